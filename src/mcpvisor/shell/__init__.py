"""``mcpvisor shell``: an interactive session over a running host (SPEC §0 item 2, §9).

Commands: ``/mcp``, ``/tools``, ``/prompts``, ``/call NAME [JSON]``, ``/prompt NAME [JSON]``,
``/reload``, ``/approve NAME``, ``/reject NAME``, ``/help``, ``/quit``; every MCP prompt is also a
``/<name>`` command. An approval dialog opens whenever a project or workspace server waits for
the user's decision, at start or mid-session.

Modules: ``session`` (the loop and the host listener), ``approval`` (the dialog's pure parts),
``commands`` (parsing what is typed), ``render`` (tools, prompts, results), ``line_editor`` (lines
typed at a terminal: editing, history, completion from ``completion``, output above the prompt),
``terminal`` (pipes and files read in a thread), and the terminal views the commands share:
``views`` (the ``/mcp`` status table) and ``narration`` (host events as lines).

Imports ``mcpvisor.host`` and ``mcpvisor.core``, and draws with rich; never the gateway or the
commands, never argv.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcpvisor._lazy import lazy_exports

if TYPE_CHECKING:
    from mcpvisor.shell.session import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, ShellSession, run_shell

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "ShellSession", "run_shell"]

__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "mcpvisor.shell.session"))
