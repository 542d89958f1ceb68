"""The exception tree. Every error mcpvisor raises on purpose derives from :class:`McpvisorError`.

::

    McpvisorError
    ├── ConfigError                  a configuration is invalid or an operation is not allowed now
    ├── ServerError                  something went wrong with one server (attribute ``server``)
    │   ├── ConnectError             could not start or reach it, or discovery failed / timed out
    │   └── ServerUnavailableError   it is not connected (down, restarting, removed) - fails fast
    └── ToolCallError                a tool call could not be made (attributes ``tool``, ``server``)
        └── ToolNotFoundError        no connected server provides that tool; ``reason`` says why

Messages follow one shape: ``<what failed> <subject!r>: <why>[; <what to do>]``.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConnectError",
    "McpvisorError",
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


class ToolCallError(McpvisorError):
    """A tool call could not be made."""

    def __init__(self, message: str, *, tool: str, server: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool
        self.server = server


class ToolNotFoundError(ToolCallError):
    """No connected server provides the tool. ``reason`` is one of ``removed``, ``not_allowed``,
    ``excluded``, ``pending_approval``, ``rejected``, ``held`` (its definition changed since it was
    approved), ``missing`` (admitted but not providing it) or ``None`` (no configured server owns that name)."""

    def __init__(self, message: str, *, tool: str, server: str | None = None, reason: str | None = None) -> None:
        super().__init__(message, tool=tool, server=server)
        self.reason = reason
