"""Several hosts (one per workspace) in one process share identical servers through the pool, and a
hot reload in pool mode never starts an unapproved project server (SPEC §5.5)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import anyio
import pytest

from mcpvisor.core.config import Config
from mcpvisor.core.errors import McpvisorError, NotRunningError, ServerUnavailableError, ToolNotFoundError
from mcpvisor.core.events import ToolsChanged
from mcpvisor.core.pool import McpConnectionPool
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from mcpvisor.host.host import Host, HostOptions
from tests.helpers import LIGHT, marker_pids, wait_until
from tests.layout import make_layout, replace_text


def server(name: str, marker: Path) -> dict[str, object]:
    return {"command": sys.executable, "args": ["-m", LIGHT, "--name", name, "--marker", str(marker)]}


async def test_two_workspaces_share_the_users_server_and_keep_their_project_servers_gated(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    other = layout.root.parent / "ws2"
    shared, proj = tmp_path / "shared", tmp_path / "proj"
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"common": server("common", shared)}}))
    replace_text(other / ".mcp.json", json.dumps({"mcpServers": {"p": server("p", proj)}}))  # creates ws2
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path / "logs")) as pool:
        one = Host(HostOptions(env=layout.env, workspace=layout.root, pool=pool, session_id="one"))
        two = Host(HostOptions(env=layout.env, workspace=other, pool=pool, session_id="two"))
        async with one, two:
            assert len(marker_pids(shared)) == 1
            assert set(one.config.tool_registry.names()) == {"mcp__common__echo"}
            assert set(two.config.tool_registry.names()) == {"mcp__common__echo"}
            # A hot reload in pool mode adds a second project server: still never spawned.
            replace_text(
                other / ".mcp.json", json.dumps({"mcpServers": {"p": server("p", proj), "q": server("q", proj)}})
            )
            await wait_until(lambda: set(two.state.assembled.servers) == {"common", "p", "q"})
            await two.config.reconcile()
            assert not proj.exists()
            await two.decide("p", "approve")
            # (Its start may go on after decide: the watcher's pass for the store decide wrote lets decide's return.)
            await wait_until(lambda: proj.exists() and len(marker_pids(proj)) == 1, what="p started once approved")
            assert one.config.manager.get_client("p") is None


async def test_a_host_and_a_pool_run_once_and_say_so_when_used_outside_async_with(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    host = Host(HostOptions(env=layout.env, workspace=layout.root, watch=False))
    with pytest.raises(RuntimeError, match="the host is not running: use it inside `async with`"):
        host.config  # noqa: B018 - the property is what is tested
    async with host:
        assert host.config.tool_registry.names() == frozenset()
        with pytest.raises(RuntimeError, match="this Host was already entered; create a new one"):
            await host.__aenter__()
    with pytest.raises(RuntimeError, match="this Host was already entered"):
        async with host:
            pass
    async with McpConnectionPool() as pool:
        with pytest.raises(RuntimeError, match="this McpConnectionPool was already entered"):
            await pool.__aenter__()


async def test_an_exception_raised_inside_async_with_reaches_the_caller_as_itself(tmp_path: Path) -> None:
    # Not wrapped in the task group's ExceptionGroup: `except ToolNotFoundError` around the block works.
    async def call_a_missing_tool() -> None:
        async with Config(mcp_servers={}) as config:
            await config.initialize()
            await config.call_tool("mcp__nope__echo", {})

    with pytest.raises(ToolNotFoundError, match="mcp__nope__echo"):
        await call_a_missing_tool()
    layout = make_layout(tmp_path)
    with pytest.raises(ValueError, match="my own bug"):
        async with Host(HostOptions(env=layout.env, workspace=layout.root, watch=False)):
            raise ValueError("my own bug")


async def test_a_config_used_outside_async_with_says_so_not_that_a_server_is_down(tmp_path: Path) -> None:
    echo = McpServerConfig(command=sys.executable, args=["-m", LIGHT])
    config = Config(mcp_servers={"echo": echo}, options=ConnectionOptions(log_dir=tmp_path))
    with pytest.raises(NotRunningError, match=r"the config is not running: use it inside 'async with Config\(...\)'"):
        await config.call_tool("mcp__echo__echo", {"text": "hi"})
    async with config:
        await config.initialize()
        assert (await config.call_tool("mcp__echo__echo", {"text": "hi"})).content
    for late in (config.call_tool("mcp__echo__echo", {"text": "hi"}), config.initialize()):
        with pytest.raises(NotRunningError, match="the config is not running"):
            await late
    layout = make_layout(tmp_path)
    host = Host(HostOptions(env=layout.env, workspace=layout.root, watch=False))
    async with host:
        pass
    with pytest.raises(NotRunningError, match="the host is not running"):
        await host.reload()
    assert issubclass(NotRunningError, McpvisorError)
    assert issubclass(NotRunningError, RuntimeError)  # what it was before it had a class of its own


def test_one_string_where_server_names_belong_is_refused_not_read_as_letters() -> None:
    with pytest.raises(TypeError, match=r"expected a list of server names, not the string 'echo': write \['echo'\]"):
        Config(mcp_servers={}, allowed_mcp_server_names="echo")


async def test_a_pool_never_entered_and_options_out_of_range_are_refused_at_once() -> None:
    pool = McpConnectionPool()  # `async with pool:` forgotten: the servers would fail one by one, in the log
    with pytest.raises(NotRunningError, match="the connection pool of this Config is not running: enter it first"):
        await Config(mcp_servers={}, pool=pool).__aenter__()
    with pytest.raises(ValueError, match="max_concurrent_starts must be at least 1"):
        ConnectionOptions(max_concurrent_starts=-1)
    with pytest.raises(ValueError, match="max_message_bytes must be at least 1024"):
        ConnectionOptions(max_message_bytes=100)


async def test_a_call_cut_short_by_the_end_of_its_session_is_told_so_not_to_retry(tmp_path: Path) -> None:
    slow = McpServerConfig(command=sys.executable, args=["-m", LIGHT, "--control"])
    outcome: list[BaseException] = []

    async def sleep_through(config: Config) -> None:
        try:
            await config.call_tool("mcp__s__sleep", {"seconds": 30})
        except ServerUnavailableError as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        async with Config(mcp_servers={"s": slow}, options=ConnectionOptions(log_dir=tmp_path)) as config:
            await config.initialize()
            tg.start_soon(sleep_through, config)
            await anyio.sleep(0.5)
    [said] = outcome
    assert str(said) == (
        "call to tool 'sleep' failed: server 's' was stopped while the call was in flight (its session was closed)"
    )


async def test_with_a_pool_a_hung_server_holds_the_start_no_longer_than_the_wait(tmp_path: Path) -> None:
    # Per-client workspaces share a pool: a pooled start is left to finish, as a handshake is.
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    hung = {"command": sys.executable, "args": ["-m", LIGHT, "--hang-on-initialize"], "discoveryTimeoutMs": 120_000}
    fast = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "fast"]}
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"hung": hung, "fast": fast}}))
    async with McpConnectionPool(ConnectionOptions(log_dir=tmp_path / "logs")) as pool:
        # 5 s, as the CLI waits: time for the fast server to start on a loaded machine (1 s was not, under coverage).
        options = HostOptions(env=layout.env, workspace=layout.root, watch=False, pool=pool, startup_wait_s=5)
        with anyio.fail_after(60):  # well before the hung server's 120 s
            async with Host(options) as host:
                assert set(host.config.tool_registry.names()) == {"mcp__fast__echo"}
                assert host.config.last_reconcile is not None
                assert host.config.last_reconcile.starting == ("hung",)


async def test_with_a_pool_a_server_that_fails_to_start_reads_down_with_its_error(tmp_path: Path) -> None:
    # As without a pool: its state says it is down and why (status views, `run --json`, the gateway's views).
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    other = layout.root.parent / "ws2"
    broken = {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"broken": broken}}))
    replace_text(other / ".mcp.json", json.dumps({"mcpServers": {}}))  # creates ws2
    async with McpConnectionPool(ConnectionOptions(log_dir=tmp_path / "logs")) as pool:
        one = Host(HostOptions(env=layout.env, workspace=layout.root, watch=False, pool=pool, session_id="one"))
        two = Host(HostOptions(env=layout.env, workspace=other, watch=False, pool=pool, session_id="two"))
        async with one, two:
            for host in (one, two):
                assert host.config.last_reconcile is not None
                assert "exited with code 3" in host.config.last_reconcile.failed["broken"]
                state = host.config.manager.snapshot()["broken"]
                assert state.status == "disconnected"
                assert state.error is not None
                assert "process exited with code 3 during start-up" in state.error
            assert pool.connections() == {}  # nothing of it is left running


async def test_what_a_host_says_while_it_stops_reaches_its_listeners(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, once the session's Config had stopped, each event of its servers going down failed in the host's
    relay (``the host is not running``): a traceback logged by every ``mcpvisor run`` stopped with Ctrl-C, and the
    host's listeners never heard their tools go."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"echo": server("echo", tmp_path / "echo")}}))
    heard: list[object] = []
    host = Host(HostOptions(env=layout.env, workspace=layout.root, watch=False))
    host.subscribe(heard.append)
    async with host:
        assert host.config.tool_registry.names() == {"mcp__echo__echo"}
        heard.clear()
    assert ToolsChanged() in heard  # its tools went with it
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
