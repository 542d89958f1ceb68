"""Servers' log messages to the handshake-era clients that asked for them (``logging/setLevel``).

Once a client sets a level, the gateway listens to every connected server's log messages, asks each
server for the lowest level any client wants, and passes each message on to every client whose level
lets it through, its logger named after the server. A server that (re)connects is heard and told the
level too. A stuck or broken client never keeps the others from hearing.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import anyio
import anyio.abc
import mcp_types as types
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPDeprecationWarning

from mcpvisor.core.call_logs import rank
from mcpvisor.core.client import McpClient, Notice
from mcpvisor.core.config import Config
from mcpvisor.gateway.asks import served_logger
from mcpvisor.gateway.notices import NOTIFY_TIMEOUT_S

__all__ = ["LogRelay"]

logger = logging.getLogger(__name__)


class LogRelay:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._levels: dict[Connection, types.LoggingLevel] = {}
        self._heard: dict[str, tuple[McpClient, Callable[[], None]]] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Relay in ``tg`` (the gateway's) from now on."""
        self._tg = tg

    def stop(self) -> None:
        """Stop listening to the servers."""
        for _, remove in self._heard.values():
            remove()
        self._heard.clear()

    async def set_level(self, connection: Connection, level: types.LoggingLevel) -> None:
        """``connection``'s client wants the servers' log messages from ``level`` up (until it closes)."""
        if connection not in self._levels:
            connection.exit_stack.callback(self._levels.pop, connection, None)
        self._levels[connection] = level
        self._hear_all()
        await self._set_upstream_levels()

    def server_connected(self, server: str) -> None:
        """A server (re)connected: hear it, and tell it the level, if any client asked for messages."""
        if not self._levels:
            return
        self._hear_all()
        if self._tg is not None:
            self._tg.start_soon(self._set_upstream_levels, [server])

    def _lowest_level(self) -> types.LoggingLevel | None:
        levels = list(self._levels.values())
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
                    tg.start_soon(client.set_logging_level, level)

    def _hear_all(self) -> None:
        """Listen to every connected server's log messages (once a client asked for them)."""
        if not self._levels:
            return
        for name, client in self._config.manager.clients().items():
            heard = self._heard.get(name)
            if heard is not None and heard[0] is client:
                continue
            if heard is not None:
                heard[1]()
            self._heard[name] = (client, client.add_listener(self._on_upstream_notice))

    def _on_upstream_notice(self, server: str, notice: Notice) -> None:
        if isinstance(notice, types.LoggingMessageNotification) and self._tg is not None:
            self._tg.start_soon(self._relay, server, notice.params)

    async def _relay(self, server: str, params: types.LoggingMessageNotificationParams) -> None:
        """One upstream log message to every client whose level lets it through."""
        severity = rank(params.level)
        logger_name = served_logger(server, params)
        for connection, level in list(self._levels.items()):
            if severity >= rank(level):
                with anyio.move_on_after(NOTIFY_TIMEOUT_S):
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore", MCPDeprecationWarning)  # handshake-era clients only
                            await connection.log(params.level, params.data, logger_name)
                    except Exception:  # one broken client never keeps the others from hearing
                        logger.exception("could not pass a log message of server %r to a client", server)
