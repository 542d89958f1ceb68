"""What the ``status`` tool answers: each configured language server's state, as :mod:`.status` words it."""

from __future__ import annotations

from mcpvisor.host.lsp.manager import LspManager
from mcpvisor.host.lsp.results import ServerStatus, StatusResult
from mcpvisor.host.lsp.status import describe_state
from mcpvisor.host.status import invalid_entry_text

__all__ = ["status_result"]


def status_result(manager: LspManager) -> StatusResult:
    """Every configured language server of ``manager`` and every invalid entry, by name, and the configuration
    files that do not parse."""
    state = manager.state
    servers = [_status(manager, name) for name in state.servers]
    for bad in state.assembled.skipped.values():  # (no server runs for it: where, why and the fix)
        where = str(bad.path) if bad.path is not None else None
        servers.append(
            ServerStatus(
                name=bad.name,
                languages=[],
                extensions=list(bad.extensions),
                state=invalid_entry_text(where, bad.problem),
            )
        )
    return StatusResult(servers=sorted(servers, key=lambda row: row.name), problems=manager.unreadable())


def _status(manager: LspManager, name: str) -> ServerStatus:
    cfg = manager.state.servers[name]
    server = manager.servers().get(name)
    reason = manager.state.reason(name) if manager.trusted else "untrusted"
    running = server is not None and server.state == "ready"
    return ServerStatus(
        name=name,
        languages=cfg.languages(),
        extensions=sorted(cfg.extension_to_language),
        state=describe_state(manager, name, server, reason, cfg),
        pid=server.pid if server is not None else None,
        open_documents=len(server.documents) if server is not None and running else 0,
        operations=server.operations() if server is not None and running else [],
        last_error=server.last_error if server is not None else None,
    )
