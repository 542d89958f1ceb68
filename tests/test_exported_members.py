"""The public API is pinned: what ``mcpvisor`` exports, and that importing it stays cheap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mcpvisor
import mcpvisor.host


def test_public_api_is_pinned() -> None:
    assert mcpvisor.__all__ == [
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
    for name in mcpvisor.__all__:
        assert getattr(mcpvisor, name) is not None
    assert set(mcpvisor.__all__) <= set(dir(mcpvisor))  # lazily imported names complete in a REPL too
    assert set(mcpvisor.host.__all__) <= set(dir(mcpvisor.host))


def test_importing_the_package_imports_nothing_heavy() -> None:
    code = "import sys, mcpvisor; assert not {'pydantic', 'mcp', 'anyio'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_program_that_configured_no_logging_gets_nothing_on_its_stderr(tmp_path: Path) -> None:
    # Python's last-resort handler printed every warning of the library there; what failed is in the result.
    code = (
        "import anyio\n"
        "from mcpvisor import Config, McpServerConfig, ConnectionOptions\n"
        "async def main():\n"
        "    bad = McpServerConfig(command='no-such-command-xyz')\n"
        f"    async with Config(mcp_servers={{'bad': bad}}, options=ConnectionOptions(log_dir=r'{tmp_path}')) as c:\n"
        "        print(sorted((await c.initialize()).failed))\n"
        "anyio.run(main)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "['bad']"
    assert done.stderr == ""


def test_the_host_and_gateway_entry_points_are_pinned() -> None:
    import mcpvisor.gateway
    import mcpvisor.host
    from mcpvisor.gateway.server import Gateway
    from mcpvisor.host.host import Host

    assert mcpvisor.host.__all__ == ["Host", "HostEvent", "HostOptions", "Ready", "SettingsWarning", "ToolFailure"]
    assert mcpvisor.gateway.__all__ == ["Gateway", "WorkspaceGateway"]
    assert mcpvisor.host.Host is Host
    assert mcpvisor.gateway.Gateway is Gateway
    for package in (mcpvisor.host, mcpvisor.gateway):
        for name in package.__all__:
            assert getattr(package, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = mcpvisor.host.Nope


def test_importing_a_package_above_the_core_stays_cheap() -> None:
    code = (
        "import sys, mcpvisor.host, mcpvisor.gateway, mcpvisor.shell, mcpvisor.cli\n"
        "assert not {'mcp', 'watchfiles', 'rich', 'typer'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_error_a_language_server_tool_raises_is_imported_from_where_the_readme_says() -> None:
    from mcpvisor import McpvisorError
    from mcpvisor.host import ToolFailure
    from mcpvisor.host.lsp.tools import ToolFailure as raised

    assert ToolFailure is raised
    assert issubclass(ToolFailure, McpvisorError)
    assert "from mcpvisor.host import ToolFailure" in " ".join(
        (Path(__file__).parents[1] / "README.md").read_text().split()
    )
