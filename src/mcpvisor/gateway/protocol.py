"""Small pieces of the server side of MCP that the gateway's parts share: the low-level server that
advertises list changes, paging, the connection behind a request, and error results."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcpvisor.core.call_logs import LOG_LEVELS
from mcpvisor.core.client import Progress
from mcpvisor.core.errors import McpvisorError, NotFoundError, RequestError, describe_invalid
from mcpvisor.host.status import error_as_said_here

if TYPE_CHECKING:
    from mcpvisor.core.config import Config

__all__ = [
    "GatewayServer",
    "PAGE_SIZE",
    "RESOURCE_NOT_FOUND",
    "as_mcp_errors",
    "as_served",
    "connection_of",
    "error_result",
    "failed_answer",
    "failed_call",
    "invalid_message",
    "is_request_id",
    "log_level_asked",
    "page",
    "progress_to",
    "said_here",
    "shape_problem",
    "takes_url_errors",
]

PAGE_SIZE = 500
"""Listings longer than this are served in pages (``nextCursor``)."""
RESOURCE_NOT_FOUND = -32002
"""The JSON-RPC error code MCP uses for an unknown resource."""
_CURSOR_PREFIX = "mcpvisor-offset-"

T = TypeVar("T")


class GatewayServer(Server[dict[str, Any]]):
    """A low-level server that advertises ``listChanged`` for tools, prompts and resources on every transport.

    The in-memory and streamable-HTTP transports call ``create_initialization_options()`` with no
    arguments, so the default has to say it; the modern era derives it from the listen handler. A handshake-era
    request before ``initialize`` is refused saying so (:meth:`initialize_first`). ``instructions`` are read when
    they are sent: from ``live_instructions`` once it is set."""

    live_instructions: Callable[[], str] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.middleware += [self.initialize_first, name_invalid_params]

    @property
    def instructions(self) -> str | None:
        return self.live_instructions() if self.live_instructions is not None else self._instructions

    @instructions.setter
    def instructions(self, value: str | None) -> None:
        self._instructions = value

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(tools_changed=True, prompts_changed=True, resources_changed=True),
            experimental_capabilities,
            extensions,
        )

    async def initialize_first(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: a handshake-era request before ``initialize`` is refused saying so (the SDK's own answer is
        ``-32602 Invalid request parameters``, which sends a client looking at its parameters). A method the
        gateway does not serve still gets the SDK's ``-32601`` (clients probe with it before the handshake). A second
        ``initialize`` in a session is refused too: the SDK accepted it and the session took its version and
        capabilities from then on, which what the gateway keeps of the session did not follow."""
        connection = connection_of(ctx)
        if ctx.method == "initialize" and connection is not None and connection.client_params is not None:
            raise MCPError(
                types.INVALID_REQUEST,
                f"initialize refused: this session is already initialized (protocol {connection.protocol_version}); "
                "to initialize again, open a new session",
            )
        if (
            ctx.request_id is not None
            and ctx.method not in ("initialize", "ping")
            and connection is not None
            and not connection.initialize_accepted
            and self.get_request_handler(ctx.method) is not None
        ):
            raise MCPError(
                types.INVALID_REQUEST,
                f"{ctx.method} before initialize: send an initialize request first, or make each request a "
                "2026-07-28 one (its _meta naming the protocol version and the client's capabilities)",
            )
        return await call_next(ctx)


async def name_invalid_params(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Middleware: a request whose params break the method's schema is answered ``-32602`` naming the fields and
    what each takes (the SDK's answer, ``Invalid request parameters`` with no field, left the client guessing).
    The params are checked again only on that way out, so a valid request costs nothing more."""
    try:
        return await call_next(ctx)
    except ValidationError:
        if ctx.request_id is None or ctx.method not in methods.SPEC_CLIENT_METHODS:
            raise
        try:
            methods.validate_client_request(ctx.method, ctx.protocol_version, ctx.params)
        except ValidationError as invalid:
            raise MCPError(types.INVALID_PARAMS, f"Invalid params: {describe_params(invalid)}") from None
        except KeyError:  # (a method this version does not define)
            pass
        raise


_EXPECTED = {
    "missing": "required",
    "string_type": "a string",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
}
_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})
"""Union members' names pydantic puts in an error's location (``progressToken.str``): not fields."""


def describe_params(exc: ValidationError, most: int = 3) -> str:
    """Which fields of a request's params are wrong and what each takes (``arguments: expected an object``), the
    members of a union as one (``expected a string or an integer``); never the values sent."""
    said: dict[str, list[str]] = {}
    for error in _of_the_named_kind(exc.errors(include_url=False, include_input=False, include_context=False)):
        path = [str(part) for part in error["loc"][1:] if not (str(part) in _TAGS or str(part)[:1].isupper())]
        expected = _EXPECTED.get(error["type"]) or str(error["msg"]).replace("Input should be ", "")
        wants = said.setdefault(".".join(path) or "params", [])
        if expected not in wants:
            wants.append(expected)
    problems = [
        f"{field}: {'required' if wants == ['required'] else 'expected ' + ' or '.join(_but_required(wants))}"
        for field, wants in said.items()
    ]
    more = f"; and {len(problems) - most} more" if len(problems) > most else ""
    return "; ".join(problems[:most]) + more


def _of_the_named_kind(errors: list[Any]) -> list[Any]:
    """``errors`` but those of a union's members whose ``type`` is not the one sent, when another member's is: a
    ``ref`` of ``type`` ``ref/prompt`` is told what a prompt reference needs, not what a resource reference does."""
    mistyped = {
        tuple(error["loc"][:-1])
        for error in errors
        if error["type"] == "literal_error"
        and len(error["loc"]) > 1
        and error["loc"][-1] == "type"
        and str(error["loc"][-2])[:1].isupper()
    }
    members = {tuple(error["loc"][: i + 1]) for error in errors for i in range(len(error["loc"]))}
    named = {member[:-1] for member in members if str(member[-1])[:1].isupper() and member not in mistyped}
    return [
        error for error in errors if not any(tuple(error["loc"][: len(m)]) == m and m[:-1] in named for m in mistyped)
    ]


def _but_required(wants: list[str]) -> list[str]:
    return [want for want in wants if want != "required"]


def page(items: list[T], params: types.PaginatedRequestParams | None, what: str) -> tuple[list[T], str | None]:
    """One page of ``items`` from the request's cursor, and the cursor of the next page (None: the last).

    A cursor is an opaque offset into the list as it is now; if the list changes between pages the
    client also gets a list-changed notice and starts over."""
    start = 0
    cursor = params.cursor if params is not None else None
    if cursor is not None:
        offset = cursor.removeprefix(_CURSOR_PREFIX) if cursor.startswith(_CURSOR_PREFIX) else ""
        if not (offset.isascii() and offset.isdigit()) or len(offset) > 18:  # ours are short ASCII numbers
            raise MCPError(
                types.INVALID_PARAMS,
                f"invalid cursor {cursor[:40]!r} for {what}: pass the nextCursor of the previous page, or none to "
                "start from the beginning",
            )
        start = int(offset)
    end = start + PAGE_SIZE
    return items[start:end], f"{_CURSOR_PREFIX}{end}" if end < len(items) else None


def progress_to(ctx: ServerRequestContext[Any, Any]) -> Progress:
    """Relays an upstream's progress on a call to the client that made it (``report_progress`` does nothing
    when that client asked for no progress; it knows the token, or the callback in process)."""

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        await ctx.session.report_progress(progress, total, message)

    return relay


def log_level_asked(params: types.RequestParams) -> types.LoggingLevel | None:
    """The level a 2026-07-28 request asked to hear log messages from (its ``_meta``), if any."""
    level = (params.meta or {}).get(types.LOG_LEVEL_META_KEY)
    return next((known for known in LOG_LEVELS if known == level), None)


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(is_error=True, content=[types.TextContent(type="text", text=message)])


def takes_url_errors(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client of ``ctx`` is told a server's URL-elicitation-required error (-32042) as the server said
    it: a handshake-era client (the 2026-07-28 era retired the error) that offers URL elicitation."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return False
    offered = ctx.session.client_capabilities
    return offered is not None and offered.elicitation is not None and offered.elicitation.url is not None


def failed_call(config: Config, exc: McpvisorError, *, url_errors: bool) -> types.CallToolResult:
    """A failed tool call's answer: an error result saying why. A server's URL-elicitation-required error is raised
    as the server said it, with the URLs to open, when ``url_errors`` (:func:`takes_url_errors`): its client opens
    them and calls again, as it would with that server; to any other client the result's text names them."""
    if url_errors and isinstance(exc, RequestError) and exc.elicitations:
        raise UrlElicitationRequiredError(list(exc.elicitations), said_here(config, exc))
    return error_result(said_here(config, exc))


def said_here(config: Config, exc: McpvisorError) -> str:
    """``exc``'s message as ``config``'s session says it (the sign-in command of a shared connection's error:
    :func:`~mcpvisor.host.status.error_as_said_here`)."""
    return error_as_said_here(config, exc)


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection | None:
    """The per-client connection behind a request. The SDK (2.3) keeps it on the per-request session
    only; the ``ctx.connection`` spelling is its announced public successor."""
    connection = getattr(ctx, "connection", None) or getattr(ctx.session, "_connection", None)
    return connection if isinstance(connection, Connection) else None


NOT_RELAYED = frozenset(
    {
        types.PARSE_ERROR,
        types.INVALID_REQUEST,
        types.METHOD_NOT_FOUND,  # the gateway has the method: -32601 would tell its client it has not
        types.HEADER_MISMATCH,
        types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        types.UNSUPPORTED_PROTOCOL_VERSION,
        types.URL_ELICITATION_REQUIRED,
    }
)
"""Server error codes about mcpvisor's own request to the server, answered to the client as internal errors."""


@contextmanager
def as_mcp_errors(config: Config) -> Iterator[None]:
    """mcpvisor's errors as the JSON-RPC errors a client of ``config``'s session gets (for requests whose result has
    no error flag): what no server provides is invalid params, a server's refusal keeps the server's code (invalid
    params stay the client's fault), the rest is an internal error; the message as that session says it
    (:func:`said_here`). A code that speaks of the exchange between mcpvisor and the server (:data:`NOT_RELAYED`:
    a method the server lacks, a request or version it could not take) is an internal error too: the client made
    none of those. So is a URL-elicitation-required error, whose message names the URLs (the 2026-07-28 era
    retired its code)."""
    try:
        yield
    except NotFoundError as exc:
        raise MCPError(types.INVALID_PARAMS, said_here(config, exc)) from exc
    except McpvisorError as exc:
        code = exc.code if isinstance(exc, RequestError) else None
        if code is None or code in NOT_RELAYED:
            code = types.INTERNAL_ERROR
        raise MCPError(code, said_here(config, exc)) from exc


def shape_problem(data: Any, *, unit: str = "POST") -> str | None:
    """Why ``data`` is not one JSON-RPC message as MCP has them (a batch, an id of another type…), or None.
    ``unit``: what carries one message (a ``POST``, a ``line``)."""
    if isinstance(data, list):
        return f"batches are not supported: send one JSON-RPC message per {unit}"
    if not isinstance(data, dict):
        return f"{'the body' if unit == 'POST' else 'a ' + unit} must be one JSON-RPC message (an object)"
    if data.get("jsonrpc") != "2.0":
        return "'jsonrpc' must be \"2.0\""
    if "id" in data and not (is_request_id(data["id"]) or (data["id"] is None and "method" not in data)):
        return "an 'id' must be a string or an integer"  # (null only in an error that could not name its request)
    if data.get("params") is not None and not isinstance(data["params"], dict):
        return "'params' must be an object"
    if "method" not in data and "id" not in data:
        return "a message needs a 'method' (a request or notification) or an 'id' (a response)"
    return None


def failed_answer(data: Any, problem: str) -> types.JSONRPCError | None:
    """For a client's answer to one of the gateway's requests (no method, a request id) that is no JSON-RPC response
    (``problem``): the error that fails that request in its place (dropped, it left the request, and the call behind
    it, waiting for an answer that had come); else None."""
    if not isinstance(data, dict) or "method" in data or not is_request_id(data.get("id")):
        return None
    said = f"the client's answer is no JSON-RPC response: {problem.partition(': ')[2] or problem}"
    return types.JSONRPCError(
        jsonrpc="2.0", id=data["id"], error=types.ErrorData(code=types.INTERNAL_ERROR, message=said)
    )


def is_request_id(value: Any) -> bool:
    """Whether ``value`` may be a JSON-RPC request's id as MCP has them: a string or an integer (no bool)."""
    return isinstance(value, int | str) and not isinstance(value, bool)


ResultT = TypeVar("ResultT", bound=types.Result)


def as_served(result: ResultT) -> ResultT:
    """An upstream's result as the gateway serves it: without that server's own identity in its ``_meta`` (the
    gateway's is stamped where none is: a client talks to one server, whichever answered behind it)."""
    meta = result.meta
    if not meta or types.SERVER_INFO_META_KEY not in meta:
        return result
    rest = {key: value for key, value in meta.items() if key != types.SERVER_INFO_META_KEY}
    return result.model_copy(update={"meta": rest or None})


def invalid_message(data: Any) -> str:
    """What makes ``data`` (that :func:`shape_problem` passed) no JSON-RPC message, in the terms of the kind it
    means to be (a request, a notification, a response), not pydantic's dump of every kind."""
    kind: type[types.JSONRPCRequest | types.JSONRPCNotification | types.JSONRPCResponse | types.JSONRPCError]
    if "method" in data:
        kind, named = (types.JSONRPCRequest, "request") if "id" in data else (types.JSONRPCNotification, "notification")
    else:
        kind, named = (types.JSONRPCError, "error") if "error" in data else (types.JSONRPCResponse, "response")
    try:
        kind.model_validate(data, by_name=False)
    except ValidationError as exc:
        return f"not a JSON-RPC {named}: {describe_invalid(exc)}"
    return "not a JSON-RPC message"
