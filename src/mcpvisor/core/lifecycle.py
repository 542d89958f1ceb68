"""The shape every long-lived mcpvisor object shares: ``__aenter__`` builds a local
``AsyncExitStack`` and keeps it only once everything started (``stack.pop_all()``);
``__aexit__`` unwinds it. Each object runs once: a second ``async with`` is refused (as the SDK's
``Client`` refuses it), and what only exists while it runs says so when asked for too early."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.abc

from mcpvisor.core.errors import NotRunningError

__all__ = ["Background", "StackOwner", "Stopping", "on_loop", "running"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def running(value: T | None, what: str) -> T:
    """``value``, which exists only while ``what`` runs; :class:`NotRunningError` saying so before or after."""
    if value is None:
        raise NotRunningError(f"the {what} is not running: use it inside `async with`")
    return value


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio event loop (None under another backend)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` run on ``loop`` (another thread's), awaited here; cancelling the wait cancels it there."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


class StackOwner:
    _stack: AsyncExitStack | None = None
    _entered = False
    _loop: asyncio.AbstractEventLoop | None = None

    @property
    def is_running(self) -> bool:
        """Whether it was entered and has not exited."""
        return self._stack is not None

    def _enter_once(self) -> None:
        """Call first in ``__aenter__``: refuses a second entry, running or finished."""
        if self._entered:
            raise NotRunningError(f"this {type(self).__name__} was already entered; create a new one to run it again")
        self._entered = True
        self._loop = _asyncio_loop()

    def elsewhere(self) -> asyncio.AbstractEventLoop | None:
        """The asyncio event loop it runs on when the caller's is another thread's (an agent run with
        ``run_sync`` in a worker thread): what it reads and writes wakes only its own loop, so the
        caller's requests must run there (:func:`on_loop`). None on its own loop."""
        own, current = self._loop, _asyncio_loop()
        return own if own is not None and current is not None and current is not own else None

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        try:
            return await stack.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            if exc is not None and _only(group, exc):
                return False  # the block's own exception, as itself: ``except ToolNotFoundError`` around it works
            raise


def _only(group: BaseExceptionGroup[BaseException], exc: BaseException) -> bool:
    """Whether every exception in ``group`` (nested groups opened) is ``exc`` itself (a task group wraps the
    exception of the block it ran beside)."""
    return all(_only(leaf, exc) if isinstance(leaf, BaseExceptionGroup) else leaf is exc for leaf in group.exceptions)


class Background:
    """Jobs run in a task group that outlives whoever started them; a caller waits for every job still running
    (its own and earlier ones) or until told to stop waiting. A job's exception is logged, never raised."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self.running: dict[str, int] = {}
        """Names of the jobs still running, with how many run under each."""
        self._live: set[int] = set()  # the jobs still running, by the number :meth:`start` gave each
        self._numbers = itertools.count()
        self._changed = anyio.Event()

    def start(self, jobs: Mapping[str, Callable[[], Awaitable[None]]]) -> frozenset[int]:
        """Start ``jobs``; the numbers of those started, for :meth:`over` (a name may have earlier jobs running)."""
        numbers = []
        for name, job in jobs.items():
            self.running[name] = self.running.get(name, 0) + 1
            numbers.append(number := next(self._numbers))
            self._live.add(number)
            self._tg.start_soon(self._run, name, number, job)
        return frozenset(numbers)

    async def _run(self, name: str, number: int, job: Callable[[], Awaitable[None]]) -> None:
        try:
            await job()
        except Exception:
            logger.exception("%s failed", name)
        finally:
            self._live.discard(number)
            self.running[name] -= 1
            if not self.running[name]:
                del self.running[name]
            self._changed.set()
            self._changed = anyio.Event()

    async def over(self, jobs: Collection[int] | None, asked: Callable[[], bool]) -> None:
        """Return once none of ``jobs`` (numbered by :meth:`start`; None: no job at all) runs, or once ``asked()``."""
        while (self._live.intersection(jobs) if jobs is not None else self._live) and not asked():  # noqa: ASYNC110 - polls: ms at a time
            await anyio.sleep(0.01)

    async def wait(self, stop_waiting: Callable[[], Awaitable[None]]) -> set[str]:
        """Wait until no job runs, or until ``stop_waiting()`` returns; the names still running then."""
        async with anyio.create_task_group() as waiting:

            async def all_done() -> None:
                while self.running:
                    await self._changed.wait()
                waiting.cancel_scope.cancel()

            async def told() -> None:
                await stop_waiting()
                waiting.cancel_scope.cancel()

            waiting.start_soon(all_done)
            waiting.start_soon(told)
        return set(self.running)


class Stopping:
    """The names whose old process (connection) is being stopped, for a start of the same name to wait until it is
    over: the old one goes first (a stateful server may hold a port or a lock)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._changed = anyio.Event()

    def names(self) -> set[str]:
        return set(self._counts)

    @contextmanager
    def of(self, name: str) -> Iterator[None]:
        """While the block runs, ``name`` is being stopped."""
        self._counts[name] += 1
        try:
            yield
        finally:
            self._counts[name] -= 1
            if not self._counts[name]:
                del self._counts[name]
            self._changed.set()
            self._changed = anyio.Event()

    async def over(self, name: str) -> None:
        """Return once nothing of ``name`` is being stopped."""
        while name in self._counts:
            await self._changed.wait()
