"""Resource subscriptions through the gateway: a client's subscription becomes one upstream subscription.

A client subscribes to a URI as the gateway lists it (``resources/subscribe`` in the handshake era; the
``resourceSubscriptions`` of a ``subscriptions/listen`` stream in the 2026-07-28 era). The gateway finds
the server that owns it (the same routing as ``resources/read``) and subscribes there once, however
many clients subscribed; the last one to leave (unsubscribe, a closed connection, an ended stream)
ends the upstream subscription. An upstream ``notifications/resources/updated`` reaches exactly the
clients subscribed to that URI, under the gateway's URI for it. When the owning server reconnects
(a restart, a crash), its subscriptions are made again on the new connection.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.subscriptions import ResourceUpdated, SubscriptionBus
from mcp.shared.exceptions import MCPError

from mcpvisor.core.errors import McpvisorError
from mcpvisor.gateway.notices import NOTIFY_TIMEOUT_S
from mcpvisor.gateway.protocol import said_here
from mcpvisor.host.status import as_said_here

if TYPE_CHECKING:
    from mcpvisor.core.client import McpClient, Notice
    from mcpvisor.core.config import Config

__all__ = ["ResourceSubscriptions", "Subscribers", "acquire_each", "release_all"]

logger = logging.getLogger(__name__)

RESUBSCRIBE_TIMEOUT_S = 10.0


@dataclass(eq=False)
class _Upstream:
    """One upstream subscription and the gateway URIs (with their subscriber counts) that rely on it."""

    server: str
    uri: str
    client: McpClient
    remove_listener: Callable[[], None]
    counts: dict[str, int] = field(default_factory=dict)


class ResourceSubscriptions:
    """Reference-counted upstream subscriptions. ``owner_of(uri)`` routes a gateway URI to (server, URI
    there) or raises the gateway's not-found error; ``deliver(uri)`` tells the subscribed clients."""

    def __init__(
        self,
        config: Config,
        owner_of: Callable[[str], tuple[str, str]],
        deliver: Callable[[str], None],
    ) -> None:
        self._config = config
        self._owner_of = owner_of
        self._deliver = deliver
        self._upstream: dict[tuple[str, str], _Upstream] = {}
        self._locks: dict[tuple[str, str], anyio.Lock] = {}
        """One per upstream subscription being made or given up: a server slow to answer holds up no other."""

    def subscribed(self) -> dict[str, int]:
        """Gateway URI -> how many subscribers it has (for tests and status)."""
        out: dict[str, int] = {}
        for entry in self._upstream.values():
            for uri, n in entry.counts.items():
                out[uri] = out.get(uri, 0) + n
        return out

    @asynccontextmanager
    async def _locked(self, key: tuple[str, str]) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, anyio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting and key not in self._upstream:
                self._locks.pop(key, None)

    async def acquire(self, uri: str) -> None:
        """Count one more subscriber of gateway URI ``uri``; subscribe upstream if it is the first.
        Raises :class:`MCPError` naming the server and the reason when that cannot be done."""
        server, upstream_uri = self._owner_of(uri)
        key = (server, upstream_uri)
        async with self._locked(key):
            entry = self._upstream.get(key)
            if entry is None:
                client = self._connected(server, uri)
                await self._subscribe(client, upstream_uri, uri)
                entry = _Upstream(server, upstream_uri, client, client.add_listener(self._listener(key)))
                self._upstream[key] = entry
            entry.counts[uri] = entry.counts.get(uri, 0) + 1

    async def release(self, uri: str) -> None:
        """One subscriber of ``uri`` fewer; the last one ends the upstream subscription."""
        key = next((k for k, entry in self._upstream.items() if uri in entry.counts), None)
        if key is None:
            return
        async with self._locked(key):
            entry = self._upstream.get(key)
            if entry is None or uri not in entry.counts:
                return
            entry.counts[uri] -= 1
            if entry.counts[uri] <= 0:
                del entry.counts[uri]
            if not entry.counts:
                del self._upstream[key]
                entry.remove_listener()
                try:
                    await entry.client.unsubscribe_resource(entry.uri)
                except McpvisorError as exc:
                    logger.debug("unsubscribing from %r on server %r failed: %s", entry.uri, entry.server, exc)

    async def resubscribe(self, server: str) -> None:
        """``server`` has a new connection: make its subscriptions again there."""
        client = self._config.manager.get_client(server)
        if client is None or client.status != "connected":
            return
        for key in [k for k, e in self._upstream.items() if e.server == server and e.client is not client]:
            async with self._locked(key):
                entry = self._upstream.get(key)
                if entry is None or entry.client is client:
                    continue
                entry.remove_listener()
                entry.remove_listener = client.add_listener(self._listener(key))
                with anyio.move_on_after(RESUBSCRIBE_TIMEOUT_S):
                    try:
                        await client.subscribe_resource(entry.uri)
                    except McpvisorError as exc:
                        logger.warning("could not subscribe again to %r on server %r: %s", entry.uri, server, exc)
                    else:
                        entry.client = client  # only a subscription counted there is given up there

    def client_of(self, server: str, uri: str) -> McpClient | None:
        """The connection an upstream subscription was last made on (None: there is none)."""
        entry = self._upstream.get((server, uri))
        return entry.client if entry is not None else None

    def servers(self) -> set[str]:
        return {entry.server for entry in self._upstream.values()}

    def _connected(self, server: str, uri: str) -> McpClient:
        client = self._config.manager.get_client(server)
        if client is None or client.status != "connected":
            why = client.last_error if client is not None else None
            raise MCPError(
                types.INVALID_PARAMS,
                f"cannot subscribe to resource {uri!r}: server {server!r} is not connected"
                + (f": {as_said_here(self._config, server, why)}" if why else ""),
            )
        return client

    async def _subscribe(self, client: McpClient, upstream_uri: str, uri: str) -> None:
        try:
            await client.subscribe_resource(upstream_uri)
        except McpvisorError as exc:
            raise MCPError(
                types.INVALID_PARAMS, f"cannot subscribe to resource {uri!r}: {said_here(self._config, exc)}"
            ) from exc

    def _listener(self, key: tuple[str, str]) -> Callable[[str, Notice], None]:
        """What hears the server's notices for one upstream subscription: a change of its URI reaches the
        clients subscribed to it once, however many other subscriptions the server has."""
        server, upstream_uri = key

        def heard(from_server: str, notice: Notice) -> None:
            if not isinstance(notice, types.ResourceUpdatedNotification) or from_server != server:
                return
            if str(notice.params.uri) != upstream_uri or (entry := self._upstream.get(key)) is None:
                return
            for uri in list(entry.counts):
                self._deliver(uri)

        return heard


async def acquire_each(subscriptions: ResourceSubscriptions, uris: Iterable[str], acquired: list[str]) -> None:
    """Acquire each of ``uris`` that can be (added to ``acquired`` as it is, for :func:`release_all`); one that
    cannot (its server not connected, the resource unknown) is left out and logged, the others stand."""
    for uri in uris:
        try:
            await subscriptions.acquire(uri)
        except MCPError as exc:
            logger.info("a listen stream's subscription to %s is left out: %s", uri, exc.error.message)
            continue
        acquired.append(uri)


async def release_all(subscriptions: ResourceSubscriptions, uris: list[str]) -> None:
    """Release ``uris`` even while the caller is being cancelled (a closed connection, an ended stream)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(RESUBSCRIBE_TIMEOUT_S):
        for uri in uris:
            await subscriptions.release(uri)


class Subscribers:
    """The handshake-era clients' subscriptions (``resources/subscribe``), each held upstream through
    ``subscriptions`` until the client unsubscribes or its connection closes; :meth:`updated` tells them,
    and the modern-era listen streams (through ``bus``), that a resource changed."""

    def __init__(self, subscriptions: ResourceSubscriptions, bus: SubscriptionBus) -> None:
        self._subscriptions = subscriptions
        self._bus = bus
        self._by_connection: dict[Connection, set[str]] = {}

    async def subscribe(self, connection: Connection, uri: str) -> None:
        mine = self._by_connection.get(connection)
        if mine is not None and uri in mine:
            return
        await self._subscriptions.acquire(uri)
        if mine is None:
            mine = self._by_connection[connection] = set()
            connection.exit_stack.push_async_callback(self._forget, connection)
        mine.add(uri)

    async def unsubscribe(self, connection: Connection, uri: str) -> None:
        mine = self._by_connection.get(connection)
        if mine is not None and uri in mine:
            mine.discard(uri)
            await self._subscriptions.release(uri)

    async def _forget(self, connection: Connection) -> None:
        """A handshake-era client went away: its subscriptions end with it."""
        await release_all(self._subscriptions, sorted(self._by_connection.pop(connection, set())))

    async def updated(self, uri: str) -> None:
        """The resource behind gateway URI ``uri`` changed: tell who subscribed."""
        await self._bus.publish(ResourceUpdated(uri))
        async with anyio.create_task_group() as tg:  # all at once: one stuck client holds up no other
            for connection, uris in list(self._by_connection.items()):
                if uri in uris:
                    tg.start_soon(self._tell, connection, uri)

    @staticmethod
    async def _tell(connection: Connection, uri: str) -> None:
        with anyio.move_on_after(NOTIFY_TIMEOUT_S):
            try:
                await connection.send_resource_updated(uri)
            except Exception:  # one broken client never keeps the others from hearing
                logger.exception("could not tell a client that resource %r changed", uri)
