"""Consoles for people and for pipes: output to a terminal wraps to its width (or ``COLUMNS``); output
to a pipe or a file is not wrapped at all, so paths, commands and diff lines stay whole for ``grep``.

What these consoles print comes in part from others: a repository's settings, a server's tool
descriptions and results. A terminal takes an escape sequence in any of it for a command (clear the
line, move the cursor, set the title), so an approval could show one command while another runs.
Every console here prints control characters as visible symbols (``ESC`` as ``␛``), and bidirectional
overrides and Unicode's line and paragraph separators as ``�``; its own styling is unaffected.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console, ConsoleRenderable, RenderHook
from rich.padding import Padding
from rich.text import Text

__all__ = ["UNWRAPPED_WIDTH", "new_console", "visible"]

UNWRAPPED_WIDTH = 100_000
"""The width given to output that is not a terminal: wide enough that no line is wrapped."""


def new_console(*, stderr: bool = False, on_closed: Callable[[], None] | None = None, **options: Any) -> Console:
    """A rich ``Console`` on stdout (or stderr) that wraps only for a terminal or when ``COLUMNS`` is set.
    ``on_closed`` is told when its output is gone (a pipe whose reader left: ``| head``); what is printed then goes
    nowhere. Without it, rich's way: the process exits with code 1."""
    stream = sys.stderr if stderr else sys.stdout
    if "width" not in options and not os.environ.get("COLUMNS") and not _is_terminal(stream):
        options["width"] = UNWRAPPED_WIDTH
    console = _Console(stderr=stderr, **options)
    console.on_closed = on_closed
    console.push_render_hook(_ShowControls(console))
    return console


class _Console(Console):
    on_closed: Callable[[], None] | None = None

    def on_broken_pipe(self) -> None:
        if self.on_closed is None:
            super().on_broken_pipe()
            return
        # Rich's SystemExit, raised in whichever task printed, cannot end an event loop's session cleanly.
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)  # what Python flushes on leaving goes nowhere too
        try:
            os.dup2(devnull, self.file.fileno())
        finally:
            os.close(devnull)
        self.on_closed()


_CONTROLS = {code: chr(0x2400 + code) for code in range(0x20) if code not in (0x09, 0x0A)}  # ␀ ... ␟
_CONTROLS |= {0x7F: "\u2421"} | dict.fromkeys(range(0x80, 0xA0), "\ufffd")  # DEL; C1, whose 0x9B opens a sequence
_CONTROLS |= dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)], "\ufffd")  # bidi overrides, isolates
_CONTROLS |= dict.fromkeys([0x2028, 0x2029], "\ufffd")  # line and paragraph separators: a line break to many readers


def visible(text: str) -> str:
    """``text`` with every control character but tab and newline as a visible symbol of the same length."""
    return text.translate(_CONTROLS)


class _ShowControls(RenderHook):
    """Shows the control characters of everything printed (:func:`visible`): text, and text indented (a
    string in it is read as the console reads one: markup)."""

    def __init__(self, console: Console) -> None:
        self._console = console

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [self._shown(renderable) for renderable in renderables]

    def _shown(self, renderable: ConsoleRenderable | str) -> ConsoleRenderable:
        if isinstance(renderable, str):
            renderable = self._console.render_str(renderable)
        if isinstance(renderable, Padding) and isinstance(renderable.renderable, ConsoleRenderable | str):
            edges = (renderable.top, renderable.right, renderable.bottom, renderable.left)
            inner = self._shown(renderable.renderable)
            return Padding(inner, edges, style=renderable.style, expand=renderable.expand)
        if isinstance(renderable, Text) and (shown := visible(renderable.plain)) != renderable.plain:
            copy = renderable.copy()
            copy.plain = shown  # one symbol per character: the styles' spans stay where they were
            return copy
        return renderable


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False
