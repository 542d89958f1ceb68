"""Requests a server makes of its client - sampling, elicitation, roots - answered by the caller they belong to.

mcpvisor is the client of every server it runs, but it has no model and no user of its own to ask.
Whoever makes a call through it may have both: the gateway's own clients do. Such a caller wraps
its calls in :func:`answering`; a connection made with ``client_requests=True`` (see
:class:`~mcpvisor.core.client.McpClient`) then declares the sampling, elicitation and roots
capabilities and routes each request a server makes to the caller it belongs to:

- exactly, when the request travels inside a call's result (the 2026-07-28 era's input-required
  results are fulfilled in the calling task);
- in the handshake era a request names no call, so it goes to the caller of the calls in flight on
  that server when they all come from one client (the common case: one client, or one call at a time).

Otherwise the server gets a JSON-RPC error that says why: no call is in flight, calls from several
clients are, or the caller cannot answer that kind of request. When the server asked for progress on
its request, the answerer is given ``progress``, which reports it to the server.

A request routed to a client is withdrawn once that client has no call left in flight on the server (the
call timed out, its client cancelled it, it ended): it can belong to none of its calls, so the client is
told (its request is cancelled) before the call's answer, and the server gets an error that says why.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPDeprecationWarning

if TYPE_CHECKING:
    from mcp.client.session import ClientRequestContext

__all__ = ["WITHDRAW_S", "Answerer", "InFlight", "Progress", "answering", "refusal"]

WITHDRAW_S = 5.0
"""How long the end of a call waits for the requests withdrawn with it to be cancelled at the client (bounded,
even while the call is being cancelled): the cancellation goes out before the call's answer, on its stream."""

T = TypeVar("T")


class Progress(Protocol):
    """Hears, or reports, progress on one request: a call's, or a server's request of its client."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


class Answerer(Protocol):
    """Answers what servers ask of their client, for one caller."""

    @property
    def client(self) -> Hashable:
        """Who is asked: answerers of the same client are interchangeable (its concurrent calls)."""
        ...

    async def create_message(
        self, server: str, params: types.CreateMessageRequestParams, progress: Progress | None = None
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData: ...

    async def elicit(
        self, server: str, params: types.ElicitRequestParams, progress: Progress | None = None
    ) -> types.ElicitResult | types.ErrorData: ...

    async def list_roots(
        self, server: str, progress: Progress | None = None
    ) -> types.ListRootsResult | types.ErrorData: ...


_answerer: ContextVar[Answerer | None] = ContextVar("mcpvisor_answerer", default=None)


@contextmanager
def answering(answerer: Answerer) -> Iterator[None]:
    """Calls made inside this block (in this task and the tasks it starts) are answered by ``answerer``."""
    token = _answerer.set(answerer)
    try:
        yield
    finally:
        _answerer.reset(token)


def refusal(message: str) -> types.ErrorData:
    """The error a server gets when its request cannot be answered."""
    return types.ErrorData(code=types.INVALID_REQUEST, message=message)


class _Routed:
    """A request of the server being answered by ``client``; cancelling ``scope`` withdraws it."""

    def __init__(self, client: Hashable) -> None:
        self.client = client
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()


class InFlight:
    """The answerers of one connection's calls in flight, and the callbacks the SDK client is given."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._calls: list[Answerer] = []
        self._routed: set[_Routed] = set()
        """The server's requests being answered now."""

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        """One call is in flight for the duration of the block (a no-op for a caller that answers nothing)."""
        answerer = _answerer.get()
        if answerer is None:
            yield
            return
        self._calls.append(answerer)
        try:
            yield
        finally:
            self._calls.remove(answerer)
            await self._withdraw(answerer.client)

    async def _withdraw(self, client: Hashable) -> None:
        """Withdraw the requests ``client`` is answering once none of its calls is left in flight, and wait until it
        was told (see the module)."""
        if not self._routed or any(a.client == client for a in self._calls):
            return
        orphans = [routed for routed in self._routed if routed.client == client]
        for routed in orphans:
            routed.scope.cancel()
        with anyio.move_on_after(WITHDRAW_S, shield=True):
            for routed in orphans:
                await routed.done.wait()

    async def _answered(
        self, context: ClientRequestContext, what: str, ask: Callable[[Answerer, Progress | None], Awaitable[T]]
    ) -> T | types.ErrorData:
        """``ask`` the answerer of a ``what`` request of this server (with the server's progress, if it asked for
        it), withdrawn when its client has no call left in flight on the server; or the error that says why not."""
        answerer = self.answerer(what)
        if isinstance(answerer, types.ErrorData):
            return answerer
        answer = partial(ask, answerer, _progress_to_server(context))
        routed = _Routed(answerer.client)
        self._routed.add(routed)
        try:
            with routed.scope:
                return await answer()
        finally:
            self._routed.discard(routed)
            routed.done.set()
        return refusal(
            f"{what} of server {self.server!r} was withdrawn from the client: the call it belongs to ended before the "
            "client answered"
        )

    def answerer(self, what: str) -> Answerer | types.ErrorData:
        """Who answers a ``what`` request of this server, or the error that says why nobody can."""
        mine = _answerer.get()
        if mine is not None:
            return mine
        clients = {a.client: a for a in self._calls}
        if len(clients) == 1:
            return self._calls[-1]
        if not clients:
            return refusal(
                f"mcpvisor cannot answer {what} for server {self.server!r}: no call to it is in flight from a client "
                "that answers such requests (mcpvisor passes them to the client whose call caused them; a program "
                "using mcpvisor as a library answers them inside `with answering(...)`)"
            )
        return refusal(
            f"mcpvisor cannot answer {what} for server {self.server!r}: calls from {len(clients)} clients are in "
            "flight and the request does not say which one it belongs to; ask again when only one client is calling"
        )

    async def sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        return await self._answered(
            context,
            "a sampling request",
            lambda asked, progress: asked.create_message(self.server, params, progress),
        )

    async def elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        return await self._answered(
            context, "an elicitation request", lambda asked, progress: asked.elicit(self.server, params, progress)
        )

    async def list_roots(self, context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        return await self._answered(
            context, "a roots request", lambda asked, progress: asked.list_roots(self.server, progress)
        )


def _progress_to_server(context: ClientRequestContext) -> Progress | None:
    """Progress on a server's request, reported to it under its token (None: it asked for none)."""
    token = (context.meta or {}).get("progress_token")
    if not isinstance(token, str | int) or isinstance(token, bool):
        return None

    async def report(progress: float, total: float | None, message: str | None) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # deprecated in 2026-07-28, where it is not used
            await context.session.send_progress_notification(token, progress, total, message)

    return report
