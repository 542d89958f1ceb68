"""What one server tells beyond its answers: resource updates and log messages, for one connection.

:class:`ServerNotices` keeps who listens (:meth:`add`, the gateway's subscriptions and log relay), the
calls in flight that asked to hear the server's log messages (:mod:`mcpvisor.core.call_logs`), the
log level last asked of a handshake-era server, and the ``subscriptions/listen`` streams that carry a
2026-07-28 server's resource updates. :class:`~mcpvisor.core.client.McpClient` owns one per connection.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from mcpvisor.core.call_logs import CallLog, rank
from mcpvisor.core.errors import RequestError
from mcpvisor.core.events import Listeners
from mcpvisor.core.transports import closed_in_sdk

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["HEAR_TIMEOUT_S", "SDK_REQUEST_ERRORS", "Notice", "ServerNotices"]

logger = logging.getLogger(__name__)

HEAR_TIMEOUT_S = 5.0
"""Bound on handing one log message to one caller (a stuck caller never stalls the connection)."""

Notice = types.ResourceUpdatedNotification | types.LoggingMessageNotification
"""What a connection's listeners hear (:meth:`ServerNotices.add`)."""

SDK_REQUEST_ERRORS: tuple[type[Exception], ...] = (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError)
"""What the SDK raises for a request that failed: the server's error, or the connection closed under it."""


class ServerNotices:
    def __init__(self, server: str) -> None:
        self.server = server
        self._listeners: Listeners[Callable[[str, Notice], None]] = Listeners(f"listener of server {server!r}")
        self._call_logs: list[CallLog] = []
        self._passing_logs = 0
        self._logs_passed = anyio.Event()
        self.log_level: types.LoggingLevel | None = None
        """The level last asked of a handshake-era server with ``logging/setLevel``."""
        self.asked_levels: dict[object, types.LoggingLevel] = {}
        """What each user of the connection (a gateway sharing it) last asked for."""
        self._resource_listens: dict[str, anyio.CancelScope] = {}

    # -- listeners ---------------------------------------------------------------------------

    def add(self, listener: Callable[[str, Notice], None]) -> Callable[[], None]:
        """``listener(server, notice)`` hears resource updates and log messages (synchronously: it must
        not block). Returns the function that removes it."""
        return self._listeners.add(listener)

    def tell(self, notice: Notice) -> None:
        self._listeners.tell(self.server, notice)

    # -- log messages ------------------------------------------------------------------------

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.tell(types.LoggingMessageNotification(params=params))
        # A server's log message names no call: every call in flight that asked for its level hears it.
        hearers = [log for log in self._call_logs if rank(params.level) >= rank(log.level)]
        if not hearers:
            return
        self._passing_logs += 1
        try:
            for log in hearers:
                with anyio.move_on_after(HEAR_TIMEOUT_S):
                    try:
                        await log.hear(self.server, params)
                    except Exception as exc:  # a caller that cannot hear any more never stops the connection
                        logger.debug("server %r: a log message could not be passed on: %s", self.server, exc)
        finally:
            self._passing_logs -= 1
            if not self._passing_logs:
                self._logs_passed.set()
                self._logs_passed = anyio.Event()

    def lowest_level(self, level: types.LoggingLevel) -> types.LoggingLevel:
        """``level``, or lower when a call in flight or another user of the connection asked for less severe
        messages."""
        return min((level, *self.asked_levels.values(), *(log.level for log in self._call_logs)), key=rank)

    async def set_logging_level(self, client: Client, level: types.LoggingLevel) -> None:
        """``logging/setLevel`` on a handshake-era server that offers logging (others: nothing)."""
        if client.server_capabilities.logging is None:
            return
        level = self.lowest_level(level)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.session.set_logging_level(level=level)
            self.log_level = level
        except SDK_REQUEST_ERRORS as exc:
            logger.debug("server %r: setting the log level failed: %s", self.server, exc)

    def hear(self, log: CallLog) -> None:
        """A call in flight hears the server's log messages from ``log.level`` up until :meth:`stop_hearing`."""
        self._call_logs.append(log)

    async def stop_hearing(self, log: CallLog) -> None:
        """The call ends. The server wrote its messages before its answer: those on their way reach the
        caller first (bounded, and even while the call is being cancelled)."""
        with anyio.move_on_after(HEAR_TIMEOUT_S, shield=True):
            await anyio.lowlevel.checkpoint()
            while self._passing_logs:
                await self._logs_passed.wait()
        self._call_logs.remove(log)

    # -- 2026-07-28 resource subscriptions ---------------------------------------------------

    async def listen_for_resource(self, tg: anyio.abc.TaskGroup, client: Client, uri: str) -> None:
        """Hear ``uri``'s updates on a ``subscriptions/listen`` stream of its own, in ``tg`` (the
        connection's: the stream ends with it). Returns once the server acknowledged it; raises
        :class:`RequestError` if the server refuses, and the SDK's ``Connection closed`` if the connection
        ends first. The stream is a task of ``tg`` from its start: an acknowledgement that never comes
        (the connection ended under the request) holds up neither the connection's end nor the caller."""
        if uri in self._resource_listens:
            return
        opening = _Opening()
        scope = anyio.CancelScope()
        tg.start_soon(self._resource_listener, client, uri, scope, opening)
        try:
            await opening.done.wait()
        except BaseException:  # given up (timed out, cancelled): the stream is not wanted any more
            scope.cancel()
            raise
        if opening.error is not None:
            raise opening.error
        self._resource_listens[uri] = scope

    def listened(self) -> list[str]:
        """The URIs with a listen stream open now."""
        return list(self._resource_listens)

    def stop_listening(self, uri: str) -> bool:
        """End ``uri``'s listen stream; False when there was none."""
        scope = self._resource_listens.pop(uri, None)
        if scope is None:
            return False
        scope.cancel()
        return True

    async def _resource_listener(self, client: Client, uri: str, scope: anyio.CancelScope, opening: _Opening) -> None:
        with scope:
            try:
                async with client.listen(resource_subscriptions=[uri]) as sub:
                    opening.error = None
                    opening.done.set()
                    async for event in sub:
                        if str(getattr(event, "uri", "")) == uri:
                            params = types.ResourceUpdatedNotificationParams(uri=uri)
                            self.tell(types.ResourceUpdatedNotification(params=params))
            except (ListenNotSupportedError, SubscriptionLost, MCPError) as exc:
                if opening.done.is_set():
                    logger.debug("server %r: the subscription to %r ended: %s", self.server, uri, exc)
                elif isinstance(exc, MCPError) and closed_in_sdk(exc):
                    opening.error = exc  # (said by the caller as the connection's end is said)
                else:
                    opening.error = RequestError(
                        f"subscribing to resource {uri!r} failed on server {self.server!r}: {exc}",
                        kind="subscription",
                        target=uri,
                        server=self.server,
                    )
            except Exception as exc:
                if opening.done.is_set():
                    raise
                opening.error = exc  # the caller's to say, not the connection's to end with
            finally:
                opening.done.set()  # (ended before an acknowledgement: the connection closed, as opening.error says)
                if self._resource_listens.get(uri) is scope:
                    del self._resource_listens[uri]


class _Opening:
    """How the opening of a listen stream went, for the task that waits for it: acknowledged (``error`` None),
    refused, or ended with the connection (``Connection closed``, until the acknowledgement comes)."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.error: Exception | None = MCPError(types.CONNECTION_CLOSED, "Connection closed")
