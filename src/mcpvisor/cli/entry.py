"""The ``mcpvisor`` command's entry point (its console script and ``python -m mcpvisor``), kept apart from the
command's modules so that a Ctrl-C while they load is answered as one later is."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    """Run the ``mcpvisor`` command. Ctrl-C while its modules load or while typer builds its commands ends it as
    Ctrl-C does later: exit code 130, no traceback."""
    try:
        from mcpvisor.cli.main import main as run

        run()
    except KeyboardInterrupt:
        sys.exit(130)
