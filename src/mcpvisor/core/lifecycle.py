"""The shape every long-lived mcpvisor object shares: ``__aenter__`` builds a local
``AsyncExitStack`` and keeps it only once everything started (``stack.pop_all()``);
``__aexit__`` unwinds it. Each object runs once: a second ``async with`` is refused (as the SDK's
``Client`` refuses it), and what only exists while it runs says so when asked for too early."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TypeVar

import anyio
import anyio.abc

__all__ = ["StackOwner", "run_until", "running"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def running(value: T | None, what: str) -> T:
    """``value``, which exists only while ``what`` runs; :class:`RuntimeError` saying so before or after."""
    if value is None:
        raise RuntimeError(f"the {what} is not running: use it inside `async with`")
    return value


class StackOwner:
    _stack: AsyncExitStack | None = None
    _entered = False

    @property
    def is_running(self) -> bool:
        """Whether it was entered and has not exited."""
        return self._stack is not None

    def _enter_once(self) -> None:
        """Call first in ``__aenter__``: refuses a second entry, running or finished."""
        if self._entered:
            raise RuntimeError(f"this {type(self).__name__} was already entered; create a new one to run it again")
        self._entered = True

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        return await stack.__aexit__(exc_type, exc, tb)


async def run_until(
    tg: anyio.abc.TaskGroup,
    jobs: Mapping[str, Callable[[], Awaitable[None]]],
    stop_waiting: Callable[[set[str]], Awaitable[None]],
) -> set[str]:
    """Run each job in ``tg`` (which outlives the caller) and wait until all are done, or until
    ``stop_waiting(left)`` returns (``left``: the names of the jobs still running, kept current); those run on
    and are returned. A job's exception is logged, never raised (each is a task of its own)."""
    left = set(jobs)
    done = anyio.Event()

    async def run(name: str, job: Callable[[], Awaitable[None]]) -> None:
        try:
            await job()
        except Exception:
            logger.exception("%s failed", name)
        finally:
            left.discard(name)
            if not left:
                done.set()

    if not jobs:
        return set()
    for name, job in jobs.items():
        tg.start_soon(run, name, job)
    async with anyio.create_task_group() as waiting:

        async def then_stop(wait: Awaitable[object]) -> None:
            await wait
            waiting.cancel_scope.cancel()

        waiting.start_soon(then_stop, done.wait())
        waiting.start_soon(then_stop, stop_waiting(left))
    return set(left)
