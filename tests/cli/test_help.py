"""Every command's --help is plain text that fits 80 columns, with no stray metavars; --version is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from mcpvisor import __version__
from mcpvisor.cli.main import app


def every_command() -> list[list[str]]:
    """Every command and command group the app has (hidden ones aside), read from the app itself."""
    found: list[list[str]] = [[]]

    def walk(group: Any, path: list[str]) -> None:
        for name, command in sorted(getattr(group, "commands", {}).items()):
            if not command.hidden:
                found.append([*path, name])
                walk(command, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = every_command()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "mcpvisor")
def test_help_is_plain_and_fits_80_columns(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert "Usage: " in result.output
    assert "<bool>" not in result.output
    assert "\x1b[" not in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_version_prints_one_plain_line() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"mcpvisor {__version__}\n"


def test_shell_completion_completes_commands() -> None:
    """``--install-completion`` installs a script that calls back with these variables (bash here)."""
    result = subprocess.run(
        [sys.executable, "-m", "mcpvisor"],
        env={**os.environ, "_MCPVISOR_COMPLETE": "complete_bash", "COMP_WORDS": "mcpvisor mcp im", "COMP_CWORD": "2"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["import"]


def test_run_help_names_every_event_run_json_prints() -> None:
    import re
    from pathlib import Path

    from mcpvisor.cli import output

    events = set(re.findall(r'"event": "([a-z_]+)"', Path(output.__file__).read_text()))
    assert len(events) >= 10
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    said = set(re.findall(r"[a-z_]+", result.output.split("one JSON object per line:")[1]))
    assert events <= said, events - said


def test_serve_help_names_every_signal_that_stops_it_gently_and_every_fleet_url_form() -> None:
    """Before: SIGHUP (a closed terminal) was left out, and --fleet named no rediss:// (TLS) URL; both work."""
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    said = " ".join(result.output.split())
    assert "SIGTERM, SIGHUP or Ctrl-C lets calls in flight finish" in said
    assert "redis://HOST:PORT/DB, rediss://… (TLS) or unix:///PATH" in said


def test_mcp_import_help_says_what_scope_it_takes_when_none_is_given() -> None:
    """Before, --scope named its two values and not what happens without it (both levels are imported)."""
    result = CliRunner().invoke(app, ["mcp", "import", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    said = " ".join(result.output.split())
    assert "(workspace); default: both" in said, said
