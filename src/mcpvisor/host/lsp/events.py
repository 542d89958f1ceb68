"""What a host tells about its language servers: events and the status view's rows. Light: importing this
module imports neither the ``mcp`` SDK nor any language server machinery (status commands must start fast)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LspPendingApprovalChanged", "LspServerChanged", "LspServerView"]


@dataclass(frozen=True, slots=True)
class LspServerChanged:
    """What a reader can see of one language server changed."""

    server: str
    state: str
    pid: int | None
    open_documents: int
    error: str | None


@dataclass(frozen=True, slots=True)
class LspPendingApprovalChanged:
    """Some language servers wait for the user's approval of their current configuration."""

    servers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LspServerView:
    """One configured language server as status views show it."""

    name: str
    source: str
    path: str | None
    target: str
    extensions: tuple[str, ...]
    state: str
    pid: int | None
    open_documents: int
    error: str | None
    gated: bool
    kept: str | None = None
    """Its entry was made invalid by an edit, and its last good configuration runs on: the notice saying so."""

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "source": self.source,
            "file": self.path,
            "command": self.target,
            "extensions": list(self.extensions),
            "state": self.state,
            "pid": self.pid,
            "open_documents": self.open_documents,
            "error": self.error,
            "kept": self.kept,
        }
