"""The exception tree. Every error mcpvisor raises on purpose derives from :class:`McpvisorError`.

::

    McpvisorError
    ├── ConfigError                  a configuration is invalid or an operation is not allowed now
    │   └── NotRunningError          used outside its ``async with`` (or entered twice); also a RuntimeError
    ├── ServerError                  something went wrong with one server (attribute ``server``)
    │   ├── ConnectError             could not start or reach it, or discovery failed / timed out
    │   ├── ServerUnavailableError   it is not connected (down, restarting, removed) - fails fast
    │   └── ConnectionBrokenError    the connection is dropped and restarted (``during(what)``: told to a caller)
    │       ├── MessageTooLargeError     it sent a message over its size limit
    │       └── InputNotReadError        it stopped reading what is sent to it
    └── RequestError             a request to a server failed (attributes ``kind``, ``target``, ``server``)
        ├── ToolCallError            ... a tool call (``kind`` "tool"; ``tool`` is the ``target``)
        ├── RequestTimeoutError      ... no answer within the server's timeout (``timeout_s``)
        │   └── ToolCallTimeoutError     a tool call's (also a ToolCallError)
        └── NotFoundError            no connected server provides the tool or prompt; ``reason`` says why
            └── ToolNotFoundError        a tool's (also a ToolCallError)

``request_failed``, ``timed_out`` and ``not_found`` pick the class for a kind of request.

Messages follow one shape: ``<what failed> <subject!r>: <why>[; <what to do>]``.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from mcp_types import ElicitRequestURLParams
    from pydantic import ValidationError

__all__ = [
    "ConfigError",
    "ConnectError",
    "ConnectionBrokenError",
    "InputNotReadError",
    "McpvisorError",
    "describe_invalid",
    "name_word",
    "MessageTooLargeError",
    "NotFoundError",
    "NotRunningError",
    "RequestError",
    "RequestKind",
    "RequestTimeoutError",
    "ServerError",
    "ServerUnavailableError",
    "ToolCallError",
    "ToolCallTimeoutError",
    "ToolNotFoundError",
    "not_found",
    "own_error",
    "request_failed",
    "timed_out",
]


class McpvisorError(Exception):
    """Root of every error mcpvisor raises on purpose."""


class ConfigError(McpvisorError):
    """A configuration is invalid, or an operation is not allowed in the current state."""


class NotRunningError(ConfigError, RuntimeError):
    """An object that runs inside ``async with`` was used before or after it, or entered a second time."""


class ServerError(McpvisorError):
    """Something went wrong with one server."""

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


class ConnectError(ServerError):
    """A server could not be started or reached, or its discovery failed or timed out."""


class ServerUnavailableError(ServerError):
    """A server is not connected right now (down, restarting or removed); calls fail fast."""


class ConnectionBrokenError(ServerError):
    """A server's connection is treated as broken and restarted like a crashed one, for a reason its subclass
    names; :meth:`during` is the same error told to the caller of a request."""

    def during(self, what: str) -> ConnectionBrokenError:
        raise NotImplementedError


class InputNotReadError(ConnectionBrokenError):
    """A stdio server stopped reading its input while messages to it piled up (``waiting`` of them): the
    connection is dropped and restarted, instead of the host's memory growing for it."""

    def __init__(self, *, server: str, waiting: int, what: str | None = None) -> None:
        super().__init__(
            f"{what or 'sending to the server'} failed: server {server!r} stopped reading its input while "
            f"{waiting:,} messages waited to reach it, so its connection is dropped and restarted",
            server=server,
        )
        self.waiting = waiting
        self.what = what

    def during(self, what: str) -> InputNotReadError:
        return InputNotReadError(server=self.server, waiting=self.waiting, what=what)


class MessageTooLargeError(ConnectionBrokenError):
    """A server sent a message larger than its limit (``mcpServers.NAME.maxMessageBytes``); the
    connection is treated as broken and restarted like a crashed one. ``what`` names the request
    that was waiting for the message, if one was."""

    def __init__(self, *, server: str, limit: int, transport_bound: bool = False, what: str | None = None) -> None:
        fix = (
            "the legacy SSE transport reads no more; connect to the server's streamable HTTP endpoint (httpUrl)"
            if transport_bound
            else f"raise mcpServers.{server}.maxMessageBytes (or mcp.maxMessageBytes for every server) "
            "if such messages are expected"
        )
        super().__init__(
            f"{what or 'reading a message'} failed: server {server!r} sent a message larger than "
            f"{format_bytes(limit)}, so its connection is dropped and restarted; {fix}",
            server=server,
        )
        self.limit = limit
        self.transport_bound = transport_bound
        self.what = what

    def during(self, what: str) -> MessageTooLargeError:
        """The same error, told to the caller of the request ``what``."""
        return MessageTooLargeError(
            server=self.server, limit=self.limit, transport_bound=self.transport_bound, what=what
        )


def format_bytes(count: int) -> str:
    """``count`` bytes for people: ``64 MiB``, ``1.5 KiB``, ``12 bytes``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.4g} {unit}"
    return f"{count} bytes"


RequestKind = Literal["tool", "prompt", "resource", "completion", "subscription"]
"""What was asked of a server: a tool call, a prompt, a resource read, a completion, a subscription."""


class RequestError(McpvisorError):
    """A request to a server could not be made or failed. ``kind`` says what was asked, ``target`` of
    what (the tool or prompt name, the resource URI, the argument completed), ``server`` of whom (None
    when no server owns the target)."""

    code: int | None = None
    """The JSON-RPC error code the server refused the request with (None: it did not answer with an error; it
    timed out, say, or its connection ended)."""
    elicitations: tuple[ElicitRequestURLParams, ...] = ()
    """What the server asks the user to open in a browser before the request can succeed (its
    URL-elicitation-required error, -32042); the message names each URL too."""

    def __init__(self, message: str, *, kind: RequestKind, target: str, server: str | None = None) -> None:
        super().__init__(message)
        self.kind: RequestKind = kind
        self.target = target
        self.server = server


class ToolCallError(RequestError):
    """A tool call could not be made or failed (``tool``: the name it was called by)."""

    def __init__(self, message: str, *, tool: str, server: str | None = None) -> None:
        super().__init__(message, kind="tool", target=tool, server=server)

    @property
    def tool(self) -> str:
        return self.target


class RequestTimeoutError(RequestError):
    """A server did not answer a request within its call timeout (``mcpServers.NAME.timeout``)."""

    def __init__(
        self, what: str, *, kind: RequestKind, target: str, server: str, timeout_s: float, fix: str | None = None
    ) -> None:
        RequestError.__init__(
            self,
            f"{what} on server {server!r} timed out after {timeout_s:g} s; "
            f"{fix or f'raise mcpServers.{server}.timeout'} if it needs longer",
            kind=kind,
            target=target,
            server=server,
        )
        self.timeout_s = timeout_s


class ToolCallTimeoutError(RequestTimeoutError, ToolCallError):
    """A tool call that timed out: both a :class:`RequestTimeoutError` and a :class:`ToolCallError`."""


class NotFoundError(RequestError):
    """No connected server provides the tool or prompt named ``target``. ``reason`` is one of ``removed``,
    ``not_allowed``, ``excluded``, ``pending_approval``, ``rejected``, ``held`` (its definition changed
    since it was approved), ``withheld`` (its server lists it, but no client could use it: an invalid schema or an
    empty name), ``missing`` (connected but not providing it), ``starting`` (its server is still
    starting: retry in a moment), ``disconnected`` (its server went down and is being started again by itself:
    retry in a moment), ``down`` (its server is not connected and does not come back by itself: its restarts gave
    up, its start failed or it waits for a sign-in; the message says what to do), ``not_started`` (no server was
    started yet: ``initialize()`` first), ``ambiguous`` (a tool's own name that several servers offer), ``moved``
    (one of mcpvisor's own tools, such as ``mcp__lsp__hover``, served under another name while an MCP server has
    theirs) or ``None`` (no configured server owns that name)."""

    def __init__(
        self, message: str, *, kind: RequestKind, target: str, server: str | None = None, reason: str | None = None
    ) -> None:
        RequestError.__init__(self, message, kind=kind, target=target, server=server)
        self.reason = reason


class ToolNotFoundError(NotFoundError, ToolCallError):
    """No connected server provides the tool (see :class:`NotFoundError` for ``reason``)."""

    def __init__(self, message: str, *, tool: str, server: str | None = None, reason: str | None = None) -> None:
        NotFoundError.__init__(self, message, kind="tool", target=tool, server=server, reason=reason)


def request_failed(message: str, *, kind: RequestKind, target: str, server: str | None) -> RequestError:
    """The error for a failed request of ``kind``: a :class:`ToolCallError` for a tool call."""
    if kind == "tool":
        return ToolCallError(message, tool=target, server=server)
    return RequestError(message, kind=kind, target=target, server=server)


def timed_out(
    what: str, *, kind: RequestKind, target: str, server: str, timeout_s: float, fix: str | None = None
) -> RequestTimeoutError:
    """The error for a request of ``kind`` that got no answer in time (``fix``: what to raise, when not the server's
    ``timeout``)."""
    cls = ToolCallTimeoutError if kind == "tool" else RequestTimeoutError
    return cls(what, kind=kind, target=target, server=server, timeout_s=timeout_s, fix=fix)


def not_found(
    message: str, *, kind: RequestKind, target: str, server: str | None = None, reason: str | None = None
) -> NotFoundError:
    """The error for a tool or prompt no connected server provides: a :class:`ToolNotFoundError` for a tool."""
    if kind == "tool":
        return ToolNotFoundError(message, tool=target, server=server, reason=reason)
    return NotFoundError(message, kind=kind, target=target, server=server, reason=reason)


def own_error(exc: BaseException) -> McpvisorError | None:
    """mcpvisor's own error inside ``exc``, also when task groups wrapped it in exception groups."""
    if isinstance(exc, McpvisorError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = own_error(sub)
            if found is not None:
                return found
    return None


def describe_invalid(exc: ValidationError, most: int = 3) -> str:
    """Where and how a value breaks its model, without the values it holds (a secret may be among them)."""
    problems = [
        f"{'.'.join(str(part) for part in error['loc']) or 'the result'}: {error['msg']}"
        for error in exc.errors(include_url=False, include_input=False, include_context=False)
    ]
    more = f"; and {len(problems) - most} more" if len(problems) > most else ""
    return "; ".join(problems[:most]) + more


def name_word(name: str) -> str:
    """A server's name as the last word of a suggested ``mcpvisor`` command: one shell word whatever it holds
    (a repository chooses its servers' names: pasting a fix must run that fix and nothing else), after ``--``
    when it starts with ``-`` (else it reads as an option)."""
    return f"-- {shlex.quote(name)}" if name.startswith("-") else shlex.quote(name)
