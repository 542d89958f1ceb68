"""The stdio client's requests in flight, as the gateway answers them: the ledger the line reader counts them in
(:class:`Unanswered`, bounded by :data:`MAX_UNANSWERED`), the read stream that lets the SDK tell it when a cancelled one
is let go of (:class:`Settling`), the write stream that notes each answer (:class:`Answering`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Self

import anyio
import mcp_types as types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import ServerMessageMetadata, SessionMessage

from mcpvisor.gateway.protocol import is_request_id

__all__ = ["ANSWER_S", "CANCELLED_S", "MAX_UNANSWERED", "Answering", "Settling", "Unanswered"]

ANSWER_S = 1.0
"""How long the requests in flight when the input ends (stdin closed, or a stop after its drain) may take to be
answered before they are cut (a client closing stdin kills its server 2 s later: the SDK's client does)."""
MAX_UNANSWERED = 1000
"""Requests of the client in flight at most: one more is refused at once (each is a task holding its request
until its answer is taken, so a client that sends without reading answers would grow them without end)."""
CANCELLED_S = 0.5
"""At the bound, how long the next request may wait for a place that a cancelled request is freeing."""


class Unanswered:
    """The requests read and not answered yet (a listen stream is not waited for: it ends as the gateway stops).
    A request the client cancelled frees its id at once, but its place among the :data:`MAX_UNANSWERED` only once
    the SDK let go of it (:meth:`settled`): until then the gateway still holds its call (it may be telling the
    server, which the SDK gives 5 s), and a client cancelling and sending again held thousands at once."""

    def __init__(self) -> None:
        self._ids: dict[Any, int] = {}
        self._cancelled: dict[Any, int] = {}
        self._changed = asyncio.Event()
        self.count = 0

    @staticmethod
    def counts(message: Any) -> bool:
        """Whether ``message`` is a request waited for (not the client's answer to a request of the gateway's, in
        the gateway's ids, nor a listen stream)."""
        return (
            isinstance(message, dict)
            and is_request_id(message.get("id"))
            and message.get("method") not in (None, "subscriptions/listen")
        )

    def in_flight(self, request_id: Any) -> bool:
        """Whether a request read with this id (``"7"`` and ``7`` are one, as the SDK correlates them) is not
        answered yet."""
        return is_request_id(request_id) and coerce_request_id(request_id) in self._ids

    def read(self, message: Any) -> None:
        if self.counts(message):
            request_id = coerce_request_id(message["id"])
            self._ids[request_id] = self._ids.get(request_id, 0) + 1
            self.count += 1
        elif isinstance(message, dict) and message.get("method") == "notifications/cancelled":
            params = message.get("params")
            cancelled: Any = params.get("requestId") if isinstance(params, dict) else None
            if self.in_flight(cancelled):  # never answered: its id is free, its place not yet
                cancelled = coerce_request_id(cancelled)
                _take(self._ids, cancelled)
                self._cancelled[cancelled] = self._cancelled.get(cancelled, 0) + 1
                self._changed.set()

    def answered(self, request_id: Any) -> None:
        """A request with this id was answered (or, cancelled, was let go of unanswered)."""
        if not is_request_id(request_id):
            return
        request_id = coerce_request_id(request_id)
        if _take(self._ids, request_id) or _take(self._cancelled, request_id):
            self.count -= 1
            self._changed.set()

    def settled(self, request_id: Any) -> Callable[[], Awaitable[None]]:
        """The hook the SDK runs once the request ``request_id`` settled without an answer (it was cancelled)."""

        async def let_go() -> None:
            if _take(self._cancelled, request_id) or _take(self._ids, request_id):
                self.count -= 1
                self._changed.set()

        return let_go

    async def wait_room(self, timeout_s: float = CANCELLED_S) -> bool:
        """Whether there is room for one more request, once the cancelled ones being let go of (if any) made some
        within ``timeout_s``: a client that cancels one at the bound and sends the next is not refused for the
        moment the gateway takes to let go of the first."""
        with anyio.move_on_after(timeout_s):
            while self.count >= MAX_UNANSWERED and self._cancelled:
                self._changed.clear()
                await self._changed.wait()
        return self.count < MAX_UNANSWERED

    async def settle(self, timeout_s: float = ANSWER_S) -> None:
        """Wait until every request read is answered, for up to ``timeout_s``."""
        with anyio.move_on_after(timeout_s):
            while self._ids:
                self._changed.clear()
                await self._changed.wait()


def _take(counts: dict[Any, int], key: Any) -> bool:
    """Take one ``key`` off ``counts``; whether there was one."""
    if key not in counts:
        return False
    counts[key] -= 1
    if not counts[key]:
        del counts[key]
    return True


class _Wrapping:
    """A stream of the session's, wrapped to note in :class:`Unanswered` what passes: the rest is the stream's own."""

    def __init__(self, inner: Any, unanswered: Unanswered) -> None:
        self._inner, self._unanswered = inner, unanswered

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self._inner.__aexit__(*exc)  # type: ignore[no-any-return]


class Settling(_Wrapping):
    """The read stream the session takes: each of the client's requests counted in :class:`Unanswered` carries
    the hook the SDK runs when it settles unanswered (:meth:`Unanswered.settled`)."""

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)  # (the SDK reads the sender's context there)

    async def receive(self) -> SessionMessage | Exception:
        item = await self._inner.receive()
        message = item.message if isinstance(item, SessionMessage) and item.metadata is None else None
        if isinstance(message, types.JSONRPCRequest) and message.method != "subscriptions/listen":
            hook = self._unanswered.settled(coerce_request_id(message.id))
            return SessionMessage(message, metadata=ServerMessageMetadata(on_request_unanswered=hook))
        return item  # type: ignore[no-any-return]

    def __aiter__(self) -> Settling:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class Answering(_Wrapping):
    """The write stream the gateway answers on, noting each answer in :class:`Unanswered`."""

    async def settle(self, timeout_s: float = ANSWER_S) -> None:
        """Wait until every request read is answered, for up to ``timeout_s`` (before the input is ended)."""
        await self._unanswered.settle(timeout_s)

    async def send(self, item: SessionMessage) -> None:
        await self._inner.send(item)
        if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
            self._unanswered.answered(item.message.id)
