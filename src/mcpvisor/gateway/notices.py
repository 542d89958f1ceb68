"""List-changed notices to every client of the gateway, in both protocol eras, coalesced per step.

- modern era (2026-07-28): ``bus.publish(ToolsListChanged())`` on the subscription bus (in memory, or a fleet's) that
  ``ListenHandler(bus)`` serves (``subscriptions/listen`` streams);
- handshake era: ``Connection.send_tool_list_changed()`` on every live handshake connection, seen by
  :meth:`ChangeNotices.middleware` from its ``initialize`` on and forgotten when it closes.

A notice goes out in the step after the change was marked (what changed in the same step goes out
together), so a client reacting to it finds the new tools; each handshake-era connection has its own sender,
so a stuck client never stalls the others (what changes meanwhile is coalesced for it).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    SubscriptionBus,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcpvisor.gateway.protocol import connection_of

__all__ = ["NOTIFY_TIMEOUT_S", "ChangeNotices"]

logger = logging.getLogger(__name__)

NOTIFY_TIMEOUT_S = 5.0
"""Bound on pushing one notice to one handshake-era client (a stuck client never stalls the others)."""

_MODERN_NOTICES: dict[str, type[ToolsListChanged | PromptsListChanged | ResourcesListChanged]] = {
    "tools": ToolsListChanged,
    "prompts": PromptsListChanged,
    "resources": ResourcesListChanged,
}


class _Listener:
    """One handshake-era connection's notices: what changed since it was last told, and its own sender."""

    def __init__(self) -> None:
        self.pending: set[str] = set()
        self.wake = anyio.Event()
        self.scope = anyio.CancelScope()


class ChangeNotices:
    """Who hears about changes, and the loop (:meth:`run`, in the gateway's task group) that tells them. Each
    handshake-era connection has a sender of its own: a client that does not read holds up only its own notices
    (coalesced meanwhile), never another client's."""

    def __init__(self, bus: SubscriptionBus) -> None:
        self.bus = bus
        self._legacy: dict[Connection, _Listener] = {}
        self._pending: set[str] = set()
        self._wake = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self.sent = 0
        """How many coalesced rounds of notices went out (for tests and status)."""

    def legacy_connections(self) -> int:
        """How many handshake-era client connections are live."""
        return len(self._legacy)

    def connections(self) -> list[Connection]:
        """The live handshake-era client connections."""
        return list(self._legacy)

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Every inbound message, ``initialize`` included, passes here first."""
        self._track(ctx)
        return await call_next(ctx)

    def _track(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Remember a handshake-era connection from its ``initialize`` on, until it closes (modern-era
        connections live for one request; they hear about changes on ``subscriptions/listen`` streams)."""
        if ctx.method != "initialize" and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        connection = connection_of(ctx)
        if connection is None or connection in self._legacy:
            return
        listener = self._legacy[connection] = _Listener()
        if self._tg is not None:
            self._tg.start_soon(self._tell, connection, listener)
        connection.exit_stack.callback(self._forget, connection)

    def _forget(self, connection: Connection) -> None:
        listener = self._legacy.pop(connection, None)
        if listener is not None:
            listener.scope.cancel()

    def mark_changed(self, *, tools: bool = False, prompts: bool = False, resources: bool = False) -> None:
        """Schedule a (coalesced) list-changed notice to every client."""
        self._pending |= {
            kind for kind, changed in (("tools", tools), ("prompts", prompts), ("resources", resources)) if changed
        }
        self._wake.set()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for connection, listener in self._legacy.items():  # tracked before the loop ran
                tg.start_soon(self._tell, connection, listener)
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                await anyio.lowlevel.checkpoint()  # what changed in the same step goes out together
                kinds, self._pending = frozenset(self._pending), set()
                if kinds:
                    try:
                        await self._publish(kinds)
                    except Exception:  # task boundary: the next change must still be announced
                        logger.exception("could not send list-changed notices")

    async def _publish(self, kinds: frozenset[str]) -> None:
        self.sent += 1
        logger.debug("announcing changed %s", " and ".join(sorted(kinds)))
        for kind, notice in _MODERN_NOTICES.items():
            if kind in kinds:
                await self.bus.publish(notice())
        for listener in self._legacy.values():
            listener.pending |= kinds
            listener.wake.set()

    async def _tell(self, connection: Connection, listener: _Listener) -> None:
        """The sender of one connection: what changed since it last heard, one round at a time."""
        with listener.scope:
            while True:
                await listener.wake.wait()
                listener.wake = anyio.Event()
                kinds, listener.pending = frozenset(listener.pending), set()
                with anyio.move_on_after(NOTIFY_TIMEOUT_S):
                    try:
                        if "tools" in kinds:
                            await connection.send_tool_list_changed()
                        if "prompts" in kinds:
                            await connection.send_prompt_list_changed()
                        if "resources" in kinds:
                            await connection.send_resource_list_changed()
                    except Exception:  # one broken client never keeps the others from hearing
                        logger.exception("dropping a client that could not take a list-changed notice")
                        self._legacy.pop(connection, None)
                        return
