from __future__ import annotations

import subprocess
import sys


def test_settings_and_watcher_modules_never_import_the_mcp_sdk() -> None:
    code = (
        "import sys\n"
        "import mcpvisor.host.settings, mcpvisor.host.settings.loader, mcpvisor.host.settings.schema\n"
        "import mcpvisor.host.settings.mcp_servers, mcpvisor.host.settings.writer, mcpvisor.host.watcher\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_what_a_command_loads_before_its_first_server_spawns_leaves_out_the_sdk_and_the_sign_in_server() -> None:
    """Everything imported before ``serve`` (or ``run``) spawns its first server delays every server: the SDK loads
    beside the servers' start, the sign-in's loopback HTTP server (``http.server``, ~5 ms) only for a sign-in."""
    code = (
        "import sys\n"
        "import mcpvisor.cli.main, mcpvisor.cli.serve, mcpvisor.host.host\n"
        "print(sorted(m for m in sys.modules if m in ('mcp', 'mcp_types', 'http.server', 'starlette')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
