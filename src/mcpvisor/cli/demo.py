"""``mcpvisor demo``: a scratch workspace with bundled example servers (SPEC §0.5).

The demo keeps everything in its own folder, including its user directory (``MCPVISOR_HOME``)
and its server logs, so it never reads or changes the real user settings, approvals or logs;
every command it suggests carries that ``MCPVISOR_HOME`` and names the mcpvisor that runs (its full path
when it is not the one on the PATH). A folder of its own is removed when the demo stops; one named
with ``--dir`` is kept.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DemoLayout", "cli_command", "create_demo"]


@dataclass(frozen=True, slots=True)
class DemoLayout:
    root: Path
    home: Path
    project: Path

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def user_settings(self) -> Path:
        return self.home / "settings.json"

    @property
    def mcp_json(self) -> Path:
        return self.project / ".mcp.json"

    def to_json(self, *, kept: bool) -> dict[str, Any]:
        """The ``demo`` event ``--json`` starts with: where the demo is, its files, and whether the folder is
        ``kept`` when it stops (else removed)."""
        return {
            "event": "demo",
            "path": str(self.root),
            "home": str(self.home),
            "project": str(self.project),
            "user_settings": str(self.user_settings),
            "mcp_json": str(self.mcp_json),
            "logs": str(self.logs),
            "kept": kept,
        }

    def instructions(self, command: str = "mcpvisor") -> str:
        """What to try, with ``command`` as the way to run this mcpvisor from another terminal."""
        env = f"MCPVISOR_HOME={shlex.quote(str(self.home))} {command}"
        return "\n".join(
            [
                "",
                "[bold]Try it[/] (in another terminal; this one shows what happens):",
                f"  • Edit [bold]{self.user_settings}[/]: change an argument of 'clock' → only clock restarts;",
                "    add or remove a server → only that one connects or disconnects;",
                '    add "mcp": {"excluded": ["notes"]} → notes disconnects, the others stay.',
                f"  • The project server 'repo-tools' in [bold]{self.mcp_json}[/] waits for your approval:",
                f"      {env} mcp approve --workspace {shlex.quote(str(self.project))} repo-tools",
                "    Then edit its args in .mcp.json: it asks for approval again.",
                f"  • See it all: {env} mcp list --workspace {shlex.quote(str(self.project))}",
            ]
        )


def cli_command() -> str:
    """How to run the mcpvisor that is running now from another terminal: ``mcpvisor`` when that is the one
    on the PATH, else its full path (a virtual environment that is not activated), or ``python -m``."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "__main__.py":
        return f"{shlex.quote(sys.executable)} -m mcpvisor"
    found = shutil.which("mcpvisor")
    if found is not None and Path(found).resolve() == argv0.resolve():
        return "mcpvisor"
    return shlex.quote(str(argv0.resolve()))


def _server(module: str, name: str, *args: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", f"mcpvisor.examples.{module}", "--name", name, *args]}


def create_demo(directory: Path | None = None) -> DemoLayout:
    """Create (or reuse) the demo folders and their settings files; existing files are kept."""
    root = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="mcpvisor-demo-"))
    layout = DemoLayout(root=root.resolve(), home=(root / "home").resolve(), project=(root / "project").resolve())
    layout.home.mkdir(parents=True, exist_ok=True)
    layout.project.mkdir(parents=True, exist_ok=True)
    if not layout.user_settings.exists():
        settings = {
            "mcpServers": {
                "clock": _server("light_server", "clock", "--tools", "now,today"),
                "notes": {
                    **_server("sdk_server", "notes", "--tools", "add_note,list_notes", "--prompts", "summarize"),
                    "description": "an example server built on the official MCP SDK",
                },
            }
        }
        layout.user_settings.write_text(
            "// mcpvisor demo: user settings. Edit me while it runs.\n" + json.dumps(settings, indent=2) + "\n"
        )
    if not layout.mcp_json.exists():
        project = {"mcpServers": {"repo-tools": _server("light_server", "repo-tools", "--tools", "grep,blame")}}
        layout.mcp_json.write_text(json.dumps(project, indent=2) + "\n")
    return layout
