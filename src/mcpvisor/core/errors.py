"""The exception tree. Every error mcpvisor raises on purpose derives from :class:`McpvisorError`.

::

    McpvisorError
    ├── ConfigError                  a configuration is invalid or an operation is not allowed now
    ├── ServerError                  something went wrong with one server (attribute ``server``)
    │   ├── ConnectError             could not start or reach it, or discovery failed / timed out
    │   ├── ServerUnavailableError   it is not connected (down, restarting, removed) - fails fast
    │   └── MessageTooLargeError     it sent a message over its size limit: the connection is dropped
    └── ToolCallError                a tool call could not be made (attributes ``tool``, ``server``)
        └── ToolNotFoundError        no connected server provides that tool; ``reason`` says why

Messages follow one shape: ``<what failed> <subject!r>: <why>[; <what to do>]``.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConnectError",
    "McpvisorError",
    "MessageTooLargeError",
    "RequestTimeoutError",
    "ServerError",
    "ServerUnavailableError",
    "ToolCallError",
    "ToolNotFoundError",
]


class McpvisorError(Exception):
    """Root of every error mcpvisor raises on purpose."""


class ConfigError(McpvisorError):
    """A configuration is invalid, or an operation is not allowed in the current state."""


class ServerError(McpvisorError):
    """Something went wrong with one server."""

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


class ConnectError(ServerError):
    """A server could not be started or reached, or its discovery failed or timed out."""


class ServerUnavailableError(ServerError):
    """A server is not connected right now (down, restarting or removed); calls fail fast."""


class MessageTooLargeError(ServerError):
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


class ToolCallError(McpvisorError):
    """A tool call could not be made."""

    def __init__(self, message: str, *, tool: str, server: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool
        self.server = server


class RequestTimeoutError(ToolCallError):
    """A server did not answer a request within its call timeout (``mcpServers.NAME.timeout``)."""

    def __init__(self, what: str, *, server: str, timeout_s: float, tool: str) -> None:
        super().__init__(
            f"{what} on server {server!r} timed out after {timeout_s:g} s; "
            f"raise mcpServers.{server}.timeout if it needs longer",
            tool=tool,
            server=server,
        )
        self.timeout_s = timeout_s


class ToolNotFoundError(ToolCallError):
    """No connected server provides the tool. ``reason`` is one of ``removed``, ``not_allowed``,
    ``excluded``, ``pending_approval``, ``rejected``, ``held`` (its definition changed since it was
    approved), ``missing`` (admitted but not providing it), ``ambiguous`` (a tool's own name that several
    servers offer) or ``None`` (no configured server owns that name)."""

    def __init__(self, message: str, *, tool: str, server: str | None = None, reason: str | None = None) -> None:
        super().__init__(message, tool=tool, server=server)
        self.reason = reason
