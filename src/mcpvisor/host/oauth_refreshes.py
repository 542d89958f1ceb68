"""Refreshes of a sign-in that go on after what waited for them stopped waiting.

Refresh tokens rotate: once a refresh request is sent, the authorization server may have replaced the refresh
token, and only its answer holds the new one. A connection whose start ran out of time, or that was stopped (its
server removed or restarted, the host ending), stops waiting for that answer; the refresh goes on here, bounded by
:data:`REFRESH_TIMEOUT_S`, and what it gets is stored. A host ending waits for the refreshes still under way,
saying so (a warning of this module's logger, which the commands show).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc

__all__ = ["REFRESH_TIMEOUT_S", "TOKEN_RESPONSE_MAX_BYTES", "Refreshes", "send_refresh"]

logger = logging.getLogger(__name__)

REFRESH_TIMEOUT_S: Final = 30.0
"""How long a refresh waits for its authorization server (to connect, and for each read)."""
TOKEN_RESPONSE_MAX_BYTES: Final = 1024 * 1024
"""The largest answer of a token endpoint that is read."""
REDIRECTS: Final = 5
"""Redirects (within the token endpoint's origin) a refresh follows, as the SDK's sign-in requests do."""

Stored = Callable[[Any], Awaitable[None]]
"""Stores what a refresh got (None: no answer) once nothing waits for it."""


class Refreshes:
    """Where the refreshes of one host's connections run (entered with the host)."""

    def __init__(self) -> None:
        self._tg: anyio.abc.TaskGroup | None = None
        self._running: list[str] = []
        self._idle = anyio.Event()

    @property
    def closed(self) -> bool:
        return self._tg is None

    async def __aenter__(self) -> Refreshes:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        tg, self._tg = self._tg, None
        assert tg is not None
        if self._running:
            logger.warning(
                "waiting for its authorization server to answer the refresh of server %s (up to %.0f s): the "
                "refresh token it replaces no longer works",
                ", ".join(repr(name) for name in self._running),
                REFRESH_TIMEOUT_S,
            )
            with anyio.CancelScope(shield=True):  # each bounded by REFRESH_TIMEOUT_S
                await self._idle.wait()
        await tg.__aexit__(None, None, None)

    def start(self, name: str, refresh: Callable[[], Awaitable[None]]) -> bool:
        """Run ``refresh`` (server ``name``'s) here; False: the host is ending (the caller runs it)."""
        if self._tg is None:
            return False

        async def one() -> None:
            try:
                with anyio.CancelScope(shield=True):  # nor cut short by the host's end: bounded by its timeout
                    await refresh()
            finally:
                self._running.remove(name)
                if not self._running:
                    self._idle.set()

        if not self._running:
            self._idle = anyio.Event()
        self._running.append(name)
        self._tg.start_soon(one, name=f"oauth-refresh:{name}")
        return True


@dataclass
class _Exchange:
    response: Any = None
    error: Exception | None = None
    stored: Stored | None = None
    """Set once the caller stopped waiting: stores the answer."""
    done: anyio.Event = field(default_factory=anyio.Event)


async def send_refresh(request: Any, *, name: str, keeper: Refreshes | None, abandoned: Callable[[], Stored]) -> Any:
    """The answer to refresh ``request`` of server ``name``, sent by a client of its own (not the connection's,
    whose end would cut it short) in ``keeper`` (None, or closed: in the caller, shielded). A caller that stops
    waiting before the answer calls ``abandoned()`` at once (taking over what the refresh holds, such as the turn to
    refresh), and what it returns stores the answer when it comes."""
    exchange = _Exchange()

    async def send() -> None:
        try:
            exchange.response = await _send(request)
        except Exception as exc:  # the caller's error (as the connection's client would raise it), or logged
            exchange.error = exc
        exchange.done.set()
        if exchange.stored is not None:
            await _store(name, exchange)

    if keeper is None or not keeper.start(name, send):
        with anyio.CancelScope(shield=True):
            await send()
    try:
        await exchange.done.wait()
    except anyio.get_cancelled_exc_class():
        exchange.stored = abandoned()
        if exchange.done.is_set():  # answered as the caller stopped waiting: stored here
            with anyio.CancelScope(shield=True):
                await _store(name, exchange)
        raise
    if exchange.error is not None:
        raise exchange.error
    return exchange.response


async def _store(name: str, exchange: _Exchange) -> None:
    assert exchange.stored is not None
    if exchange.error is not None:
        logger.warning("server %r: refreshing its sign-in failed: %s", name, type(exchange.error).__name__)
    try:
        await exchange.stored(exchange.response)
    except Exception as exc:  # a task's end: said, as the connection would have said it
        logger.warning("server %r: %s", name, exc)


async def _send(request: Any) -> Any:
    import httpx2
    from mcp.shared._httpx_utils import next_request_within_origin

    from mcpvisor.core.http_limits import LimitedTransport

    transport = LimitedTransport(httpx2.AsyncHTTPTransport(), limit=TOKEN_RESPONSE_MAX_BYTES, on_too_large=_nothing)
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(REFRESH_TIMEOUT_S), transport=transport) as client:
        response = await client.send(request)
        for _ in range(REDIRECTS):
            if (follow := next_request_within_origin(response)) is None:
                break
            response = await client.send(follow)
        return response


def _nothing() -> None:
    pass
