"""The ``mcpvisor`` command's entry point (its console script and ``python -m mcpvisor``), kept apart from the
command's modules so that a Ctrl-C while they load is answered as one later is."""

from __future__ import annotations

import codecs
import io
import sys

__all__ = ["main"]


def _show_what_cannot_be_encoded() -> None:
    """Standard output and error in an encoding other than UTF-8 (a terminal under a Latin-1 locale, ``LANG=C``
    with Python's UTF-8 mode off) write ``?`` for a character they have no byte for: the views print symbols
    (…, ✓, ●) and a server's text, and one of them must not end the command with a traceback."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and codecs.lookup(stream.encoding).name != "utf-8":
            stream.reconfigure(errors="replace")


def main() -> None:
    """Run the ``mcpvisor`` command. Ctrl-C while its modules load or while typer builds its commands ends it as
    Ctrl-C does later: exit code 130, no traceback."""
    _show_what_cannot_be_encoded()
    try:
        from mcpvisor.cli.main import main as run

        run()
    except KeyboardInterrupt:
        sys.exit(130)
