"""Lines typed at a terminal, read with prompt_toolkit: line editing, history, completion, and output
printed above the prompt.

Used when standard input and output are both a terminal (:func:`mcpvisor.shell.terminal.wants_line_editor`);
pipes and files are read line by line as they are (:func:`mcpvisor.shell.terminal.stdin_lines`), and
never load prompt_toolkit. What the editor
gives: the arrow keys, Home/End and the usual Emacs keys; Up/Down and Ctrl-R through the history of
slash commands, kept across sessions in ``$MCPVISOR_HOME/shell-history`` (0600: call arguments may be
private); Tab completion (:mod:`mcpvisor.shell.completion`); and everything the session prints while
the prompt is displayed (a server was added, an approval is needed) goes above it, the line being
typed kept as it was.

Ctrl-C at the prompt is a key here (the terminal is in raw mode while a line is edited), passed to
``on_interrupt``; while a command runs the terminal is cooked again and Ctrl-C is the signal the
session already handles. Ctrl-D on an empty line is the end of input.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio.lowlevel
from prompt_toolkit import PromptSession
from prompt_toolkit.filters import is_searching
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.patch_stdout import patch_stdout
from prompt_toolkit.search import accept_search

from mcpvisor.shell.completion import ShellCompleter

__all__ = ["HISTORY_FILENAME", "CommandHistory", "edited_lines"]

logger = logging.getLogger(__name__)

HISTORY_FILENAME = "shell-history"


class CommandHistory(FileHistory):
    """The file history, keeping slash commands only (answers to the approval dialog are not worth
    recalling), in a file only its owner reads; a history that cannot be read or written is not an
    error (the session recalls its own lines)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._path = path
        self._created = False
        self._warned = False

    def append_string(self, string: str) -> None:
        if string.lstrip().startswith("/"):
            super().append_string(string)

    def load_history_strings(self) -> Iterable[str]:
        try:
            return super().load_history_strings()
        except OSError as exc:
            self._warn("read from", exc)
            return ()

    def store_string(self, string: str) -> None:
        try:
            if not self._created:  # the first line of a session makes the file, private, if it is new
                self._path.parent.mkdir(parents=True, exist_ok=True)
                os.close(os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
                self._created = True
            super().store_string(string)
        except OSError as exc:
            self._warn("saved to", exc)

    def _warn(self, what: str, exc: OSError) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("shell history not %s %s: %s", what, self._path, exc.strerror or exc)


def _history(path: Path | None) -> History:
    return CommandHistory(path) if path is not None else InMemoryHistory()


def _key_bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("enter", filter=is_searching)
    def _run_found(event: KeyPressEvent) -> None:
        """Enter in a Ctrl-R search runs the line found, as readline does (not only ends the search)."""
        accept_search()
        event.app.current_buffer.validate_and_handle()

    return bindings


@asynccontextmanager
async def edited_lines(
    *,
    message: Callable[[], str],
    candidates: Callable[[str], Mapping[str, str]],
    history: Path | None,
    on_interrupt: Callable[[], None],
) -> AsyncIterator[AsyncIterator[str]]:
    """Lines read with the line editor; ``message`` is the prompt as it reads now (asked again whenever
    the prompt is drawn), ``candidates`` feeds completion (see :class:`ShellCompleter`)."""
    session: PromptSession[str] = PromptSession(
        history=_history(history),
        completer=ShellCompleter(candidates),
        complete_while_typing=False,
        enable_history_search=False,  # Up recalls; Ctrl-R searches
        key_bindings=_key_bindings(),
    )

    async def lines() -> AsyncGenerator[str, None]:
        while True:
            try:
                # The session owns SIGINT (cli/main.py listens for it): prompt_toolkit must neither
                # install nor, on leaving, remove a handler of its own.
                line = await session.prompt_async(message, handle_sigint=False)
            except KeyboardInterrupt:
                on_interrupt()
                # A Ctrl-C that ends the session ends it here: a prompt drawn again would ask the terminal where
                # its cursor is, and the answer would come after the session let go of the terminal.
                await anyio.lowlevel.checkpoint_if_cancelled()
                continue
            except EOFError:
                return
            yield line

    with patch_stdout(raw=True):
        iterator = lines()
        try:
            yield iterator
        finally:
            await iterator.aclose()
