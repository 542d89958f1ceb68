"""Shared connections across sessions (SPEC §5.5, §11 "Trust"): real subprocess servers."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from mcpvisor.core.config import Config
from mcpvisor.core.errors import ConfigError, ServerUnavailableError, ToolNotFoundError
from mcpvisor.core.events import ReconcileFinished
from mcpvisor.core.gating import McpGating, NameList
from mcpvisor.core.pool import McpConnectionPool
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from tests.helpers import WAIT_S, light, light_after_gate, marker_pids, pid_alive, wait_until


def live_pids(pool: McpConnectionPool) -> set[int]:
    return {c.pid for c in pool.connections().values() if c.pid is not None and pid_alive(c.pid)}


async def test_two_sessions_with_the_same_server_share_one_process(tmp_path: Path) -> None:
    marker = tmp_path / "m"
    server = light("s", "--tools", "x,y", "--marker", str(marker))
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with (
            Config(mcp_servers={"s": server}, pool=pool, session_id="one") as one,
            Config(mcp_servers={"s": server}, pool=pool, session_id="two") as two,
        ):
            await one.initialize()
            await two.initialize()
            assert len(marker_pids(marker)) == 1
            assert len(pool.connections()) == 1
            result = await two.call_tool("mcp__s__x", {"text": "hi"})
            assert result.content[0].text == "s:x:hi"  # type: ignore[union-attr]


async def test_sessions_project_their_own_tool_filters_onto_a_shared_connection(tmp_path: Path) -> None:
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with (
            Config(mcp_servers={"s": light("s", "--tools", "x,y")}, pool=pool, session_id="one") as one,
            Config(
                mcp_servers={"s": light("s", "--tools", "x,y", excludeTools=["y"])}, pool=pool, session_id="two"
            ) as two,
        ):
            await one.initialize()
            await two.initialize()
            assert len(pool.connections()) == 1
            assert set(one.tool_registry.names()) == {"mcp__s__x", "mcp__s__y"}
            assert set(two.tool_registry.names()) == {"mcp__s__x"}


async def test_changing_the_server_in_one_session_gives_it_a_new_connection_while_the_other_keeps_the_old(
    tmp_path: Path,
) -> None:
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with (
            Config(mcp_servers={"s": light("s")}, pool=pool, session_id="one") as one,
            Config(mcp_servers={"s": light("s")}, pool=pool, session_id="two") as two,
        ):
            await one.initialize()
            await two.initialize()
            old = two.manager.clients()["s"]
            await one.reinitialize_mcp_servers({"s": light("s", "--tools", "v2")})
            assert two.manager.clients()["s"] is old
            assert old.status == "connected"
            assert one.manager.clients()["s"] is not old
            assert set(one.tool_registry.names()) == {"mcp__s__v2"}
            assert set(two.tool_registry.names()) == {"mcp__s__echo"}
            assert len(pool.connections()) == 2


async def test_a_pending_server_added_by_a_reconcile_in_pool_mode_is_never_spawned(tmp_path: Path) -> None:
    marker = tmp_path / "pending-started"
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with Config(pool=pool, session_id="one") as config:
            await config.initialize()
            config.set_pending_mcp_servers(["proj"])
            await config.reinitialize_mcp_servers({"proj": light("proj", "--marker", str(marker)), "ok": light("ok")})
            assert set(config.manager.clients()) == {"ok"}
            assert config.last_reconcile is not None
            assert config.last_reconcile.gated == {"proj": "pending_approval"}
            # A rejected server stays pending (rejected is not approved): still never spawned.
            config.set_reason_refiner(lambda name, reason: "rejected" if name == "proj" else reason)
            await config.reinitialize_mcp_servers({"proj": light("proj", "--marker", str(marker)), "ok": light("ok")})
            assert "proj" not in config.manager.clients()
    assert not marker.exists()


async def test_unshared_servers_get_one_process_per_session(tmp_path: Path) -> None:
    marker = tmp_path / "m"
    server = light("st", "--marker", str(marker), shared=False)
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with (
            Config(mcp_servers={"st": server}, pool=pool, session_id="one") as one,
            Config(mcp_servers={"st": server}, pool=pool, session_id="two") as two,
        ):
            await one.initialize()
            await two.initialize()
            assert len(set(marker_pids(marker))) == 2


async def test_the_last_release_stops_the_process_and_closing_the_pool_leaves_none(tmp_path: Path) -> None:
    marker = tmp_path / "m"
    server = light("s", "--marker", str(marker))
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with Config(mcp_servers={"s": server}, pool=pool, session_id="one") as one:
            await one.initialize()
            async with Config(mcp_servers={"s": server}, pool=pool, session_id="two") as two:
                await two.initialize()
            [pid] = marker_pids(marker)
            assert pid_alive(pid)  # session one still holds it
            assert pool.holders_of(next(iter(pool.connections()))) == {"one"}
        await wait_until(lambda: not pid_alive(pid))
        assert pool.connections() == {}
        async with Config(mcp_servers={"t": light("t", "--marker", str(marker))}, pool=pool, session_id="x") as three:
            await three.initialize()
            started = live_pids(pool)
    assert started
    for p in started:
        await wait_until(lambda p=p: not pid_alive(p))  # type: ignore[misc]


async def test_a_failed_connection_is_evicted_so_the_next_acquire_retries(tmp_path: Path) -> None:
    script = tmp_path / "server.sh"
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with Config(mcp_servers={"s": light("s")}, pool=pool, session_id="one") as config:
            broken = McpServerConfig(command=str(script))
            await config.initialize()
            await config.reinitialize_mcp_servers({"b": broken})
            assert config.last_reconcile is not None
            assert "b" in config.last_reconcile.failed
            assert pool.connections() == {}
            script.write_text(f"#!/bin/sh\nexec {sys.executable} -m mcpvisor.examples.light_server --name b\n")
            script.chmod(0o755)
            await config.reconcile()
            assert config.manager.clients()["b"].status == "connected"


async def test_a_killed_shared_server_is_reconnected_for_every_session(tmp_path: Path) -> None:
    server = light("s")
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with (
            Config(mcp_servers={"s": server}, pool=pool, session_id="one") as one,
            Config(mcp_servers={"s": server}, pool=pool, session_id="two") as two,
        ):
            await one.initialize()
            await two.initialize()
            pid = one.manager.clients()["s"].pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            for session in (one, two):
                await wait_until(
                    lambda s=session: (
                        s.manager.clients().get("s") is not None  # type: ignore[misc]
                        and s.manager.clients()["s"].status == "connected"
                        and s.manager.clients()["s"].pid != pid
                    )
                )
            assert one.manager.clients()["s"] is two.manager.clients()["s"]
            with anyio.fail_after(10):
                await two.call_tool("mcp__s__echo")


def flaky_server(tmp_path: Path) -> McpServerConfig:
    """Start 1 runs a server that exits after a second, start 2 fails at once, later starts work."""
    count = tmp_path / "starts"
    script = tmp_path / "flaky.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}\n"
        'if [ "$n" -eq 2 ]; then exit 3; fi\n'
        f'if [ "$n" -eq 1 ]; then exec {sys.executable} -m mcpvisor.examples.light_server --name s --exit-after 1; fi\n'
        f"exec {sys.executable} -m mcpvisor.examples.light_server --name s\n"
    )
    script.chmod(0o755)
    return McpServerConfig(command=str(script))


async def test_a_pooled_server_is_reconnected_even_after_a_failed_attempt(tmp_path: Path) -> None:
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with Config(mcp_servers={"s": flaky_server(tmp_path)}, pool=pool, session_id="one") as config:
            await config.initialize()
            first = config.manager.clients()["s"]
            await wait_until(lambda: first.status == "disconnected")
            await wait_until(
                lambda: (
                    config.manager.get_client("s") is not None
                    and config.manager.clients()["s"] is not first
                    and config.manager.clients()["s"].status == "connected"
                )
            )
            assert (tmp_path / "starts").read_text().strip() == "3"


def slow_server(tmp_path: Path, marker: Path) -> McpServerConfig:
    script = tmp_path / "slow.sh"
    script.write_text(
        f"#!/bin/sh\nsleep 1\nexec {sys.executable} -m mcpvisor.examples.light_server --marker {marker}\n"
    )
    script.chmod(0o755)
    return McpServerConfig(command=str(script))


def ignore(_: object) -> None:
    return None


async def test_a_cancelled_waiter_leaves_no_hold_behind(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    cfg = slow_server(tmp_path, marker)
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool, anyio.create_task_group() as tg:
        tg.start_soon(lambda: pool.acquire("A", "s", cfg, on_change=ignore, on_lost=ignore))
        await wait_until(lambda: bool(pool.connections()))
        with anyio.move_on_after(0.2):
            await pool.acquire("B", "s", cfg, on_change=ignore, on_lost=ignore)
        await wait_until(lambda: any(c.status == "connected" for c in pool.connections().values()))
        [key] = pool.connections()
        assert pool.holders_of(key) == {"A"}
        await pool.release("A", pool.connections()[key])
        assert pool.connections() == {}
    [pid] = marker_pids(marker)
    await wait_until(lambda: not pid_alive(pid))


async def test_when_the_starter_is_cancelled_a_waiter_starts_the_server_itself(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    cfg = slow_server(tmp_path, marker)
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool, anyio.create_task_group() as tg:
        starter = anyio.CancelScope()

        async def start_then_give_up() -> None:
            with starter:
                await pool.acquire("A", "s", cfg, on_change=ignore, on_lost=ignore)

        tg.start_soon(start_then_give_up)
        await wait_until(lambda: bool(pool.connections()))
        waiter: list[object] = []

        async def wait() -> None:
            waiter.append(await pool.acquire("B", "s", cfg, on_change=ignore, on_lost=ignore))

        tg.start_soon(wait)
        await wait_until(lambda: bool(pool.holders_of(next(iter(pool.connections()), "")) >= {"B"}))
        starter.cancel()
        await wait_until(lambda: bool(waiter))
        [key] = pool.connections()
        assert pool.holders_of(key) == {"B"}
        assert pool.connections()[key] is waiter[0]
        assert pool.connections()[key].status == "connected"


async def test_two_live_connections_never_share_a_log_whatever_came_before(tmp_path: Path) -> None:
    def nop(_client: object) -> None:
        return None

    in_a, in_b = light("db", "--tools", "x"), light("db", "--tools", "y")  # two workspaces' "db"
    async with McpConnectionPool(ConnectionOptions(log_dir=tmp_path)) as pool:
        a = await pool.acquire("A", "db", in_a, on_change=nop, on_lost=nop)
        assert a.log_path.name == "db.log"
        await pool.release("A", a)  # workspace A closes...
        b = await pool.acquire("B", "db", in_b, on_change=nop, on_lost=nop)
        assert b.log_path.name == "db.log"  # ...so B's is the only "db" running
        again = await pool.acquire("A", "db", in_a, on_change=nop, on_lost=nop)  # A comes back
        assert again.log_path != b.log_path
        for _ in range(5):  # A closing and coming back keeps no more than what runs
            await pool.release("A", again)
            again = await pool.acquire("A", "db", in_a, on_change=nop, on_lost=nop)
        assert len(pool._log_names) == 2


async def test_a_second_exit_of_a_pool_does_nothing_as_for_a_config_or_a_host(tmp_path: Path) -> None:
    pool = McpConnectionPool(ConnectionOptions(log_dir=tmp_path))
    async with pool:
        pass
    await pool.__aexit__(None, None, None)  # a bare AssertionError before


async def test_a_second_config_with_a_session_id_in_use_is_refused_and_the_first_keeps_its_server(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "m"
    server = light("s", "--marker", str(marker))
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with Config(mcp_servers={"s": server}, pool=pool) as first:  # session_id left at its default
            await first.initialize()
            second = Config(mcp_servers={"s": server}, pool=pool)
            with pytest.raises(ConfigError, match="session_id 'default' is already used") as refused:
                async with second:
                    await second.initialize()
            assert "give each Config sharing a pool its own session_id" in str(refused.value)
            [pid] = marker_pids(marker)
            assert pid_alive(pid)
            result = await first.call_tool("mcp__s__echo", {"text": "hi"})
            assert result.content[0].text == "s:echo:hi"  # type: ignore[union-attr]
        async with Config(mcp_servers={"s": server}, pool=pool) as again:  # the id is free once its Config left
            await again.initialize()
            assert again.tool_registry.get_tool("mcp__s__echo") is not None


async def test_a_pooled_start_a_pass_left_waiting_for_its_connection_is_not_started_again_by_the_next(
    tmp_path: Path,
) -> None:
    """A pass waits for a slow start its ``pass_wait_s`` at most; with a pool the start goes on waiting for its
    connection. The next pass found no client of that name and started it again: a second acquire, and the server
    reported added by that pass after its own start had said it came up (the shell said it twice)."""
    gate, marker = tmp_path / "gate", tmp_path / "m"
    a = McpServerConfig.model_validate(light_after_gate("a", gate, "--marker", str(marker)))
    summaries: list[ReconcileFinished] = []
    async with (
        McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool,
        Config(mcp_servers={"a": a}, pool=pool, session_id="one", pass_wait_s=0.2) as config,
    ):
        config.events.subscribe(lambda e: summaries.append(e) if isinstance(e, ReconcileFinished) else None)
        first = await config.initialize()
        assert first is not None
        assert first.starting == ("a",)
        config.set_mcp_servers({"a": a, "b": light("b")})
        later = await config.reconcile()
        assert later is not None
        gate.touch()
        await wait_until(lambda: "mcp__a__echo" in config.tool_registry.names(), what="a's tools")
        await config.reconcile()
        assert "a" not in later.added
        assert [s.added for s in summaries if "a" in s.added] == [("a",)]  # the first pass's start, once
        assert config.manager.connect_count == 2  # a once, b once
        assert len(marker_pids(marker)) == 1


async def test_a_pooled_start_superseded_while_both_wait_for_their_connections_leaves_the_newer_one_waiting(
    tmp_path: Path,
) -> None:
    """An edit replaces a server whose pooled start still waits for its connection: the newer start waits too. The
    older one's end counted the name as no longer waiting, although the newer one was: the next pass started it a
    second time (another acquire)."""
    gate_old, gate_new, old_marker = tmp_path / "old", tmp_path / "new", tmp_path / "old.pids"
    old = McpServerConfig.model_validate(light_after_gate("a", gate_old, "--marker", str(old_marker)))
    new = McpServerConfig.model_validate(light_after_gate("a", gate_new, "--tools", "echo,add"))
    async with (
        McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool,
        Config(mcp_servers={"a": old}, pool=pool, session_id="one", pass_wait_s=0.2) as config,
    ):
        await config.initialize()
        config.set_mcp_servers({"a": new})
        await config.reconcile()  # the newer start waits behind its gate, beside the older one
        gate_old.touch()
        await wait_until(lambda: bool(marker_pids(old_marker)), what="the older start's server")
        await wait_until(lambda: not pid_alive(marker_pids(old_marker)[0]), what="the older start released")
        connections = config.manager.connect_count
        config.set_mcp_servers({"a": new, "b": light("b")})
        later = await config.reconcile()
        assert later is not None
        assert later.added == ("b",)
        assert config.manager.connect_count == connections + 1  # b's alone
        gate_new.touch()
        await wait_until(lambda: "mcp__a__add" in config.tool_registry.names(), what="the newer start's tools")


@pytest.mark.parametrize(
    ("second_file", "told"), [("/one/settings.json", "in mcp.excluded of /one/"), ("/two/settings.json", None)]
)
async def test_a_call_cut_short_on_a_shared_connection_is_never_told_another_sessions_settings_file(
    tmp_path: Path, second_file: str, told: str | None
) -> None:
    """A call of session one runs on while one excludes the server (two still holds it); two's exclusion stops it:
    the call is told it was excluded, and which file only when both sessions name the same one."""
    server = light("s", "--control")
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with (
            Config(mcp_servers={"s": server}, pool=pool, session_id="one") as one,
            Config(mcp_servers={"s": server}, pool=pool, session_id="two") as two,
        ):
            await one.initialize()
            await two.initialize()
            outcome: list[BaseException] = []
            sleeping = anyio.Event()

            async def heard(progress: float, total: float | None, message: str | None) -> None:
                sleeping.set()

            async def call() -> None:
                try:
                    await one.call_tool("mcp__s__sleep", {"seconds": 60}, progress=heard, timeout_s=WAIT_S)
                except ServerUnavailableError as exc:
                    outcome.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                with anyio.fail_after(WAIT_S):
                    await sleeping.wait()
                for config, file in ((one, "/one/settings.json"), (two, second_file)):
                    config.set_mcp_gating(McpGating(("s",), excluded_by=(NameList("mcp.excluded", ("s",), file),)))
                    await config.reconcile()
            assert len(outcome) == 1
            said = str(outcome[0])
            assert "/two/" not in said
            assert "(it was excluded" in said
            assert (told in said) if told is not None else said.endswith("(it was excluded)")


async def test_a_shared_connection_is_said_withheld_by_each_sessions_own_tool_filters(tmp_path: Path) -> None:
    """One connection serves two workspaces that filter its tools differently: what each one's row warns of, and
    what a call of a withheld tool is told, follow that workspace's own filters, never the other's."""
    described = tmp_path / "described.json"
    bad = {"type": "object", "properties": {"n": {"type": "nonsense"}}}
    described.write_text(json.dumps({"bad": {"inputSchema": bad}}))
    args = ("--tools", "echo,bad", "--descriptions", str(described))
    async with McpConnectionPool(options=ConnectionOptions(log_dir=tmp_path)) as pool:
        async with (
            Config(mcp_servers={"w": light("w", *args)}, pool=pool, session_id="one") as one,
            Config(mcp_servers={"w": light("w", *args, excludeTools=["bad"])}, pool=pool, session_id="two") as two,
        ):
            await one.initialize()
            await two.initialize()
            shared = one.manager.get_client("w")
            assert shared is not None
            assert shared is two.manager.get_client("w")
            for _ in range(2):  # (whichever synced last)
                with pytest.raises(ToolNotFoundError) as caught:
                    await one.call_tool("mcp__w__bad", {"n": 1})
                assert caught.value.reason == "withheld"
                with pytest.raises(ToolNotFoundError) as caught:
                    await two.call_tool("mcp__w__bad", {"n": 1})
                assert caught.value.reason != "withheld"
                assert (one.manager.snapshot()["w"].warning or "").startswith("tool 'bad' is withheld")
                assert two.manager.snapshot()["w"].warning is None
                shared.request_refresh(tools=True)  # (a re-listing syncs both again)
                await anyio.sleep(0.2)
