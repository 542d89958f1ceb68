"""What an upstream server asks of its client - sampling, elicitation, roots - asked of the gateway's
client whose call caused it (:mod:`mcpvisor.core.client_requests` routes the server's request here).

- A handshake-era client is asked the way a server asks: a request on the stream of the call it
  belongs to (:class:`CallingClient`), and its answer - or its error - goes back to the server.
- A 2026-07-28-era client cannot be sent a request in the middle of a call; it is asked the way that
  era asks: the call answers with an input-required result carrying the server's requests, and the
  client's retry of the call carries the answers (:class:`Rounds`). The call to the server runs on
  between the rounds; if the client does not come back within :data:`ROUND_TIMEOUT_S` it is cancelled.
  The progress and log messages it sends while the client is between rounds (the ended round's stream
  is closed) go on the next round's stream, first and in order.

A client that did not declare the capability is not asked: the server gets an error that says so.
"""

from __future__ import annotations

import logging
import secrets
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from contextlib import ExitStack
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from pydantic import BaseModel, ValidationError

from mcpvisor.core.call_logs import CallLog, hearing
from mcpvisor.core.client_requests import Progress, answering, refusal
from mcpvisor.core.errors import describe_invalid

__all__ = [
    "MAX_OPEN_ROUNDS",
    "ROUND_TIMEOUT_S",
    "CallingClient",
    "OffersNothing",
    "Rounds",
    "offers_input",
    "pass_log",
    "served_logger",
]

logger = logging.getLogger(__name__)

ROUND_TIMEOUT_S = 600.0
"""How long a call whose server asked for input waits for the client's next round before it is cancelled."""
MAX_OPEN_ROUNDS = 1000
"""Calls waiting for their client's next round at once, per gateway (each holds its call's state, tens of KB):
one more is cancelled and refused, so clients that never come back cannot fill the memory."""

_STATE_PREFIX = "mcpvisor-round-"
_COALESCE_CHECKPOINTS = 5
"""Requests a server sends together (the modern era's are dispatched at once) go out in one round."""
_MAX_HELD = 1000
"""Progress and log messages of one call held for its client's next round: the oldest are dropped beyond this."""

R = TypeVar("R", bound=BaseModel)
A = TypeVar("A", bound=BaseModel)
Ctx = ServerRequestContext[Any, Any]
Answer = types.CreateMessageResult | types.CreateMessageResultWithTools | types.ElicitResult | types.ListRootsResult


def _sampling(params: types.CreateMessageRequestParams) -> tuple[str, types.ClientCapabilities]:
    with_tools = bool(params.tools) or params.tool_choice is not None
    tools = types.SamplingToolsCapability() if with_tools else None
    return "sampling" + (" with tools" if with_tools else ""), types.ClientCapabilities(
        sampling=types.SamplingCapability(tools=tools)
    )


def _elicitation(params: types.ElicitRequestParams) -> str:
    return "URL elicitation" if isinstance(params, types.ElicitRequestURLParams) else "elicitation"


_ROOTS = types.ClientCapabilities(roots=types.RootsCapability())


def served_logger(server: str, params: types.LoggingMessageNotificationParams) -> str:
    """The logger an upstream's log message is passed on under: ``<server>/<logger>``, or ``<server>``."""
    return f"{server}/{params.logger}" if params.logger else server


async def pass_log(ctx: Ctx, server: str, params: types.LoggingMessageNotificationParams) -> None:
    """An upstream's log message on the stream of the 2026-07-28 request that asked for it (the session drops
    it below the level the request asked for), the logger named ``<server>/<logger>``."""
    name = served_logger(server, params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)  # logging is deprecated, not gone, in 2026-07-28
        await ctx.session.send_log_message(params.level, params.data, name)


def offers_input(capabilities: types.ClientCapabilities | None) -> bool:
    """Whether a client declared any of sampling, elicitation and roots: the calls of one that declared none
    need no way of asking it anything (whatever their servers ask is refused at once, saying so)."""
    if capabilities is None:
        return False
    return any(kind is not None for kind in (capabilities.sampling, capabilities.elicitation, capabilities.roots))


def _not_offered(server: str, what: str) -> types.ErrorData:
    return refusal(
        f"server {server!r} asked for {what}, but the client calling it through mcpvisor does not offer {what} "
        "(it declared no such capability)"
    )


def _ended(server: str, what: str) -> types.ErrorData:
    return refusal(f"server {server!r} asked for {what} after the call it belongs to ended")


class OffersNothing:
    """The answerer for a client that declared none of sampling, elicitation and roots: whatever a server
    asks during its calls is refused at once, saying so (as :class:`CallingClient` would refuse it)."""

    def __init__(self, client: Hashable) -> None:
        self._client = client

    @property
    def client(self) -> Hashable:
        return self._client

    async def create_message(
        self, server: str, params: types.CreateMessageRequestParams, progress: Progress | None = None
    ) -> types.ErrorData:
        return _not_offered(server, _sampling(params)[0])

    async def elicit(
        self, server: str, params: types.ElicitRequestParams, progress: Progress | None = None
    ) -> types.ErrorData:
        return _not_offered(server, _elicitation(params))

    async def list_roots(self, server: str, progress: Progress | None = None) -> types.ErrorData:
        return _not_offered(server, "roots")


class _Asking:
    """Asks the client behind :attr:`ctx` what a server asked, if it offers that (how: :meth:`_ask`)."""

    ctx: Ctx

    async def create_message(
        self, server: str, params: types.CreateMessageRequestParams, progress: Progress | None = None
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        what, needed = _sampling(params)
        if not self.ctx.session.check_client_capability(needed):
            return _not_offered(server, what)
        with_tools = needed.sampling is not None and needed.sampling.tools is not None
        result_type: type[types.CreateMessageResult | types.CreateMessageResultWithTools] = (
            types.CreateMessageResultWithTools if with_tools else types.CreateMessageResult
        )
        return await self._ask(server, what, types.CreateMessageRequest(params=params), result_type, progress)

    async def elicit(
        self, server: str, params: types.ElicitRequestParams, progress: Progress | None = None
    ) -> types.ElicitResult | types.ErrorData:
        have = self.ctx.session.client_capabilities
        url = isinstance(params, types.ElicitRequestURLParams)
        what = _elicitation(params)
        if have is None or have.elicitation is None or (url and have.elicitation.url is None):
            return _not_offered(server, what)
        return await self._ask(server, what, types.ElicitRequest(params=params), types.ElicitResult, progress)

    async def list_roots(
        self, server: str, progress: Progress | None = None
    ) -> types.ListRootsResult | types.ErrorData:
        if not self.ctx.session.check_client_capability(_ROOTS):
            return _not_offered(server, "roots")
        return await self._ask(server, "roots", types.ListRootsRequest(), types.ListRootsResult, progress)

    async def _ask(
        self,
        server: str,
        what: str,
        request: types.InputRequest,
        result_type: type[A],
        progress: Progress | None = None,
    ) -> A | types.ErrorData:
        raise NotImplementedError


class CallingClient(_Asking):
    """A handshake-era client behind one request, as the answerer of what servers ask during it."""

    def __init__(self, ctx: Ctx, connection: object | None) -> None:
        self.ctx = ctx
        self._connection = connection

    @property
    def client(self) -> Hashable:
        return self._connection if self._connection is not None else id(self.ctx.session)

    async def _ask(
        self,
        server: str,
        what: str,
        request: types.InputRequest,
        result_type: type[A],
        progress: Progress | None = None,
    ) -> A | types.ErrorData:
        metadata = ServerMessageMetadata(related_request_id=self.ctx.request_id)
        try:
            return await self.ctx.session.send_request(
                request, result_type, metadata=metadata, progress_callback=progress
            )
        except MCPError as exc:  # the client's own answer, or a connection that cannot carry the request
            return exc.error
        except ValidationError as exc:  # (passed on, the server heard that its own request was invalid)
            said = describe_invalid(exc)
            return refusal(f"the client answered server {server!r}'s {what} request with something else: {said}")


class _Ask:
    def __init__(self, key: str, request: types.InputRequest) -> None:
        self.key = key
        self.request = request
        self.answer: Answer | None = None
        self.answered = anyio.Event()


class _Call(_Asking, Generic[R]):
    """One call of a 2026-07-28-era client, running on between the client's rounds."""

    def __init__(self, ctx: Ctx, log_level: types.LoggingLevel | None, params: BaseModel) -> None:
        self.ctx = ctx
        """The request of the current round: capabilities are checked, progress and log messages go on it."""
        self._log_level = log_level
        self._first = (ctx.method, params)
        """The call's first request: a retry carrying its state repeats it (:meth:`repeated_by`)."""
        self.scope = anyio.CancelScope()
        self._asked = 0
        self._pending: dict[str, _Ask] = {}
        self._sent: dict[str, _Ask] = {}
        self._changed = anyio.Event()
        self._result: R | None = None
        self._error: Exception | None = None
        self._done = False
        self._between = False
        """A round ended with the server's requests and the client has not come back: the ended round's stream is
        closed, so what the server sends meanwhile is held for the next round."""
        self._held: deque[Callable[[Ctx], Awaitable[None]]] = deque(maxlen=_MAX_HELD)
        self._sending = 0
        self._sent_all = anyio.Event()
        """Set while nothing is being sent on the current round's stream (a round ends only after that)."""
        self._sent_all.set()

    @property
    def client(self) -> Hashable:
        return self

    def repeated_by(self, method: str, params: BaseModel) -> bool:
        """Whether a request is this call's first one again: the same method, and what it names (a tool or prompt,
        a URI) with the same arguments. Compared only when a retry comes (a call that needs no round costs none)."""
        include = {"name", "uri", "arguments"}
        first_method, first = self._first
        return first_method == method and first.model_dump(mode="json", include=include) == params.model_dump(
            mode="json", include=include
        )

    # -- the answerer, called from the server's side -----------------------------------------

    async def _ask(
        self,
        server: str,
        what: str,
        request: types.InputRequest,
        result_type: type[A],
        progress: Progress | None = None,
    ) -> A | types.ErrorData:
        if self._done:
            return _ended(server, what)
        self._asked += 1
        ask = _Ask(f"{server}-{self._asked}", request)
        self._pending[ask.key] = ask
        self._wake()
        try:
            await ask.answered.wait()
        finally:  # answered, or withdrawn by the server: either way no longer the client's to answer
            self._pending.pop(ask.key, None)
            self._sent.pop(ask.key, None)
        if ask.answer is None:
            return _ended(server, what)
        if isinstance(ask.answer, result_type):
            return ask.answer
        try:  # parsed as another member of the answer union (sampling with or without tools)
            return result_type.model_validate(ask.answer.model_dump(by_alias=True, exclude_none=True))
        except ValidationError:
            return refusal(f"the client answered server {server!r}'s {what} request with something else")

    async def report_progress(self, progress: float, total: float | None, message: str | None) -> None:
        await self._on_stream(lambda ctx: ctx.session.report_progress(progress, total, message))

    # -- the call and its rounds -------------------------------------------------------------

    async def hear_log(self, server: str, params: types.LoggingMessageNotificationParams) -> None:
        await self._on_stream(lambda ctx: pass_log(ctx, server, params))

    async def _on_stream(self, send: Callable[[Ctx], Awaitable[None]]) -> None:
        """Send a notification on the current round's stream, or hold it for the next round (see _between)."""
        if self._between:
            self._held.append(send)
            return
        self._sending += 1
        self._sent_all = anyio.Event() if self._sent_all.is_set() else self._sent_all
        try:
            await self._send(send)
        finally:
            self._sending -= 1
            if not self._sending:
                self._sent_all.set()

    async def _send(self, send: Callable[[Ctx], Awaitable[None]]) -> None:
        try:
            await send(self.ctx)
        except Exception as exc:  # progress and log messages are advisory: they never fail the call
            logger.debug("could not relay a notification to the client: %s", exc)

    async def resume(self) -> None:
        """The client came back: what the server sent between the rounds goes on this round's stream, in order
        (what comes meanwhile is held behind it)."""
        while self._held:
            await self._send(self._held.popleft())
        self._between = False

    async def drive(self, call: Callable[[Progress], Awaitable[R]]) -> None:
        """Make the call (in the gateway's task group, so it outlives a round)."""
        try:
            with self.scope, answering(self), ExitStack() as stack:
                if self._log_level is not None:
                    stack.enter_context(hearing(CallLog(self._log_level, self.hear_log)))
                self._result = await call(self.report_progress)
        except Exception as exc:  # handed to the round that waits for it
            self._error = exc
        finally:
            self._done = True
            for ask in (*self._pending.values(), *self._sent.values()):
                ask.answered.set()  # nobody is left to answer them
            self._wake()

    async def next_round(self) -> R | dict[str, _Ask]:
        """The call's result, or the requests the server made meanwhile (for the client to answer)."""
        while not self._done and not self._pending:
            await self._changed.wait()
        if not self._done:
            for _ in range(_COALESCE_CHECKPOINTS):  # requests sent together go out together
                await anyio.lowlevel.checkpoint()
        if self._done:
            await self._sent_all.wait()  # (what is being sent on the round's stream goes before its answer)
            if self._error is not None:
                raise self._error
            if self._result is None:
                raise MCPError(types.INTERNAL_ERROR, "the call was cancelled before it finished")
            return self._result
        asks, self._pending = self._pending, {}
        self._sent.update(asks)
        # The round's answer closes its stream: what the server sends from now on waits for the next round, and
        # what is being sent on it now gets there first.
        self._between = True
        await self._sent_all.wait()
        return asks

    def answer(self, responses: types.InputResponses | None) -> None:
        """The client's answers; a request it left unanswered is asked again in the next round."""
        for key, response in (responses or {}).items():
            ask = self._sent.pop(key, None)
            if ask is not None:
                ask.answer = response
                ask.answered.set()
        self._pending.update(self._sent)
        self._sent.clear()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


class Rounds:
    """The calls of 2026-07-28-era clients whose servers asked for input, between the clients' rounds."""

    def __init__(
        self,
        tg: anyio.abc.TaskGroup,
        *,
        timeout_s: float = ROUND_TIMEOUT_S,
        name: Callable[[str], str] | None = None,
        max_open: int | None = None,
    ) -> None:
        """``name`` makes a round's ``request_state`` from a random token (default ``mcpvisor-round-<token>``);
        a fleet replica's names the replica the call runs on, so a retry landing elsewhere reaches it."""
        self._tg = tg
        self._timeout_s = timeout_s
        self._max_open = max_open or MAX_OPEN_ROUNDS
        self._name = name or (lambda token: _STATE_PREFIX + token)
        self._open: dict[str, _Call[Any]] = {}
        self._timers: dict[str, anyio.CancelScope] = {}
        """Each open round's expiry, ended when its client comes back (it holds nothing of the call)."""

    def __len__(self) -> int:
        return len(self._open)

    async def run(
        self,
        ctx: Ctx,
        params: types.InputResponseRequestParams,
        call: Callable[[Progress], Awaitable[R]],
        *,
        log_level: types.LoggingLevel | None = None,
    ) -> R | types.InputRequiredResult:
        """A round of ``call``: the first one starts it, a retry carrying ``request_state`` goes on with it.
        With ``log_level`` the server's log messages from that level up go on the round's stream."""
        state = params.request_state
        if state is not None:
            running = self._open.get(state)
            if running is None:
                raise MCPError(
                    types.INVALID_PARAMS,
                    f"request_state {state[:40]!r} names no call waiting for input (it finished, or waited longer "
                    f"than {self._timeout_s:g} s for the answers); make the call again without it",
                )
            if not running.repeated_by(ctx.method, params):  # (its own request, retried, still gets the result)
                raise MCPError(
                    types.INVALID_PARAMS,
                    f"request_state {state[:40]!r} belongs to another request: retry the request that was answered "
                    "with it (the same method, name or URI, and arguments)",
                )
            del self._open[state]
            self._timers.pop(state).cancel()
            running.ctx = ctx
            running.answer(params.input_responses)
        else:
            running = _Call[R](ctx, log_level, params)
            self._tg.start_soon(running.drive, call)
        try:
            await running.resume()
            outcome = await running.next_round()
        except anyio.get_cancelled_exc_class():
            running.scope.cancel()  # the client gave up on the call: so does the server
            raise
        if not isinstance(outcome, dict):
            return outcome
        if len(self._open) >= self._max_open:
            running.scope.cancel()
            raise MCPError(
                types.INTERNAL_ERROR,
                f"the call's server asked for input, and the gateway already holds {self._max_open:,} calls waiting "
                f"for their clients' answers (each waits up to {self._timeout_s:g} s); make the call again later",
            )
        state = self._name(secrets.token_urlsafe(18))
        self._open[state] = running
        self._timers[state] = timer = anyio.CancelScope()
        self._tg.start_soon(self._expire, state, timer)
        return types.InputRequiredResult(
            input_requests={key: ask.request for key, ask in outcome.items()}, request_state=state
        )

    async def _expire(self, state: str, timer: anyio.CancelScope) -> None:
        """Cancel the call if its client does not come back in time (a retry ends ``timer``)."""
        with timer:
            await anyio.sleep(self._timeout_s)
            self._timers.pop(state, None)
            if (running := self._open.pop(state, None)) is not None:
                running.scope.cancel()
