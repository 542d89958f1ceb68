"""One connection to one MCP server, over the official SDK (SPEC §5.1): the requests made on it.

:class:`McpClient` is a :class:`~mcpvisor.core.connection.ServerConnection` (one owner task keeps the
connection; see there) that other tasks make requests on: tool calls, prompts, resources, completions,
resource subscriptions and the log level. What the SDK raises for a request is turned into mcpvisor's
errors in one place (:meth:`McpClient._requesting`), naming the server and, where there is one, the fix.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Final, cast

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from mcpvisor.core import call_logs, cancel_give_ups
from mcpvisor.core.call_logs import rank
from mcpvisor.core.client_requests import Progress
from mcpvisor.core.connection import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_REMOTE_DISCOVERY_TIMEOUT_S,
    DEFAULT_STDIO_DISCOVERY_TIMEOUT_S,
    ServerConnection,
)
from mcpvisor.core.errors import (
    RequestError,
    RequestKind,
    ServerUnavailableError,
    ToolCallError,
    describe_invalid,
    name_word,
    request_failed,
    timed_out,
)
from mcpvisor.core.exposure import Exposure
from mcpvisor.core.listing import warning_of
from mcpvisor.core.processes import how_it_exited
from mcpvisor.core.server_config import redact_text
from mcpvisor.core.server_notices import SDK_REQUEST_ERRORS, Notice
from mcpvisor.core.tracing import skip_unrecorded_spans
from mcpvisor.core.transports import closed_in_sdk, timed_out_in_sdk

__all__ = [
    "DEFAULT_CALL_TIMEOUT_S",
    "DEFAULT_REMOTE_DISCOVERY_TIMEOUT_S",
    "DEFAULT_STDIO_DISCOVERY_TIMEOUT_S",
    "McpClient",
    "Notice",
    "Progress",
]

logger = logging.getLogger(__name__)

skip_unrecorded_spans()  # the SDK builds its request spans only when they are recorded (see core/tracing.py)

GATED: Final[dict[str, str]] = {
    "rejected": "it was rejected; it serves no calls until approved",
    "pending_approval": "it waits for approval again",
    "excluded": "it was excluded",
    "not_allowed": "it is not allowed any more",
    "removed": "it was removed from the configuration",
}
"""What a call cut short by gating, or by the server's removal, is told, per reason (calling it again is refused for
that reason)."""


class McpClient(ServerConnection):
    """A connection to one server and the requests made on it. Build it, ``await start(task_group)``,
    use it, ``await aclose()``; see :class:`~mcpvisor.core.connection.ServerConnection` for ``on_change``,
    ``on_lost``, ``client_requests`` and ``max_message_bytes``."""

    def warning(self, exposure: Exposure) -> str | None:
        """What its row warns of while it is connected, served under ``exposure`` (a connection shared by workspaces
        is served under each one's tool filters): the tools withheld from its listing that those filters do not hide
        anyway, then what else is wrong with the listing (:attr:`listing_problem`), or None."""
        return warning_of(self.listing_problem, self.withheld, exposure.admits)

    # -- resource subscriptions ---------------------------------------------------------------

    def add_listener(self, listener: Callable[[str, Notice], None]) -> Callable[[], None]:
        """``listener(server, notice)`` hears this connection's resource updates and log messages
        (synchronously: it must not block). Returns the function that removes it."""
        return self._notices.add(listener)

    async def set_logging_level(self, level: types.LoggingLevel, *, asker: object = None) -> None:
        """Ask a handshake-era server that offers logging to send messages from ``level`` up (others: nothing);
        never above what a call in flight asked for, nor above what another ``asker`` (a gateway sharing
        this connection) still wants: each asker's latest level counts, until :meth:`forget_logging_level`."""
        if asker is not None:
            self._notices.asked_levels[asker] = level
        client = self._client
        if client is None or self.status != "connected" or client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        await self._notices.set_logging_level(client, level)

    def forget_logging_level(self, asker: object) -> None:
        """``asker`` no longer wants log messages: its level no longer holds the next one down."""
        self._notices.asked_levels.pop(asker, None)

    async def subscribe_resource(self, uri: str) -> None:
        """Ask the server to announce changes of ``uri``: ``resources/subscribe`` in the handshake era, a
        ``subscriptions/listen`` stream for it in the 2026-07-28 era. Raises :class:`RequestError`
        when the server offers no subscriptions or refuses this one. Counted: the server is asked once
        however many users of this connection subscribe, and :meth:`unsubscribe_resource` ends it only
        for the last of them."""
        async with self._subscribing:  # one at a time: two first subscribers would open two listen streams
            modern = self._client is not None and self._client.protocol_version in MODERN_PROTOCOL_VERSIONS
            stream_gone = modern and uri not in self._notices.listened()
            if self._subscribers[uri] and not stream_gone:
                self._subscribers[uri] += 1
                return
            await self._subscribe(uri)  # the first, or a listen stream that ended by itself: made again
            self._subscribers[uri] += 1

    async def _subscribe(self, uri: str) -> None:
        what = f"subscribing to resource {uri!r}"
        client = self._connected_client(what)
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            if self._connection_tg is not None:
                with self._requesting(what, "subscription", uri, client), self._bounded(what, "subscription", uri):
                    await self._notices.listen_for_resource(self._connection_tg, client, uri)
            return
        caps = client.server_capabilities.resources
        if caps is None or not caps.subscribe:
            raise RequestError(
                f"{what} failed: server {self.name!r} does not offer resource subscriptions",
                kind="subscription",
                target=uri,
                server=self.name,
            )
        with self._requesting(what, "subscription", uri, client), self._bounded(what, "subscription", uri):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # deprecated only for the modern era
                await client.session.subscribe_resource(uri)

    async def unsubscribe_resource(self, uri: str) -> None:
        """One subscriber of ``uri`` fewer; the last one ends the subscription at the server."""
        if self._subscribers[uri] > 1:
            self._subscribers[uri] -= 1
            return
        self._subscribers.pop(uri, None)
        if self._notices.stop_listening(uri):
            return
        client = self._client
        if client is None or self.status != "connected" or client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return  # gone with the connection
        try:
            what = f"unsubscribing from {uri!r}"
            with (
                self._requesting(what, "subscription", uri, client),
                self._bounded(what, "subscription", uri),
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.session.unsubscribe_resource(uri)
        except (RequestError, ServerUnavailableError) as exc:  # (a timeout is a RequestError)
            logger.debug("server %r: %s", self.name, exc)

    # -- requests ----------------------------------------------------------------------------

    def _connected_client(self, what: str) -> Client:
        client = self._client
        if client is None or self.status != "connected":
            raise self._not_connected(what)
        return client

    def _not_connected(self, what: str) -> ServerUnavailableError:
        status = "disconnected" if self._client is None and self.status == "connected" else self.status
        reason = self._lost_reason or self.last_error
        detail = f": {reason}" if reason else ""
        return ServerUnavailableError(
            f"{what} failed: server {self.name!r} is not connected ({status}){detail}", server=self.name
        )

    @contextmanager
    def _requesting(
        self, what: str, kind: RequestKind, target: str, client: Client, *, timeout_s: float | None = None
    ) -> Iterator[None]:
        """Map what the SDK raises for one request made on ``client`` onto mcpvisor's errors (one place
        for every kind of request); ``timeout_s``: the request's own timeout, if not the server's."""
        try:
            with cancel_give_ups.requesting(self.name):
                yield
        except SDK_REQUEST_ERRORS as exc:
            raise self._request_error(what, exc, kind=kind, target=target, timeout_s=timeout_s) from exc
        except ValidationError as exc:  # a model refused: the server's answer, or the request made of the arguments
            problems = redact_text(describe_invalid(exc), self.config)
            if exc.title.endswith("Result"):  # the values are not shown (a secret may be among them)
                message = f"{what} on server {self.name!r} failed: its answer is not valid MCP ({problems})"
            else:
                message = f"{what} on server {self.name!r} was not sent: its arguments are not valid ({problems})"
            raise request_failed(message, kind=kind, target=target, server=self.name) from None
        except (PydanticSerializationError, UnicodeDecodeError) as exc:  # arguments with no JSON form
            why = "a value of type bytes that is not UTF-8" if isinstance(exc, UnicodeDecodeError) else str(exc)
            raise request_failed(
                f"{what} on server {self.name!r} was not sent: its arguments cannot be written as JSON ({why})",
                kind=kind,
                target=target,
                server=self.name,
            ) from None
        except RuntimeError as exc:
            if self._client is client and (problem := _output_problem(exc)) is not None:
                raise request_failed(
                    f"{what} on server {self.name!r} failed: {problem}", kind=kind, target=target, server=self.name
                ) from None
            # The connection ended between taking the client and using it: the SDK refuses to send
            # ("Client must be used within an async context manager").
            if self._client is client:
                raise
            raise self._not_connected(what) from exc

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
        progress: Progress | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> types.CallToolResult:
        """Call ``tool`` by its name on the server. Fails fast if the server is not connected.
        ``progress(progress, total, message)`` hears the server's progress notifications for this call;
        ``meta`` is sent as the request's ``_meta`` (but its ``progressToken``: ``progress`` has one)."""
        what = f"call to tool {tool!r}"
        client = self._connected_client(what)
        timeout = timeout_s or self.call_timeout_s
        relay = _InOrder(progress) if progress is not None else None
        with self._requesting(what, "tool", tool, client, timeout_s=timeout_s):
            async with self._calling(client, meta) as sent:
                result = await client.call_tool(
                    tool, arguments or {}, read_timeout_seconds=timeout, progress_callback=relay, meta=sent
                )
        if relay is not None:
            await relay.settled()
        if not isinstance(result, types.CallToolResult):
            raise ToolCallError(
                f"call to tool {tool!r} on server {self.name!r} returned an unexpected result",
                tool=tool,
                server=self.name,
            )
        return result

    async def get_prompt(
        self, prompt: str, arguments: dict[str, str] | None = None, *, meta: Mapping[str, Any] | None = None
    ) -> types.GetPromptResult:
        """Get ``prompt`` from the server; ``meta`` is sent as the request's ``_meta``."""
        what = f"getting prompt {prompt!r}"
        client = self._connected_client(what)
        with self._requesting(what, "prompt", prompt, client), self._bounded(what, "prompt", prompt):
            async with self._calling(client, meta) as sent:
                return await client.get_prompt(prompt, arguments, meta=sent)

    async def read_resource(self, uri: str, *, meta: Mapping[str, Any] | None = None) -> types.ReadResourceResult:
        """Read ``uri`` from the server; ``meta`` is sent as the request's ``_meta``."""
        what = f"reading resource {uri!r}"
        client = self._connected_client(what)
        with self._requesting(what, "resource", uri, client), self._bounded(what, "resource", uri):
            async with self._calling(client, meta) as sent:
                return await client.read_resource(uri, meta=sent)

    async def complete(
        self,
        ref: types.PromptReference | types.ResourceTemplateReference,
        argument: dict[str, str],
        context_arguments: dict[str, str] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> types.CompleteResult:
        """Completions for an argument of one of this server's prompts or resource templates; ``meta`` is sent as
        the request's ``_meta`` (as :meth:`call_tool` sends it; the SDK's ``complete`` takes none)."""
        of = ref.name if isinstance(ref, types.PromptReference) else ref.uri
        what = f"completing argument {argument.get('name')!r} of {of!r}"
        client = self._connected_client(what)
        name = argument.get("name", "")
        with self._requesting(what, "completion", name, client), self._bounded(what, "completion", name):
            context = types.CompletionContext(arguments=context_arguments) if context_arguments is not None else None
            params = types.CompleteRequestParams(
                ref=ref,
                argument=types.CompletionArgument(**argument),
                context=context,
                _meta=_with_meta(meta or {}, None),
            )
            return await client.session.send_request(types.CompleteRequest(params=params), types.CompleteResult)

    @asynccontextmanager
    async def _calling(
        self, client: Client, caller_meta: Mapping[str, Any] | None = None
    ) -> AsyncIterator[types.RequestParamsMeta | None]:
        """A call in flight: what the server asks of its client meanwhile goes to this call's caller, and
        its log messages to a caller that wants to hear them (:mod:`mcpvisor.core.call_logs`). Yields the
        request's ``_meta``: the caller's (see :func:`_with_meta`) with what mcpvisor sets itself."""
        log = call_logs.current()
        meta: types.RequestParamsMeta | None = None
        if log is not None and log.ask_only:
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                meta = cast(types.RequestParamsMeta, {types.LOG_LEVEL_META_KEY: log.level})
            log = None
        if log is not None:
            self._notices.hear(log)
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                meta = cast(types.RequestParamsMeta, {types.LOG_LEVEL_META_KEY: log.level})
            elif self._notices.log_level is None or rank(log.level) < rank(self._notices.log_level):
                await self.set_logging_level(log.level)
        ended = anyio.CancelScope()  # cancelled when the connection ends (see ServerConnection._calls)
        self._calls.add(ended)
        if self._client is not client:
            ended.cancel()  # it ended meanwhile
        if caller_meta:
            meta = _with_meta(caller_meta, meta)
        try:
            with ended:
                if self._in_flight is None:
                    yield meta
                else:
                    async with self._in_flight.call():
                        yield meta
        finally:
            self._calls.discard(ended)
            if log is not None:
                await self._notices.stop_hearing(log)
        if ended.cancelled_caught:  # said as the connection's end is said (see _request_error)
            raise MCPError(types.CONNECTION_CLOSED, "Connection closed")

    @contextmanager
    def _bounded(self, what: str, kind: RequestKind, target: str) -> Iterator[None]:
        """A request the SDK gives no timeout of its own: bounded by the server's call timeout."""
        try:
            with anyio.fail_after(self.call_timeout_s):
                yield
        except TimeoutError:
            raise timed_out(what, kind=kind, target=target, server=self.name, timeout_s=self.call_timeout_s) from None

    def _request_error(
        self, what: str, exc: BaseException, *, kind: RequestKind, target: str, timeout_s: float | None = None
    ) -> Exception:
        if self._stopping:
            why = "its session was closed" if self._ending else "its configuration changed or it was removed"
            if self._gated is not None:  # a retry would be refused: say why instead
                gated, _, which = self._gated.partition(": ")  # gating's reason, then which list and the fix
                why = GATED.get(gated, f"it is {gated.replace('_', ' ')} now") + (f": {which}" if which else "")
            return ServerUnavailableError(
                f"{what} failed: server {self.name!r} was stopped while the call was in flight ({why})"
                + ("" if self._ending or self._gated is not None else "; retry the call"),
                server=self.name,
            )
        if isinstance(exc, MCPError) and timed_out_in_sdk(exc):
            timeout = timeout_s or self.call_timeout_s
            fix = "raise the call's timeout_s" if timeout_s is not None else None  # else the server's timeout
            return timed_out(what, kind=kind, target=target, server=self.name, timeout_s=timeout, fix=fix)
        if self._ended and self._lost_reason is not None and (not isinstance(exc, MCPError) or closed_in_sdk(exc)):
            # Ended on purpose (signed out): that is why it closed, not the server.
            return ServerUnavailableError(f"{what} failed: {self._lost_reason}", server=self.name)
        if self._broken is not None:  # the transport stopped reading: that is why the request failed
            return self._broken.during(what)
        refused = getattr(self._auth_in_use, "sign_in_refused", None)
        if refused:  # the sign-in failed under a request (revoked, signed out): that ended this connection
            self.mark_lost(refused)  # (its provider is this connection's: every request failing with it says so)
            return ServerUnavailableError(f"{what} failed: {refused}", server=self.name)
        if not isinstance(exc, MCPError) or closed_in_sdk(exc):
            self.mark_lost("connection closed during a request")
            where = self.log_path if self.config.transport == "stdio" else self.config.target()
            code = self.process.returncode if self.process is not None else None
            if self.process is None:
                why = f" (the server exited or crashed; see {where})"
            elif code is not None:
                why = f": its process {how_it_exited(code)}; see {where}"
            else:  # (a crash not reaped yet reads so too: its output closed as it ended)
                why = f": its process closed its output (it ended, or runs on without answering); see {where}"
            return ServerUnavailableError(
                f"{what} failed: the connection to server {self.name!r} closed{why}",
                server=self.name,
            )
        if isinstance(exc, MCPError) and exc.code == types.PARSE_ERROR and exc.message.startswith("Failed to parse"):
            return request_failed(  # the SDK's text quotes the answer, which may hold a secret
                f"{what} on server {self.name!r} failed: its answer is not valid JSON-RPC (not shown)",
                kind=kind,
                target=target,
                server=self.name,
            )
        wider = getattr(self._auth_in_use, "step_up_scope", None)
        if wider:  # refused for want of scope (403 insufficient_scope): the connection itself is fine
            self._auth_in_use.step_up_scope = None
            return request_failed(
                f"server {self.name!r} needs a wider sign-in ({wider}) — "
                f"run: {self.login_command.format(name=name_word(self.name))}",
                kind=kind,
                target=target,
                server=self.name,
            )
        why, elicitations = exc.message, _urls_to_open(exc)
        if elicitations:  # what the user is to do first: open them
            opened = ", ".join(f"{e.url} ({e.message.rstrip('.')})" for e in elicitations)
            why = f"{why.rstrip('.')}; open in a browser: {opened}; then make the request again"
        error = request_failed(
            f"{what} on server {self.name!r} failed: {redact_text(why, self.config)}",
            kind=kind,
            target=target,
            server=self.name,
        )
        error.code, error.elicitations = exc.code, elicitations
        return error


PROGRESS_SETTLE_S = 1.0
"""How long a call's answer waits for the relay of the progress notifications that came before it."""


class _InOrder:
    """A call's progress callback run one notification at a time, in the order they came, each finished before
    the call returns: the SDK runs each in a task of its own, so the answer could overtake the last one (and a
    2026-07-28 request's stream, closed with the answer, would then drop it)."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._lock = anyio.Lock()
        self._running = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self._running += 1
        if self._idle.is_set():
            self._idle = anyio.Event()
        try:
            async with self._lock:
                await self._progress(progress, total, message)
        finally:
            self._running -= 1
            if not self._running:
                self._idle.set()

    async def settled(self) -> None:
        """Once every notification that came before the answer is relayed (at most :data:`PROGRESS_SETTLE_S`)."""
        await anyio.lowlevel.checkpoint()  # a relay the answer's arrival scheduled after it gets to start
        with anyio.move_on_after(PROGRESS_SETTLE_S):
            await self._idle.wait()


def _urls_to_open(exc: MCPError) -> tuple[types.ElicitRequestURLParams, ...]:
    """The URLs a server's URL-elicitation-required error (-32042, handshake era) asks the user to open; none for
    another error, or one whose data is not what the protocol says it is."""
    if exc.code != types.URL_ELICITATION_REQUIRED:
        return ()
    try:
        return tuple(types.ElicitationRequiredErrorData.model_validate(exc.error.data).elicitations)
    except ValidationError:
        return ()


def _output_problem(exc: RuntimeError) -> str | None:
    """What the SDK's check of a tool's result against its output schema found (``None``: another error), without
    the values (a secret may be among them)."""
    text, cause = str(exc), exc.__cause__
    if text.startswith("Invalid structured content returned by tool "):
        from jsonschema import ValidationError as SchemaError  # imported by the SDK's check already, not at start-up

        where = f" at {cause.json_path} (its {cause.validator!s} rule)" if isinstance(cause, SchemaError) else ""
        return f"its structured result does not match the tool's output schema{where}"
    if text.startswith("Tool ") and text.endswith(" has an output schema but did not return structured content"):
        return "its result has no structured content, which the tool's output schema asks for"
    if text.startswith("Invalid schema for tool "):
        return "the tool's output schema cannot be used to check its result (a $ref in it does not resolve)"
    return None


_PROTOCOL_META_PREFIX = "io.modelcontextprotocol/"
_PROGRESS_KEYS = ("progressToken", "progress_token")


def _with_meta(meta: Mapping[str, Any], own: types.RequestParamsMeta | None) -> types.RequestParamsMeta | None:
    """The caller's ``_meta`` for a request, with what mcpvisor sets itself in its place (the log level it asks for);
    without a progress token (the SDK gives the request its own when someone listens for progress; a caller's would
    name another request of this connection to the server: the SDK's request ids are its tokens), under either of
    its names (a request's parsed ``_meta`` has it as ``progress_token``), and without the protocol's own keys
    (``io.modelcontextprotocol/…``: this connection's version, client and capabilities, as the SDK stamps them;
    a gateway client's are its own connection's)."""
    merged = {k: v for k, v in meta.items() if k not in _PROGRESS_KEYS and not k.startswith(_PROTOCOL_META_PREFIX)}
    return cast(types.RequestParamsMeta, {**merged, **(own or {})}) if merged else own
