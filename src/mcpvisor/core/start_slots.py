"""The bound on simultaneous server starts, counting the starts whose server uses the CPU.

Spawning a server is CPU-bound (an interpreter loading its modules): starting fifty at once on two cores makes
every one of them late, so at most about as many start at once as there are cores. But a start also waits for
things that need no CPU — ``npx`` or ``uvx`` asking a registry about their package, a wrapper's ``sleep``, a
server ready and waiting for its handshake — and a slot held through such a wait only delays the starts behind it.
So a start asking for a slot, and every :data:`SAMPLE_S` one waiting for it, looks at the servers of the starts
holding one: one whose processes (the server and every process under it, each thread) ran or waited to run for at
most :data:`IDLE_SHARE` of one core over a whole :data:`IDLE_WINDOW_S` gives its slot up, and its start goes on
without one. Once its processes use the CPU again
(``npx`` done asking, the server loading) it counts again: no further start begins until as few use the CPU as
there are slots. And at most as many starts go on without a slot as there are slots: servers that all waited
(spawned meanwhile) and then all load at once are at most twice the bound.

What a server's processes used comes from Linux's ``/proc`` (each task's ``schedstat``: the nanoseconds it ran and
it waited on a run queue; ``stat`` for its state; ``children`` for the processes under it). Where that cannot be
read — another system, a kernel without ``/proc/PID/task/TID/children`` — a start holds its slot until it is over.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

import anyio

__all__ = ["IDLE_SHARE", "IDLE_WINDOW_S", "SAMPLE_S", "StartSlot", "StartSlots", "default_max_starts", "tree_cpu_ns"]

SAMPLE_S = 0.05
"""How often a start waiting for a slot looks at the servers of the starts that hold one."""
IDLE_WINDOW_S = 0.1
"""How long a server must have been idle for its start to give up its slot."""
IDLE_SHARE = 0.05
"""Idle: its processes ran or waited to run for at most this share of one core over the window."""
_LONGEST_WINDOW_S = 4 * IDLE_WINDOW_S
"""A longer window, nobody having looked meanwhile, would hide a recent burst in its average."""


def default_max_starts() -> int:
    """Simultaneous server starts: spawning is CPU-bound, so about the number of cores."""
    return max(2, os.cpu_count() or 2)


class _HasPid(Protocol):
    @property
    def pid(self) -> int | None: ...


def tree_cpu_ns(pid: int) -> int | None:
    """The nanoseconds the process ``pid`` and every process under it (each thread) ran or waited on a run queue,
    or None: unknown (no ``/proc`` to read, the process gone), or one of them is running or runnable right now."""
    total, pending = 0, [pid]
    try:
        while pending:
            proc = f"/proc/{pending.pop()}/task"
            for tid in os.listdir(proc):
                with open(f"{proc}/{tid}/stat", "rb") as stat:
                    state = stat.read().rpartition(b")")[2].split(maxsplit=1)[0]
                if state in (b"R", b"Z", b"X"):
                    return None  # wants the CPU now (or is gone: its start is about to hear of it)
                with open(f"{proc}/{tid}/schedstat", "rb") as schedstat:
                    ran, waited, _ = schedstat.read().split()
                total += int(ran) + int(waited)
                with open(f"{proc}/{tid}/children", "rb") as children:
                    pending.extend(int(child) for child in children.read().split())
    except (OSError, ValueError, IndexError):
        return None
    return total


@dataclass(eq=False)
class StartSlot:
    """One start's slot (:meth:`StartSlots.hold`): held until the start is over, or until the server it
    :meth:`watch`\\ es has been idle a while (:attr:`held` False from then on; the start counts again while its
    server is :meth:`busy`)."""

    held: bool = True
    _server: _HasPid | None = field(default=None, repr=False)
    _since: tuple[float, int] | None = field(default=None, repr=False)
    """When the server's processes were last seen to use the CPU, and their CPU time then."""

    def watch(self, server: _HasPid) -> None:
        """Whose processes tell whether this start still uses the CPU (``server.pid``: None until it is spawned)."""
        self._server, self._since = server, None

    def idle(self, now: float) -> bool:
        """Whether the watched server's processes have used (almost) no CPU for :data:`IDLE_WINDOW_S` up to
        ``now``."""
        pid = self._server.pid if self._server is not None else None
        used = tree_cpu_ns(pid) if pid is not None else None
        if used is None:
            self._since = None
            return False
        if self._since is None:
            self._since = (now, used)
            return False
        since, used_then = self._since
        if now - since < IDLE_WINDOW_S:
            return False
        if now - since <= _LONGEST_WINDOW_S and 0 <= used - used_then <= (now - since) * IDLE_SHARE * 1e9:
            return True
        self._since = (now, used)
        return False

    def busy(self, now: float) -> bool:
        """Whether the watched server's processes use the CPU again (or are gone: its start is about to hear of it)
        since they were last looked at (what they used over a longer window than :data:`_LONGEST_WINDOW_S` is
        weighed against that window: it may all have been used at its end)."""
        pid = self._server.pid if self._server is not None else None
        if pid is None:
            return False
        used, since = tree_cpu_ns(pid), self._since
        self._since = None if used is None else (now, used)
        if used is None:
            return True
        if since is None:
            return False
        return used - since[1] > min(now - since[0], _LONGEST_WINDOW_S) * IDLE_SHARE * 1e9


class StartSlots:
    """At most ``total`` starts at once whose server uses the CPU (see the module's docstring)."""

    def __init__(self, total: int | None = None) -> None:
        self.total = total or default_max_starts()
        self._limiter = anyio.CapacityLimiter(self.total)
        self._holding: list[StartSlot] = []
        self._resting: list[StartSlot] = []
        """The starts that gave their slot up and whose server waits."""
        self._busy_again: list[StartSlot] = []
        """The starts that gave their slot up and whose server uses the CPU again: each takes a slot's place."""
        self._sampled = 0.0

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[StartSlot]:
        """Wait for a slot and hold it for the block (or until the server the block watches is idle)."""
        slot = StartSlot()
        await self._acquire(slot)
        self._holding.append(slot)
        try:
            yield slot
        finally:
            self._give_up(slot)
            if slot in self._busy_again:
                self._busy_again.remove(slot)
                self._count_busy_again()
            else:
                self._resting.remove(slot)

    async def _acquire(self, slot: StartSlot) -> None:
        self._sample(time.monotonic())  # a start that gave its slot up may use the CPU again: it counts first
        while True:
            with anyio.move_on_after(SAMPLE_S):
                await self._limiter.acquire_on_behalf_of(slot)
                return
            self._take_from_idle()

    def _take_from_idle(self) -> None:
        """Free the slots of the starts whose server is idle (once per :data:`SAMPLE_S`, however many wait)."""
        now = time.monotonic()
        if now - self._sampled < SAMPLE_S * 0.9:
            return
        self._sample(now)

    def _sample(self, now: float) -> None:
        self._sampled = now
        for slot in [slot for slot in self._resting if slot.busy(now)]:
            self._resting.remove(slot)
            self._busy_again.append(slot)
        for slot in [slot for slot in self._busy_again if slot.idle(now)]:
            self._busy_again.remove(slot)
            self._resting.append(slot)
        self._count_busy_again()
        for slot in [slot for slot in self._holding if slot.idle(now)]:
            if len(self._resting) + len(self._busy_again) >= self.total:
                break  # as many run without a slot as there are slots: should all their servers load at once
            self._give_up(slot)

    def _count_busy_again(self) -> None:
        """Leave as many slots to take as there are, less one for each start whose server is busy again."""
        self._limiter.total_tokens = max(0, self.total - len(self._busy_again))

    def _give_up(self, slot: StartSlot) -> None:
        if slot.held:
            slot.held = False
            self._holding.remove(slot)
            self._resting.append(slot)
            self._limiter.release_on_behalf_of(slot)
