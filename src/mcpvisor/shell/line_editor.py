"""Lines typed at a terminal, read with prompt_toolkit: line editing, history, completion, and output
printed above the prompt.

Used when standard input and output are both a terminal (:func:`mcpvisor.shell.terminal.wants_line_editor`);
pipes and files are read line by line as they are (:func:`mcpvisor.shell.terminal.stdin_lines`), and
never load prompt_toolkit. What the editor
gives: the arrow keys, Home/End and the usual Emacs keys; Up/Down and Ctrl-R through the history of
slash commands, kept across sessions in ``$MCPVISOR_HOME/shell-history`` (0600: call arguments may be
private); Tab completion (:mod:`mcpvisor.shell.completion`); a paste of several lines shown as pasted, and on
Enter run line by line; and everything the session prints while
the prompt is displayed (a server was added, an approval is needed) goes above it, the line being
typed kept as it was.

Ctrl-C at the prompt is a key here (the terminal is in raw mode while a line is edited), passed to
``on_interrupt``; while a command runs the terminal is cooked again and Ctrl-C is the signal the
session already handles. Ctrl-D on an empty line is the end of input. Ctrl-Z stops the shell until ``fg``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio.lowlevel
from prompt_toolkit import PromptSession
from prompt_toolkit.application import get_app, get_app_session, run_in_terminal
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.filters import Condition, is_searching
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.input.typeahead import get_typeahead, store_typeahead
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.key_binding.key_processor import KeyPress
from prompt_toolkit.keys import Keys
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

    @Condition
    def several_lines() -> bool:
        return "\n" in get_app().current_buffer.text

    @bindings.add("enter", filter=~is_searching & several_lines)
    def _run_line_by_line(event: KeyPressEvent) -> None:
        """Enter on several lines (pasted: the editor keeps a paste's line breaks) runs each line in turn, at a prompt
        of its own, as though typed one after the other; blank lines are left out. The first runs now; the rest is
        pasted again, with its Enter, ahead of whatever was typed after it, for the next prompt to take."""
        buffer = event.app.current_buffer
        first, *rest = [line for line in buffer.text.split("\n") if line.strip()] or [""]
        buffer.text = first
        if rest:
            again = [KeyPress(Keys.BracketedPaste, "\n".join(rest)), KeyPress(Keys.ControlM, "\r")]
            event.app.key_processor.feed_multiple(again, first=True)
        buffer.validate_and_handle()

    return bindings


@asynccontextmanager
async def edited_lines(
    *,
    message: Callable[[], str],
    candidates: Callable[[str], Mapping[str, str]],
    history: Path | None,
    on_interrupt: Callable[[], None],
    on_typing: Callable[[bool], None] = lambda ahead: None,
) -> AsyncIterator[AsyncIterator[str]]:
    """Lines read with the line editor; ``message`` is the prompt as it reads now (asked again whenever
    the prompt is drawn), ``candidates`` feeds completion (see :class:`ShellCompleter`), ``on_typing`` is
    called when an empty line gets its first text (typed, recalled or pasted), with True when the line was
    typed ahead: it waits already as its prompt comes, typed while the line before ran."""
    session: PromptSession[str] = PromptSession(
        history=_history(history),
        completer=ShellCompleter(candidates),
        complete_while_typing=False,
        enable_history_search=False,  # Up recalls; Ctrl-R searches
        enable_suspend=True,  # Ctrl-Z stops the shell (its servers run on, in sessions of their own) until `fg`
        key_bindings=_key_bindings(),
    )
    typed = False

    def text_changed(buffer: Buffer) -> None:
        nonlocal typed
        if buffer.text and not typed:
            on_typing(False)
        typed = bool(buffer.text)

    session.default_buffer.on_text_changed += text_changed

    async def lines() -> AsyncGenerator[str, None]:
        nonlocal typed
        while True:
            typed = False  # each prompt starts on an empty line
            if _typed_ahead(session.input):
                typed = True
                on_typing(True)
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

    with _output_above_the_prompt():
        iterator = lines()
        try:
            yield iterator
        finally:
            await iterator.aclose()


def _typed_ahead(terminal: Input) -> bool:
    """Whether keys typed before the next prompt wait for it: read by the prompt before (typed as it ended), or a
    line typed while a command ran (the terminal is not in raw mode then: a line counts once its Enter is typed)."""
    keys = get_typeahead(terminal)
    store_typeahead(terminal, keys)  # (only looked at: the prompt takes them)
    try:
        return bool(keys) or bool(select.select([sys.stdin.fileno()], [], [], 0)[0])
    except (OSError, ValueError):  # no standard input to look at
        return bool(keys)


@contextmanager
def _output_above_the_prompt() -> Iterator[None]:
    """Standard output and error as :class:`_AboveThePrompt` while lines are edited."""
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _AboveThePrompt(stdout), _AboveThePrompt(stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr


class _AboveThePrompt:
    """A standard stream while lines are edited: what is written while a line is being edited is drawn above its
    prompt, the line kept as it was; what is written between two lines (a command's output) is written at once, so it
    is on the terminal before the next prompt takes a line typed ahead. (prompt_toolkit's ``patch_stdout`` hands all
    of it to a thread that writes it when it can: a command's output came out below the next line when that line
    had been typed ahead.)"""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._session = get_app_session()
        self._held: list[str] = []
        """Written while a line is edited, and not yet drawn: what comes meanwhile is drawn with it, in one go."""

    def write(self, text: str) -> int:
        app = self._session.app
        if app is None or not app.is_running:
            self._held.append(text)
            self._write_held()  # after what was held, if any: in order
        elif not _runs_on(app.loop):  # another thread: written from the prompt's own loop
            if app.loop is not None:
                app.loop.call_soon_threadsafe(self.write, text)
        else:
            if not self._held:
                run_in_terminal(self._write_held)
            self._held.append(text)
        return len(text)

    def _write_held(self) -> None:
        text, self._held = "".join(self._held), []
        if text:
            self._stream.write(text)
            self._stream.flush()

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding...: the stream's
        return getattr(self._stream, name)


def _runs_on(loop: asyncio.AbstractEventLoop | None) -> bool:
    try:
        return loop is not None and asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs in this thread
        return False
