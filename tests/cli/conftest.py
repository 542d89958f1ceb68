"""Commands run in this process through typer's runner."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _keep_logging() -> Iterator[None]:
    """The commands set up logging for a process; in this one, the next tests need it back as it was."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {
        name: logging.getLogger(name).level
        for name in ("mcp", "watchfiles", "uvicorn", "httpx2", "httpcore2", "httpx", "httpcore")
    }
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)
