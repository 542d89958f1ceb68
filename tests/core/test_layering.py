"""The core never imports the CLI layer or a UI/watcher library (SPEC §1)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import mcpvisor.core

CORE = Path(mcpvisor.core.__file__).parent
FORBIDDEN = ("mcpvisor.cli", "watchfiles", "typer", "rich", "prompt_toolkit")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_core_module_imports_the_cli_layer_anywhere_in_its_source() -> None:
    offenders = {
        f"{path.relative_to(CORE)}: {name}"
        for path in CORE.rglob("*.py")
        for name in imported_modules(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    }
    assert offenders == set()


def test_importing_every_core_module_loads_no_cli_module() -> None:
    # Third-party libraries are checked in the source above: the mcp SDK itself may load some of them.
    modules = [f"mcpvisor.core.{p.stem}" for p in CORE.glob("*.py") if p.stem != "__init__"]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = [m for m in sys.modules if m.startswith('mcpvisor.cli')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_config_module_does_not_import_the_mcp_sdk() -> None:
    """Commands that start no server must answer fast: the SDK costs about a second to import."""
    code = (
        "import sys, mcpvisor.core.config, mcpvisor.core.server_config, mcpvisor.core.gating\n"
        "assert 'mcp' not in sys.modules and 'mcp_types' not in sys.modules, 'the mcp SDK was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
