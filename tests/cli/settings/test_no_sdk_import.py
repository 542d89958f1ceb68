from __future__ import annotations

import subprocess
import sys


def test_settings_and_watcher_modules_never_import_the_mcp_sdk() -> None:
    code = (
        "import sys\n"
        "import mcpvisor.cli.settings, mcpvisor.cli.settings.loader, mcpvisor.cli.settings.schema\n"
        "import mcpvisor.cli.settings.mcp_servers, mcpvisor.cli.settings.writer, mcpvisor.cli.watcher\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
