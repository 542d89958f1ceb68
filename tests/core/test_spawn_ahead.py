"""Servers spawned while the SDK loads (``mcpvisor.core.processes``): adopted by their connection, or stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, get_default_environment

from mcpvisor.core.processes import INHERITED_ENV_VARS, SpawnedAhead, child_environment, loading_sdk, spawn_ahead
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.core.start_slots import StartSlots
from tests.helpers import WAIT_S, light, marker_pids, pid_alive, wait_until

pytestmark = pytest.mark.anyio


def test_servers_inherit_what_the_sdk_gives_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHELL", "() { echo exported function; }")  # a shell function is never passed on
    monkeypatch.setenv("TERM", "")
    monkeypatch.setenv("MCPVISOR_TEST_SECRET", "not for servers")
    assert INHERITED_ENV_VARS == tuple(DEFAULT_INHERITED_ENV_VARS)
    assert child_environment({"A": "1"}) == get_default_environment() | {"A": "1"}
    environment = child_environment(None)
    assert "SHELL" not in environment
    assert environment["TERM"] == ""
    assert "MCPVISOR_TEST_SECRET" not in environment


def _slow_module(folder: Path, name: str, body: str = "") -> str:
    (folder / f"{name}.py").write_text(f"import time\ntime.sleep(1.0)\n{body}\n")
    return name


async def test_a_process_its_connection_did_not_take_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = tmp_path / "marker"
    cfg = light("a", "--marker", str(marker))
    slow, slots = _slow_module(tmp_path, "slow_unused"), StartSlots(1)
    async with loading_sdk(slow, slots, "a", cfg, lambda: True, tmp_path / "logs") as ahead:
        assert ahead is not None
        assert ahead.pid is not None
        await wait_until(lambda: marker_pids(marker) == [ahead.pid], what="the server spawned before the import")
        assert "slow_unused" in sys.modules
    await wait_until(lambda: not pid_alive(marker_pids(marker)[0]), what="the unused process to stop")


async def test_a_process_spawned_for_an_import_that_fails_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = tmp_path / "marker"
    module = _slow_module(tmp_path, "slow_broken", 'raise RuntimeError("broken on import")')
    cfg = light("a", "--marker", str(marker))
    with pytest.raises(RuntimeError, match="broken on import"):
        async with loading_sdk(module, StartSlots(1), "a", cfg, lambda: True, tmp_path / "logs"):
            pytest.fail("the body runs only after a good import")
    [pid] = marker_pids(marker)  # it started while the import ran (a second), and is gone after
    await wait_until(lambda: not pid_alive(pid), what="the process of the failed start to stop")


async def test_nothing_is_spawned_when_the_gating_says_no_or_the_sdk_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = tmp_path / "marker"
    cfg = light("a", "--marker", str(marker))
    slow, slots = _slow_module(tmp_path, "slow_gated"), StartSlots(1)
    async with loading_sdk(slow, slots, "a", cfg, lambda: False, tmp_path / "logs") as ahead:
        assert ahead is None
        assert "slow_gated" in sys.modules
    busy = StartSlots(1)
    async with busy.hold():  # every slot taken: a loaded module needs none
        with anyio.fail_after(WAIT_S):
            async with loading_sdk("json", busy, "a", cfg, lambda: True, tmp_path / "logs") as ahead:
                assert ahead is None
    assert marker_pids(marker) == []


async def test_only_a_connection_to_the_same_configuration_takes_the_process(tmp_path: Path) -> None:
    cfg = light("a")
    ahead = await spawn_ahead(cfg, tmp_path / "a.log")
    assert isinstance(ahead, SpawnedAhead)
    assert ahead.pid is not None
    pid = ahead.pid
    try:
        assert ahead.take(light("a", "--other")) is None
        assert ahead.take(light("b")) is None
        taken = ahead.take(light("a"))  # equal, not the same object
        assert taken is not None
        assert taken[0].pid == pid
        assert taken[1].path == tmp_path / "a.log"  # its log, opened before it was spawned
        taken[1].close()
        assert ahead.take(cfg) is None  # once
        await ahead.discard()  # taken: not its to stop
        assert pid_alive(pid)
    finally:
        os.kill(pid, 9)
    log = tmp_path / "b.log"
    assert await spawn_ahead(McpServerConfig(command=str(tmp_path / "missing")), log) is None
    assert await spawn_ahead(McpServerConfig(command=sys.executable, cwd=str(tmp_path / "gone")), log) is None
    bad_name = McpServerConfig(command=sys.executable, env={"A=B": "x"})  # ValueError, not OSError
    assert await spawn_ahead(bad_name, log) is None
    marker = tmp_path / "marker"
    (tmp_path / "c.log").symlink_to(tmp_path / "elsewhere.log")  # a log refused: nothing may start
    assert await spawn_ahead(light("c", "--marker", str(marker)), tmp_path / "c.log") is None
    await anyio.sleep(0.5)
    assert marker_pids(marker) == []


_FIRST_STARTS = """
import json, sys
import anyio
from mcpvisor.core import processes
from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig

marker, logs, bound = sys.argv[1], sys.argv[2], int(sys.argv[3])
spawns = []
spawn = processes.spawn


async def recording(command, args, **options):
    spawns.append("mcp" not in sys.modules)  # spawned before the SDK loaded
    return await spawn(command, args, **options)


processes.spawn = recording
argv = ["-m", "mcpvisor.examples.light_server", "--marker", marker, "--name"]
servers = {n: McpServerConfig(command=sys.executable, args=[*argv, n]) for n in ("a", "b", "c")}


async def main():
    options = ConnectionOptions(log_dir=logs, max_concurrent_starts=bound)
    async with Config(mcp_servers=servers, options=options) as config:
        await config.initialize()
        clients = config.manager.clients()
        print(json.dumps({
            "spawns": spawns,
            "pids": sorted(c.pid for c in clients.values()),
            "status": sorted(c.status for c in clients.values()),
        }))


anyio.run(main)
"""


@pytest.mark.parametrize(("bound", "at_least"), [(3, 3), (1, 1)])
def test_a_fresh_process_starts_its_servers_while_the_sdk_loads(tmp_path: Path, bound: int, at_least: int) -> None:
    """As ``mcpvisor serve`` does: nothing imported the SDK yet. As many servers as may start at once are spawned
    before it loads (more, once one waits for its handshake: the next start takes its slot); each server runs one
    process, the one its connection speaks to."""
    marker = tmp_path / "marker"
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_STARTS, str(marker), str(tmp_path / "logs"), str(bound)],
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == ["connected"] * 3
    assert result["spawns"][0] is True
    assert sum(result["spawns"]) >= at_least
    assert result["pids"] == sorted(marker_pids(marker))  # one process each, none left over


_REFUSED_STARTS = """
import json, os, sys
import anyio
from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig

marker, logs = sys.argv[1], sys.argv[2]
os.makedirs(logs)
os.symlink(os.path.join(logs, "elsewhere.log"), os.path.join(logs, "lnk.log"))
argv = ["-m", "mcpvisor.examples.light_server", "--marker", marker, "--name"]
servers = {
    "bad": McpServerConfig(command=sys.executable, args=[*argv, "bad"], env={"A=B": "x"}),
    "lnk": McpServerConfig(command=sys.executable, args=[*argv, "lnk"]),
}


async def main():
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=logs)) as config:
        await config.initialize()
        print(json.dumps({name: c.last_error for name, c in config.manager.clients().items()}))


anyio.run(main)
"""


def test_a_start_refused_while_the_sdk_loads_says_why_and_runs_nothing(tmp_path: Path) -> None:
    """A server whose log may not be written never runs (its stderr would go nowhere), and one that cannot be
    spawned (a name with "=" in its env: ValueError) is reported as such, as they are once the SDK is loaded."""
    marker = tmp_path / "marker"
    out = subprocess.run(
        [sys.executable, "-c", _REFUSED_STARTS, str(marker), str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
    )
    assert out.returncode == 0, out.stderr
    errors = json.loads(out.stdout)
    assert "illegal environment variable name" in errors["bad"]
    assert "is a symbolic link; remove it" in errors["lnk"]
    assert marker_pids(marker) == []


async def test_a_start_given_a_slot_while_the_sdk_loads_spawns_its_server_and_waits_for_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One slot: the first start's server, spawned before the import, soon waits for its handshake, so the second
    start gets the slot while the import runs — it spawns its server too, and goes on once the import is over (not
    while the module is half loaded: importing it then would hold up the loop until the import's end)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    b_marker = tmp_path / "b.marker"
    deadline = time.monotonic() + WAIT_S
    waits_for_b = f"import os\nwhile not os.path.exists({str(b_marker)!r}) and time.monotonic() < {deadline}:\n"
    waits_for_b += "    time.sleep(0.01)\nLOADED = True"
    slow, slots = _slow_module(tmp_path, "slow_shared", waits_for_b), StartSlots(1)
    seen: dict[str, tuple[bool, bool]] = {}

    async def start(cfg: McpServerConfig, name: str) -> None:
        async with loading_sdk(slow, slots, name, cfg, lambda: True, tmp_path / "logs") as ahead:
            seen[name] = (ahead is not None, getattr(sys.modules[slow], "LOADED", False))

    async with anyio.create_task_group() as tg:
        tg.start_soon(start, light("a"), "a")
        tg.start_soon(start, light("b", "--marker", str(b_marker)), "b")
    assert seen == {"a": (True, True), "b": (True, True)}
