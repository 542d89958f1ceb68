"""The shell's terminal: output that keeps the prompt at the bottom, and lines read off the loop.

:class:`Screen` prints everything the shell shows. On a real terminal, output that arrives while
the prompt is displayed (a server was added, an approval is needed) is printed above it and the
prompt is drawn again; elsewhere (pipes, recording consoles in tests) the prompt is not drawn.

:func:`stdin_lines` reads standard input in a daemon thread (blocking terminal input never runs on
the event loop) straight from the file descriptor: no Python-level buffer lock is held, so a
thread still blocked in ``read`` when the shell exits never stalls interpreter shutdown.
"""

from __future__ import annotations

import codecs
import math
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import anyio
from anyio.from_thread import BlockingPortal
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from rich.console import Console

__all__ = ["READ_CHUNK_BYTES", "InputLines", "Screen", "stdin_lines", "wants_line_editor"]

READ_CHUNK_BYTES = 4096
_CLEAR_LINE = "\r\x1b[2K"


def stdin_is_terminal() -> bool:
    """Whether standard input is a terminal (someone types), not a pipe or a file."""
    stdin = sys.stdin
    try:
        return stdin is not None and stdin.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def wants_line_editor(stdout_is_terminal: bool) -> bool:
    """Whether lines are read with the line editor (:mod:`mcpvisor.shell.line_editor`): standard input
    and output are both a terminal that can draw one (not ``TERM=dumb``)."""
    return stdout_is_terminal and stdin_is_terminal() and os.environ.get("TERM") != "dumb"


class Screen:
    """Where the shell prints. ``above()`` wraps output that may interrupt a displayed prompt."""

    def __init__(self, console: Console, prompt: Callable[[], str] = lambda: "> ") -> None:
        self.console = console
        self._prompt_text = prompt
        self._prompt: str | None = None
        self.prompt_not_drawn = False
        """No prompt is drawn here: the line editor draws its own and keeps output above it
        (:mod:`mcpvisor.shell.line_editor`), or no one types (lines read from a pipe or a file)."""

    @property
    def draws_prompt(self) -> bool:
        return self.console.is_terminal and not self.prompt_not_drawn

    def prompt_text(self) -> str:
        """The prompt as it reads now (the approval dialog's question changes it)."""
        return self._prompt_text()

    def show_prompt(self) -> None:
        """Draw the input prompt (terminals only); it stays displayed until a line is read."""
        if not self.draws_prompt:
            return
        self._prompt = self._prompt_text()
        self._write(self._prompt)

    def prompt_answered(self) -> None:
        """The user pressed Enter: the cursor is on a fresh line and no prompt is displayed."""
        self._prompt = None

    def interrupted(self) -> None:
        """Ctrl-C came as a signal (the terminal is not in the line editor's hands): the terminal echoed it (``^C``)
        where the cursor was, so what is printed next starts on the next line, not after the echo (a displayed prompt
        is redrawn by what is printed above it)."""
        if self._prompt is None and self.console.is_terminal:
            self._write("\n")

    def leave(self) -> None:
        """The session ends: move off a displayed prompt so what follows starts on a fresh line."""
        if self._prompt is not None:
            self._prompt = None
            self._write("\n")

    @contextmanager
    def above(self) -> Iterator[None]:
        """Output printed inside this block goes above a displayed prompt, which is then redrawn
        (as it reads now: the output may have opened or closed the approval dialog); on a dumb terminal
        it starts on the next line."""
        if self._prompt is None:
            yield
            return
        with self.console.capture() as capture:
            yield
        text = capture.get()
        if text:
            self._prompt = self._prompt_text()
            # A terminal that moves no cursor (TERM=dumb) cannot clear the line: what was typed on it stays, above.
            start = "\n" if self.console.is_dumb_terminal else _CLEAR_LINE
            self._write(start + text + self._prompt)

    def _write(self, text: str) -> None:
        self.console.file.write(text)
        self.console.file.flush()


def _read_lines(fd: int, deliver: Callable[[str | None], bool]) -> None:
    """Thread body: read ``fd`` until end of file, delivering each line, then ``None``."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    while True:
        try:
            chunk = os.read(fd, READ_CHUNK_BYTES)
        except OSError:
            chunk = b""  # the terminal hung up or the descriptor was closed: treat as end of file
        pending += decoder.decode(chunk, final=not chunk)
        *lines, pending = pending.split("\n")
        for line in lines:
            if not deliver(line.removesuffix("\r")):
                return
        if not chunk:
            if pending:
                deliver(pending)
            deliver(None)
            return


class InputLines(AsyncIterator[str]):
    """Lines read off standard input, in order; the iteration ends at end of file."""

    def __init__(self, receive: MemoryObjectReceiveStream[str | None]) -> None:
        self._receive = receive
        self._ended = False

    async def __anext__(self) -> str:
        line = None if self._ended else await self._receive.receive()
        if line is None:
            self._ended = True
            raise StopAsyncIteration
        return line

    def waiting(self) -> bool:
        """Whether a line was read already and waits to be taken (at a terminal: typed ahead, before its prompt)."""
        return self._receive.statistics().current_buffer_used > 0


@asynccontextmanager
async def stdin_lines(fd: int | None = None) -> AsyncIterator[InputLines]:
    """Lines of standard input (or ``fd``) without their line ending; the iterator ends at end of file."""
    if fd is None:
        fd = sys.stdin.fileno() if sys.stdin is not None else -1
    send, receive = anyio.create_memory_object_stream[str | None](math.inf)
    async with BlockingPortal() as portal:
        if fd < 0:
            send.send_nowait(None)  # no standard input at all: end of file at once
        else:
            deliver = _deliverer(portal, send)
            threading.Thread(target=_read_lines, args=(fd, deliver), name="mcpvisor-shell-input", daemon=True).start()
        try:
            yield InputLines(receive)
        finally:
            receive.close()
            send.close()


def _deliverer(portal: BlockingPortal, send: MemoryObjectSendStream[str | None]) -> Callable[[str | None], bool]:
    def deliver(item: str | None) -> bool:
        """Hand one item to the event loop; False once the shell stopped listening."""
        try:
            portal.call(send.send_nowait, item)
        except (RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        return True

    return deliver
