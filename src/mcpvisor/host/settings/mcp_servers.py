"""Assembling the desired server map (SPEC §2.3) — one function for start-up and every reload.

Lowest to highest precedence:

1. user and system-defaults settings servers,
2. the workspace ``.mcp.json`` (Claude Code format, stamped ``scope: "project"``),
3. workspace and system settings servers,
4. the top tier: session-injected servers, then each ``--mcp-config FILE`` in order.

``settings_servers`` is the settings layers already merged (:attr:`MergedSettings.mcp_servers`); each
entry keeps the scope that defined it, which is how ``.mcp.json`` slots in between them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host import paths as _paths
from mcpvisor.host.settings.loader import (
    ServerEntry,
    ServerLayer,
    ServerScope,
    SettingsError,
    load_server_file,
)
from mcpvisor.host.settings.servers import SkippedServer, look_alike

if TYPE_CHECKING:
    from mcpvisor.host.settings.loader import Settings

__all__ = [
    "SOURCE_LABELS",
    "SOURCE_ORDER",
    "AssembledServers",
    "ServerSource",
    "SourceLabel",
    "TopTier",
    "assemble_from_settings",
    "assemble_mcp_servers",
    "kept_entries",
    "load_top_tier",
]

SourceLabel = Literal["User", "Project .mcp.json", "Workspace", "System", "Extensions", "Command line"]

SOURCE_ORDER: tuple[SourceLabel, ...] = (
    "User",
    "Project .mcp.json",
    "Workspace",
    "System",
    "Extensions",
    "Command line",
)
"""The groups of the ``/mcp`` status view, in display order."""

SOURCE_LABELS: Mapping[ServerScope, SourceLabel] = {
    "system_defaults": "System",
    "user": "User",
    "project": "Project .mcp.json",
    "workspace": "Workspace",
    "system": "System",
    "session": "Command line",
    "mcp_config": "Command line",
}

_BELOW_PROJECT: frozenset[ServerScope] = frozenset({"system_defaults", "user"})


@dataclass(frozen=True, slots=True)
class ServerSource:
    """Where a server of the assembled map came from: the status-view group, the scope and the file."""

    label: SourceLabel
    scope: ServerScope
    path: Path | None


@dataclass(frozen=True, slots=True)
class TopTier:
    """The highest-precedence servers: session-injected ones, then ``--mcp-config`` files in order."""

    session: Mapping[str, McpServerConfig] = field(default_factory=dict)
    mcp_config: Sequence[ServerLayer] = ()


@dataclass(frozen=True, slots=True)
class AssembledServers:
    """The desired server map and, for each name, its source."""

    servers: Mapping[str, McpServerConfig]
    sources: Mapping[str, ServerSource]
    warnings: tuple[str, ...] = ()
    errors: tuple[SettingsError, ...] = ()
    shadowed: Mapping[str, str] = field(default_factory=dict)
    """For each ``.mcp.json`` server that takes the place of one of the user's own: the warning that says so (it
    is among ``warnings`` too)."""
    skipped: Mapping[str, SkippedServer] = field(default_factory=dict)
    """The invalid entries of names no valid entry configures, by name (the highest-precedence one of each)."""

    def grouped(self) -> dict[SourceLabel, list[str]]:
        """Server names by source label, in :data:`SOURCE_ORDER` (empty groups left out), names sorted."""
        groups: dict[SourceLabel, list[str]] = {}
        for label in SOURCE_ORDER:
            names = sorted(name for name, source in self.sources.items() if source.label == label)
            if names:
                groups[label] = names
        return groups


def load_top_tier(
    mcp_config_files: Iterable[Path],
    env: Mapping[str, str],
    session: Mapping[str, McpServerConfig] | None = None,
) -> TopTier:
    """Read each ``--mcp-config`` file (``mcpServers`` or VS Code ``servers``); a missing file is an error."""
    layers = [load_server_file(Path(p), env, scope="mcp_config", missing_ok=False) for p in mcp_config_files]
    return TopTier(session=dict(session or {}), mcp_config=layers)


def assemble_mcp_servers(
    settings_servers: Mapping[str, ServerEntry],
    root: Path,
    top_tier: TopTier | None = None,
    *,
    project: ServerLayer | None = None,
    env: Mapping[str, str] | None = None,
    settings_skipped: Mapping[str, SkippedServer] | None = None,
) -> AssembledServers:
    """The desired server map, lowest to highest precedence as in the module docstring.

    ``project`` is the ``.mcp.json`` layer already read (:attr:`Settings.project` keeps the last good
    one, so a half-saved file never drops servers); when ``None``, ``<root>/.mcp.json`` is read now
    and ``env`` (for ``${VAR}`` expansion) is required. A file that fails to parse is reported in
    ``errors``; a bad entry is skipped with a warning, and kept in ``skipped`` (``settings_skipped``: the settings
    files' own, :attr:`MergedSettings.skipped`) when no valid entry gives its name.
    """
    if project is None:
        if env is None:
            raise TypeError("assemble_mcp_servers needs env= to read .mcp.json (or pass project=)")
        project = load_server_file(_paths.workspace_mcp_json_path(root), env, scope="project")
    top = top_tier if top_tier is not None else TopTier()

    below = {name: e for name, e in settings_servers.items() if e.scope in _BELOW_PROJECT}
    above = {name: e for name, e in settings_servers.items() if e.scope not in _BELOW_PROJECT}
    session = {name: ServerEntry(cfg, "session", None) for name, cfg in top.session.items()}
    layers: list[Mapping[str, ServerEntry]] = [below, project.servers, above, session]
    layers.extend(layer.servers for layer in top.mcp_config)

    chosen: dict[str, ServerEntry] = {}
    for layer in layers:
        chosen.update(layer)
    invalid = settings_skipped or {}
    skipped: dict[str, SkippedServer] = {}
    for bad in (
        {name: s for name, s in invalid.items() if s.scope in _BELOW_PROJECT},
        project.skipped,
        {name: s for name, s in invalid.items() if s.scope not in _BELOW_PROJECT},
        *(layer.skipped for layer in top.mcp_config),
    ):
        skipped.update(bad)
    file_layers = [project, *top.mcp_config]
    shadowed = {
        name: _shadowing(name, below[name], project.servers[name])
        for name in sorted(below.keys() & project.servers.keys())
        if chosen[name] is project.servers[name]
    }
    return AssembledServers(
        servers={name: in_its_folder(entry.config, entry.scope, root) for name, entry in chosen.items()},
        sources={name: ServerSource(SOURCE_LABELS[e.scope], e.scope, e.path) for name, e in chosen.items()},
        warnings=(
            *(w for layer in file_layers for w in layer.warnings),
            *shadowed.values(),
            *look_alike("MCP servers", ((name, e.path) for name, e in chosen.items())),
        ),
        errors=tuple(layer.error for layer in file_layers if layer.error is not None),
        shadowed=shadowed,
        skipped={name: bad for name, bad in skipped.items() if name not in chosen},
    )


def _shadowing(name: str, own: ServerEntry, project: ServerEntry) -> str:
    """The warning for a repository's ``.mcp.json`` server that takes the place of one of the user's own."""
    yours = f"your {SOURCE_LABELS[own.scope].lower()} server of that name" + (f" (in {own.path})" if own.path else "")
    return (
        f"MCP server {name!r} of {project.path or '.mcp.json'} replaces {yours} in this workspace: it runs only once "
        f"approved, and yours does not run here meanwhile; rename one of them to keep both"
    )


_placed: dict[tuple[int, str], tuple[McpServerConfig, McpServerConfig]] = {}


def in_its_folder(cfg: McpServerConfig, scope: ServerScope, root: Path) -> McpServerConfig:
    """A repository's stdio server (``.mcp.json``, the workspace settings) runs in the folder it belongs to:
    its ``cwd`` is the workspace root unless it names one (a relative one is taken from the root). Two
    workspaces' identical entries are then two servers, each running its own folder's code. The same object
    for the same entry and root on every reload (comparing maps stays cheap)."""
    if scope not in ("project", "workspace") or cfg.command is None:
        return cfg
    if cfg.cwd is not None and Path(cfg.cwd).is_absolute():
        return cfg
    cwd = str(root / cfg.cwd) if cfg.cwd is not None else str(root)
    key = (id(cfg), cwd)
    hit = _placed.get(key)
    if hit is not None and hit[0] is cfg:
        return hit[1]
    if len(_placed) >= 4096:
        _placed.clear()
    placed = cfg.model_copy(update={"cwd": cwd})  # the approval hash and the entry as written go along
    _placed[key] = (cfg, placed)
    return placed


def assemble_from_settings(settings: Settings, top_tier: TopTier | None = None) -> AssembledServers:
    """:func:`assemble_mcp_servers` over a :class:`Settings`' merged servers and last good ``.mcp.json``."""
    merged = settings.merged
    return assemble_mcp_servers(
        merged.mcp_servers, settings.root, top_tier, project=settings.project, settings_skipped=merged.skipped
    )


def kept_entries(settings: Settings, assembled: AssembledServers) -> dict[str, str]:
    """For each server of ``assembled`` whose entry an edit made invalid, so its last good one runs on: the notice
    saying so. Read from ``settings`` as they are now: such an edit changes no server, so no reload follows it."""
    kept = {name: settings.kept_servers(source.scope).get(name) for name, source in assembled.sources.items()}
    return {name: notice for name, notice in kept.items() if notice is not None}
