"""``mcpvisor shell`` at a real pseudo-terminal: the line editor's completion, history, Ctrl-R and
output above the prompt, the approval dialog mid-session, Ctrl-C and Ctrl-D — as a person meets them.
Completion's pure part is checked against prompt_toolkit's own document type."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import stat
import struct
import subprocess
import sys
import termios
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from mcpvisor.shell.completion import ShellCompleter
from mcpvisor.shell.line_editor import HISTORY_FILENAME
from tests.helpers import WAIT_S
from tests.layout import Layout, make_layout
from tests.shell.test_shell import save, server

_ESCAPE = re.compile(r"\x1b(\[[0-9;?<=>]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][A-Z0-9]|[=>78])")
_CURSOR_QUERY = b"\x1b[6n"
# Runs a command in a new session whose controlling terminal is its standard input, as a terminal
# emulator starts a shell: then Ctrl-C typed at the terminal is SIGINT to it.
_WITH_TERMINAL = (
    "import fcntl, os, sys, termios; os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)
_WITH_JOB_CONTROL = """
import fcntl, os, signal, sys, termios
os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0)
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0); os.tcsetpgrp(0, os.getpid()); signal.signal(signal.SIGTTOU, signal.SIG_DFL)
    os.execv(sys.argv[1], sys.argv[1:])
os.setpgid(pid, pid); os.tcsetpgrp(0, pid)
while True:
    _, status = os.waitpid(pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        sys.exit(os.waitstatus_to_exitcode(status))
    os.write(1, b"\\r\\n[stopped] the job shell resumes it\\r\\n")
    os.tcsetpgrp(0, pid); os.killpg(pid, signal.SIGCONT)
"""
"""A shell with job control, as the user's (the terminal's session leader): it runs the command in a process group
of its own, in the foreground, and resumes it when it stops (as ``fg`` does)."""
UP, CTRL_C, CTRL_D, CTRL_R, TAB, CTRL_Z = "\x1b[A", "\x03", "\x04", "\x12", "\t", "\x1a"
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"


_FORWARD = re.compile(r"\x1b\[(\d*)C")


def plain(data: bytes) -> str:
    """What a terminal shows of ``data``: cursor moves forward as spaces, other escape sequences
    (colours, cursor moves) removed."""
    text = _FORWARD.sub(lambda m: " " * int(m.group(1) or 1), data.decode(errors="replace"))
    return _ESCAPE.sub("", text).replace("\r", "")


_TOKEN = re.compile(r"\x1b\[([0-9;?<=>]*)[ -/]*([@-~])|" + _ESCAPE.pattern + r"|\x1b|[\x00-\x1f]|[^\x00-\x1f\x1b]+")


def screen_lines(data: bytes) -> list[str]:
    """The lines a terminal shows after ``data``, cursor moves applied. The editor redraws only what
    changed: when a completion lands a frame after the text it completes (a loaded machine), the
    rest of the word is written after a move back up to the line, and the line reads whole only here."""
    rows: list[list[str]] = [[]]
    row = col = 0
    for token in _TOKEN.finditer(data.decode(errors="replace")):
        piece, params, final = token.group(0), token.group(1), token.group(2)
        if final is not None:
            n = int(params) if params.isdigit() else 1
            if final == "A":
                row = max(0, row - n)
            elif final == "B":
                row += n
            elif final == "C":
                col += n
            elif final == "D":
                col = max(0, col - n)
            elif final in "JK" and params in ("", "0") and row < len(rows):  # erase to the end
                del rows[row][col:]
                if final == "J":
                    del rows[row + 1 :]
            elif final == "K" and params == "2" and row < len(rows):  # erase the line
                rows[row].clear()
        elif piece == "\r":
            col = 0
        elif piece == "\n":
            row += 1
        elif piece == "\b":
            col = max(0, col - 1)
        elif piece >= " ":  # text (escape sequences and other control characters sort before " ")
            rows.extend([] for _ in range(row + 1 - len(rows)))
            line = rows[row]
            line.extend(" " * (col - len(line)))
            line[col : col + len(piece)] = piece
            col += len(piece)
    return ["".join(line).rstrip() for line in rows]


class Terminal:
    """A pseudo-terminal running ``mcpvisor shell``: type keys, wait for what it shows."""

    def __init__(self, process: anyio.abc.Process, fd: int) -> None:
        self.process = process
        self.fd = fd
        self.output = b""

    def mark(self) -> int:
        return len(self.output)

    async def _read(self) -> bool:
        await anyio.wait_readable(self.fd)
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # the shell left and the terminal closed
            return False
        # Answer the cursor position requests a terminal answers (the editor asks where it is).
        for _ in range(chunk.count(_CURSOR_QUERY)):
            os.write(self.fd, b"\x1b[1;1R")
        self.output += chunk
        return bool(chunk)

    def shows(self, text: str, since: int, before: list[str]) -> bool:
        """Whether ``text`` was shown since ``since``: in the output, or on a line of the screen that
        output changed from ``before``, the screen at ``since`` (see :func:`screen_lines`)."""
        if text in plain(self.output[since:]):
            return True
        now = screen_lines(self.output)
        return any(text in line for i, line in enumerate(now) if i >= len(before) or line != before[i])

    async def expect(self, text: str, since: int = 0) -> str:
        before = screen_lines(self.output[:since])
        with anyio.move_on_after(WAIT_S):
            while not self.shows(text, since, before) and await self._read():
                pass
        assert self.shows(text, since, before), f"{text!r} never shown; the terminal showed:\n{plain(self.output)}"
        return plain(self.output[since:])

    async def answered(self, text: str, since: int, prompt: str = "mcp>") -> str:
        """Wait for ``text``, then for the prompt drawn again after it (the next keys go to the editor)."""
        shown = await self.expect(text, since)

        def after_text() -> str:  # from ``since`` when the text was seen on the screen only
            return shown[shown.index(text) + len(text) :] if text in shown else shown

        with anyio.move_on_after(WAIT_S):
            while prompt not in after_text() and await self._read():
                shown = plain(self.output[since:])
        assert prompt in after_text(), f"no prompt after {text!r}:\n{shown}"
        return shown

    def type(self, keys: str) -> int:
        """Type ``keys``; returns the output mark from before them."""
        mark = self.mark()
        os.write(self.fd, keys.encode())
        return mark

    async def exit_code(self) -> int:
        with anyio.fail_after(WAIT_S):
            while await self._read():
                pass
            return await self.process.wait()


@asynccontextmanager
async def shell_at_a_terminal(
    layout: Layout, *, job_control: bool = False, term: str = "xterm-256color", ready: str = "mcp> "
) -> AsyncIterator[Terminal]:
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    process = await anyio.open_process(
        [
            sys.executable,
            "-c",
            _WITH_JOB_CONTROL if job_control else _WITH_TERMINAL,
            sys.executable,
            "-m",
            "mcpvisor",
            "shell",
            "--workspace",
            str(layout.root),
        ],
        stdin=side,
        stdout=side,
        stderr=side,
        env={**os.environ, **layout.env, "TERM": term, "NO_COLOR": "1"},
    )
    os.close(side)
    terminal = Terminal(process, main)
    try:
        await terminal.expect(ready)
        yield terminal
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()
            os.close(main)


async def test_completion_history_and_output_above_the_prompt_at_a_real_terminal(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    user = {"mcpServers": {"alpha": server("alpha", "--tools", "echo,slow", "--hang-on-call", "slow")}}
    save(layout.paths.user, user)
    async with shell_at_a_terminal(layout) as t:
        await t.expect("Type /help")
        # Tab completes the command, then a tool name, from the live registry.
        since = t.type(f"/ca{TAB}")
        await t.expect("/call", since)
        since = t.type(f" mcp__alpha__ec{TAB}")
        await t.expect("mcp__alpha__echo", since)
        since = t.type(' {"text": "hi"}\r')
        await t.answered("alpha:echo:hi", since)
        since = t.type(f"/tools al{TAB}")  # a server's name after /tools (and /prompts)
        await t.expect("/tools alpha", since)
        since = t.type("\r")
        await t.answered("alpha (2 tools)", since)

        # Output that arrives while a line is half typed goes above the prompt; the line is kept.
        since = t.type("/to")
        save(layout.paths.user, {"mcpServers": {**user["mcpServers"], "beta": server("beta")}})
        await t.expect("beta", since)
        since = t.type("ols\r")
        listed = await t.answered("mcp__beta__echo", since)
        assert "Commands start with" not in listed  # '/to' + 'ols' ran as /tools

        # A project server added mid-session opens the dialog; the prompt turns into the question's.
        since = t.mark()
        save(layout.paths.project, {"mcpServers": {"proj": server("proj")}})
        await t.expect("[a/A/r/s]> ", since)
        since = t.type("a\r")
        await t.answered("approved proj", since)

        # Ctrl-C cancels a running call (the terminal is cooked again while a command runs).
        since = t.type("/call mcp__alpha__slow\r")
        await t.expect("still waiting for mcp__alpha__slow", since)
        since = t.type(CTRL_C)
        await t.answered("cancelled", since)

        # Up recalls the last slash command (the dialog's answer 'a' is not kept).
        since = t.type(UP)
        await t.expect("/call mcp__alpha__slow", since)
        t.type("\x15")  # Ctrl-U empties the line; Up goes on from where the history was
        since = t.type(f"{UP}\r")
        await t.answered("mcp__proj__echo", since)  # /tools again
        # The aliases complete too.
        since = t.type(f"/ex{TAB}")
        await t.expect("/exit", since)
        t.type("\x15")
        t.type(CTRL_D)
        assert await t.exit_code() == 0

    history = Path(layout.env["MCPVISOR_HOME"]) / HISTORY_FILENAME
    assert stat.S_IMODE(os.stat(history).st_mode) == 0o600
    echo = '/call mcp__alpha__echo {"text": "hi"}'
    assert kept_lines(history) == [echo, "/tools alpha", "/tools", "/call mcp__alpha__slow", "/tools"]

    # The next session recalls it: Ctrl-R finds the first call, Enter runs it; Ctrl-C twice leaves.
    async with shell_at_a_terminal(layout) as t:
        since = t.type(f"{CTRL_R}echo")
        await t.expect('/call mcp__alpha__echo {"text": "hi"}', since)
        since = t.type("\r")
        await t.answered("alpha:echo:hi", since)
        since = t.type(CTRL_C)
        await t.expect("press Ctrl-C again to leave", since)
        t.type(CTRL_C)
        assert await t.exit_code() == 130


async def test_leaving_with_ctrl_c_twice_draws_no_prompt_whose_terminal_answer_is_left_behind(tmp_path: Path) -> None:
    """The second Ctrl-C drew a fresh prompt before the session ended, and with it asked the terminal where its cursor
    was: the answer came once the editor had let go of the terminal, and was echoed (``^[[12;1R``) and left as typed
    input for the shell the user went back to."""
    layout = make_layout(tmp_path)
    async with shell_at_a_terminal(layout) as t:
        await t.expect("Type /help")
        since = t.type(CTRL_C)
        await t.answered("press Ctrl-C again to leave", since)
        since = t.type(CTRL_C)
        assert await t.exit_code() == 130
        assert _CURSOR_QUERY not in t.output[since:]
        assert "^[" not in plain(t.output[since:])


async def test_a_history_that_cannot_be_read_is_no_error_and_the_session_goes_on(tmp_path: Path) -> None:
    """A history file the session cannot read (here a folder; as well one left by another user) printed prompt_toolkit's
    "Unhandled exception in event loop" traceback at every prompt and "Press ENTER to continue...", and held Ctrl-D."""
    layout = make_layout(tmp_path)
    (Path(layout.env["MCPVISOR_HOME"]) / HISTORY_FILENAME).mkdir(parents=True)
    async with shell_at_a_terminal(layout) as t:
        since = t.type("/help\r")
        await t.answered("leave the shell", since)
        since = t.type(f"{UP}")
        await t.expect("/help", since)
        t.type("\x15")
        t.type(CTRL_D)
        assert await t.exit_code() == 0
    assert "Traceback" not in plain(t.output)
    assert "Press ENTER" not in plain(t.output)


async def test_lines_typed_ahead_run_each_below_the_output_of_the_one_before(tmp_path: Path) -> None:
    """Lines typed ahead (each with its Enter, faster than the command before runs) are read by the next prompts at
    once: the first command's output, held back to be drawn above a prompt, came out below the second line, as
    though that line had printed it."""
    layout = make_layout(tmp_path)
    user = {"mcpServers": {"alpha": server("alpha")}}
    save(layout.paths.user, user)
    async with shell_at_a_terminal(layout) as t:
        await t.expect("Type /help")
        since = t.mark()
        save(layout.paths.user, {"mcpServers": {**user["mcpServers"], "beta": server("beta")}})
        await t.expect("added beta", since)  # news drawn above the prompt
        since = t.type("/help\r/tools\r")
        await t.answered("mcp__beta__echo", since)
        lines = screen_lines(t.output)
        help_line = next(i for i, line in enumerate(lines) if line.startswith("mcp> /help"))
        listed = next(i for i, line in enumerate(lines) if "leave the shell" in line)
        tools_line = next(i for i, line in enumerate(lines) if line.startswith("mcp> /tools"))
        assert help_line < listed < tools_line, "\n".join(lines)
        t.type(CTRL_D)
        assert await t.exit_code() == 0


async def test_ctrl_z_stops_the_shell_until_it_is_resumed(tmp_path: Path) -> None:
    """Ctrl-Z put an invisible control character in the line (the next command read as '^Z/tools alpha', "Commands
    start with '/'"): it stops the shell as it stops any program at a terminal, and ``fg`` resumes it."""
    layout = make_layout(tmp_path)
    save(layout.paths.user, {"mcpServers": {"alpha": server("alpha")}})
    async with shell_at_a_terminal(layout, job_control=True) as t:
        await t.expect("Type /help")
        await t.expect("[stopped] the job shell resumes it", t.type(CTRL_Z))
        since = t.type("/tools alpha\r")
        shown = await t.answered("mcp__alpha__echo", since)
        assert "Commands start with" not in shown
        t.type(CTRL_D)
        assert await t.exit_code() == 0


async def test_lines_pasted_together_run_one_by_one_each_at_its_own_prompt(tmp_path: Path) -> None:
    """A paste of several commands (the terminal brackets it, and the editor keeps its line breaks) was one line: Enter
    ran ``/help\n/tools`` as the unknown command ``/help\n/tools``, and kept it so in the history."""
    layout = make_layout(tmp_path)
    save(layout.paths.user, {"mcpServers": {"alpha": server("alpha")}})
    async with shell_at_a_terminal(layout) as t:
        await t.expect("Type /help")
        t.type(f"{PASTE_START}/help\r\r/tools alpha\r{PASTE_END}")
        since = t.type("\r")
        shown = await t.answered("mcp__alpha__echo", since)
        assert "unknown command" not in shown
        lines = screen_lines(t.output)
        help_line = lines.index("mcp> /help")
        listed = next(i for i, line in enumerate(lines) if "leave the shell" in line)
        tools_line = lines.index("mcp> /tools alpha")
        assert help_line < listed < tools_line, "\n".join(lines)
        t.type(CTRL_D)
        assert await t.exit_code() == 0
    assert kept_lines(Path(layout.env["MCPVISOR_HOME"]) / HISTORY_FILENAME) == ["/help", "/tools alpha"]


async def test_an_answer_typed_before_the_question_changed_approves_nothing(tmp_path: Path) -> None:
    """'a' typed while the dialog asked about one configuration of a server, Enter pressed once it asked about another
    (the project file changed meanwhile, the new details drawn above the line): the server was approved with a
    configuration the user had not seen when answering."""
    layout = make_layout(tmp_path)
    async with shell_at_a_terminal(layout) as t:
        await t.expect("Type /help")
        since = t.mark()
        save(layout.paths.project, {"mcpServers": {"proj": server("proj")}})
        await t.expect("[a/A/r/s]> ", since)
        t.type("a")
        since = t.mark()
        save(layout.paths.project, {"mcpServers": {"proj": server("proj", "--tools", "other")}})
        await t.answered('"--tools", "other"', since, prompt="[a/A/r/s]> a")
        since = t.type("\r")
        shown = await t.answered("not answered: the question changed", since, prompt="[a/A/r/s]>")
        assert "approved proj" not in shown
        since = t.type("/mcp\r")
        await t.answered("proj · ? needs approval", since, prompt="[a/A/r/s]>")
        since = t.type("a\r")  # the question as it is now, answered
        await t.answered("approved proj", since)
        await t.expect("added proj", since)  # (connected: /tools typed before would list none yet)
        since = t.type("/tools\r")
        await t.answered("mcp__proj__other", since)
        t.type(CTRL_D)
        assert await t.exit_code() == 0


async def test_commands_read_from_a_pipe_draw_no_prompt_at_the_terminal_showing_their_output(tmp_path: Path) -> None:
    """``mcpvisor shell < commands.txt`` at a terminal: no one types, yet a prompt was drawn before each command, and
    the command's output (a line read from a pipe is not echoed) came out after it on its line, as though typed."""
    layout = make_layout(tmp_path)
    save(layout.paths.user, {"mcpServers": {"alpha": server("alpha")}})
    main, side = pty.openpty()
    process = await anyio.open_process(
        [sys.executable, "-m", "mcpvisor", "shell", "--workspace", str(layout.root)],
        stdin=subprocess.PIPE,
        stdout=side,
        stderr=side,
        env={**os.environ, **layout.env, "TERM": "xterm-256color", "NO_COLOR": "1"},
    )
    os.close(side)
    try:
        assert process.stdin is not None
        t = Terminal(process, main)
        # Once alpha is up (its row, or the notice after a start slower than the shell waits for on a busy machine).
        await t.expect("1 tool")
        await process.stdin.send(b'/call mcp__alpha__echo {"text": "hi"}\n/tools\n')
        await process.stdin.aclose()
        assert await t.exit_code() == 0
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()
            os.close(main)
    lines = screen_lines(t.output)
    assert "alpha:echo:hi" in lines, "\n".join(lines)
    assert "alpha (1 tool)" in lines, "\n".join(lines)
    assert not any(line.startswith("mcp>") for line in lines), "\n".join(lines)


def kept_lines(history: Path) -> list[str]:
    return [line[1:] for line in history.read_text().splitlines() if line.startswith("+")]


def completions(completer: ShellCompleter, text: str) -> list[str]:
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]


def test_completion_offers_commands_then_the_first_argument_only() -> None:
    offered = {
        "": {"call": "call a tool", "prompt": "get a prompt", "brief": "MCP prompt"},
        "call": {"mcp__a__echo": "", "mcp__a__env": "", "mcp__b__echo": ""},
    }
    completer = ShellCompleter(lambda command: offered.get(command, {}))
    assert completions(completer, "/") == ["/brief", "/call", "/prompt"]
    assert completions(completer, "/c") == ["/call"]
    assert completions(completer, "/call mcp__a__e") == ["mcp__a__echo", "mcp__a__env"]
    assert completions(completer, "/call ") == ["mcp__a__echo", "mcp__a__env", "mcp__b__echo"]
    assert completions(completer, '/call mcp__a__echo {"te') == []  # JSON is the user's to write
    assert completions(completer, "/quit ") == []
    assert completions(completer, "a") == []  # an answer to the dialog


def test_a_name_completes_as_the_command_reads_it_in_quotes_when_it_has_a_space() -> None:
    """A repository chooses its servers' names: Tab completed ``/approve my srv``, which the command refused (usage:
    /approve NAME); it completes ``/approve 'my srv'``, as the hints write it, from a start typed with a quote or
    without."""
    offered = {"approve": {"my srv": "pending", "plain": "pending"}, "tools": {"my srv": "stdio"}}
    completer = ShellCompleter(lambda command: offered.get(command, {}))
    assert completions(completer, "/approve my") == ["'my srv'"]
    assert completions(completer, "/approve 'my") == ["'my srv'"]
    assert completions(completer, "/approve 'my s") == ["'my srv'"]
    assert completions(completer, "/approve ") == ["'my srv'", "plain"]
    assert completions(completer, "/tools m") == ["'my srv'"]
    assert completions(completer, "/approve 'my srv' x") == []


def test_the_history_file_is_written_private_and_keeps_commands_only(tmp_path: Path) -> None:
    from mcpvisor.shell.line_editor import CommandHistory

    path = tmp_path / "home" / HISTORY_FILENAME
    history = CommandHistory(path)
    for line in ("/tools", "a", "hello", " /mcp"):
        history.append_string(line)
    assert history.get_strings() == ["/tools", " /mcp"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert list(reversed(list(CommandHistory(path).load_history_strings()))) == ["/tools", " /mcp"]
