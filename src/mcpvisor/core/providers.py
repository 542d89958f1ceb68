"""Tools served from inside the process rather than by an MCP server (the language servers' operations).

A :class:`ToolProvider` registers its tools in the session's :class:`~mcpvisor.core.registry.ToolRegistry`
under its own name, like a server's (``mcp__lsp__hover``), so everything that serves the registry — the
gateway, the shell, the library, the framework adapters — serves them too, with no change. A call of one
of them goes to :meth:`ToolProvider.call_tool` instead of an MCP connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mcp_types import CallToolResult, Tool

    from mcpvisor.core.client_requests import Progress

__all__ = ["ToolProvider"]


class ToolProvider(Protocol):
    """A set of tools answered in process. ``name`` is the server part of their registered names."""

    name: str

    def list_tools(self) -> Sequence[Tool]:
        """The tools offered now (empty: none are registered). Cheap: called on every refresh."""
        ...

    async def call_tool(
        self, tool: str, arguments: dict[str, Any], *, progress: Progress | None = None
    ) -> CallToolResult:
        """Answer a call of ``tool`` (its own name, not the registered one). Failures are results with
        ``is_error``, never exceptions, unless the failure is mcpvisor's own (:class:`McpvisorError`)."""
        ...
