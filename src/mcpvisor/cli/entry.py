"""The ``mcpvisor`` command's entry point (its console script and ``python -m mcpvisor``), kept apart from the
command's modules so that a Ctrl-C while they load is answered as one later is."""

from __future__ import annotations

import codecs
import io
import os
import sys
from typing import Any

__all__ = ["main"]


def _show_what_cannot_be_encoded() -> None:
    """Standard output and error in an encoding other than UTF-8 (a terminal under a Latin-1 locale, ``LANG=C``
    with Python's UTF-8 mode off) write ``?`` for a character they have no byte for: the views print symbols
    (…, ✓, ●) and a server's text, and one of them must not end the command with a traceback."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and codecs.lookup(stream.encoding).name != "utf-8":
            stream.reconfigure(errors="replace")


def _open_closed_standard_streams() -> None:
    """A standard stream closed as the command starts (``2>&-``, a launcher that closes what it does not pass on) is
    opened on /dev/null: the next file opened took its number, and what was meant for it went there (under ``serve``
    the event loop's epoll took fd 2, the stdio gateway pointed fd 1 at it, and it and its servers died of SIGABRT)."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # (the lowest free number: this one, as those below are open)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
            if getattr(sys, name) is None:  # (Python leaves a stream it found closed as None)
                setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))


class _LostInterrupts:
    """While installed as ``sys.unraisablehook``: a Ctrl-C that lands in a weakref callback or a ``__del__`` (each
    import's module lock has one) is kept instead of "ignored" by Python — its traceback printed, the command going
    on as if no Ctrl-C came — so that it ends the command once the import is over. Other unraisables are said as
    Python says them."""

    def __init__(self) -> None:
        self.caught = False
        self._said_otherwise = sys.unraisablehook

    def __call__(self, unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            self.caught = True
        else:
            self._said_otherwise(unraisable)

    def __enter__(self) -> _LostInterrupts:
        sys.unraisablehook = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        sys.unraisablehook = self._said_otherwise


def main() -> None:
    """Run the ``mcpvisor`` command. Ctrl-C while its modules load or while typer builds its commands ends it as
    Ctrl-C does later: exit code 130, no traceback."""
    _open_closed_standard_streams()
    _show_what_cannot_be_encoded()
    try:
        with _LostInterrupts() as lost:
            from mcpvisor.cli.main import main as run
        if lost.caught:
            raise KeyboardInterrupt
        run()
    except KeyboardInterrupt:
        sys.exit(130)
