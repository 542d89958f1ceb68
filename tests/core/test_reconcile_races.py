"""A reconcile pass and a crashed server's reconnect running at the same time, with real example servers:
whatever the order, one process per server, a removed server stays removed, a re-filter reaches the
reconnected server, and the next pass still works."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from mcpvisor.core import connection
from mcpvisor.core.config import Config
from mcpvisor.core.errors import McpvisorError
from mcpvisor.core.events import McpClientUpdate, McpEvent, ReconcileFinished
from mcpvisor.core.pool import McpConnectionPool
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
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
