"""A reconcile pass and a crashed server's reconnect running at the same time, with real example servers:
whatever the order, one process per server, a removed server stays removed, a re-filter reaches the
reconnected server, and the next pass still works."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from mcpvisor.core import connection, processes
from mcpvisor.core.config import Config
from mcpvisor.core.errors import McpvisorError
from mcpvisor.core.events import McpClientUpdate, McpEvent, ReconcileFinished, ServerStateChanged
from mcpvisor.core.pool import McpConnectionPool
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig, connection_id_of
from tests.helpers import LIGHT, WAIT_S, light, marker_pids, pid_alive, wait_until


@contextlib.asynccontextmanager
async def running(tmp_path: Path, *, pooled: bool) -> AsyncIterator[Config]:
    options = ConnectionOptions(log_dir=tmp_path / "logs")
    if not pooled:
        async with Config(options=options) as config:
            yield config
        return
    async with McpConnectionPool(options) as pool, Config(pool=pool) as config:
        yield config


async def crash(config: Config, name: str) -> None:
    """Call the tool that makes ``name`` exit, and wait until the manager knows it is down."""
    with contextlib.suppress(McpvisorError):
        await config.call_tool(f"mcp__{name}__boom", {})
    await wait_until(lambda: config.manager.clients()[name].status == "disconnected", what=f"{name} down")


def passes_planned(config: Config) -> anyio.Event:
    """Set when the next reconcile pass has made its plan (in the step that announces it)."""
    planned = anyio.Event()

    def on_event(event: McpEvent) -> None:
        if isinstance(event, McpClientUpdate) and event.in_progress and event.server is None:
            planned.set()

    config.events.subscribe(on_event)
    return planned


@pytest.mark.parametrize("edit", ["removed", "excluded"])
@pytest.mark.parametrize("pooled", [True, False], ids=["pool", "no pool"])
async def test_a_server_removed_or_excluded_while_its_reconnect_waits_leaves_the_next_pass_working(
    tmp_path: Path, edit: str, pooled: bool
) -> None:
    x = light("x", "--tools", "echo,boom", "--crash-on-call", "boom")
    slow = light("slow", "--hang-on-initialize", discoveryTimeoutMs=2500)  # keeps a pass busy 2.5 s
    async with running(tmp_path, pooled=pooled) as config:
        config.set_mcp_servers({"x": x})
        await config.initialize()
        planned = passes_planned(config)
        async with anyio.create_task_group() as tg:
            tg.start_soon(config.reinitialize_mcp_servers, {"x": x, "slow": slow})
            await planned.wait()
            await crash(config, "x")  # its reconnect waits its backoff while the pass runs
            if edit == "removed":
                tg.start_soon(config.reinitialize_mcp_servers, {"slow": slow})  # waits for the pass
            else:
                config.set_excluded_mcp_servers(["x"])
                tg.start_soon(config.reconcile)
        await config.reinitialize_mcp_servers({"y": light("y")})  # raised KeyError: 'x' once
        assert "x" not in config.manager.clients()
        assert not any(tool.startswith("mcp__x__") for tool in config.tool_registry.names())
        assert config.manager.clients()["y"].status == "connected"


async def test_a_start_planned_while_down_keeps_the_process_a_reconnect_brought_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "STOP_TIMEOUT_S", 2.0)  # how long the stubborn server holds the pass
    marker = tmp_path / "x.pids"
    x = light("x", "--tools", "echo,boom", "--crash-on-call", "boom", "--marker", str(marker))
    stubborn = light("b", "--stubborn")
    with anyio.fail_after(WAIT_S):  # leaving the Config once hung on an orphaned connection
        async with running(tmp_path, pooled=False) as config:
            config.set_mcp_servers({"x": x, "b": stubborn})
            await config.initialize()
            await crash(config, "x")
            # The pass plans to start x (it is down), then waits for b to stop; x's reconnect runs meanwhile.
            await config.reinitialize_mcp_servers({"x": x})
            alive = [pid for pid in marker_pids(marker) if pid_alive(pid)]
            assert alive == [config.manager.clients()["x"].pid]
    await wait_until(lambda: not any(pid_alive(pid) for pid in marker_pids(marker)), what="x's processes to end")


async def test_a_reconnect_that_straddles_a_re_filter_brings_the_server_back_filtered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "STOP_TIMEOUT_S", 2.0)
    hold, waiting = tmp_path / "hold", tmp_path / "waiting"
    # x's later starts wait until `hold` is gone: its reconnect is still acquiring when the re-filter lands.
    script = (
        f'if [ -f "{hold}" ]; then touch "{waiting}"; while [ -f "{hold}" ]; do sleep 0.02; done; fi; '
        f'exec "{sys.executable}" -m {LIGHT} --name x --tools echo,boom --crash-on-call boom'
    )

    def x(**fields: object) -> McpServerConfig:
        return McpServerConfig.model_validate({"command": "/bin/sh", "args": ["-c", script], **fields})

    async with running(tmp_path, pooled=True) as config:
        config.set_mcp_servers({"x": x(), "b": light("b", "--stubborn")})
        await config.initialize()
        hold.touch()
        planned = passes_planned(config)  # x connected when the pass plans: a re-filter
        async with anyio.create_task_group() as tg:
            tg.start_soon(config.reinitialize_mcp_servers, {"x": x(excludeTools=["echo"])})  # and b stops, slowly
            await planned.wait()
            await crash(config, "x")
            await wait_until(waiting.exists, what="x's reconnect to be under way")
        assert config.last_reconcile is not None
        assert config.last_reconcile.refiltered == ("x",)
        hold.unlink()
        await wait_until(lambda: config.manager.clients()["x"].status == "connected", what="x back")
        assert set(config.tool_registry.names()) == {"mcp__x__boom"}


async def test_a_restart_asked_for_during_a_pass_runs_after_it(tmp_path: Path) -> None:
    async with running(tmp_path, pooled=False) as config:
        config.set_mcp_servers({"a": light("a")})
        await config.initialize()
        finished: list[ReconcileFinished] = []
        config.events.subscribe(lambda e: finished.append(e) if isinstance(e, ReconcileFinished) else None)
        planned = passes_planned(config)
        slow = light("slow", "--hang-on-initialize", discoveryTimeoutMs=1500)
        async with anyio.create_task_group() as tg:
            tg.start_soon(config.reinitialize_mcp_servers, {"a": light("a"), "slow": slow})
            await planned.wait()
            tg.start_soon(config.restart_mcp_servers)
        # The pass ran to its end undisturbed (slow timed out; not stopped under it), then the restart ran.
        assert len(finished) == 2
        assert "no answer within 1.5 s" in finished[0].failed["slow"]
        assert config.manager.clients()["a"].status == "connected"


@pytest.mark.parametrize("pooled", [True, False], ids=["pool", "no pool"])
async def test_a_server_removed_while_its_restart_stops_the_old_process_is_reported_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pooled: bool
) -> None:
    monkeypatch.setattr(connection, "STOP_TIMEOUT_S", 2.0)  # the stubborn server's old process stops slowly
    async with running(tmp_path, pooled=pooled) as config:
        config.set_mcp_servers({"x": light("x", "--stubborn")})
        await config.initialize()
        planned = passes_planned(config)
        async with anyio.create_task_group() as tg:
            tg.start_soon(config.reinitialize_mcp_servers, {"x": light("x", "--stubborn", "--tools", "echo,other")})
            await planned.wait()  # a restart: the old process is stopping
            tg.start_soon(config.reinitialize_mcp_servers, {})  # and x is removed meanwhile
        assert config.manager.clients() == {}
        assert config.manager.snapshot() == {}  # nothing left that still says "connected"
        assert not config.tool_registry.names()


@pytest.mark.parametrize("then", ["re-filtered", "changed again", "another server added"])
async def test_a_pass_while_a_restart_stops_the_old_process_decides_about_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """A restart stops the old process first (a stateful server may hold a port or a lock), slowly here; a pass
    asked for meanwhile does not wait for it, and what it decides about the server applies to the new process."""
    monkeypatch.setattr(processes, "TERMINATE_GRACE_S", 15.0)  # the old process ignores SIGTERM: 15 s to stop
    marker = tmp_path / "x.pids"

    def x(*args: str, **fields: object) -> McpServerConfig:
        return light("x", "--stubborn", "--marker", str(marker), *args, **fields)

    later = {
        "re-filtered": {"x": x("--tools", "echo,more", excludeTools=["echo"])},
        "changed again": {"x": x("--tools", "echo,more", "--prompts", "p")},
        "another server added": {"x": x("--tools", "echo,more"), "n": light("n")},
    }[then]
    async with running(tmp_path, pooled=False) as config:
        config.set_mcp_servers({"x": x()})
        await config.initialize()
        old = marker_pids(marker)  # the server and a child of its group that ignores SIGTERM too
        old_alive_at_start: list[bool] = []

        def on_event(e: McpEvent) -> None:  # a connection of x starting (what is said of x reads so sooner)
            client = config.manager.get_client("x")
            if isinstance(e, McpClientUpdate) and e.server == "x" and client and client.status == "connecting":
                old_alive_at_start.append(any(pid_alive(pid) for pid in old))

        config.events.subscribe(on_event)
        planned = passes_planned(config)
        async with anyio.create_task_group() as tg:
            tg.start_soon(config.reinitialize_mcp_servers, {"x": x("--tools", "echo,more")})
            await planned.wait()  # x's restart: its old process is stopping
            await config.reinitialize_mcp_servers(later)
            if then == "another server added":
                assert all(pid_alive(pid) for pid in old)  # n did not wait for x's old process
                assert config.manager.clients()["n"].status == "connected"
        await wait_until(lambda: (c := config.manager.get_client("x")) is not None and c.status == "connected")
        assert old_alive_at_start == [False]  # one start of x, once the old process was gone
        assert [pid for pid in marker_pids(marker) if pid_alive(pid)] == marker_pids(marker)[len(old) :]
        assert config.manager.get_client("x").connection_id == connection_id_of("x", later["x"])  # type: ignore[union-attr]
        names = {"re-filtered": {"mcp__x__more"}, "changed again": {"mcp__x__echo", "mcp__x__more"}}
        expected = names.get(then, {"mcp__x__echo", "mcp__x__more", "mcp__n__echo"})
        assert set(config.tool_registry.names()) == expected


async def test_a_server_added_back_excluded_while_its_removal_still_stops_it_stays_reported_excluded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The removal ends once the old process is gone, after the later pass said the server is excluded: what the
    removal says of it (forgotten) is said first, never over the later pass's word."""
    caplog.set_level(logging.INFO, logger="mcpvisor")
    monkeypatch.setattr(processes, "TERMINATE_GRACE_S", 3.0)  # the process ignores SIGTERM: seconds to stop
    async with running(tmp_path, pooled=False) as config:
        config.set_mcp_servers({"x": light("x", "--stubborn")})
        await config.initialize()
        planned = passes_planned(config)
        async with anyio.create_task_group() as tg:
            tg.start_soon(config.reinitialize_mcp_servers, {})
            await planned.wait()  # x's removal: its process is stopping
            config.set_excluded_mcp_servers(["x"])
            tg.start_soon(config.reinitialize_mcp_servers, {"x": light("x", "--stubborn")})
        stopped = lambda: any(r.getMessage() == "server 'x' disconnected" for r in caplog.records)  # noqa: E731
        await wait_until(stopped, what="x's old process to be stopped")
        assert config.manager.snapshot()["x"].reason == "excluded"


class InProcess:
    """Tools served in process under the name ``x``, which a server of that name takes while it is configured."""

    name = "x"

    def list_tools(self) -> list[types.Tool]:
        return [types.Tool(name="own", inputSchema={"type": "object"})]

    async def call_tool(self, tool: str, arguments: dict[str, Any], *, progress: object = None) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"in process: {tool}")])


async def test_a_server_removed_while_slow_to_stop_leaves_the_name_to_the_tools_served_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The pass that removed the server gave the name back once another pass was asked for, while the process
    still stopped: the end of its stop takes nothing registered under the name since."""
    caplog.set_level(logging.INFO, logger="mcpvisor")
    monkeypatch.setattr(processes, "TERMINATE_GRACE_S", 3.0)  # the process ignores SIGTERM: seconds to stop
    async with running(tmp_path, pooled=False) as config:
        config.set_mcp_servers({"x": light("x", "--stubborn")})
        await config.initialize()
        config.add_tool_provider(InProcess())
        assert set(config.tool_registry.names()) == {"mcp__x__echo", "mcp__x_1__own"}
        planned = passes_planned(config)
        async with anyio.create_task_group() as tg:
            tg.start_soon(config.reinitialize_mcp_servers, {})
            await planned.wait()  # x's removal: its process is stopping
            tg.start_soon(config.reinitialize_mcp_servers, {"n": light("n")})
        assert set(config.tool_registry.names()) == {"mcp__x__own", "mcp__n__echo"}
        stopped = lambda: any(r.getMessage() == "server 'x' disconnected" for r in caplog.records)  # noqa: E731
        await wait_until(stopped, what="x's process to be stopped")
        assert set(config.tool_registry.names()) == {"mcp__x__own", "mcp__n__echo"}
        result = await config.call_tool("mcp__x__own", {})
        assert result.content[0].text == "in process: own"  # type: ignore[union-attr]


@pytest.mark.parametrize("how", ["changed", "restarted"])
@pytest.mark.parametrize("pooled", [True, False], ids=["pool", "no pool"])
async def test_a_server_restarting_while_its_old_process_stops_is_not_said_connected_with_its_old_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pooled: bool, how: str
) -> None:
    """A restart (its entry changed, or restart_mcp_servers) takes the old tools at once, then waits for the old
    process to stop, slowly here: what was said of the server (run --json's server events, the snapshot) still
    read connected with those tools all that time, while the tools were gone and the pass reported it starting."""
    monkeypatch.setattr(processes, "TERMINATE_GRACE_S", 15.0)  # the old process ignores SIGTERM: 15 s to stop
    marker = tmp_path / "x.pids"

    def x(*args: str) -> McpServerConfig:
        return light("x", "--stubborn", "--marker", str(marker), *args)

    later = x("--tools", "echo,more") if how == "changed" else x()
    async with running(tmp_path, pooled=pooled) as config:
        config.set_mcp_servers({"x": x()})
        await config.initialize()
        old = marker_pids(marker)  # the server and a child of its group that ignores SIGTERM too
        said: list[ServerStateChanged] = []
        config.events.subscribe(lambda e: said.append(e) if isinstance(e, ServerStateChanged) else None)
        async with anyio.create_task_group() as tg:
            if how == "changed":
                tg.start_soon(config.reinitialize_mcp_servers, {"x": later})
            else:
                tg.start_soon(config.restart_mcp_servers)
            await wait_until(lambda: not config.tool_registry.names(), what="x's old tools to go")
            assert all(pid_alive(pid) for pid in old)  # the old process is still stopping
            state = config.manager.snapshot()["x"]
            assert (state.status, state.tools) == ("connecting", ())
        await wait_until(lambda: "x" in config.manager.clients(), what="x's new connection")
        await wait_until(lambda: config.manager.snapshot()["x"].status == "connected", what="x connected")
        assert not any(pid_alive(pid) for pid in old)  # the old process went first
        assert [(e.status, e.tools) for e in said][0] == ("connecting", ())  # said as the old tools went


async def test_a_reconcile_asked_for_while_a_restart_stops_its_servers_does_not_wait_for_their_handshakes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """restart_mcp_servers stops every server first (x slowly here), then starts them again (h now hangs in its
    handshake). A reconcile asked for while the restart still stopped them was lost on the way: the restart's
    pass waited for h until its discovery timeout, and the added server n with it."""
    monkeypatch.setattr(processes, "TERMINATE_GRACE_S", 3.0)  # x ignores SIGTERM: seconds to stop
    hold = tmp_path / "hold"
    script = f'if [ -f "{hold}" ]; then exec sleep 600; fi; exec "{sys.executable}" -m {LIGHT} --name h'
    h = McpServerConfig.model_validate({"command": "/bin/sh", "args": ["-c", script], "discoveryTimeoutMs": 25_000})
    servers = {"x": light("x", "--stubborn"), "h": h}
    async with running(tmp_path, pooled=False) as config:
        config.set_mcp_servers(servers)
        await config.initialize()
        hold.touch()  # h's next start never answers its handshake
        async with anyio.create_task_group() as tg:
            tg.start_soon(config.restart_mcp_servers)
            await wait_until(lambda: not config.tool_registry.names(), what="the restart to stop x and h")
            await config.reinitialize_mcp_servers({**servers, "n": light("n")})
            assert config.manager.clients()["n"].status == "connected"
            assert config.manager.clients()["h"].status == "connecting"  # its handshake did not hold the reconcile
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("then", ["removed again", "excluded"])
async def test_a_pass_that_stops_a_server_added_back_while_its_old_process_stops_does_not_wait_for_that_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """x is removed (its process slow to stop), added back (its start waits for the old process), then removed or
    excluded again: that last pass had nothing of its own to stop, yet it waited for the first removal's stop to
    end, as a stop of the same name, as long as no other pass was asked for."""
    monkeypatch.setattr(processes, "TERMINATE_GRACE_S", 15.0)  # the process ignores SIGTERM: 15 s to stop
    marker = tmp_path / "x.pids"
    x = light("x", "--stubborn", "--marker", str(marker))
    async with running(tmp_path, pooled=False) as config:
        config.set_mcp_servers({"x": x, "r": light("r")})
        await config.initialize()
        old = marker_pids(marker)  # the server and a child of its group that ignores SIGTERM too
        async with anyio.create_task_group() as tg:
            planned = passes_planned(config)
            tg.start_soon(config.reinitialize_mcp_servers, {"r": light("r")})
            await planned.wait()  # x's removal: its process is stopping
            planned = passes_planned(config)
            tg.start_soon(config.reinitialize_mcp_servers, {"x": x, "r": light("r")})
            await planned.wait()  # x added back: its start waits for the old process
            if then == "excluded":
                config.set_excluded_mcp_servers(["x"])
                await config.reinitialize_mcp_servers({"x": x, "r": light("r")})
            else:
                await config.reinitialize_mcp_servers({"r": light("r")})
            assert all(pid_alive(pid) for pid in old)  # the pass did not wait for the old process
        assert "x" not in config.manager.clients()
        assert set(config.tool_registry.names()) == {"mcp__r__echo"}
        assert ("x" in config.manager.snapshot()) == (then == "excluded")
