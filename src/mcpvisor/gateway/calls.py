"""The calls in flight through a gateway, and how they end when it stops.

When the gateway stops (SIGTERM to ``mcpvisor serve``), :meth:`InFlight.drain` refuses new calls, lets
those in flight finish for a grace period, then ends the rest; each refused or ended call is answered
that the gateway is shutting down (:class:`ShuttingDown`), never cut off as if its server crashed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = ["DRAIN_S", "SHUTTING_DOWN", "InFlight", "ShuttingDown"]

logger = logging.getLogger(__name__)

DRAIN_S = 5.0
"""When the gateway stops, how long calls in flight may take to finish before they are ended."""
SHUTTING_DOWN = "the gateway is shutting down; make the call again once it is back"

T = TypeVar("T")


class ShuttingDown(Exception):
    """A call the gateway refused or ended because it is stopping."""


class InFlight:
    def __init__(self) -> None:
        self._draining = False
        self._refused = 0  # calls made while draining (each answered that the gateway is shutting down)
        self._scopes: set[anyio.CancelScope] = set()
        self._done = anyio.Event()

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Make ``call``; :class:`ShuttingDown` when the gateway drains before it starts or ends."""
        if self._draining:
            self._refused += 1
            raise ShuttingDown
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                return await call()
            finally:
                self._scopes.discard(scope)
                if not self._scopes:
                    self._done.set()
        raise ShuttingDown  # ended by drain()

    async def drain(self, grace_s: float = DRAIN_S) -> int:
        """Stop taking calls, let those in flight finish for up to ``grace_s``, then end the rest (they are
        answered as they end, for up to ``grace_s`` more). Returns how many were ended or, made meanwhile, refused."""
        self._draining = True
        await self._settle(grace_s)
        ended = len(self._scopes)
        for scope in list(self._scopes):
            scope.cancel()
        await self._settle(grace_s)
        if ended:
            logger.info("ended %d call(s) still in flight: the gateway is shutting down", ended)
        return ended + self._refused

    async def _settle(self, timeout_s: float) -> None:
        with anyio.move_on_after(timeout_s):
            while self._scopes:
                self._done = anyio.Event()
                await self._done.wait()
