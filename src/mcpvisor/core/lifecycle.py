"""The shape every long-lived mcpvisor object shares: ``__aenter__`` builds a local
``AsyncExitStack`` and keeps it only once everything started (``stack.pop_all()``);
``__aexit__`` unwinds it. Each object runs once: a second ``async with`` is refused (as the SDK's
``Client`` refuses it), and what only exists while it runs says so when asked for too early."""

from __future__ import annotations

from contextlib import AsyncExitStack
from types import TracebackType
from typing import TypeVar

__all__ = ["StackOwner", "running"]

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
