"""Incremental reconcile with real subprocess servers (SPEC §4, §5.3, §5.4, §11 "Core", "Reconcile edges")."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from mcpvisor.core import manager, processes
from mcpvisor.core.config import Config
from mcpvisor.core.errors import (
    ConfigError,
    NotFoundError,
    NotRunningError,
    ServerUnavailableError,
    ToolNotFoundError,
)
from mcpvisor.core.events import McpEvent, ReconcileFinished, ServerStateChanged
from mcpvisor.core.reconnects import BACKOFF_INITIAL_S, MAX_RECONNECT_ATTEMPTS
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from tests.helpers import (
    LIGHT,
    WAIT_S,
    free_port,
    http_server,
    light,
    light_after_gate,
    marker_pids,
    pid_alive,
    wait_until,
)


@pytest.fixture
async def config(tmp_path: Path) -> AsyncIterator[Config]:
    async with Config(options=ConnectionOptions(log_dir=tmp_path / "logs")) as cfg:
        yield cfg


def pids(config: Config) -> dict[str, int | None]:
    return {name: client.pid for name, client in config.manager.clients().items()}


def tools(config: Config) -> set[str]:
    return set(config.tool_registry.names())


def record(config: Config) -> list[McpEvent]:
    events: list[McpEvent] = []
    config.events.subscribe(events.append)
    return events


async def test_set_mcp_servers_replaces_the_layer_and_works_after_init(config: Config) -> None:
    config.set_mcp_servers({"a": light("a")})
    await config.initialize()
    config.set_mcp_servers({"b": light("b")})
    assert set(config.get_mcp_servers()) == {"b"}
    assert config.get_mcp_server_unavailable_reason("a") == "removed"


async def test_add_mcp_servers_refuses_after_init(config: Config) -> None:
    config.add_mcp_servers({"a": light("a")})
    await config.initialize()
    with pytest.raises(ConfigError, match="after initialisation"):
        config.add_mcp_servers({"b": light("b")})


async def test_a_plain_entry_instead_of_a_server_config_is_refused_at_once(config: Config) -> None:
    entry = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "a"]}
    said = r"server 'a' is a dict, not an McpServerConfig: .* McpServerConfig.from_entry\(entry\)"
    with pytest.raises(TypeError, match=said):
        Config(mcp_servers={"a": entry})  # type: ignore[dict-item]  # what an untyped caller may pass
    for layer in (config.set_mcp_servers, config.add_mcp_servers, config.set_extension_mcp_servers):
        with pytest.raises(TypeError, match=said):
            layer({"a": entry})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=said):
        config.add_runtime_mcp_server("a", entry)  # type: ignore[arg-type]
    assert config.get_merged_mcp_servers() == {}
    config.set_mcp_servers({"a": McpServerConfig.from_entry(entry)})
    await config.initialize()
    assert tools(config) == {"mcp__a__echo"}


async def test_reinitialize_before_initialize_is_a_safe_no_op(config: Config, tmp_path: Path) -> None:
    marker = tmp_path / "m"
    await config.reinitialize_mcp_servers({"a": light("a", "--marker", str(marker))})
    assert set(config.get_mcp_servers()) == {"a"}
    assert config.manager.clients() == {}
    assert not marker.exists()


async def test_reinitialize_after_the_block_says_the_config_is_not_running(tmp_path: Path) -> None:
    """Before, it returned as if done: the servers were set and nothing connected, with no word of why."""
    config = Config(mcp_servers={"a": light("a")}, options=ConnectionOptions(log_dir=tmp_path / "logs"))
    async with config:
        await config.initialize()
        assert tools(config) == {"mcp__a__echo"}
    with pytest.raises(NotRunningError, match="the config is not running"):
        await config.reinitialize_mcp_servers({"b": light("b")})
    assert set(config.get_mcp_servers()) == {"a"}


async def test_the_same_config_three_times_connects_once(config: Config) -> None:
    await config.initialize()
    for _ in range(3):
        await config.reinitialize_mcp_servers({"a": light("a")})
    assert config.manager.connect_count == 1
    assert tools(config) == {"mcp__a__echo"}


async def test_changed_args_disconnect_once_and_reconnect_once_purging_old_tools_first(config: Config) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers({"a": light("a", "--tools", "old", "--prompts", "oldp")})
    old_pid = pids(config)["a"]
    seen_during_restart: list[set[str]] = []

    def watch(event: McpEvent) -> None:
        if isinstance(event, ServerStateChanged) and event.server == "a" and event.status == "connecting":
            seen_during_restart.append(tools(config) | set(config.prompt_registry.names()))

    config.events.subscribe(watch)
    await config.reinitialize_mcp_servers({"a": light("a", "--tools", "new", "--prompts", "newp")})
    assert config.manager.connect_count == 2
    assert config.manager.disconnect_count == 1
    assert seen_during_restart == [set()]
    assert tools(config) == {"mcp__a__new"}
    assert set(config.prompt_registry.names()) == {"newp"}
    assert old_pid is not None
    await wait_until(lambda: not pid_alive(old_pid))
    assert config.last_reconcile is not None
    assert config.last_reconcile.restarted == ("a",)


async def test_editing_one_server_of_five_leaves_the_others_untouched(config: Config) -> None:
    servers = {name: light(name, "--tools", f"t{name}") for name in "abcde"}
    await config.initialize()
    await config.reinitialize_mcp_servers(servers)
    before_pids = pids(config)
    before_tools = {n: config.tool_registry.tools_of(n) for n in "abde"}
    await config.reinitialize_mcp_servers({**servers, "c": light("c", "--tools", "changed")})
    after = pids(config)
    assert {n: after[n] for n in "abde"} == {n: before_pids[n] for n in "abde"}
    assert after["c"] != before_pids["c"]
    for n in "abde":
        assert config.tool_registry.tools_of(n) == before_tools[n]
        assert all(x is y for x, y in zip(config.tool_registry.tools_of(n), before_tools[n], strict=True))
    assert "mcp__c__changed" in tools(config)
    assert config.last_reconcile is not None
    assert sorted(config.last_reconcile.kept) == ["a", "b", "d", "e"]


async def test_zero_to_one_and_back_to_zero_leaves_nothing_behind(config: Config) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers({"a": light("a", "--prompts", "p")})
    pid = pids(config)["a"]
    assert pid is not None
    assert tools(config) == {"mcp__a__echo"}
    await config.reinitialize_mcp_servers({})
    assert config.manager.clients() == {}
    assert tools(config) == set()
    assert config.prompt_registry.names() == frozenset()
    await wait_until(lambda: not pid_alive(pid))


async def test_removing_a_server_drops_its_prompts_too(config: Config) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers({"a": light("a", "--prompts", "p"), "b": light("b", "--prompts", "q")})
    assert set(config.prompt_registry.names()) == {"p", "q"}
    await config.reinitialize_mcp_servers({"b": light("b", "--prompts", "q")})
    assert set(config.prompt_registry.names()) == {"q"}


async def test_a_server_slow_to_exit_delays_no_other_servers_start(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One save removes a server that ignores the end of its input and SIGTERM (seconds to stop) and adds another:
    the new one is callable while the old one still runs; the pass ends once it is gone."""
    monkeypatch.setattr(processes, "TERMINATE_GRACE_S", 15.0)  # a slow machine starts n well within its stop
    marker = tmp_path / "x.pids"
    await config.initialize()
    await config.reinitialize_mcp_servers({"x": light("x", "--stubborn", "--marker", str(marker)), "r": light("r")})
    stubborn = marker_pids(marker)  # the server and a child of its group that ignores SIGTERM too
    async with anyio.create_task_group() as tg:
        tg.start_soon(config.reinitialize_mcp_servers, {"r": light("r"), "n": light("n")})
        await wait_until(lambda: "mcp__n__echo" in tools(config), what="n's tools")
        assert all(pid_alive(pid) for pid in stubborn)  # still stopping: n did not wait for them
        assert "mcp__x__echo" not in tools(config)  # its tools went at once
        result = await config.call_tool("mcp__n__echo", {"text": "hi"})
        assert result.content[0].text == "n:echo:hi"  # type: ignore[union-attr]
    assert not any(pid_alive(pid) for pid in stubborn)
    assert config.last_reconcile is not None
    assert config.last_reconcile.added == ("n",)
    assert config.last_reconcile.removed == ("x",)


async def test_each_pass_waits_for_starts_still_handshaking_at_most_its_pass_wait(tmp_path: Path) -> None:
    """``pass_wait_s`` bounds every pass, not the first alone: a later one returns naming the start that goes on
    (which then comes up by itself), as the first did."""
    gate = tmp_path / "gate"
    b = McpServerConfig.model_validate(light_after_gate("b", gate))
    async with Config(mcp_servers={"a": b}, pass_wait_s=0.2) as config:
        first = await config.initialize()
        config.set_mcp_servers({"a": b, "b": b})
        later = await config.reconcile()
        assert first is not None
        assert later is not None
        assert (first.starting, later.starting) == (("a",), ("a", "b"))
        gate.touch()
        await wait_until(lambda: {"mcp__a__echo", "mcp__b__echo"} <= tools(config), what="both servers' tools")


async def test_a_server_that_came_up_while_a_pass_waited_for_a_stop_is_not_reported_as_still_starting(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass returns while a start still handshakes (another was asked for); the next one removes a server slow to
    stop, and the start ends while it waits for the stop: its summary named the server as still starting, although
    it was up (the shell said "◌ b is still starting", never that it came up, and a sign-in refused later was said
    as its start failing). A summary names only what still starts as it ends."""
    monkeypatch.setattr(processes, "TERMINATE_GRACE_S", 60.0)  # it stops when the test kills it
    monkeypatch.setattr(manager, "EARLIER_STARTS_WAIT_S", 0.1)
    marker, gate = tmp_path / "x.pids", tmp_path / "gate"
    x = light("x", "--stubborn", "--marker", str(marker))
    b = McpServerConfig.model_validate(light_after_gate("b", gate))
    await config.initialize()
    await config.reinitialize_mcp_servers({"x": x})
    stubborn = marker_pids(marker)
    events = record(config)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(config.reinitialize_mcp_servers, {"x": x, "b": b})
            await wait_until(lambda: config.manager.starting("b"), what="b's start")
            tg.start_soon(config.reinitialize_mcp_servers, {"b": b})  # x goes: the pass waits for its stop
            await wait_until(lambda: "mcp__x__echo" not in tools(config), what="x's stop")
            await anyio.sleep(0.5)  # the pass is past its wait for b's start (so that b comes up during the stop)
            gate.touch()
            await wait_until(lambda: "mcp__b__echo" in tools(config), what="b's tools")
            for pid in stubborn:
                os.kill(pid, signal.SIGKILL)
    finally:
        for pid in (p for p in stubborn if pid_alive(p)):
            os.kill(pid, signal.SIGKILL)
    summaries = [e for e in events if isinstance(e, ReconcileFinished)]
    assert summaries[0].starting == ("b",)  # the first pass: b handshook still
    assert summaries[-1].removed == ("x",)
    assert summaries[-1].starting == ()


async def test_exposure_change_refilters_in_place_without_reconnecting(config: Config) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers({"a": light("a", "--tools", "x,y")})
    pid = pids(config)["a"]
    await config.reinitialize_mcp_servers({"a": light("a", "--tools", "x,y", excludeTools=["y"])})
    assert pids(config)["a"] == pid
    assert config.manager.connect_count == 1
    assert tools(config) == {"mcp__a__x"}
    assert config.last_reconcile is not None
    assert config.last_reconcile.refiltered == ("a",)


async def test_toggling_excluded_disconnects_then_reconnects_with_tools_cleared(config: Config) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers({"a": light("a", "--prompts", "p"), "b": light("b")})
    b_pid = pids(config)["b"]
    config.set_excluded_mcp_servers(["a"])
    await config.reconcile()
    assert "a" not in config.manager.clients()
    assert tools(config) == {"mcp__b__echo"}
    assert config.prompt_registry.names() == frozenset()
    assert config.get_mcp_server_unavailable_reason("a") == "excluded"
    assert config.last_reconcile is not None
    assert config.last_reconcile.gated == {"a": "excluded"}
    config.set_excluded_mcp_servers(None)
    await config.reconcile()
    assert tools(config) == {"mcp__a__echo", "mcp__b__echo"}
    assert pids(config)["b"] == b_pid


async def test_a_server_the_library_caller_leaves_out_is_said_to_be_left_out_by_the_host_not_by_a_settings_file(
    config: Config,
) -> None:
    """A ``Config`` used as a library has no settings file: what a call says names the call that set the list."""
    await config.initialize()
    await config.reinitialize_mcp_servers({n: light(n) for n in ("a", "b", "db1")})
    config.set_excluded_mcp_servers(["a", "db*"])
    config.set_allowed_mcp_servers(["a", "db*"])
    await config.reconcile()
    assert set(config.manager.clients()) == set()
    said = {n: str(config.not_found(f"mcp__{n}__echo", "tool")) for n in ("a", "b", "db1")}
    assert said["a"].endswith("server 'a' is excluded: in the list the host set with set_excluded_mcp_servers()")
    assert said["db1"].endswith(
        "server 'db1' is excluded: matched by 'db*' in the list the host set with set_excluded_mcp_servers()"
    )
    assert said["b"].endswith("server 'b' is not allowed: not in the list the host set with set_allowed_mcp_servers()")
    assert not any("settings" in text or "mcp.allowed" in text or "mcp.excluded" in text for text in said.values())


async def test_a_gated_server_dropped_from_the_configuration_is_said_gone_as_a_running_one_is(config: Config) -> None:
    config.set_excluded_mcp_servers(["b"])
    config.set_allowed_mcp_servers(["a", "b"])
    await config.initialize()
    await config.reinitialize_mcp_servers({n: light(n) for n in "abc"})
    events = record(config)
    await config.reinitialize_mcp_servers({})
    gone = {e.server: (e.status, e.reason) for e in events if isinstance(e, ServerStateChanged)}
    assert gone == dict.fromkeys("abc", ("disconnected", None))  # b excluded, c not allowed: never started
    events.clear()
    await config.reinitialize_mcp_servers({"b": light("b")})  # back, and excluded still: said again
    assert [(e.server, e.reason) for e in events if isinstance(e, ServerStateChanged)] == [("b", "excluded")]


async def test_pending_servers_are_never_started(config: Config, tmp_path: Path) -> None:
    marker = tmp_path / "m"
    config.set_pending_mcp_servers(["p"])
    await config.initialize()
    await config.reinitialize_mcp_servers({"p": light("p", "--marker", str(marker)), "a": light("a")})
    assert set(config.manager.clients()) == {"a"}
    assert not marker.exists()
    assert config.get_mcp_server_unavailable_reason("p") == "pending_approval"


async def test_untrusted_folder_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "m"
    async with Config(mcp_servers={"a": light("a", "--marker", str(marker))}, trusted_folder=False) as config:
        await config.initialize()
        await config.reinitialize_mcp_servers({"b": light("b", "--marker", str(marker))})
        assert config.manager.clients() == {}
    assert not marker.exists()


async def test_allow_list_ceiling_narrowing_and_unavailable_reasons(tmp_path: Path) -> None:
    servers = {n: light(n) for n in "abc"}
    async with Config(
        mcp_servers=servers, allowed_mcp_server_names=["a", "b"], options=ConnectionOptions(log_dir=tmp_path)
    ) as config:
        await config.initialize()
        assert set(config.manager.clients()) == {"a", "b"}
        assert config.get_mcp_server_unavailable_reason("c") == "not_allowed"
        assert config.get_cli_allowed_mcp_server_names() == ("a", "b")
        config.set_allowed_mcp_servers(["a"])
        await config.reconcile()
        assert set(config.manager.clients()) == {"a"}
        assert config.get_mcp_server_unavailable_reason("b") == "not_allowed"
        assert config.get_mcp_server_unavailable_reason("a") is None
        assert config.get_mcp_server_unavailable_reason("never") is None
        config.set_allowed_mcp_servers([])
        await config.reconcile()
        assert config.manager.clients() == {}


async def test_glob_patterns_work_and_excluded_wins_over_allowed(config: Config) -> None:
    config.set_allowed_mcp_servers(["git*"])
    config.set_excluded_mcp_servers(["gitlab"])
    await config.initialize()
    await config.reinitialize_mcp_servers({n: light(n) for n in ("github", "gitlab", "slack")})
    assert set(config.manager.clients()) == {"github"}


async def test_runtime_overlay_wins_and_extension_only_adds_new_names(config: Config) -> None:
    config.set_mcp_servers({"a": light("a", "--tools", "settings")})
    config.set_extension_mcp_servers({"a": light("a", "--tools", "ext"), "e": light("e")})
    config.add_runtime_mcp_server("e", light("e", "--tools", "runtime"))
    await config.initialize()
    assert tools(config) == {"mcp__a__settings", "mcp__e__runtime"}
    await config.reinitialize_mcp_servers({})
    assert tools(config) == {"mcp__a__ext", "mcp__e__runtime"}


async def test_concurrent_reinitialize_calls_coalesce_and_all_see_the_final_state(config: Config) -> None:
    await config.initialize()
    finals: list[set[str]] = []

    async def edit(servers: dict[str, McpServerConfig]) -> None:
        await config.reinitialize_mcp_servers(servers)
        finals.append(set(config.manager.clients()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(edit, {"a": light("a")})
        tg.start_soon(edit, {"a": light("a"), "b": light("b")})
        tg.start_soon(edit, {"b": light("b"), "c": light("c")})
    assert finals == [{"b", "c"}] * 3


async def test_reconcile_events_come_after_their_server_events(config: Config) -> None:
    events = record(config)
    await config.initialize()
    await config.reinitialize_mcp_servers({"a": light("a")})
    kinds = [type(e).__name__ for e in events if isinstance(e, ServerStateChanged | ReconcileFinished)]
    last_server = max(i for i, k in enumerate(kinds) if k == "ServerStateChanged")
    assert kinds[-1] == "ReconcileFinished"
    assert last_server < len(kinds) - 1
    connected = [e for e in events if isinstance(e, ServerStateChanged) and e.status == "connected"]
    assert connected[-1].tools == ("mcp__a__echo",)


async def test_a_failing_server_never_blocks_the_others(config: Config) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers(
        {"bad": McpServerConfig(command="/nonexistent/server"), "good": light("good")}
    )
    assert config.manager.clients()["good"].status == "connected"
    assert config.last_reconcile is not None
    assert "not found" in config.last_reconcile.failed["bad"]


async def test_a_killed_server_is_reconnected_and_calls_fail_fast_while_it_is_down(config: Config) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers({"a": light("a")})
    pid = pids(config)["a"]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    await wait_until(lambda: config.manager.clients()["a"].status == "disconnected")
    with anyio.fail_after(5), pytest.raises((ServerUnavailableError, ToolNotFoundError)):
        await config.call_tool("mcp__a__echo")
    await wait_until(lambda: config.manager.clients()["a"].status == "connected")
    assert pids(config)["a"] != pid
    result = await config.call_tool("mcp__a__echo", {"text": "back"})
    assert result.content[0].text == "a:echo:back"  # type: ignore[union-attr]


async def test_a_deliberate_stop_never_respawns(config: Config, tmp_path: Path) -> None:
    marker = tmp_path / "m"
    await config.initialize()
    await config.reinitialize_mcp_servers({"a": light("a", "--marker", str(marker))})
    await config.reinitialize_mcp_servers({})
    await config.reinitialize_mcp_servers({"b": light("b")})
    # Proving an absence: wait well past the first reconnect backoff, then look again.
    await anyio.sleep(BACKOFF_INITIAL_S * 4)
    assert len(marker_pids(marker)) == 1
    assert "a" not in config.manager.clients()


async def test_an_in_flight_call_to_a_replaced_server_ends_with_a_clear_error(config: Config) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers({"a": light("a", "--control"), "b": light("b", "--control")})
    outcome: dict[str, object] = {}
    sleeping = {"a": anyio.Event(), "b": anyio.Event()}

    async def call(server: str) -> None:
        async def heard(progress: float, total: float | None, message: str | None) -> None:
            sleeping[server].set()  # the server reports progress once the call reached it

        try:
            outcome[server] = await config.call_tool(f"mcp__{server}__sleep", {"seconds": 4}, progress=heard)
        except ServerUnavailableError as exc:
            outcome[server] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "a")
        tg.start_soon(call, "b")
        with anyio.fail_after(WAIT_S):
            for event in sleeping.values():
                await event.wait()
        await config.reinitialize_mcp_servers(
            {"a": light("a", "--control", "--tools", "v2"), "b": light("b", "--control")}
        )
    assert isinstance(outcome["a"], ServerUnavailableError)
    assert "stopped while the call was in flight" in str(outcome["a"])
    assert not isinstance(outcome["b"], Exception)


async def test_tool_not_found_names_the_server_and_the_fix(config: Config) -> None:
    config.set_pending_mcp_servers(["p"])
    config.set_excluded_mcp_servers(["x"])
    config.set_allowed_mcp_servers(["a", "p", "x", "gone"])
    await config.initialize()
    await config.reinitialize_mcp_servers(
        {"a": light("a"), "p": light("p"), "x": light("x"), "n": light("n"), "gone": light("gone")}
    )
    await config.reinitialize_mcp_servers({"a": light("a"), "p": light("p"), "x": light("x"), "n": light("n")})
    cases = {
        "mcp__gone__t": ("removed", "add it back to mcpServers"),
        "mcp__n__t": ("not_allowed", "not in the list the host set with set_allowed_mcp_servers()"),
        "mcp__x__t": ("excluded", "in the list the host set with set_excluded_mcp_servers()"),
        "mcp__p__t": ("pending_approval", "mcpvisor mcp approve p"),
        "mcp__a__nope": ("missing", "its tools: mcp__a__echo"),
        "mcp__zzz__t": (None, "no MCP server providing it is currently configured"),
    }
    for name, (reason, fix) in cases.items():
        with pytest.raises(ToolNotFoundError) as info:
            await config.call_tool(name)
        assert info.value.reason == reason, name
        assert fix in str(info.value), name
    # The layer above words the reason (the host: the user rejected this pending server).
    config.set_reason_refiner(
        lambda name, reason: "rejected" if (name, reason) == ("p", "pending_approval") else reason
    )
    with pytest.raises(ToolNotFoundError, match="rejected; edit its configuration") as rejected:
        await config.call_tool("mcp__p__t")
    assert rejected.value.reason == "rejected"
    with pytest.raises(ValueError, match="timeout_s must be a number of seconds above 0"):
        await config.call_tool("mcp__a__echo", timeout_s=-1)
    with pytest.raises(ConfigError, match="a server's name must be a non-blank string, not ''"):
        config.set_mcp_servers({"": light("blank")})  # (its tools would be mcp____echo)
    # A prompt is explained in a prompt's own words: its kind, and the server's prompts.
    prompt = config.not_found("mcp__a__nope", "prompt")
    assert not isinstance(prompt, ToolNotFoundError)
    assert (prompt.kind, prompt.target, prompt.server, prompt.reason) == ("prompt", "mcp__a__nope", "a", "missing")
    assert str(prompt) == (
        "prompt 'mcp__a__nope' is unavailable: server 'a' does not provide it (renamed or filtered out?); "
        "its prompts: none"
    )
    with pytest.raises(NotFoundError, match="prompt 'nope' not found") as missing:
        await config.get_prompt("nope")
    assert (missing.value.kind, missing.value.target) == ("prompt", "nope")


async def test_a_tool_of_a_server_that_is_down_names_its_log_once_and_how_to_start_it_again(
    config: Config, tmp_path: Path
) -> None:
    """It said "check its configuration and logs, or /reload": which log, and ``/reload`` is the shell's alone (an
    agent calling through the gateway, or a library, has none). The log is named once: the failed start's error
    says "see its log PATH", and "; its log: PATH" came after it."""
    dead = McpServerConfig(
        command=sys.executable, args=["-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
    )
    await config.initialize()
    await config.reinitialize_mcp_servers({"dead": dead, "a": light("a")})
    with pytest.raises(ToolNotFoundError) as info:
        await config.call_tool("mcp__dead__t")
    assert info.value.reason == "down"  # (a failed start is not tried again by itself: a retry would not help)
    said = str(info.value)
    log = tmp_path / "logs" / "dead.log"
    assert f"(last error: process exited with code 3 during start-up; see its log {log})" in said, said
    assert said.count(str(log)) == 1, said
    assert "the next change to the settings starts it again (in the shell: /reload)" in said, said
    await config.reinitialize_mcp_servers({"dead": dead, "a": light("a"), "b": light("b")})  # (any change: a pass)
    assert config.manager.connect_count == 4  # dead was started again
    assert "boom" in (tmp_path / "logs" / "dead.log").read_text()


async def test_not_found_names_a_server_whose_name_registered_names_spell_otherwise(config: Config) -> None:
    """A server named with a dot (or a space, or a long name) has its tools registered under a valid spelling
    with a digest: a tool of it that is missing is still explained by its server, removed or crashed."""
    await config.initialize()
    await config.reinitialize_mcp_servers({"docs.example": light("docs.example"), "plain": light("plain")})
    [registered] = [name for name in config.tool_registry.names() if "docs" in name]
    assert registered.startswith("mcp__docs_example__echo_")
    await config.reinitialize_mcp_servers({"plain": light("plain")})
    with pytest.raises(ToolNotFoundError, match="was removed from the configuration this session") as removed:
        await config.call_tool(registered)
    assert removed.value.server == "docs.example"


async def test_a_config_not_initialized_says_to_initialize_it(tmp_path: Path) -> None:
    async with Config(mcp_servers={"echo": light("echo")}, options=ConnectionOptions(log_dir=tmp_path)) as not_started:
        with pytest.raises(ToolNotFoundError, match=r"call `await config.initialize\(\)` first"):
            await not_started.call_tool("mcp__echo__echo", {"text": "hi"})


async def test_restart_mcp_servers_replaces_every_process(config: Config) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers({"a": light("a"), "b": light("b")})
    before = pids(config)
    summary = await config.restart_mcp_servers()
    after = pids(config)
    assert set(after) == {"a", "b"}
    assert all(after[n] != before[n] for n in after)
    assert summary is not None
    assert (summary.added, sorted(summary.restarted)) == ((), ["a", "b"])


async def test_closing_the_config_leaves_no_process(tmp_path: Path) -> None:
    async with Config(mcp_servers={n: light(n) for n in "abc"}, options=ConnectionOptions(log_dir=tmp_path)) as config:
        await config.initialize()
        started = [pid for pid in pids(config).values() if pid is not None]
    assert len(started) == 3
    with anyio.fail_after(WAIT_S):
        for pid in started:
            await wait_until(lambda pid=pid: not pid_alive(pid))  # type: ignore[misc]


async def test_a_lost_http_server_fails_calls_fast_and_is_reconnected_when_it_returns(config: Config) -> None:
    port = free_port()
    await config.initialize()
    async with http_server("h", port=port) as url:
        await config.reinitialize_mcp_servers({"h": McpServerConfig(http_url=url)})
        assert config.manager.clients()["h"].status == "connected"
    # The server is gone: the next call fails fast with a clear error instead of hanging.
    with anyio.fail_after(WAIT_S), pytest.raises((ServerUnavailableError, ToolNotFoundError)) as info:
        await config.call_tool("mcp__h__echo")
    assert "'h'" in str(info.value)
    async with http_server("h", port=port):
        await wait_until(lambda: config.manager.clients()["h"].status == "connected", timeout_s=WAIT_S * 2)
        result = await config.call_tool("mcp__h__echo", {"text": "again"})
        assert result.content[0].text == "h:echo:again"  # type: ignore[union-attr]


async def test_a_remote_server_not_up_at_its_start_is_tried_again_until_it_is(config: Config) -> None:
    port = free_port()
    await config.initialize()
    await config.reinitialize_mcp_servers({"h": McpServerConfig(http_url=f"http://127.0.0.1:{port}/mcp")})
    assert config.manager.clients()["h"].status == "disconnected"
    async with http_server("h", port=port):  # it comes up later: connected without a reload
        await wait_until(lambda: config.manager.clients()["h"].status == "connected", timeout_s=WAIT_S * 2)
        result = await config.call_tool("mcp__h__echo", {"text": "late"})
        assert result.content[0].text == "h:echo:late"  # type: ignore[union-attr]


async def test_a_reconcile_leaves_a_crashed_server_to_its_reconnect_pause_and_never_calls_it_added(
    config: Config,
) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers({"q": light("q", "--exit-after", "0.2")})
    await wait_until(lambda: config.manager.clients()["q"].status == "disconnected")
    with pytest.raises(ToolNotFoundError) as down:  # (before: reason "missing", as for a tool it does not have)
        await config.call_tool("mcp__q__echo")
    assert down.value.reason == "disconnected"  # (its reconnect waits 1 s)
    # Down a fraction of a second after it connected: its reconnect waits 1 s, which a save must not skip.
    summary = await config.reconcile()
    assert summary is not None
    assert "q" not in summary.added
    assert "q" in summary.kept
    await wait_until(lambda: config.manager.clients()["q"].status == "connected")  # the reconnect loop's start


async def test_a_save_while_a_lost_server_is_torn_down_leaves_it_to_its_reconnect_pause(config: Config) -> None:
    """The status says "disconnected" as soon as the loss is known; the reconnect loop starts once the teardown
    is over. A reconcile in between must not start the server at once (it would skip the pause)."""
    await config.initialize()
    await config.reinitialize_mcp_servers({"q": light("q")})
    config.manager.clients()["q"].mark_lost("the session was refused")
    summary = await config.reconcile()
    assert summary is not None
    assert (summary.retried, summary.kept) == ((), ("q",))
    await wait_until(lambda: config.manager.clients()["q"].status == "connected")  # the reconnect loop's start


async def test_a_save_while_a_server_that_gave_up_goes_down_starts_it_again(config: Config) -> None:
    """A server down for the last time (too many quick stops) is left down — but a reload meanwhile starts it
    again, as a reload does, also when it lands while the lost connection is torn down."""
    await config.initialize()
    await config.reinitialize_mcp_servers({"q": light("q")})
    config.manager._reconnects._quick_stops["q"] = MAX_RECONNECT_ATTEMPTS  # its earlier quick stops
    config.manager.clients()["q"].mark_lost("the session was refused")
    summary = await config.reconcile()
    assert summary is not None
    assert summary.kept == ("q",)
    await wait_until(lambda: config.manager.clients()["q"].status == "connected")


async def test_a_reconnect_after_a_crash_keeps_the_current_tool_filters(config: Config) -> None:
    await config.initialize()
    await config.reinitialize_mcp_servers({"s": light("s", "--tools", "a,b,boom", "--crash-on-call", "boom")})
    await config.reinitialize_mcp_servers(
        {"s": light("s", "--tools", "a,b,boom", "--crash-on-call", "boom", excludeTools=["b"])}
    )
    assert config.last_reconcile is not None
    assert config.last_reconcile.refiltered == ("s",)
    pid = pids(config)["s"]
    with pytest.raises(ServerUnavailableError):
        await config.call_tool("mcp__s__boom")
    await wait_until(
        lambda: pids(config).get("s") not in (None, pid) and config.manager.clients()["s"].status == "connected"
    )
    assert tools(config) == {"mcp__s__a", "mcp__s__boom"}


async def test_an_update_waiting_behind_a_cancelled_reconcile_is_still_applied(config: Config, tmp_path: Path) -> None:
    script = tmp_path / "slow.sh"
    script.write_text(f"#!/bin/sh\nsleep 2\nexec {sys.executable} -m mcpvisor.examples.light_server --name slow\n")
    script.chmod(0o755)
    await config.initialize()
    slow = McpServerConfig(command=str(script))

    async def leader() -> None:
        with anyio.move_on_after(0.5):
            await config.reinitialize_mcp_servers({"slow": slow})

    async def follower() -> None:
        await wait_until(lambda: "slow" in config.manager.clients())
        await config.reinitialize_mcp_servers({"slow": slow, "fast": light("fast")})

    async with anyio.create_task_group() as tg:
        tg.start_soon(leader)
        tg.start_soon(follower)
    assert "mcp__fast__echo" in tools(config)


@pytest.mark.parametrize("field", ["env", "command", "cwd"])
async def test_a_changed_connection_field_restarts_only_that_server(config: Config, tmp_path: Path, field: str) -> None:
    servers = {name: light(name) for name in "abc"}
    await config.initialize()
    await config.reinitialize_mcp_servers(servers)
    before = pids(config)
    changed = {
        "env": light("b", env={"MODE": "2"}),
        "command": McpServerConfig(command="/bin/sh", args=("-c", f"exec {sys.executable} -m {LIGHT} --name b")),
        "cwd": light("b", cwd=str(tmp_path)),
    }[field]
    await config.reinitialize_mcp_servers({**servers, "b": changed})
    after = pids(config)
    assert config.last_reconcile is not None
    assert config.last_reconcile.restarted == ("b",)
    assert after["a"] == before["a"]
    assert after["c"] == before["c"]
    assert after["b"] != before["b"]


async def test_a_tool_name_two_servers_make_alike_calls_the_same_server_whichever_started_first(config: Config) -> None:
    # Server a's b__echo and server a__b's echo both make mcp__a__b__echo. It went to the first to connect: with
    # a running before a__b was added, the name called a; in a session starting both, it could call either.
    async def echo(name: str, text: str) -> str:
        result = await config.call_tool(name, {"text": text})
        return result.content[0].text  # type: ignore[union-attr]

    a, a_b = light("a", "--tools", "b__echo"), light("a__b")
    config.set_mcp_servers({"a": a})
    await config.initialize()
    assert tools(config) == {"mcp__a__b__echo"}
    events = record(config)
    await config.reinitialize_mcp_servers({"a": a, "a__b": a_b})
    renamed = next(iter(tools(config) - {"mcp__a__b__echo"}))
    assert tools(config) == {"mcp__a__b__echo", renamed}
    assert await echo("mcp__a__b__echo", "x") == "a__b:echo:x"
    assert await echo(renamed, "x") == "a:b__echo:x"
    # whoever reads a's state (run --json, status) hears its tool's new name
    assert [e.tools for e in events if isinstance(e, ServerStateChanged) and e.server == "a"][-1] == (renamed,)

    await config.reinitialize_mcp_servers({"a": a})  # a__b gone: its name reaches no other server
    assert tools(config) == {renamed}
    with pytest.raises(ToolNotFoundError, match="server 'a__b' was removed"):
        await echo("mcp__a__b__echo", "y")
    assert await echo(renamed, "y") == "a:b__echo:y"


async def test_a_reconcile_asked_to_wait_briefly_during_a_pass_is_not_held_by_its_own_starts(tmp_path: Path) -> None:
    """A call during a pass joins it (the pass runs again for what it set): the pass ran again with the waiting of
    whoever began it (here each start's timeout), not the joining call's ``wait_s``."""
    gate = tmp_path / "gate"

    def waits_for_gate(name: str) -> McpServerConfig:
        return McpServerConfig.model_validate(light_after_gate(name, gate))

    joined: list[ReconcileFinished | None] = []
    async with Config(options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        await config.initialize()
        async with anyio.create_task_group() as tg:
            tg.start_soon(config.reinitialize_mcp_servers, {"a": waits_for_gate("a")})  # waits for a's start
            await wait_until(lambda: config.manager.starting("a"), what="a's start")

            async def join() -> None:
                config.set_mcp_servers({"a": waits_for_gate("a"), "b": waits_for_gate("b")})
                joined.append(await config.reconcile(wait_s=0.2))

            tg.start_soon(join)
            await wait_until(lambda: bool(joined), what="the reconcile asked to wait 0.2 s at most")
            gate.touch()
        assert joined[0] is not None
        assert "b" in joined[0].starting


async def test_a_reconcile_that_asks_no_wait_joining_a_pass_waits_as_the_config_says(tmp_path: Path) -> None:
    """A call that asks for no ``wait_s`` waits :attr:`~Config.pass_wait_s` at most: joining a run begun by a call
    that asked to wait longer, it waited as that call did (until the gated starts ended)."""
    gate = tmp_path / "gate"
    a, b = (McpServerConfig.model_validate(light_after_gate(n, gate)) for n in "ab")
    joined: list[ReconcileFinished | None] = []
    options = ConnectionOptions(log_dir=tmp_path / "logs")
    async with Config(options=options, pass_wait_s=0.2) as config:
        await config.initialize()
        async with anyio.create_task_group() as tg:
            config.set_mcp_servers({"a": a})
            tg.start_soon(lambda: config.reconcile(wait_s=3600))  # waits for a's start
            await wait_until(lambda: config.manager.starting("a"), what="a's start")

            async def join() -> None:
                config.set_mcp_servers({"a": a, "b": b})
                joined.append(await config.reconcile())

            tg.start_soon(join)
            await wait_until(lambda: bool(joined), what="the reconcile that asked for the config's wait")
            gate.touch()
        assert joined[0] is not None
        assert "b" in joined[0].starting
