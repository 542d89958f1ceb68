"""The shape every long-lived mcpvisor object shares: ``__aenter__`` builds a local
``AsyncExitStack`` and keeps it only once everything started (``stack.pop_all()``);
``__aexit__`` unwinds it."""

from __future__ import annotations

from contextlib import AsyncExitStack
from types import TracebackType

__all__ = ["StackOwner"]


class StackOwner:
    _stack: AsyncExitStack | None = None

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        return await stack.__aexit__(exc_type, exc, tb)
