"""mcpvisor: an MCP host runtime whose servers follow their configuration files while it runs.

The library API is the core (``mcpvisor.core``): build a :class:`Config`, enter it, call
``initialize()``, read ``tool_registry`` / ``prompt_registry``, ``call_tool(...)``, and
``reinitialize_mcp_servers(...)`` whenever the desired servers change: only what changed is
connected, disconnected or restarted. A session that follows settings files on its own is
``mcpvisor.host.Host``; one MCP server over it is ``mcpvisor.gateway.Gateway``. Names are
imported lazily so that ``import mcpvisor`` stays cheap (the bundled example servers rely on it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mcpvisor._lazy import lazy_exports

__version__ = "0.1.0"

# A library logs; the program decides where it goes. Without this, Python's last-resort handler printed every
# warning to a program's stderr that configured no logging (what a reconcile returns says the same).
logging.getLogger(__name__).addHandler(logging.NullHandler())

_EXPORTS: dict[str, str] = {
    "Config": "mcpvisor.core.config",
    "McpServerConfig": "mcpvisor.core.server_config",
    "connection_id_of": "mcpvisor.core.server_config",
    "McpConnectionPool": "mcpvisor.core.pool",
    "McpGating": "mcpvisor.core.gating",
    "McpClient": "mcpvisor.core.client",
    "ConnectionOptions": "mcpvisor.core.server_config",
    "EventBus": "mcpvisor.core.events",
    "McpClientUpdate": "mcpvisor.core.events",
    "ServerStateChanged": "mcpvisor.core.events",
    "ReconcileFinished": "mcpvisor.core.events",
    "ToolsChanged": "mcpvisor.core.events",
    "PromptsChanged": "mcpvisor.core.events",
    "McpvisorError": "mcpvisor.core.errors",
    "NotRunningError": "mcpvisor.core.errors",
    "ConfigError": "mcpvisor.core.errors",
    "ConnectError": "mcpvisor.core.errors",
    "ServerError": "mcpvisor.core.errors",
    "ServerUnavailableError": "mcpvisor.core.errors",
    "RequestError": "mcpvisor.core.errors",
    "RequestTimeoutError": "mcpvisor.core.errors",
    "NotFoundError": "mcpvisor.core.errors",
    "ToolCallError": "mcpvisor.core.errors",
    "ToolNotFoundError": "mcpvisor.core.errors",
    "ToolCallTimeoutError": "mcpvisor.core.errors",
    "McpEvent": "mcpvisor.core.events",
}

__all__ = [
    "Config",
    "ConfigError",
    "ConnectError",
    "ConnectionOptions",
    "EventBus",
    "McpClient",
    "McpClientUpdate",
    "McpConnectionPool",
    "McpEvent",
    "McpGating",
    "McpServerConfig",
    "McpvisorError",
    "NotFoundError",
    "NotRunningError",
    "PromptsChanged",
    "ReconcileFinished",
    "RequestError",
    "RequestTimeoutError",
    "ServerError",
    "ServerStateChanged",
    "ServerUnavailableError",
    "ToolCallError",
    "ToolCallTimeoutError",
    "ToolNotFoundError",
    "ToolsChanged",
    "__version__",
    "connection_id_of",
]

if TYPE_CHECKING:
    from mcpvisor.core.client import McpClient
    from mcpvisor.core.config import Config
    from mcpvisor.core.errors import (
        ConfigError,
        ConnectError,
        McpvisorError,
        NotFoundError,
        NotRunningError,
        RequestError,
        RequestTimeoutError,
        ServerError,
        ServerUnavailableError,
        ToolCallError,
        ToolCallTimeoutError,
        ToolNotFoundError,
    )
    from mcpvisor.core.events import (
        EventBus,
        McpClientUpdate,
        McpEvent,
        PromptsChanged,
        ReconcileFinished,
        ServerStateChanged,
        ToolsChanged,
    )
    from mcpvisor.core.gating import McpGating
    from mcpvisor.core.pool import McpConnectionPool
    from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig, connection_id_of

__getattr__ = lazy_exports(__name__, _EXPORTS)
