"""Edits that come faster than a server starts (a real watcher, real saves, a server that takes 0.4 s to start
as npx or docker do): the session ends with the last configuration running, once, and nothing else."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil

from mcpvisor.core.events import ReconcileFinished
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.host import Host, HostOptions
from mcpvisor.host.hot_reload import McpPendingApprovalChanged
from tests.helpers import LIGHT, WAIT_S, marker_pids, wait_until
from tests.layout import make_layout, replace_text


def _settings(tag: str, marker: Path) -> str:
    slow = f"sleep 0.4; exec {sys.executable} -m {LIGHT} --name {tag} --marker {marker}"
    return json.dumps({"mcpServers": {"x": {"command": "/bin/sh", "args": ["-c", slow]}}})


def _running(marker: Path) -> list[str]:
    """The ``--name`` of each server process started with ``marker`` that still runs."""
    names = []
    for pid in marker_pids(marker):
        try:
            cmdline = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        names.append(cmdline[cmdline.index("--name") + 1])
    return sorted(names)


async def test_quick_edits_of_a_slow_starting_server_end_with_the_last_one_running_alone(tmp_path: Path) -> None:
    """Before, a restart planned by an earlier pass went on after a later pass had started the server anew: it
    closed the newer start and ran its own, older configuration, or stored its client over the newer one, whose
    process then ran on unowned (three copies of the server, or the wrong one, after thirty quick saves)."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    replace_text(layout.paths.user, _settings("x-start", marker))
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        await wait_until(lambda: _running(marker) == ["x-start"], what="the first start")
        for i in range(30):
            replace_text(layout.paths.user, _settings(f"x-{i % 3}", marker))
            await anyio.sleep(0.15)
        replace_text(layout.paths.user, _settings("x-final", marker))

        def settled() -> bool:
            client = host.config.manager.get_client("x")
            connected = client is not None and client.status == "connected" and "x-final" in client.config.args[1]
            return connected and _running(marker) == ["x-final"]

        await wait_until(settled, what="x-final running, alone")


def _server(name: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", LIGHT, "--name", name]}


async def test_a_repository_switched_away_and_back_asks_for_no_approval_it_has(tmp_path: Path) -> None:
    """A git stash and pop: the repository's .mcp.json and workspace settings switch to entries that need approval
    and back to approved ones. Before, the reload of one file, begun before the other file was read again, ended
    last and announced its stale 'needs approval' for a server approved and running by then."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    approved = {"project": {"p": _server("pB")}, "workspace": {"w": _server("wB")}}
    other = {"project": {"p": _server("pA")}, "workspace": {"w": _server("wA")}}
    store = ApprovalStore(layout.paths.approvals)
    for scope, entries in approved.items():
        for name, entry in entries.items():
            store.approve(layout.root, name, McpServerConfig.from_entry(entry, scope=scope))

    def switch_to(files: dict[str, dict[str, Any]]) -> None:
        replace_text(layout.paths.project, json.dumps({"mcpServers": files["project"]}))
        replace_text(layout.paths.workspace, json.dumps({"mcpServers": files["workspace"]}))

    switch_to(approved)
    events: list[object] = []
    host = Host(HostOptions(env=layout.env, workspace=layout.root))
    host.subscribe(events.append)
    async with host:

        def running(tag: str) -> bool:
            clients = host.config.manager.clients()
            return all(
                (c := clients.get(n)) is not None and c.status == "connected" and f"{n}{tag}" in c.config.args
                for n in ("p", "w")
            )

        await wait_until(lambda: running("B"), what="both approved servers running")
        switch_to(other)
        await wait_until(
            lambda: any(isinstance(e, McpPendingApprovalChanged) and set(e.servers) == {"p", "w"} for e in events),
            what="both asking for approval",
        )
        popped = len(events)
        switch_to(approved)
        await wait_until(lambda: running("B"), what="both approved servers running again")
        for _ in range(3):  # every reload begun meanwhile has ended (each takes a reconcile of light servers)
            await anyio.sleep(0.5)
        stale = [e for e in events[popped:] if isinstance(e, McpPendingApprovalChanged)]
        assert stale == []


async def test_an_edit_while_an_earlier_start_hangs_is_reported_at_once(tmp_path: Path) -> None:
    """Before, the reconcile of an edit waited for a start an earlier reconcile had left handshaking (it waits only
    for its own starts now, and names the other as starting): its event, and an approval prompt after it, came when
    the hanging server's discovery timeout ran out."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "slow.pids"
    hanging = {**_server("slow"), "discoveryTimeoutMs": 120_000}
    hanging["args"] = [*hanging["args"], "--hang-on-initialize", "--marker", str(marker)]
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"a": _server("a")}}))
    events: list[object] = []
    host = Host(HostOptions(env=layout.env, workspace=layout.root))
    host.subscribe(events.append)
    async with host:
        replace_text(layout.paths.user, json.dumps({"mcpServers": {"a": _server("a"), "slow": hanging}}))
        await wait_until(marker.exists, what="the hanging server started")
        servers = {"a": _server("a"), "slow": hanging, "b": _server("b")}
        replace_text(layout.paths.user, json.dumps({"mcpServers": servers}))
        with anyio.fail_after(WAIT_S / 2):  # far less than the hanging server's discovery timeout
            await wait_until(lambda: any(isinstance(e, ReconcileFinished) and "b" in e.added for e in events))
        [done] = [e for e in events if isinstance(e, ReconcileFinished) and "b" in e.added]
        assert "slow" in done.starting
