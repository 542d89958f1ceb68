"""Human views fit the terminal: ``COLUMNS`` sets the width, wrapped lines keep their indent, ``NO_COLOR`` holds,
a terminal that cannot show every character (a non-UTF-8 locale) gets a stand-in for it, and output piped to a reader
that stops reading (``| head``) ends the command quietly."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from mcpvisor.cli.main import app
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.settings.mcp_servers import ServerSource
from mcpvisor.shell.approval import approval_request, render_approval_request, render_question
from tests.helpers import WAIT_S
from tests.layout import Layout, make_layout, write_json

COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-9]|9[0-7])(?:;[0-9;]*)?m")
LONG_NAME = "a-server-whose-name-is-long-enough-to-wrap"


@pytest.fixture
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    layout = make_layout(tmp_path_factory.mktemp("a-folder-with-a-rather-long-name-to-push-paths-past-the-edge"))
    args = ["-m", "mcpvisor.examples.light_server", "--name", "w", "--tools", "echo"]
    write_json(layout.paths.user, {"mcpServers": {"light": {"command": sys.executable, "args": args}}})
    long_args = ["-m", "some.module.with.a.long.name", "--option", "value-that-is-long", "/a/very/long/path/" * 5]
    write_json(layout.paths.project, {"mcpServers": {LONG_NAME: {"command": "python3", "args": long_args}}})
    write_json(
        layout.home / ".cursor" / "mcp.json",
        {"mcpServers": {LONG_NAME: {"command": "npx", "args": ["-y", "@scope/a-long-package-name", "--x" * 20]}}},
    )
    return layout


def invoke(layout: Layout, *args: str, **env: str) -> str:
    result = CliRunner().invoke(app, [*args, "--workspace", str(layout.root)], env={**layout.env, **env})
    assert result.exit_code in (0, 1), result.output
    return result.output


VIEWS = [["mcp", "list"], ["mcp", "import", "--from", "cursor", "--dry-run"], ["status"]]


@pytest.mark.parametrize("argv", VIEWS, ids=" ".join)
@pytest.mark.parametrize("columns", [80, 60])
def test_views_fit_columns_and_wrapped_lines_keep_their_indent(layout: Layout, argv: list[str], columns: int) -> None:
    out = invoke(layout, *argv, COLUMNS=str(columns), MCPVISOR_LOG_DIR=str(layout.home / "logs"))
    lines = out.splitlines()
    assert lines, out
    assert max(len(line) for line in lines) <= columns, out
    # The long server's lines wrapped: every line after its name is still indented under it.
    start = next(i for i, line in enumerate(lines) if LONG_NAME in line)
    assert lines[start].startswith("  ")
    assert lines[start + 1].startswith("  "), out


@pytest.mark.parametrize("argv", VIEWS, ids=" ".join)
def test_no_color_is_honoured_and_colour_is_there_without_it(layout: Layout, argv: list[str]) -> None:
    logs = str(layout.home / "logs")
    coloured = invoke(layout, *argv, FORCE_COLOR="1", COLUMNS="80", MCPVISOR_LOG_DIR=logs)
    assert COLOUR.search(coloured), coloured
    plain = invoke(layout, *argv, FORCE_COLOR="1", NO_COLOR="1", COLUMNS="80", MCPVISOR_LOG_DIR=logs)
    assert not COLOUR.search(plain), plain


def test_the_shell_approval_dialog_fits_80_columns(tmp_path: Path) -> None:
    cfg = McpServerConfig.model_validate(
        {"command": "python3", "args": ["-m", "pkg", "/a/very/long/path/" * 6], "env": {"TOKEN": "s3cret"}}
    )
    source = ServerSource("Project .mcp.json", "project", tmp_path / "a-long-folder-name" / ".mcp.json")
    console = Console(record=True, width=80, file=io.StringIO())
    render_approval_request(console, approval_request(LONG_NAME, cfg, source))
    render_question(console, LONG_NAME, waiting=3)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    args_at = next(i for i, line in enumerate(lines) if line.startswith("    args:"))
    assert lines[args_at + 1].startswith("    "), lines  # the long args wrapped under their label
    assert "s3cret" not in "\n".join(lines)


@pytest.mark.parametrize("argv", VIEWS, ids=" ".join)
def test_piped_output_is_not_wrapped_unless_columns_is_set(layout: Layout, argv: list[str]) -> None:
    result = CliRunner().invoke(
        app,
        [*argv, "--workspace", str(layout.root)],
        env={**layout.env, "COLUMNS": None, "MCPVISOR_LOG_DIR": str(layout.home / "logs")},
    )
    assert result.exit_code in (0, 1), result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) > 80, result.output  # nothing was cut at 80 columns
    [entry] = [line for line in lines if LONG_NAME in line]  # the long server's entry stayed one line
    assert entry.startswith("  ")


@pytest.mark.parametrize(
    "encoding",
    [{"PYTHONIOENCODING": "latin-1"}, {"LC_ALL": "C", "PYTHONUTF8": "0"}],
    ids=["latin-1 locale", "C locale without UTF-8 mode"],
)
@pytest.mark.parametrize("argv", [["shell"], ["mcp", "list"]], ids=" ".join)
def test_output_a_locale_cannot_encode_shows_a_stand_in_and_the_command_runs(
    layout: Layout, argv: list[str], encoding: dict[str, str]
) -> None:
    """Every view prints symbols (…, ✓, ●) that Latin-1 or ASCII has no byte for: the command printed a traceback
    on its first one and exited 1; a "?" stands in for each, and the command does its work."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONIO", "PYTHONUTF8"))}
    env |= {**layout.env, "MCPVISOR_LOG_DIR": str(layout.home / "logs"), **encoding}
    done = subprocess.run(
        [sys.executable, "-m", "mcpvisor", *argv, "--workspace", str(layout.root)],
        input=b"/mcp\n",
        env=env,
        capture_output=True,
        timeout=WAIT_S,
    )
    out, err = done.stdout.decode("latin-1"), done.stderr.decode("latin-1")
    assert "Traceback" not in err, err
    assert done.returncode == 0, out + err
    assert any(line.startswith(f"  {LONG_NAME} ") and "? needs approval" in line for line in out.splitlines()), out
    if argv == ["shell"]:
        assert "Connecting to the admitted servers? (Ctrl-C leaves)" in out, out


@pytest.mark.parametrize("closed", ["at the start", "then Ctrl-C"])
def test_output_piped_to_a_reader_that_stops_reading_ends_the_shell_without_a_traceback(
    layout: Layout, closed: str
) -> None:
    """``mcpvisor shell | head -1``, or ``| tee`` ended by the Ctrl-C that reached the shell too: the next line it
    wrote found the pipe closed, and it printed a page of exception-group traceback on the terminal. The session
    ends as at the end of its input, with exit code 1."""
    env = {**os.environ, **layout.env, "MCPVISOR_LOG_DIR": str(layout.home / "logs")}
    with subprocess.Popen(
        [sys.executable, "-m", "mcpvisor", "shell", "--workspace", str(layout.root)],
        stdin=subprocess.PIPE,  # kept open: the session does not end by itself
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        assert process.stdout.readline().startswith(b"Connecting to the admitted servers")
        if closed == "then Ctrl-C":
            while not process.stdout.readline().startswith(b"Type /help"):
                pass
        process.stdout.close()  # as head does once it has its line (the servers are starting)
        if closed == "then Ctrl-C":
            process.send_signal(signal.SIGINT)  # says how to leave, to the closed pipe
        err = process.stderr.read().decode()
        assert process.wait(timeout=WAIT_S) == 1
    assert "Traceback" not in err, err


def test_a_commands_output_piped_to_a_reader_that_stopped_reading_ends_it_without_a_traceback(layout: Layout) -> None:
    """``mcpvisor status | head -1``: the rows printed once the servers were connected found the pipe closed, and
    rich's exit on a broken pipe came out of the task groups as a page of exception-group traceback on the
    terminal. The command ends with exit code 1 and nothing on stderr but what it said before."""
    env = {**os.environ, **layout.env, "MCPVISOR_LOG_DIR": str(layout.home / "logs")}
    with subprocess.Popen(
        [sys.executable, "-m", "mcpvisor", "status", "--workspace", str(layout.root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()  # as head does once it has its line
        err = process.stderr.read().decode()
        assert process.wait(timeout=WAIT_S) == 1
    assert "Traceback" not in err, err
