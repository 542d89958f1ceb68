"""How a language server's state reads to people (status tool, ``mcpvisor status``, ``/mcp``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcpvisor.host.lsp.manager import LspManager
    from mcpvisor.host.lsp.server import LanguageServer

__all__ = ["describe_state"]


def describe_state(manager: LspManager, name: str, server: LanguageServer | None, reason: str | None) -> str:
    """One language server's state as people read it."""
    if reason == "untrusted":
        return "not started: the folder is not trusted"
    if reason == "pending_approval":
        return f"needs approval — run: mcpvisor lsp approve {name}"
    if reason == "rejected":
        return "rejected — edit config to re-approve"
    if reason == "excluded":
        return "disabled (in lsp.excluded)"
    if reason == "not_allowed":
        return "not allowed"
    if server is None:
        return "stopped"
    if server.state == "ready":
        return "ready"
    if server.state == "starting":
        return "starting"
    if server.state == "failed":
        return "failed"
    return "idle" if manager.is_idle(name) else "stopped (starts on first use)"
