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
