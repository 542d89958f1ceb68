"""Simultaneous server starts (``mcpvisor.core.start_slots``): a start whose server waits lets the next one begin;
one whose server is busy starting keeps its slot. Real processes, read through Linux's ``/proc``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from mcpvisor.core.start_slots import IDLE_WINDOW_S, StartSlot, StartSlots, tree_cpu_ns
from tests.helpers import LIGHT, WAIT_S, light, wait_until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads what a process uses from Linux's /proc"),
]

SPIN = [sys.executable, "-c", "while True: pass"]
WAITS = ["sleep", "60"]


@dataclass
class Running:
    pid: int | None


@contextmanager
def running(argv: list[str]) -> Iterator[Running]:
    process = subprocess.Popen(argv, start_new_session=True)
    try:
        yield Running(process.pid)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the whole group: a shell's child too
        process.wait()


async def test_a_waiting_tree_has_a_cpu_time_and_a_busy_one_none() -> None:
    with running(["/bin/sh", "-c", "sleep 60; true"]) as waiting:
        await wait_until(lambda: isinstance(tree_cpu_ns(waiting.pid or 0), int), what="the shell and its sleep to wait")
    # a shell waiting for its busy child, as npx waits for the server it runs: the tree is busy
    with running(["/bin/sh", "-c", f"{sys.executable} -c 'while True: pass'; true"]) as busy_below:
        await wait_until(lambda: tree_cpu_ns(busy_below.pid or 0) is None, what="the busy child to be seen")
    assert tree_cpu_ns(2**22 + 1) is None  # no such process


async def _second_start_begins(slots: StartSlots, server: Running, *, within_s: float) -> bool:
    """Whether a second start gets a slot within ``within_s`` while the first holds one watching ``server``."""
    got = anyio.Event()

    async def second() -> None:
        async with slots.hold():
            got.set()

    async with anyio.create_task_group() as tg, slots.hold() as first:
        first.watch(server)
        tg.start_soon(second)
        with anyio.move_on_after(within_s):
            await got.wait()
        began = got.is_set()
        assert first.held is not began  # its slot was handed on, or it still holds it
    return began


async def test_a_start_whose_server_waits_gives_its_slot_to_the_next() -> None:
    with running(WAITS) as waiting:
        assert await _second_start_begins(StartSlots(1), waiting, within_s=WAIT_S)


async def test_a_start_whose_server_is_busy_keeps_its_slot() -> None:
    with running(SPIN) as busy:
        assert not await _second_start_begins(StartSlots(1), busy, within_s=10 * IDLE_WINDOW_S)
    unspawned = Running(None)  # (a start that has not spawned its server yet keeps its slot too)
    assert not await _second_start_begins(StartSlots(1), unspawned, within_s=10 * IDLE_WINDOW_S)


async def test_a_server_that_waits_before_it_is_ready_holds_no_other_start_up(tmp_path: Path) -> None:
    """One start at a time: a server that sleeps before it serves (as ``npx`` checks its package) lets the next
    server start and connect meanwhile."""
    waits = McpServerConfig(
        command="/bin/sh",
        args=("-c", 'sleep 60; exec "$0" "$@"', sys.executable, "-m", LIGHT, "--name", "waits"),
        discovery_timeout_ms=120_000,
    )
    options = ConnectionOptions(log_dir=tmp_path / "logs", max_concurrent_starts=1)
    async with Config(options=options) as config, anyio.create_task_group() as tg:
        config.set_mcp_servers({"waits": waits, "b": light("b")})
        tg.start_soon(config.initialize)
        await wait_until(lambda: "mcp__b__echo" in config.tool_registry.names(), what="b's tools")
        assert config.manager is not None
        assert config.manager.clients()["waits"].status != "connected"
        tg.cancel_scope.cancel()


async def _begins(slots: StartSlots, *, within_s: float) -> bool:
    """Whether a start gets a slot within ``within_s``."""
    with anyio.move_on_after(within_s):
        async with slots.hold():
            return True
    return False


@contextmanager
def _waits_then_spins(then: str = "while True: pass") -> Iterator[subprocess.Popen[bytes]]:
    """A process that waits for a byte on its stdin, then spins (or runs ``then``); it says ``waiting`` on its
    stdout as it begins to wait."""
    argv = [sys.executable, "-c", f"import sys\nprint('waiting', flush=True)\nsys.stdin.read(1)\n{then}"]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True) as process:
        try:
            yield process
        finally:
            os.killpg(process.pid, signal.SIGKILL)


async def test_a_start_whose_server_is_busy_again_counts_again() -> None:
    """A server that waits (as ``npx`` asks a registry), then loads: its start gave its slot up while it waited,
    and counts again once its server uses the CPU — no further start begins meanwhile, and one begins once it is
    over."""
    with _waits_then_spins() as process:
        assert process.stdin is not None
        slots = StartSlots(1)
        async with slots.hold() as first:
            first.watch(Running(process.pid))
            assert await _begins(slots, within_s=WAIT_S)  # its server waits: the next start takes the slot
            assert not first.held
            process.stdin.write(b"x")
            process.stdin.flush()
            await wait_until(lambda: tree_cpu_ns(process.pid) is None, what="the server to use the CPU")
            assert not await _begins(slots, within_s=10 * IDLE_WINDOW_S)
        assert await _begins(slots, within_s=WAIT_S)


async def test_at_most_as_many_starts_go_on_without_a_slot_as_there_are_slots() -> None:
    """Servers that all wait (and may all load at once when their waits end): with one slot, one start goes on
    without it, and the next start waits for a start to be over."""
    with running(WAITS) as a, running(WAITS) as b:
        slots = StartSlots(1)
        async with slots.hold() as first:
            first.watch(a)
            await wait_until(lambda: isinstance(tree_cpu_ns(a.pid or 0), int), what="a to wait")
            async with slots.hold() as second:  # a waits: its start gives its slot up
                second.watch(b)
                assert not first.held
                assert not await _begins(slots, within_s=10 * IDLE_WINDOW_S)
                assert second.held
        assert await _begins(slots, within_s=WAIT_S)


async def test_a_long_unlooked_at_window_says_nothing_of_idleness() -> None:
    """Nobody waited for a slot for a while: what a server used over that long window (a burst at its end hidden
    in the average) is no sign it is idle now; a window of the usual length after it is."""
    with running(WAITS) as waiting:
        await wait_until(lambda: isinstance(tree_cpu_ns(waiting.pid or 0), int), what="the sleep to wait")
        slot = StartSlot()
        slot.watch(waiting)
        now = time.monotonic()
        assert not slot.idle(now)  # the first look
        assert not slot.idle(now + 10 * IDLE_WINDOW_S)  # too long after it: only a new first look
        assert slot.idle(now + 12 * IDLE_WINDOW_S)


_BURST_S = 0.1
_THEN_BURSTS = f"""import time
start = time.process_time()
while time.process_time() - start < {_BURST_S}:
    pass
time.sleep(60)
"""


async def test_a_burst_at_the_end_of_a_long_unlooked_at_window_is_busy_again() -> None:
    """A start that gave its slot up, looked at again long after: its server, loading again for a moment now (its
    threads not runnable at the instant of the look, as between two reads from disk), uses the CPU again — the
    burst is not averaged over the whole window nobody looked at."""
    with _waits_then_spins(_THEN_BURSTS) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        assert await anyio.to_thread.run_sync(process.stdout.readline) == b"waiting\n"  # (its start-up is over)
        await wait_until(lambda: isinstance(tree_cpu_ns(process.pid), int), what="the server to wait")
        slot = StartSlot()
        slot.watch(Running(process.pid))
        now, before = time.monotonic(), tree_cpu_ns(process.pid) or 0
        assert not slot.busy(now)  # the first look
        process.stdin.write(b"x")
        process.stdin.flush()
        await wait_until(lambda: (tree_cpu_ns(process.pid) or 0) - before >= _BURST_S * 1e9, what="the burst")
        assert slot.busy(now + 100 * IDLE_WINDOW_S)
