"""Servers' log messages to the handshake-era clients that asked for them (``logging/setLevel``).

Once a client sets a level, the gateway listens to every connected server's log messages, asks each
server for the lowest level any client wants, and passes each message on to every client whose level
lets it through, its logger named after the server. A server shared with other workspaces' gateways
(per-client workspaces) is asked for the lowest level any of them wants. A server that (re)connects is
heard and told the level too. A stuck or broken client never keeps the others from hearing.

Each client has a queue of at most :data:`QUEUE_MESSAGES` messages and one task passing them on: a
server that logs faster than a client reads loses that client the messages over the bound (it is told
how many, once the queue moves again), never the gateway its memory.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPDeprecationWarning

from mcpvisor.core.call_logs import rank
from mcpvisor.core.client import McpClient, Notice
from mcpvisor.core.config import Config
from mcpvisor.gateway.asks import served_logger
from mcpvisor.gateway.notices import NOTIFY_TIMEOUT_S

__all__ = ["LogRelay"]

logger = logging.getLogger(__name__)

QUEUE_MESSAGES = 256
"""Log messages waiting for one client at most; more are dropped (and counted) until it catches up."""

_Message = tuple[str, types.LoggingMessageNotificationParams]


@dataclass(eq=False)
class _Listener:
    """One client that asked for log messages: its level, its queue, and what the queue had to drop."""

    level: types.LoggingLevel
    queue: MemoryObjectSendStream[_Message]
    dropped: int = 0


class LogRelay:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._listeners: dict[Connection, _Listener] = {}
        self._heard: dict[str, tuple[McpClient, Callable[[], None]]] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Relay in ``tg`` (the gateway's) from now on."""
        self._tg = tg

    def stop(self) -> None:
        """Stop listening to the servers."""
        for client, remove in self._heard.values():
            remove()
            client.forget_logging_level(self)
        self._heard.clear()

    async def set_level(self, connection: Connection, level: types.LoggingLevel) -> None:
        """``connection``'s client wants the servers' log messages from ``level`` up (until it closes)."""
        listener = self._listeners.get(connection)
        if listener is not None:
            listener.level = level
        elif self._tg is not None:
            send, receive = anyio.create_memory_object_stream[_Message](QUEUE_MESSAGES)
            listener = self._listeners[connection] = _Listener(level, send)
            connection.exit_stack.callback(self._forget, connection)
            self._tg.start_soon(self._pass_on, connection, listener, receive)
        self._hear_all()
        await self._set_upstream_levels()

    def level_of(self, connection: Connection | None) -> types.LoggingLevel | None:
        """The level ``connection``'s client asked for, if it did."""
        listener = self._listeners.get(connection) if connection is not None else None
        return listener.level if listener is not None else None

    def _forget(self, connection: Connection) -> None:
        listener = self._listeners.pop(connection, None)
        if listener is not None:
            listener.queue.close()  # its task ends
        if not self._listeners:  # the level this gateway asked for no longer holds a shared server's down, and no
            self.stop()  # server needs hearing (nor its connection keeping) until a client asks again

    def server_connected(self, server: str) -> None:
        """A server (re)connected: hear it, and tell it the level, if any client asked for messages."""
        if not self._listeners:
            return
        self._hear_all()
        if self._tg is not None:
            self._tg.start_soon(self._set_upstream_levels, [server])

    def _lowest_level(self) -> types.LoggingLevel | None:
        levels = [listener.level for listener in self._listeners.values()]
        if not levels:
            return None
        return min(levels, key=rank)

    async def _set_upstream_levels(self, servers: list[str] | None = None) -> None:
        level = self._lowest_level()
        if level is None:
            return
        async with anyio.create_task_group() as tg:
            for name, client in self._config.manager.clients().items():
                if servers is None or name in servers:
                    tg.start_soon(partial(client.set_logging_level, level, asker=self))

    def _hear_all(self) -> None:
        """Listen to every connected server's log messages (once a client asked for them)."""
        if not self._listeners:
            return
        clients = self._config.manager.clients()
        for name in self._heard.keys() - clients.keys():  # a server removed: its ended connection is let go
            gone, remove = self._heard.pop(name)
            remove()
            gone.forget_logging_level(self)
        for name, client in clients.items():
            heard = self._heard.get(name)
            if heard is not None and heard[0] is client:
                continue
            if heard is not None:  # a new connection: the old one no longer hears, nor keeps this relay's level
                heard[1]()
                heard[0].forget_logging_level(self)
            self._heard[name] = (client, client.add_listener(self._on_upstream_notice))

    def _on_upstream_notice(self, server: str, notice: Notice) -> None:
        if not isinstance(notice, types.LoggingMessageNotification):
            return
        severity = rank(notice.params.level)
        for listener in self._listeners.values():
            if severity >= rank(listener.level):
                try:
                    listener.queue.send_nowait((server, notice.params))
                except anyio.WouldBlock:
                    listener.dropped += 1
                except anyio.ClosedResourceError:
                    pass  # the client is gone

    async def _pass_on(
        self, connection: Connection, listener: _Listener, queue: MemoryObjectReceiveStream[_Message]
    ) -> None:
        """Pass ``listener``'s queue on to its client, one message at a time, until the client goes."""
        async with queue:
            async for server, params in queue:
                await self._send(connection, params.level, params.data, served_logger(server, params))
                if listener.dropped:
                    dropped, listener.dropped = listener.dropped, 0
                    text = f"{dropped} log messages of the servers were dropped: they came faster than this client read"
                    await self._send(connection, "warning", text, "mcpvisor")

    async def tell(self, connection: Connection, level: types.LoggingLevel, text: str) -> None:
        """Send mcpvisor's own log message (logger ``mcpvisor``) to ``connection``'s client, unless the level it
        asked for (``logging/setLevel``) holds it back."""
        asked = self.level_of(connection)
        if asked is None or rank(level) >= rank(asked):
            await self._send(connection, level, text, "mcpvisor")

    async def _send(self, connection: Connection, level: types.LoggingLevel, data: object, name: str) -> None:
        with anyio.move_on_after(NOTIFY_TIMEOUT_S):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)  # handshake-era clients only
                    await connection.log(level, data, name)
            except Exception:  # one broken client never keeps the others from hearing
                logger.exception("could not pass a log message to a client (logger %r)", name)
