"""Settings scopes, files, ``$VAR`` expansion, merging and folder trust (SPEC §2.2).

Scopes, lowest to highest precedence: ``system_defaults`` < ``user`` < ``workspace`` < ``system``.
The workspace's ``.mcp.json`` is kept here too, as the ``project`` file scope, so that the watcher
can diff it and the writer can edit it; it is *not* part of the settings merge — it enters the
server map in :func:`mcpvisor.host.settings.mcp_servers.assemble_mcp_servers`.

Merge strategies:

- ``mcpServers``: shallow by name; a clash replaces the whole server. Workspace servers are stamped
  ``scope="workspace"``, system servers ``scope="system"``; every server keeps its provenance
  (:class:`ServerEntry`: scope and file). An invalid entry is skipped with a warning.
- ``mcp.excluded``: united across scopes.
- ``mcp.allowed``: *narrows*. Each scope that sets a list keeps it (:attr:`MergedSettings.allowed_lists`);
  a name is allowed only if it matches every one of them, so a repository can never widen what the
  user allows. ``merged.data`` holds no single ``mcp.allowed``.
- everything else: objects merge recursively, later scope wins for other values.

Strings expand ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` from an explicitly passed environment
(``$$`` is a literal ``$``; an undefined variable without default expands to ``""`` with a warning).
Server entries are hashed for approval before expansion (:meth:`McpServerConfig.from_entry`).

Pure functions decide, each in its module — parsing (``files``), expansion (``expand``), the
semantic diff (``diff``), server entries (``servers``), merging and trust (``merge``); they are
re-exported here. :class:`Settings` is the thin I/O shell holding the in-memory state the watcher
diffs against and the writer updates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpvisor.host import paths as _paths
from mcpvisor.host.settings.diff import changed_paths, values_equal
from mcpvisor.host.settings.expand import expand_string, expand_vars
from mcpvisor.host.settings.files import (
    SettingsError,
    SettingsFileError,
    parse_settings_text,
    read_json_any,
    read_settings_document,
    read_settings_file,
)
from mcpvisor.host.settings.lsp_servers import LSP_KEY, LspFile, keep_last_good_lsp_entries, lsp_file_from_data
from mcpvisor.host.settings.merge import (
    MergedSettings,
    ScopeLayer,
    allowed_by_all,
    deep_copy,
    folder_trust_enabled,
    is_folder_trusted,
    merge_settings,
    narrow_allowed,
    parse_trusted_folders,
)
from mcpvisor.host.settings.scopes import (
    FILE_SCOPES,
    REPOSITORY_SCOPES,
    SETTINGS_SCOPES,
    TRUST_SCOPES,
    FileScope,
    ServerScope,
    SettingsScope,
)
from mcpvisor.host.settings.servers import (
    ServerEntry,
    ServerLayer,
    build_server_entries,
    keep_last_good_entries,
    load_server_file,
    server_layer_from_data,
)

__all__ = [
    "FILE_SCOPES",
    "SETTINGS_SCOPES",
    "FileScope",
    "LoadRead",
    "MergedSettings",
    "ScopeLayer",
    "ScopeRead",
    "ScopeReload",
    "ServerEntry",
    "ServerLayer",
    "ServerScope",
    "Settings",
    "SettingsError",
    "SettingsFileError",
    "SettingsPaths",
    "SettingsScope",
    "allowed_by_all",
    "build_server_entries",
    "changed_paths",
    "expand_string",
    "expand_vars",
    "folder_trust_enabled",
    "is_folder_trusted",
    "load_server_file",
    "load_settings",
    "merge_settings",
    "narrow_allowed",
    "parse_settings_text",
    "parse_trusted_folders",
    "read_settings_file",
    "server_layer_from_data",
    "settings_paths",
    "values_equal",
]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the stateful shell


@dataclass(frozen=True, slots=True)
class SettingsPaths:
    """Every file the settings layer reads."""

    system_defaults: Path
    user: Path
    workspace: Path
    system: Path
    project: Path
    lsp_project: Path
    approvals: Path
    trusted_folders: Path
    oauth_tokens: Path
    pins: Path

    def of(self, scope: FileScope) -> Path:
        path: Path = getattr(self, scope)
        return path


def settings_paths(env: Mapping[str, str], root: Path) -> SettingsPaths:
    """Where each scope lives for this environment and workspace root (no I/O)."""
    return SettingsPaths(
        system_defaults=_paths.system_defaults_path(env),
        user=_paths.user_settings_path(env),
        workspace=_paths.workspace_settings_path(root),
        system=_paths.system_settings_path(env),
        project=_paths.workspace_mcp_json_path(root),
        lsp_project=_paths.workspace_lsp_json_path(root),
        approvals=_paths.approvals_path(env),
        trusted_folders=_paths.trusted_folders_path(env),
        oauth_tokens=_paths.oauth_tokens_path(env),
        pins=_paths.pins_path(env),
    )


@dataclass(frozen=True, slots=True)
class ScopeRead:
    """The outcome of reading one scope's file: its object (``None``: no file) or an error."""

    scope: FileScope
    data: dict[str, Any] | None
    error: SettingsError | None = None
    duplicates: tuple[str, ...] = ()
    """A warning for each key the file gives twice in one object (the later one is used)."""


@dataclass(frozen=True, slots=True)
class LoadRead:
    """Every file a :meth:`Settings.load` needs, read without touching the settings (:meth:`Settings.read_files`
    in a worker thread); the load then applies it at once, so no reader ever sees a half-loaded state."""

    scopes: Mapping[FileScope, ScopeRead]
    trusted_folders: Any = None
    """The trusted-folders file's JSON (``None``: no file)."""
    trusted_folders_error: SettingsFileError | None = None
    workspace_is_user: bool = False
    """The workspace settings file is the user's (the workspace root is the home folder)."""


@dataclass(frozen=True, slots=True)
class ScopeReload:
    """What a reload of one scope did: the changed dotted paths, or the error (previous state kept)."""

    scope: FileScope
    changed: tuple[str, ...] = ()
    error: SettingsError | None = None
    kept: tuple[str, ...] = ()
    """One notice per invalid server entry whose last good configuration stays in force, and per key the file
    gives twice (said on each save while they last)."""


class Settings:
    """The in-memory settings of one workspace: each scope's literal content, merged on demand.

    Build with :func:`load_settings` (or the constructor, which does no I/O, then :meth:`load`).
    The watcher calls :meth:`reload_scope` (or :meth:`read_scope` off the event loop, then
    :meth:`apply`); the writer calls :meth:`replace_scope_data` *before* writing a file, so the
    app's own writes never show up as changes.

    Folder trust is decided at :meth:`load` (``security.folderTrust.enabled`` requires a restart):
    an untrusted folder leaves the ``workspace`` and ``project`` scopes inactive. When a user or
    system settings file fails to parse at load, trust fails closed (the folder is untrusted). The workspace scope
    is also inactive when it is the user settings file (the workspace root is the home folder).
    """

    def __init__(self, *, env: Mapping[str, str], root: Path, paths: SettingsPaths | None = None) -> None:
        self.env: Mapping[str, str] = dict(env)
        self.root = root
        self.paths = paths if paths is not None else settings_paths(self.env, root)
        self.errors: dict[FileScope, SettingsError] = {}
        """The current read/parse error of each scope whose last reload failed."""
        self.trusted = True
        self.trust_undecided = False
        """Trust was decided while a user or system settings file did not parse (fail closed): once they all
        parse, a full :meth:`load` decides it (the host does so when the watcher reports them fixed)."""
        self.folder_trust_enabled = False
        self.trust_warnings: tuple[str, ...] = ()
        self._data: dict[FileScope, dict[str, Any]] = {scope: {} for scope in FILE_SCOPES}
        self._kept: dict[FileScope, tuple[str, ...]] = {}
        """Per scope: the notices of invalid server entries replaced by their last good entry."""
        self._kept_servers: dict[str, dict[str, str]] = {}
        """Per scope: those of MCP servers, by server name."""
        self._kept_lsp: dict[str, dict[str, str]] = {}
        self._duplicates: dict[FileScope, tuple[str, ...]] = {}
        """Per scope: the warnings of keys its file gives twice in one object."""
        self._inactive: set[FileScope] = set()
        self._merged: MergedSettings | None = None
        self._project: ServerLayer | None = None
        self._lsp_project: LspFile | None = None
        self._logged: set[str] = set()
        self._generation: dict[FileScope, int] = dict.fromkeys(FILE_SCOPES, 0)
        self._loaded = False

    # -- reading

    def is_active(self, scope: FileScope) -> bool:
        return scope not in self._inactive

    def data(self, scope: FileScope) -> Mapping[str, Any]:
        """A scope's literal content as last read or written (``{}``: no file, or inactive)."""
        return self._data[scope]

    def generation(self, scope: FileScope) -> int:
        """Counts the changes of a scope's in-memory content; a reader compares it around a slow read."""
        return self._generation[scope]

    def generations(self) -> tuple[int, ...]:
        """:meth:`generation` of every scope: equal before and after a slow read, nothing changed meanwhile."""
        return tuple(self._generation.values())

    def read_scope(self, scope: FileScope) -> ScopeRead:
        """Read one scope's file without touching the state (safe to run in a worker thread)."""
        try:
            data, duplicates = read_settings_document(self.paths.of(scope))
            return ScopeRead(scope, data, duplicates=duplicates)
        except SettingsFileError as exc:
            return ScopeRead(scope, None, exc.report)

    def read_files(self) -> LoadRead:
        """Read every file :meth:`load` needs without touching the state (safe to run in a worker thread).
        A repository scope's file is read even when the folder turns out untrusted; it is not applied then."""
        try:
            folders, folders_error = read_json_any(self.paths.trusted_folders), None
        except SettingsFileError as exc:
            folders, folders_error = None, exc
        return LoadRead(
            {scope: self.read_scope(scope) for scope in FILE_SCOPES},
            folders,
            folders_error,
            _same_file(self.paths.workspace, self.paths.user),
        )

    def load(self, read: LoadRead | None = None) -> None:
        """Apply :meth:`read_files` (read now when not given) and decide folder trust. Errors are kept in
        :attr:`errors`, never raised; nothing here reads a file once ``read`` is given.

        On a reload (``/reload``), a scope whose file does not parse keeps its last good content, and
        the folder keeps its trust decision: a half-saved file never drops servers."""
        if read is None:
            read = self.read_files()
        reloading = self._loaded
        previous = self._data
        self.errors.clear()
        self._data = {scope: {} for scope in FILE_SCOPES}
        for scope in TRUST_SCOPES:
            self._store(read.scopes[scope], previous if reloading else None)
        layers = [ScopeLayer(s, self.paths.of(s), self._data[s]) for s in TRUST_SCOPES]
        self.folder_trust_enabled = folder_trust_enabled(layers)
        if reloading and any(scope in self.errors for scope in TRUST_SCOPES):
            pass  # keep the trust decided from the last good content
        else:
            self.trusted, self.trust_warnings = self._decide_trust(read)
            self.trust_undecided = any(scope in self.errors for scope in TRUST_SCOPES)
        self._loaded = True
        self._inactive = set()
        if not self.trusted:
            self._inactive.update(REPOSITORY_SCOPES)
            logger.info("folder %s is not trusted: its settings and .mcp.json are ignored", self.root)
        if read.workspace_is_user:
            self._inactive.add("workspace")
        for repo_scope in REPOSITORY_SCOPES:
            if self.is_active(repo_scope):
                self._store(read.scopes[repo_scope], previous if reloading else None)
        for error in self.errors.values():
            logger.warning("%s", error)
        for file_scope in FILE_SCOPES:
            self._generation[file_scope] += 1
        self._invalidate()
        self._log_warnings()

    def _decide_trust(self, read: LoadRead) -> tuple[bool, tuple[str, ...]]:
        if broken := self.trust_unknown_in:
            # Folder trust might be enabled in the file that failed to parse: fail closed.
            return False, (
                f"cannot tell whether folder trust is enabled ({', '.join(broken)} did not parse); "
                f"treating {self.root} as untrusted until it is fixed",
            )
        if not self.folder_trust_enabled:
            return True, ()
        path = self.paths.trusted_folders
        try:
            if read.trusted_folders_error is not None:
                raise read.trusted_folders_error
            folders = parse_trusted_folders(read.trusted_folders if read.trusted_folders is not None else [])
        except (SettingsFileError, ValueError) as exc:
            return False, (f"cannot read trusted folders {path}: {exc}; treating {self.root} as untrusted",)
        return is_folder_trusted(self.root, folders), ()

    def _store(self, read: ScopeRead, previous: Mapping[FileScope, dict[str, Any]] | None = None) -> None:
        if read.error is not None:
            self.errors[read.scope] = read.error
            if previous is not None:
                self._data[read.scope] = previous[read.scope]  # the last good content stays in force
        else:
            self.errors.pop(read.scope, None)
            self._duplicates[read.scope] = read.duplicates
            data = read.data if read.data is not None else {}
            if previous is not None:
                data = dict(self._keep_last_good(read.scope, data, previous[read.scope]))
            else:
                self._kept.pop(read.scope, None)
                self._kept_servers.pop(read.scope, None)
            self._data[read.scope] = data

    # -- updating

    def apply(self, read: ScopeRead) -> ScopeReload:
        """Take a fresh read of one scope: diff it against memory and keep it, or keep the old state on error."""
        if not self.is_active(read.scope):
            return ScopeReload(read.scope)
        if read.error is not None:
            self.errors[read.scope] = read.error
            return ScopeReload(read.scope, error=read.error)
        self.errors.pop(read.scope, None)
        self._duplicates[read.scope] = read.duplicates
        changed = self.replace_scope_data(read.scope, read.data or {})  # (a key given twice may change nothing)
        return ScopeReload(read.scope, changed, kept=(*read.duplicates, *self._kept.get(read.scope, ())))

    def reload_scope(self, scope: FileScope) -> ScopeReload:
        """Re-read one scope's file and return the changed dotted paths, or the error."""
        if not self.is_active(scope):
            return ScopeReload(scope)
        return self.apply(self.read_scope(scope))

    def replace_scope_data(self, scope: FileScope, data: Mapping[str, Any]) -> tuple[str, ...]:
        """Set a scope's literal content in memory (no I/O) and return the changed dotted paths."""
        if not self.is_active(scope):
            return ()
        data = self._keep_last_good(scope, data, self._data[scope])
        changed = tuple(changed_paths(self._data[scope], data))
        self._data[scope] = deep_copy(data)
        if changed:
            self._generation[scope] += 1
            self._invalidate()
            self._log_warnings()
        return changed

    def _keep_last_good(
        self, scope: FileScope, data: Mapping[str, Any], previous: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        """``data`` with invalid server entries replaced by their last good ones (the notices kept for
        :attr:`warnings`): one bad entry never stops a server that was running, nor the rest of a save."""
        path = self.paths.of(scope)
        servers: dict[str, str] = {}
        if scope == "lsp_project":
            data, lsp_kept = keep_last_good_lsp_entries(
                data, previous, path=path, source="project", env=self.env, key=None
            )
        else:
            data, servers = keep_last_good_entries(
                data, previous, path=path, env=self.env, settings_file=scope != "project"
            )
            lsp, lsp_kept = keep_last_good_lsp_entries(
                data.get(LSP_KEY), previous.get(LSP_KEY), path=path, source=scope, env=self.env, key=LSP_KEY
            )
            data = {**data, LSP_KEY: lsp} if lsp_kept else data
        kept = tuple(dict.fromkeys([*servers.values(), *lsp_kept.values()]))
        self._kept_lsp[scope] = lsp_kept
        if kept:
            self._kept[scope] = kept
        else:
            self._kept.pop(scope, None)
        self._kept_servers[scope] = servers
        return data

    def kept_servers(self, scope: str, *, lsp: bool = False) -> Mapping[str, str]:
        """The notice of each MCP server (``lsp``: language server) of ``scope``'s file whose invalid entry gave way
        to its last good one."""
        active = any(scope == file_scope and self.is_active(file_scope) for file_scope in FILE_SCOPES)
        return (self._kept_lsp if lsp else self._kept_servers).get(scope, {}) if active else {}

    def _invalidate(self) -> None:
        self._merged = None
        self._project = None
        self._lsp_project = None

    # -- merged views

    @property
    def merged(self) -> MergedSettings:
        """The active settings scopes merged (recomputed after a change)."""
        if self._merged is None:
            layers = [
                ScopeLayer(scope, self.paths.of(scope), self._data[scope])
                for scope in SETTINGS_SCOPES
                if self.is_active(scope)
            ]
            self._merged = merge_settings(layers, self.env)
        return self._merged

    @property
    def project(self) -> ServerLayer:
        """The servers of the workspace ``.mcp.json`` as last read successfully (empty when untrusted)."""
        if self._project is None:
            self._project = server_layer_from_data(
                self._data["project"], self.paths.project, scope="project", env=self.env
            )
        return self._project

    @property
    def lsp_project(self) -> LspFile:
        """The language servers of the workspace ``.lsp.json`` as last read successfully (empty when untrusted)."""
        if self._lsp_project is None:
            self._lsp_project = lsp_file_from_data(
                self._data["lsp_project"], self.paths.lsp_project, source="project", env=self.env
            )
        return self._lsp_project

    def lsp_layers(self) -> list[tuple[SettingsScope, Path, Mapping[str, Any]]]:
        """``(scope, file, content)`` of each active settings scope, in merge order (for ``lspServers``)."""
        return [(s, self.paths.of(s), self._data[s]) for s in SETTINGS_SCOPES if self.is_active(s)]

    @property
    def trust_unknown_in(self) -> list[str]:
        """The settings files that may turn folder trust on and did not parse: until they do, no folder is trusted."""
        return [str(self.paths.of(scope)) for scope in TRUST_SCOPES if scope in self.errors]

    @property
    def duplicates(self) -> tuple[str, ...]:
        """A warning for each key given twice in one object of a file read (the later one is used)."""
        return tuple(
            notice for scope in FILE_SCOPES if self.is_active(scope) for notice in self._duplicates.get(scope, ())
        )

    @property
    def warnings(self) -> tuple[str, ...]:
        """Every current warning: invalid servers, unknown keys, undefined variables, trust problems."""
        kept = (notice for scope in FILE_SCOPES if self.is_active(scope) for notice in self._kept.get(scope, ()))
        return (
            *self.trust_warnings,
            *self.duplicates,
            *kept,
            *self.merged.warnings,
            *self.project.warnings,
            *self.lsp_project.warnings,
        )

    def _log_warnings(self) -> None:
        for warning in self.warnings:
            if warning not in self._logged:
                self._logged.add(warning)
                logger.warning("%s", warning)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python 3.11); reading the file says so
        return False


def load_settings(env: Mapping[str, str], root: Path | str | None = None) -> Settings:
    """Load the settings of a workspace (``root``: ``--workspace`` or the cwd, resolved to a real path)."""
    settings = Settings(env=env, root=_paths.workspace_root(root))
    settings.load()
    return settings
