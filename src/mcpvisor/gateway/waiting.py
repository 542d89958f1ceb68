"""What the gateway's clients are told of servers that wait for the user's approval (SPEC §7, §9).

A project server (``.mcp.json``, a workspace's settings) starts only once the user approved that exact
configuration. Until then a client of the gateway lists none of its tools, and the gateway, unlike the shell,
cannot ask the user. So it says so where a client looks:

- in the ``instructions`` of its answer to ``initialize`` (and of the 2026-07-28 era's ``server/discover``),
  read when a session begins: the model learns which servers wait and the command the user runs;
- when a server starts waiting mid-session (a project file edited or added), in a log message
  (``notifications/message``, level ``warning``, logger ``mcpvisor``) to each handshake-era client whose
  ``logging/setLevel`` lets it through: clients show it where they show servers' logs. (A 2026-07-28-era
  client gets log messages only for its own requests; it reads the instructions again on ``server/discover``.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio.abc

from mcpvisor.core.config import Config
from mcpvisor.core.errors import name_word
from mcpvisor.core.events import McpEvent, ReconcileFinished
from mcpvisor.gateway.log_relay import LogRelay
from mcpvisor.gateway.notices import ChangeNotices

__all__ = ["INSTRUCTIONS", "WaitingNotices", "instructions", "waiting_for_approval"]

logger = logging.getLogger(__name__)

INSTRUCTIONS = "Tools and prompts of the MCP servers mcpvisor runs; the set follows its settings files."
NAMED_AT_MOST = 10
"""Servers named one by one; more are counted."""


def waiting_for_approval(config: Config) -> list[str]:
    """The servers of ``config`` that would start but for the user's approval (not the rejected ones)."""
    return sorted(
        name
        for name in config.get_merged_mcp_servers()
        if config.is_mcp_server_pending_approval(name)  # (cheap: the full reason is asked of these few only)
        and config.get_mcp_server_unavailable_reason(name) == "pending_approval"
        and config.refined_reason(name, "pending_approval") == "pending_approval"
    )


def _approve(config: Config, name: str) -> str:
    return config.approve_command.format(name=name_word(name))


def _waiting_said(config: Config, names: Sequence[str], *, told: str) -> str:
    """``names`` (one or more) wait for the user's approval; ``told`` whose: "the user's" or "your". While the
    approvals store cannot be read (a corrupt file, a fleet's store not answering), that is said too: every
    server is held then, approved or not, and ``mcp approve`` cannot record a decision."""
    held = "; mcpvisor cannot read the approvals store now (its log says why)" if config.approvals_unreadable() else ""
    if len(names) == 1:
        return f"the server {names[0]!r} waits for {told} approval before it starts: {_approve(config, names[0])}{held}"
    each = "; ".join(f"{name!r}: {_approve(config, name)}" for name in names[:NAMED_AT_MOST])
    more = (
        f"; and {len(names) - NAMED_AT_MOST} more (mcpvisor mcp list shows them)" if len(names) > NAMED_AT_MOST else ""
    )
    return f"{len(names)} servers wait for {told} approval before they start: {each}{more}{held}"


def instructions(config: Config) -> str:
    """The gateway's instructions as they stand: what it serves, and the servers waiting for approval."""
    waiting = waiting_for_approval(config)
    if not waiting:
        return INSTRUCTIONS
    said = _waiting_said(config, waiting, told="the user's")
    return (
        f"{INSTRUCTIONS} In this workspace's project configuration {said}. "
        "Tell the user; once approved, a server's tools appear here."
    )


class WaitingNotices:
    """Tells the handshake-era clients connected when a server starts waiting for approval (see the module)."""

    def __init__(self, config: Config, notices: ChangeNotices, logs: LogRelay) -> None:
        self._config, self._notices, self._logs = config, notices, logs
        self._told: frozenset[str] = frozenset()
        self._tg: anyio.abc.TaskGroup | None = None

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Tell from now on, in ``tg`` (the gateway's); what waits already is in the instructions."""
        self._tg, self._told = tg, frozenset(waiting_for_approval(self._config))

    def on_event(self, event: McpEvent) -> None:
        if not isinstance(event, ReconcileFinished) or self._tg is None:
            return
        waiting = waiting_for_approval(self._config)
        new = [name for name in waiting if name not in self._told]
        self._told = frozenset(waiting)
        if not new:
            return
        text = f"In this workspace's project configuration {_waiting_said(self._config, new, told='your')}"
        logger.debug("telling %d clients: %s", len(self._notices.connections()), text)
        for connection in self._notices.connections():
            self._tg.start_soon(self._logs.tell, connection, "warning", text)
