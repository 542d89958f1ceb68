"""Bounded reading of a remote server's HTTP responses: no message larger than the connection's limit.

The SDK reads a JSON response whole (``response.aread()``) and an SSE stream event by event. Both go
through :class:`LimitedTransport`, an ``httpx2`` transport wrapped around the real one: a JSON body
(or any body that is not an event stream) may hold at most ``limit`` bytes, an event stream at most
``limit`` bytes per event. Past that the response fails with an exception the SDK already handles
for that kind of body (a stream error for JSON, an SSE error for events), after ``on_too_large``
has been told, so the connection's owner can report why and treat the connection as broken.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2

__all__ = ["LEGACY_SSE_MAX_EVENT_BYTES", "LimitedTransport", "ResponseTooLarge", "SSEEventTooLarge"]

LEGACY_SSE_MAX_EVENT_BYTES = 1024 * 1024
"""What the SDK's legacy SSE client reads per event at most (fixed in ``mcp.shared._httpx_utils``)."""


class ResponseTooLarge(httpx2.StreamError):
    """A response body passed the connection's message limit."""


class SSEEventTooLarge(httpx2.SSEError):
    """One server-sent event passed the connection's message limit."""


class LimitedTransport(httpx2.AsyncBaseTransport):
    """Wraps ``inner`` so that no response carries a message over ``limit`` bytes (see the module)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, *, limit: int, on_too_large: Callable[[], None]) -> None:
        self._inner = inner
        self._limit = limit
        self._on_too_large = on_too_large

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        events = response.headers.get("content-type", "").lower().startswith("text/event-stream")
        response.stream = _LimitedStream(response.stream, self._limit, events=events, too_large=self._too_large)
        return response

    def _too_large(self, events: bool) -> Exception:
        self._on_too_large()
        if events:
            return SSEEventTooLarge(f"a server-sent event passed the {self._limit} byte limit")
        return ResponseTooLarge(f"a response passed the {self._limit} byte limit")

    async def aclose(self) -> None:
        await self._inner.aclose()


class _LimitedStream(httpx2.AsyncByteStream):
    """Counts what passes: the whole body, or (``events``) the bytes since the last blank line."""

    def __init__(self, inner: Any, limit: int, *, events: bool, too_large: Callable[[bool], Exception]) -> None:
        self._inner = inner
        self._limit = limit
        self._events = events
        self._too_large = too_large
        self._count = 0
        self._line = 0
        """Bytes of the current line so far (events only); a line of at most one byte (``\\r``) ends an event."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            if self._events:
                too_large = self._count_events(chunk)
            else:
                self._count += len(chunk)
                too_large = self._count > self._limit
            if too_large:
                raise self._too_large(self._events)
            yield chunk

    def _count_events(self, chunk: bytes) -> bool:
        """Count ``chunk`` into the current event; whether an event passed the limit."""
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._line += end - start
            self._count += end - start + 1
            if self._count > self._limit:
                return True
            if self._line <= 1:
                self._count = 0  # a blank line: the event is complete
            self._line = 0
            start = end + 1
        self._line += len(chunk) - start
        self._count += len(chunk) - start
        return self._count > self._limit

    async def aclose(self) -> None:
        await self._inner.aclose()
