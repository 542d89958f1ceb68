"""Shared connections for many sessions (SPEC §5.5).

Connections are keyed by connection id and reference-counted by session: the first acquire
starts the server, the last release stops it. A failed connection is evicted so the next acquire
retries. A server configured with ``"shared": false`` gets one connection per session.

Each session projects the shared connection through its own trust and include/exclude settings
(its own registry), so two sessions may see different tool subsets of one process.

Usage::

    async with McpConnectionPool() as pool:
        async with Config(pool=pool, session_id="client-1") as one, Config(pool=pool, session_id="client-2") as two:
            ...
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from mcpvisor.core.errors import ConfigError, ConnectError, NotRunningError
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig, connection_id_of
from mcpvisor.core.start_slots import StartSlots

if TYPE_CHECKING:
    from mcpvisor.core.client import McpClient

__all__ = ["McpConnectionPool", "PooledStartFailed", "as_said_to", "pool_key", "release"]

logger = logging.getLogger(__name__)

ClientCallback = Callable[["McpClient"], None]


def pool_key(session_id: str, name: str, cfg: McpServerConfig) -> str:
    """The pool key: the connection id, or one per session for ``"shared": false`` servers."""
    cid = connection_id_of(name, cfg)
    return cid if cfg.shared is not False else f"{cid}#{session_id}"


async def release(
    pool: McpConnectionPool | None, session_id: str, client: McpClient, *, ending: bool, gated: str | None
) -> None:
    """A session is done with ``client``: the pool's hold dropped, or without a pool the connection closed
    (``ending``: the session is closing; ``gated``: gating forbids the server now, the reason)."""
    await (pool.release(session_id, client, gated) if pool is not None else client.aclose(ending=ending, gated=gated))


class PooledStartFailed(ConnectError):
    """A pooled connection could not be started; ``client`` is the failed one (closed, its ``last_error`` and
    ``needs_auth`` kept), so that a session shows it down and why, as it does a failed start of its own."""

    def __init__(self, message: str, *, server: str, client: McpClient) -> None:
        super().__init__(message, server=server)
        self.client = client


def as_said_to(exc: ConnectError, login_command: str) -> str:
    """``exc`` as a session that signs in with ``login_command`` (``{name}``) says it: a shared connection's failed
    start says to sign in with the pool's command, which names no session's workspace (see
    :meth:`~mcpvisor.core.connection.ServerConnection.said_to`)."""
    return exc.client.said_to(login_command, str(exc)) if isinstance(exc, PooledStartFailed) else str(exc)


@dataclass(eq=False)
class _Entry:
    key: str
    client: McpClient
    holders: dict[str, tuple[ClientCallback, ClientCallback]] = field(default_factory=dict)
    left: dict[str, str | None] = field(default_factory=dict)
    """What gating said of the server when a session let go while others still held it, by session."""
    ready: anyio.Event = field(default_factory=anyio.Event)
    """Set once the first start attempt is over (connected, failed or abandoned)."""
    error: str | None = None
    """Why the start failed (waiters fail with it instead of starting the server again)."""


class McpConnectionPool:
    """Connections shared by the hosts of one process (one per workspace or client, SPEC §5.5): a server
    configured identically (the same connection id) in several sessions runs once; each session holds a
    lease, and the last release stops it. Enter it (``async with``) before the hosts that use it; runs once."""

    def __init__(self, options: ConnectionOptions | None = None) -> None:
        self.options = options or ConnectionOptions()
        """How the pool's connections are made (theirs, not the sessions': a session's own are ignored)."""
        self._slots = StartSlots(self.options.max_concurrent_starts)
        self._entries: dict[str, _Entry] = {}
        self._log_names: dict[str, str] = {}
        """Pool key -> the name its server's log is written under (:meth:`_log_name`)."""
        self._tg: anyio.abc.TaskGroup | None = None
        self._tg_cm: anyio.abc.TaskGroup | None = None
        self.start_count = 0
        """Connections opened in total (for tests and benchmarks)."""
        self._entered = False
        self._sessions: set[str] = set()
        """The session ids of the Configs running on it (holds are counted by session id)."""

    @property
    def is_running(self) -> bool:
        """Whether it was entered and has not exited."""
        return self._tg is not None

    async def __aenter__(self) -> McpConnectionPool:
        if self._entered:
            raise NotRunningError("this McpConnectionPool was already entered; create a new one to run it again")
        self._entered = True
        tg = anyio.create_task_group()
        self._tg = await tg.__aenter__()
        self._tg_cm = tg
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg, self._tg_cm, self._tg = self._tg_cm, None, None
        if tg is None:
            return None  # exited already: as for a Config or a Host, a second exit does nothing
        await self.aclose()
        return await tg.__aexit__(exc_type, exc, tb)

    async def aclose(self) -> None:
        """Stop every pooled process."""
        entries, self._entries = list(self._entries.values()), {}
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for entry in entries:
                    entry.holders.clear()
                    tg.start_soon(partial(entry.client.aclose, ending=True))

    def join(self, session_id: str) -> None:
        """A Config starts on the pool as ``session_id``, refused while another running Config has that id (its
        holds would be taken as the other's: the first of them to leave would stop the servers of both)."""
        if session_id in self._sessions:
            raise ConfigError(
                f"session_id {session_id!r} is already used by another running Config of this connection pool: "
                "give each Config sharing a pool its own session_id (Config(..., session_id=...), or "
                "HostOptions(session_id=...) for a Host)"
            )
        self._sessions.add(session_id)

    def leave(self, session_id: str) -> None:
        """The Config of ``session_id`` has left the pool (its holds released): the id is free again."""
        self._sessions.discard(session_id)

    def connections(self) -> dict[str, McpClient]:
        """Pool key -> client, for status views and tests."""
        return {key: entry.client for key, entry in self._entries.items()}

    def holders_of(self, key: str) -> frozenset[str]:
        entry = self._entries.get(key)
        return frozenset(entry.holders) if entry is not None else frozenset()

    async def acquire(
        self,
        session_id: str,
        name: str,
        cfg: McpServerConfig,
        *,
        on_change: ClientCallback,
        on_lost: ClientCallback,
    ) -> McpClient:
        """A connected client for ``name``/``cfg``, shared where the connection id matches.

        Raises :class:`PooledStartFailed` (a :class:`ConnectError`) if the server cannot be connected; the failed
        entry is evicted.
        """

        if self._tg is None:
            raise NotRunningError("the connection pool is not running: use 'async with McpConnectionPool()'")
        key = pool_key(session_id, name, cfg)
        while True:
            entry = self._entries.get(key)
            if entry is not None and entry.ready.is_set() and entry.client.status == "disconnected":
                del self._entries[key]  # a dead connection: evict, start afresh
                entry = None
            if entry is None:
                return await self._create(key, session_id, name, cfg, on_change, on_lost)
            entry.holders[session_id] = (on_change, on_lost)
            entry.left.pop(session_id, None)
            try:
                await entry.ready.wait()
            except BaseException:
                entry.holders.pop(session_id, None)
                if not entry.holders and self._entries.get(key) is entry:
                    del self._entries[key]
                    with anyio.CancelScope(shield=True):
                        await entry.client.aclose()
                raise
            if entry.error is not None:
                entry.holders.pop(session_id, None)
                raise PooledStartFailed(entry.error, server=name, client=entry.client)
            if self._entries.get(key) is not entry:
                continue  # its starter gave up (cancelled) before it connected: start it ourselves
            return entry.client

    async def _create(
        self,
        key: str,
        session_id: str,
        name: str,
        cfg: McpServerConfig,
        on_change: ClientCallback,
        on_lost: ClientCallback,
    ) -> McpClient:
        from mcpvisor.core.client import McpClient

        assert self._tg is not None

        def fan_out_change(client: McpClient) -> None:
            for change, _ in list(new.holders.values()):
                change(client)

        def fan_out_lost(client: McpClient) -> None:
            for _, lost in list(new.holders.values()):
                lost(client)

        client = McpClient(
            name,
            cfg,
            options=self.options,
            on_change=fan_out_change,
            on_lost=fan_out_lost,
            log_name=self._log_name(key, session_id, name),
        )
        new = _Entry(key, client)
        new.holders[session_id] = (on_change, on_lost)
        self._entries[key] = new
        try:
            async with self._slots.hold() as slot:
                slot.watch(client)
                self.start_count += 1
                await client.start(self._tg)
        except BaseException as exc:
            # Failed, or the caller was cancelled: nobody keeps this half-started connection.
            if isinstance(exc, ConnectError):
                new.error = str(exc)
            if self._entries.get(key) is new:
                del self._entries[key]
            new.holders.clear()
            with anyio.CancelScope(shield=True):
                await client.aclose()
            if new.error is not None:
                raise PooledStartFailed(new.error, server=name, client=client) from exc
            raise
        finally:
            new.ready.set()
        logger.debug("pool: %s started for session %r", key, session_id)
        return client

    def _log_name(self, key: str, session_id: str, name: str) -> str:
        """The server's name, or, when a server of that name runs from another configuration for another
        session (two workspaces' project servers ``db``), the name and a digest of the connection: two
        processes never write one log file."""
        live = {entry.key for entry in self._entries.values()}
        self._log_names = {k: v for k, v in self._log_names.items() if k in live or k == key}  # bounded
        others = [entry for entry in self._entries.values() if entry.key != key and session_id not in entry.holders]
        taken = {self._log_names.get(entry.key) for entry in others}
        named = self._log_names.get(key)
        if named is not None and named not in taken:
            return named  # a reconnection writes on in the same log
        clash = name in taken or any(entry.client.name == name for entry in others)
        named = f"{name}.{hashlib.sha256(key.encode()).hexdigest()[:8]}" if clash else name
        self._log_names[key] = named
        return named

    async def release(self, session_id: str, client: McpClient, gated: str | None = None) -> None:
        """Drop ``session_id``'s hold on ``client``; the last holder stops the process (``gated``: the reason gating
        forbids it, when that is why)."""
        for key, entry in list(self._entries.items()):
            if entry.client is client:
                entry.holders.pop(session_id, None)
                if entry.holders:
                    entry.left[session_id] = gated
                    return
                del self._entries[key]
                gated = _said_to_all(gated, entry.left.values())
                break
        await client.aclose(gated=gated)


def _said_to_all(gated: str | None, others: Iterable[str | None]) -> str | None:
    """What the calls in flight on a shared connection are told when the last session lets go of it (``gated``) and
    the others had said before (``others``): a call may come from any of them, so the list that leaves the server out,
    which names one workspace's file, only when each said the same, else gating's reason when they agree on it."""
    said = [gated, *others]
    if all(one == gated for one in said):
        return gated
    reasons = {one.partition(": ")[0] if one is not None else None for one in said}
    return reasons.pop() if len(reasons) == 1 else None
