"""Answers to the approval dialog at a real pseudo-terminal, typed in ways the line editor does not see begin: at a
terminal that draws no line editor (``TERM=dumb``: an editor's shell buffer, a bare console), and typed ahead while a
command runs. Either decides only what was on screen when the answer was begun."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.layout import make_layout
from tests.shell.test_line_editor import CTRL_D, shell_at_a_terminal
from tests.shell.test_shell import save, server


async def test_an_answer_typed_before_the_question_changed_approves_nothing_without_the_line_editor(
    tmp_path: Path,
) -> None:
    """'a' typed while the dialog asked about p2, Enter pressed once p2's configuration had changed (its new details
    drawn above the line): p2 was approved with a configuration the user had not seen when answering."""
    layout = make_layout(tmp_path)
    async with shell_at_a_terminal(layout, term="dumb") as t:
        await t.expect("Type /help")
        since = t.mark()
        save(layout.paths.project, {"mcpServers": {"proj": server("proj"), "p2": server("p2")}})
        await t.expect("Approve proj?", since)
        since = t.type("a")  # answered on sight of the question: it counts (no question was open at the prompt)
        t.type("\r")
        await t.answered("approved proj", since, prompt="[a/A/r/s]>")
        await t.expect("Approve p2?", since)
        since = t.type("/mcp\r")
        await t.answered("p2 · ? needs approval", since, prompt="[a/A/r/s]>")
        t.type("a")  # begun while the dialog asks about p2 ...
        since = t.mark()
        save(layout.paths.project, {"mcpServers": {"proj": server("proj"), "p2": server("p2", "--tools", "other")}})
        await t.answered("Approve p2?", since, prompt="[a/A/r/s]>")  # (its new details drawn above)
        since = t.type("\r")  # ... and sent once it asks about p2 as it is now
        shown = await t.answered("not answered: the question changed", since, prompt="[a/A/r/s]>")
        assert "approved p2" not in shown
        since = t.type("a\r")  # the question as it is now, answered
        await t.answered("approved p2", since)
        await t.expect("added p2", since)
        since = t.type("/tools p2\r")
        await t.answered("mcp__p2__other", since)
        t.type(CTRL_D)
        assert await t.exit_code() == 0


@pytest.mark.parametrize("term", ["xterm-256color", "dumb"])
async def test_an_answer_typed_ahead_while_a_command_ran_approves_nothing_the_question_changed_to_meanwhile(
    tmp_path: Path, term: str
) -> None:
    """'a' and Enter typed while a command ran at the dialog's prompt, then proj's configuration changed (its new
    details printed): the next prompt took the line as begun then, and approved the configuration it had not seen."""
    layout = make_layout(tmp_path)
    save(layout.paths.user, {"mcpServers": {"alpha": server("alpha", "--tools", "slow", "--hang-on-call", "slow")}})
    save(layout.paths.project, {"mcpServers": {"proj": server("proj")}})
    async with shell_at_a_terminal(layout, ready="[a/A/r/s]> ", term=term) as t:
        since = t.type("/call mcp__alpha__slow\r")
        await t.expect("still waiting for mcp__alpha__slow", since)
        await t.expect("a", t.type("a\r"))  # typed ahead (the terminal echoes it) ...
        since = t.mark()
        save(layout.paths.project, {"mcpServers": {"proj": server("proj", "--tools", "other")}})
        await t.expect("Approve proj?", since)  # ... before the question changed
        os.kill(t.process.pid, signal.SIGINT)  # the call cancelled, the line typed ahead kept (a typed Ctrl-C drops it)
        shown = await t.answered("not answered: the question changed", since, prompt="[a/A/r/s]>")
        assert "approved proj" not in shown
        since = t.type("a\r")  # the question as it is now, answered
        await t.answered("approved proj", since)
        await t.expect("added proj", since)
        since = t.type("/tools proj\r")
        await t.answered("mcp__proj__other", since)
        t.type(CTRL_D)
        assert await t.exit_code() == 0
