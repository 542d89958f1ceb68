"""Consoles for people and for pipes: output to a terminal wraps to its width (or ``COLUMNS``); output
to a pipe or a file is not wrapped at all, so paths, commands and diff lines stay whole for ``grep``."""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console

__all__ = ["UNWRAPPED_WIDTH", "new_console"]

UNWRAPPED_WIDTH = 100_000
"""The width given to output that is not a terminal: wide enough that no line is wrapped."""


def new_console(*, stderr: bool = False, **options: Any) -> Console:
    """A rich ``Console`` on stdout (or stderr) that wraps only for a terminal or when ``COLUMNS`` is set."""
    stream = sys.stderr if stderr else sys.stdout
    if "width" not in options and not os.environ.get("COLUMNS") and not _is_terminal(stream):
        options["width"] = UNWRAPPED_WIDTH
    return Console(stderr=stderr, **options)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False
