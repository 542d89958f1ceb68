"""Ctrl-C at a real pseudo-terminal while no line is edited (a command runs, the servers start): the terminal is
cooked then, so Ctrl-C is the signal, and the terminal itself echoes it where the cursor is."""

from __future__ import annotations

from pathlib import Path

from tests.layout import make_layout
from tests.shell.test_line_editor import CTRL_C, CTRL_D, plain, screen_lines, shell_at_a_terminal
from tests.shell.test_shell import save, server


async def test_what_follows_a_ctrl_c_the_terminal_echoed_starts_on_a_line_of_its_own(tmp_path: Path) -> None:
    """The terminal's ``^C`` and what the shell said next ran together on one line (``^Ccancelled``), and a session
    left while its servers started gave the user's shell its prompt after the ``^C``, on the same line."""
    layout = make_layout(tmp_path)
    save(layout.paths.user, {"mcpServers": {"alpha": server("alpha", "--tools", "slow", "--hang-on-call", "slow")}})
    async with shell_at_a_terminal(layout) as t:
        since = t.type("/call mcp__alpha__slow\r")
        await t.expect("still waiting for mcp__alpha__slow", since)
        since = t.type(CTRL_C)
        await t.answered("cancelled", since)
        assert "cancelled" in screen_lines(t.output), plain(t.output)
        t.type(CTRL_D)
        assert await t.exit_code() == 0

    save(layout.paths.user, {"mcpServers": {"hang": server("hang", "--hang-on-initialize")}})
    async with shell_at_a_terminal(layout, ready="(Ctrl-C leaves)") as t:
        since = t.type(CTRL_C)
        assert await t.exit_code() == 130
        assert plain(t.output[since:]).endswith("\n"), repr(plain(t.output[since:]))
