"""The public API is pinned: what ``mcpvisor`` exports, and that importing it stays cheap."""

from __future__ import annotations

import subprocess
import sys

import mcpvisor


def test_public_api_is_pinned() -> None:
    assert mcpvisor.__all__ == [
        "Config",
        "ConfigError",
        "ConnectError",
        "EventBus",
        "McpClient",
        "McpClientUpdate",
        "McpConnectionPool",
        "McpGating",
        "McpServerConfig",
        "McpvisorError",
        "PromptsChanged",
        "ReconcileFinished",
        "ServerError",
        "ServerStateChanged",
        "ServerUnavailableError",
        "ToolCallError",
        "ToolNotFoundError",
        "ToolsChanged",
        "__version__",
        "connection_id_of",
    ]
    for name in mcpvisor.__all__:
        assert getattr(mcpvisor, name) is not None


def test_importing_the_package_imports_nothing_heavy() -> None:
    code = "import sys, mcpvisor; assert not {'pydantic', 'mcp', 'anyio'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)
