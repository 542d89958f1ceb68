"""Reconnects: how a manager brings back a server that went down by itself (SPEC §5.4).

A server that dies is started again after a pause that doubles with each quick stop in a row (one that stops soon
after it connected is crashing in a loop), and left down after too many of them; a remote server that could not be
reached is tried again for as long as it runs. The reconnect loop, one per server at most, and the counts that pace
it live here; what a start is, and which client and configuration a server has now, stay the manager's."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from mcpvisor.core.errors import ConnectError
from mcpvisor.core.server_config import McpServerConfig, connection_id_of

if TYPE_CHECKING:
    from mcpvisor.core.client import McpClient

__all__ = ["BACKOFF_INITIAL_S", "BACKOFF_MAX_S", "MAX_RECONNECT_ATTEMPTS", "STABLE_AFTER_S", "Reconnects", "Recovery"]

logger = logging.getLogger(__name__)

BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
MAX_RECONNECT_ATTEMPTS = 8
"""After this many failed reconnects in a row the server stays down until the next reconcile."""
STABLE_AFTER_S = 30.0
"""A server that stops sooner than this after it connected is crashing in a loop: each such stop doubles the pause
before the next start, and after :data:`MAX_RECONNECT_ATTEMPTS` of them in a row it is left down until the next
reconcile."""


@dataclass(frozen=True)
class Recovery:
    """What is done about a server that is down: it is being started again (``tries``: the try under way or next,
    of ``attempts`` at most, None: for as long as the session runs), or that gave up after ``tries`` of them. A
    server crashing in a loop is at the try its quick stops in a row have come to: each of its restarts succeeds, and
    the stops, not the starts, are what it is left down after."""

    tries: int
    attempts: int | None
    gave_up: bool = False


@dataclass
class _Loop:
    scope: anyio.CancelScope
    attempts: int | None
    tries: int = 1
    since: int = 1  # the try its first start is (a server crashing in a loop: its quick stops in a row)


class Reconnects:
    """The reconnect loops of one manager's servers. ``clients`` and ``configs``: the manager's live clients and
    their configurations (read, never written); ``reopen(name, cfg, dead)``: start ``name`` again in place of its
    ``dead`` client (raises :class:`ConnectError`); ``said(exc)``: a failed start as the session words it;
    ``publish(name)``: say ``name``'s state."""

    def __init__(
        self,
        tg: anyio.abc.TaskGroup,
        *,
        clients: Mapping[str, McpClient],
        configs: Mapping[str, McpServerConfig],
        reopen: Callable[[str, McpServerConfig, McpClient], Awaitable[None]],
        said: Callable[[ConnectError], str],
        publish: Callable[[str], None],
    ) -> None:
        self._tg, self._clients, self._configs = tg, clients, configs
        self._reopen, self._said, self._publish = reopen, said, publish
        self._loops: dict[str, _Loop] = {}
        self._gave_up: dict[str, tuple[McpClient, int]] = {}  # the client left down, after how many tries
        self._up_since, self._quick_stops = dict[str, float](), dict[str, int]()
        self.held_while_ending: set[str] = set()
        """Lost ones a pass left to their pause, their teardown not over."""
        self._closed = False

    def __contains__(self, name: object) -> bool:
        """Whether a reconnect loop runs for ``name`` (in its pause, or starting it)."""
        return name in self._loops

    def recovery(self, name: str) -> Recovery | None:
        """Whether ``name``'s client, down, is being started again or was left down after its tries; None when it
        is not down, or not by itself (it failed to start, it waits for a sign-in, it was stopped)."""
        client = self._clients.get(name)
        if client is None or client.status != "disconnected" or self._closed:
            return None
        if (loop := self._loops.get(name)) is not None:
            return Recovery(loop.tries, loop.attempts)
        if (given := self._gave_up.get(name)) is not None and given[0] is client:
            return Recovery(given[1], MAX_RECONNECT_ATTEMPTS, gave_up=True)
        if client.ending and name in self._up_since:  # lost, its teardown not over: :meth:`lost` comes next
            stops = self._stops(name)
            if stops > MAX_RECONNECT_ATTEMPTS:
                return Recovery(stops - 1, MAX_RECONNECT_ATTEMPTS, gave_up=True)
            return Recovery(max(stops, 1), MAX_RECONNECT_ATTEMPTS)
        return None

    def up(self, name: str) -> None:
        """``name`` connected now: how long it stays up tells a crash loop from a server that ran."""
        self._up_since[name] = time.monotonic()

    def forget(self, name: str) -> None:
        """A deliberate stop or restart: no loop for ``name`` any more, and its count starts afresh."""
        self.cancel(name)
        self._quick_stops.pop(name, None)
        self._up_since.pop(name, None)
        self._gave_up.pop(name, None)

    def cancel(self, name: str) -> None:
        if (loop := self._loops.pop(name, None)) is not None:
            loop.scope.cancel()

    def close(self) -> None:
        """The manager closes: every loop ends, and a loss heard from now on starts none."""
        self._closed = True
        for loop in self._loops.values():
            loop.scope.cancel()

    def lost(self, client: McpClient) -> None:
        """``client``, the manager's current one for its server, went down by itself (its teardown is over)."""
        name = client.name
        stops = self._stops(name)
        self._up_since.pop(name, None)
        self.held_while_ending.discard(name)
        self._quick_stops[name] = stops
        if stops > MAX_RECONNECT_ATTEMPTS:
            client.last_error = (
                f"{client.last_error or 'it stopped'}; left down after {stops} stops within {STABLE_AFTER_S:g} s of "
                "starting (it is started again when its configuration changes or on a reload)"
            )
            logger.error("server %r keeps crashing: %s", name, client.last_error)
            self._gave_up[name] = (client, stops - 1)
            self._publish(name)
            return
        pause = min(BACKOFF_INITIAL_S * 2**stops, BACKOFF_MAX_S)
        self.retry(name, client, pause, MAX_RECONNECT_ATTEMPTS, since=max(stops, 1))

    def _stops(self, name: str) -> int:
        """How many quick stops in a row ``name`` has made if it went down now (0: it ran long enough)."""
        up_since = self._up_since.get(name)
        quick = up_since is not None and time.monotonic() - up_since < STABLE_AFTER_S
        stops = self._quick_stops.get(name, 0) + 1 if quick else 0
        if stops > MAX_RECONNECT_ATTEMPTS and name in self.held_while_ending:
            stops = 0  # a reload came while it went down: it is started again, as a reload does
        return stops

    def retry(
        self,
        name: str,
        client: McpClient,
        first_pause: float = BACKOFF_INITIAL_S,
        attempts: int | None = None,
        *,
        since: int = 1,
    ) -> None:
        """Start the reconnect loop (``attempts``: how many before it gives up; None: never), the only one for it;
        ``since``: the try its first start is said to be (a server crashing in a loop: its quick stops in a row), until
        the loop's own count of starts is higher: each count has its give-up, the nearer one is said."""
        self.cancel(name)
        scope = anyio.CancelScope()
        self._loops[name] = _Loop(scope, attempts, since, since)
        self._tg.start_soon(self._loop, name, client.connection_id, scope, first_pause, attempts)

    async def _loop(
        self, name: str, connection_id: str, scope: anyio.CancelScope, first_pause: float, attempts: int | None
    ) -> None:
        delay = first_pause
        with scope:
            for attempt in itertools.count(1) if attempts is None else range(1, attempts + 1):
                if (loop := self._loops.get(name)) is not None and loop.scope is scope:
                    loop.tries = max(loop.since, attempt)
                await anyio.sleep(delay)
                current = self._clients.get(name)
                # The config as it is now (a re-filter may have changed it); a changed connection is the reconcile's.
                cfg = self._configs.get(name)
                if self._closed or current is None or current.status != "disconnected" or cfg is None:
                    return
                if connection_id_of(name, cfg) != connection_id:
                    return
                logger.info("server %r: reconnecting (attempt %d)", name, attempt)
                try:
                    await self._reopen(name, cfg, current)
                except ConnectError as exc:  # said at each try of the first ones, then quietly
                    tell = logger.warning if attempt <= MAX_RECONNECT_ATTEMPTS else logger.info
                    tell("server %r: reconnect failed: %s", name, self._said(exc))
                    if (down := self._clients.get(name)) is not None and down.needs_auth:
                        self._loops.pop(name, None)  # a sign-in is the person's: the pass after it starts it
                        return
                    delay = min(delay * 2, BACKOFF_MAX_S)
                    continue
                self._loops.pop(name, None)
                return
            if (down := self._clients.get(name)) is not None:
                self._gave_up[name] = (down, attempt)
            logger.error("server %r: gave up reconnecting after %d attempts", name, MAX_RECONNECT_ATTEMPTS)
        if (loop := self._loops.get(name)) is not None and loop.scope is scope:
            del self._loops[name]
