"""Settings scopes, files, ``$VAR`` expansion, merging and folder trust (SPEC §2.2).

Scopes, lowest to highest precedence: ``system_defaults`` < ``user`` < ``workspace`` < ``system``.
The workspace's ``.mcp.json`` is kept here too, as the ``project`` file scope, so that the watcher
can diff it and the writer can edit it; it is *not* part of the settings merge — it enters the
server map in :func:`mcpvisor.cli.settings.mcp_servers.assemble_mcp_servers`.

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

Pure functions decide (parse, expand, diff, merge, trust); :class:`Settings` is the thin I/O shell
holding the in-memory state the watcher diffs against and the writer updates.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import json5
from pydantic import ValidationError

from mcpvisor.cli import paths as _paths
from mcpvisor.cli.settings.schema import type_mismatches, unknown_keys
from mcpvisor.core.errors import ConfigError
from mcpvisor.core.gating import matches_any
from mcpvisor.core.server_config import McpServerConfig, Scope

__all__ = [
    "FILE_SCOPES",
    "SETTINGS_SCOPES",
    "FileScope",
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

SettingsScope = Literal["system_defaults", "user", "workspace", "system"]
FileScope = Literal["system_defaults", "user", "workspace", "system", "project"]
ServerScope = Literal["system_defaults", "user", "workspace", "system", "project", "session", "mcp_config"]

SETTINGS_SCOPES: tuple[SettingsScope, ...] = ("system_defaults", "user", "workspace", "system")
"""Merge order, lowest precedence first."""
FILE_SCOPES: tuple[FileScope, ...] = (*SETTINGS_SCOPES, "project")

# Scopes whose settings may enable folder trust: never the repository's own.
_TRUST_SCOPES: tuple[SettingsScope, ...] = ("system_defaults", "user", "system")
# Scopes a repository controls: dropped when its folder is untrusted.
_REPOSITORY_SCOPES: tuple[FileScope, ...] = ("workspace", "project")
# ``scope`` stamped on the servers of each settings scope.
_STAMPS: dict[SettingsScope, Scope | None] = {
    "system_defaults": None,
    "user": None,
    "workspace": "workspace",
    "system": "system",
}


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class SettingsError:
    """A settings file that could not be read or parsed. ``line``/``column`` are 1-based when known."""

    path: Path
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = str(self.path)
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"invalid settings file {where}: {self.message}"


class SettingsFileError(ConfigError):
    """Raised by :func:`parse_settings_text`; ``report`` carries file, line, column and message."""

    def __init__(self, report: SettingsError) -> None:
        super().__init__(str(report))
        self.report = report
        self.path = report.path


# --------------------------------------------------------------------------- parsing

_JSON5_POSITION = re.compile(r"^<string>:(?P<line>\d+) (?P<msg>.*?)(?: at column (?P<col>\d+))?$", re.DOTALL)


def parse_settings_text(text: str, path: Path) -> dict[str, Any]:
    """Parse a settings file's text (JSON with comments and trailing commas) into an object.

    Raises :class:`SettingsFileError` naming the file (and line and column where known) for a
    syntax error, an empty file (a non-atomic save in progress is never "no settings"), or a
    document that is not a JSON object.
    """
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise SettingsFileError(SettingsError(path, "the file is empty; expected a JSON object", 1, 1))
    try:
        value = json5.loads(text)
    except ValueError as exc:
        match = _JSON5_POSITION.match(str(exc))
        if match is None:
            raise SettingsFileError(SettingsError(path, str(exc))) from exc
        column = int(match["col"]) if match["col"] else None
        raise SettingsFileError(SettingsError(path, match["msg"], int(match["line"]), column)) from exc
    if not isinstance(value, dict):
        kind = "an array" if isinstance(value, list) else f"a {type(value).__name__}"
        raise SettingsFileError(SettingsError(path, f"expected a JSON object at the top level, found {kind}", 1, 1))
    return value


def read_settings_file(path: Path) -> dict[str, Any] | None:
    """Read and parse one settings file; ``None`` when it does not exist. Raises :class:`SettingsFileError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SettingsFileError(SettingsError(path, f"cannot read the file: {reason}")) from exc
    return parse_settings_text(text, path)


# --------------------------------------------------------------------------- $VAR expansion

_VAR = re.compile(
    r"\$(?:(?P<dollar>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def expand_string(text: str, env: Mapping[str, str], missing: set[str] | None = None) -> str:
    """Expand ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` in one string.

    ``${VAR:-default}`` uses the (literal) default when ``VAR`` is unset or empty. ``$$`` is a
    literal ``$``. An undefined variable without default expands to ``""`` and its *name* is added
    to ``missing``. Anything else after ``$`` (``$5``, an unclosed ``${``) stays as written.
    """

    def replace(match: re.Match[str]) -> str:
        if match["dollar"]:
            return "$"
        name = match["braced"] or match["bare"]
        value = env.get(name)
        if match["default"] is not None and not value:
            return match["default"]
        if value is None:
            if missing is not None:
                missing.add(name)
            return ""
        return value

    return _VAR.sub(replace, text)


def expand_vars(value: Any, env: Mapping[str, str], missing: set[str] | None = None) -> Any:
    """Expand variables in every string inside ``value`` (object values and array items; keys stay)."""
    if isinstance(value, str):
        return expand_string(value, env, missing)
    if isinstance(value, Mapping):
        return {key: expand_vars(item, env, missing) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [expand_vars(item, env, missing) for item in value]
    return value


# --------------------------------------------------------------------------- diff


def values_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is not ``1.0``, key order never matters, NaN equals NaN."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


_ABSENT: Any = object()


def changed_paths(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths that differ between two settings objects, sorted.

    Objects recurse and other values compare whole: changing server ``a``'s ``args`` gives
    ``mcpServers.a.args``. An object that appears or disappears recurses against ``{}``, so
    adding ``{"mcp": {"excluded": [...]}}`` gives ``mcp.excluded`` (hot-reloadable) and not ``mcp``,
    and adding server ``a`` gives one path per field (``mcpServers.a.command``, ...). An empty object
    and an absent key are the same. A key with a dot in it is spelled as is (``mcpServers.my.server``).
    """
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}{key}"
        a = old.get(key, _ABSENT)
        b = new.get(key, _ABSENT)
        a_obj = a is _ABSENT or isinstance(a, Mapping)
        b_obj = b is _ABSENT or isinstance(b, Mapping)
        if a_obj and b_obj:
            out.extend(changed_paths({} if a is _ABSENT else a, {} if b is _ABSENT else b, f"{path}."))
        elif not values_equal(a, b):
            out.append(path)
    return out


# --------------------------------------------------------------------------- servers


@dataclass(frozen=True, slots=True)
class ServerEntry:
    """One configured server and where it came from (``path`` is ``None`` for session-injected ones)."""

    config: McpServerConfig
    scope: ServerScope
    path: Path | None


@dataclass(frozen=True, slots=True)
class ServerLayer:
    """The servers of one server file (``.mcp.json`` or ``--mcp-config``)."""

    scope: ServerScope
    path: Path | None
    servers: Mapping[str, ServerEntry] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    error: SettingsError | None = None


def _describe_validation(exc: ValueError) -> str:
    """A validation problem in words, never echoing the input (it may hold secrets)."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors(include_input=False, include_url=False):
            loc = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            parts.append(f"{loc}: {msg}" if loc else msg)
        return "; ".join(parts)
    return str(exc)


def build_server_entries(
    entries: Any,
    *,
    path: Path | None,
    scope: ServerScope,
    stamp: Scope | None,
    env: Mapping[str, str],
    key: str = "mcpServers",
) -> tuple[dict[str, ServerEntry], list[str]]:
    """Validate a ``{name: entry}`` object into server entries, hashing each literal entry before expansion.

    An invalid entry is skipped with a warning naming the file, the server and the fix; the others
    load. Returns the entries and the warnings.
    """
    where = str(path) if path is not None else scope
    if entries is None:
        return {}, []
    if not isinstance(entries, Mapping):
        return {}, [f"ignored {key!r} in {where}: expected an object of servers by name"]
    servers: dict[str, ServerEntry] = {}
    warnings: list[str] = []
    for name, entry in entries.items():
        if not isinstance(entry, Mapping):
            warnings.append(f"skipped MCP server {name!r} in {where}: expected an object; fix {key}.{name}")
            continue
        missing: set[str] = set()
        try:
            cfg = McpServerConfig.from_entry(entry, expand=partial(expand_vars, env=env, missing=missing), scope=stamp)
        except ValueError as exc:
            warnings.append(f"skipped MCP server {name!r} in {where}: {_describe_validation(exc)}; fix {key}.{name}")
            continue
        warnings.extend(
            f"undefined environment variable {var!r} in MCP server {name!r} ({where}) expanded to ''"
            for var in sorted(missing)
        )
        servers[name] = ServerEntry(cfg, scope, path)
    return servers, warnings


def server_layer_from_data(
    data: Mapping[str, Any] | None, path: Path | None, *, scope: ServerScope, env: Mapping[str, str]
) -> ServerLayer:
    """Servers of a server file's parsed content: Claude Code ``mcpServers`` or VS Code ``servers``.

    ``.mcp.json`` servers (``scope="project"``) are stamped ``scope: "project"``.
    """
    if not data:
        return ServerLayer(scope, path)
    warnings: list[str] = []
    if "mcpServers" in data:
        key = "mcpServers"
        if "servers" in data:
            warnings.append(f"ignored 'servers' in {path}: 'mcpServers' is also set and wins")
    else:
        key = "servers"
    stamp: Scope | None = "project" if scope == "project" else None
    servers, more = build_server_entries(data.get(key), path=path, scope=scope, stamp=stamp, env=env, key=key)
    return ServerLayer(scope, path, servers, tuple(warnings + more))


def load_server_file(path: Path, env: Mapping[str, str], *, scope: ServerScope, missing_ok: bool = True) -> ServerLayer:
    """Read a server file (``.mcp.json``, ``--mcp-config FILE``). Errors are returned in ``error``."""
    try:
        data = read_settings_file(path)
    except SettingsFileError as exc:
        return ServerLayer(scope, path, error=exc.report)
    if data is None and not missing_ok:
        return ServerLayer(scope, path, error=SettingsError(path, "the file does not exist"))
    return server_layer_from_data(data, path, scope=scope, env=env)


# --------------------------------------------------------------------------- allow-lists and trust


def allowed_by_all(name: str, allowed_lists: Iterable[Sequence[str]]) -> bool:
    """Whether ``name`` matches the allow-list of every scope that sets one (no list: allowed)."""
    return all(matches_any(name, patterns) for patterns in allowed_lists)


def _glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def narrow_allowed(names: Iterable[str], allowed_lists: Sequence[Sequence[str]]) -> tuple[str, ...] | None:
    """One allow-list for a known set of names: those allowed by every scope's list, glob-escaped.

    ``None`` (admit all) when no scope sets a list; ``()`` (admit none) when nothing matches all.
    """
    if not allowed_lists:
        return None
    return tuple(_glob_escape(n) for n in sorted(set(names)) if allowed_by_all(n, allowed_lists))


def parse_trusted_folders(data: Any) -> list[Path]:
    """The trusted-folders file's content: a JSON list of real paths. Anything else raises ValueError."""
    if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
        raise ValueError("expected a JSON list of folder paths")
    return [Path(os.path.normpath(item)) for item in data]


def is_folder_trusted(root: Path, trusted: Iterable[Path]) -> bool:
    """A folder is trusted if it or one of its parents is listed."""
    return any(root == folder or folder in root.parents for folder in trusted)


# --------------------------------------------------------------------------- merge


@dataclass(frozen=True, slots=True)
class ScopeLayer:
    """One settings scope's literal (unexpanded) content, as input to :func:`merge_settings`."""

    scope: SettingsScope
    path: Path
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class MergedSettings:
    """The merged view of the active settings scopes.

    ``data`` holds every other key, expanded, with ``mcp.excluded`` the union of all scopes and
    without ``mcpServers`` or ``mcp.allowed`` (see ``mcp_servers`` and ``allowed_lists``).
    """

    data: Mapping[str, Any]
    mcp_servers: Mapping[str, ServerEntry]
    excluded: tuple[str, ...] | None
    allowed_by_scope: Mapping[SettingsScope, tuple[str, ...]]
    warnings: tuple[str, ...] = ()

    @property
    def allowed_lists(self) -> list[tuple[str, ...]]:
        """The allow-list of each scope that sets one, lowest precedence first; a name must match all."""
        return list(self.allowed_by_scope.values())

    def is_allowed(self, name: str) -> bool:
        return allowed_by_all(name, self.allowed_by_scope.values())

    def get(self, key: str, default: Any = None) -> Any:
        """A merged value by dotted key (``ui.theme``), or ``default``."""
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> None:
    for key, value in over.items():
        current = base.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            _deep_merge(current, value)
        else:
            base[key] = _copy(value)


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _pattern_list(
    value: Any, *, what: str, where: Path, on_invalid: tuple[str, ...]
) -> tuple[tuple[str, ...], str | None]:
    if isinstance(value, str):
        return (value,), None
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value), None
    fallback = "deny all" if what == "mcp.allowed" else "exclude all"
    return on_invalid, f"invalid {what} in {where}: expected a list of glob patterns; treated as {fallback}"


def merge_settings(layers: Sequence[ScopeLayer], env: Mapping[str, str]) -> MergedSettings:
    """Merge settings scopes (lowest precedence first) with the strategies in the module docstring.

    A malformed ``mcp.allowed`` fails closed (deny all) and a malformed ``mcp.excluded`` too
    (exclude all), each with a warning; a bare string is read as a one-item list.
    """
    data: dict[str, Any] = {}
    servers: dict[str, ServerEntry] = {}
    excluded: list[str] | None = None
    allowed: dict[SettingsScope, tuple[str, ...]] = {}
    warnings: list[str] = []
    for layer in layers:
        where = layer.path
        warnings.extend(f"unknown setting {key!r} in {where}" for key in unknown_keys(layer.data))
        warnings.extend(f"{problem} in {where}" for problem in type_mismatches(layer.data))
        missing: set[str] = set()
        rest = {k: v for k, v in layer.data.items() if k != "mcpServers"}
        mcp = rest.get("mcp")
        if isinstance(mcp, Mapping):
            if "allowed" in mcp:
                allowed[layer.scope], problem = _pattern_list(
                    expand_vars(mcp["allowed"], env, missing), what="mcp.allowed", where=where, on_invalid=()
                )
                warnings.extend([problem] if problem else [])
            if "excluded" in mcp:
                patterns, problem = _pattern_list(
                    expand_vars(mcp["excluded"], env, missing), what="mcp.excluded", where=where, on_invalid=("*",)
                )
                warnings.extend([problem] if problem else [])
                excluded = [*(excluded or []), *(p for p in patterns if p not in (excluded or []))]
            rest["mcp"] = {k: v for k, v in mcp.items() if k not in ("allowed", "excluded")}
        _deep_merge(data, expand_vars(rest, env, missing))
        warnings.extend(f"undefined environment variable {var!r} in {where} expanded to ''" for var in sorted(missing))
        built, more = build_server_entries(
            layer.data.get("mcpServers"), path=where, scope=layer.scope, stamp=_STAMPS[layer.scope], env=env
        )
        servers.update(built)
        warnings.extend(more)
    if isinstance(data.get("mcp"), dict):
        if excluded is not None:
            data["mcp"]["excluded"] = list(excluded)
        if not data["mcp"]:
            del data["mcp"]
    elif excluded is not None:
        data["mcp"] = {"excluded": list(excluded)}
    return MergedSettings(
        data=data,
        mcp_servers=servers,
        excluded=tuple(excluded) if excluded is not None else None,
        allowed_by_scope=allowed,
        warnings=tuple(warnings),
    )


def folder_trust_enabled(layers: Iterable[ScopeLayer]) -> bool:
    """``security.folderTrust.enabled`` from system defaults, user and system settings (never the workspace)."""
    enabled = False
    for layer in layers:
        if layer.scope not in _TRUST_SCOPES:
            continue
        security = layer.data.get("security")
        trust = security.get("folderTrust") if isinstance(security, Mapping) else None
        value = trust.get("enabled") if isinstance(trust, Mapping) else None
        if isinstance(value, bool):
            enabled = value
    return enabled


# --------------------------------------------------------------------------- the stateful shell


@dataclass(frozen=True, slots=True)
class SettingsPaths:
    """Every file the settings layer reads."""

    system_defaults: Path
    user: Path
    workspace: Path
    system: Path
    project: Path
    approvals: Path
    trusted_folders: Path

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
        approvals=_paths.approvals_path(env),
        trusted_folders=_paths.trusted_folders_path(env),
    )


@dataclass(frozen=True, slots=True)
class ScopeRead:
    """The outcome of reading one scope's file: its object (``None``: no file) or an error."""

    scope: FileScope
    data: dict[str, Any] | None
    error: SettingsError | None = None


@dataclass(frozen=True, slots=True)
class ScopeReload:
    """What a reload of one scope did: the changed dotted paths, or the error (previous state kept)."""

    scope: FileScope
    changed: tuple[str, ...] = ()
    error: SettingsError | None = None


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
        self.folder_trust_enabled = False
        self.trust_warnings: tuple[str, ...] = ()
        self._data: dict[FileScope, dict[str, Any]] = {scope: {} for scope in FILE_SCOPES}
        self._inactive: set[FileScope] = set()
        self._merged: MergedSettings | None = None
        self._project: ServerLayer | None = None
        self._logged: set[str] = set()
        self._generation: dict[FileScope, int] = dict.fromkeys(FILE_SCOPES, 0)

    # -- reading

    def is_active(self, scope: FileScope) -> bool:
        return scope not in self._inactive

    def data(self, scope: FileScope) -> Mapping[str, Any]:
        """A scope's literal content as last read or written (``{}``: no file, or inactive)."""
        return self._data[scope]

    def generation(self, scope: FileScope) -> int:
        """Counts the changes of a scope's in-memory content; a reader compares it around a slow read."""
        return self._generation[scope]

    def read_scope(self, scope: FileScope) -> ScopeRead:
        """Read one scope's file without touching the state (safe to run in a worker thread)."""
        try:
            return ScopeRead(scope, read_settings_file(self.paths.of(scope)))
        except SettingsFileError as exc:
            return ScopeRead(scope, None, exc.report)

    def load(self) -> None:
        """Read every scope and decide folder trust. Errors are kept in :attr:`errors`, never raised."""
        self.errors.clear()
        self._data = {scope: {} for scope in FILE_SCOPES}
        for scope in _TRUST_SCOPES:
            self._store(self.read_scope(scope))
        layers = [ScopeLayer(s, self.paths.of(s), self._data[s]) for s in _TRUST_SCOPES]
        self.folder_trust_enabled = folder_trust_enabled(layers)
        self.trusted, self.trust_warnings = self._decide_trust()
        self._inactive = set()
        if not self.trusted:
            self._inactive.update(_REPOSITORY_SCOPES)
            logger.info("folder %s is not trusted: its settings and .mcp.json are ignored", self.root)
        if _same_file(self.paths.workspace, self.paths.user):
            self._inactive.add("workspace")
        for repo_scope in _REPOSITORY_SCOPES:
            if self.is_active(repo_scope):
                self._store(self.read_scope(repo_scope))
        for error in self.errors.values():
            logger.warning("%s", error)
        for file_scope in FILE_SCOPES:
            self._generation[file_scope] += 1
        self._invalidate()
        self._log_warnings()

    def _decide_trust(self) -> tuple[bool, tuple[str, ...]]:
        broken = [str(self.paths.of(scope)) for scope in _TRUST_SCOPES if scope in self.errors]
        if broken:
            # Folder trust might be enabled in the file that failed to parse: fail closed.
            return False, (
                f"cannot tell whether folder trust is enabled ({', '.join(broken)} did not parse); "
                f"treating {self.root} as untrusted until it is fixed",
            )
        if not self.folder_trust_enabled:
            return True, ()
        path = self.paths.trusted_folders
        try:
            data = _read_json_any(path)
            folders = parse_trusted_folders(data if data is not None else [])
        except (SettingsFileError, ValueError) as exc:
            return False, (f"cannot read trusted folders {path}: {exc}; treating {self.root} as untrusted",)
        return is_folder_trusted(self.root, folders), ()

    def _store(self, read: ScopeRead) -> None:
        if read.error is not None:
            self.errors[read.scope] = read.error
        else:
            self.errors.pop(read.scope, None)
            self._data[read.scope] = read.data if read.data is not None else {}

    # -- updating

    def apply(self, read: ScopeRead) -> ScopeReload:
        """Take a fresh read of one scope: diff it against memory and keep it, or keep the old state on error."""
        if not self.is_active(read.scope):
            return ScopeReload(read.scope)
        if read.error is not None:
            self.errors[read.scope] = read.error
            return ScopeReload(read.scope, error=read.error)
        self.errors.pop(read.scope, None)
        return ScopeReload(read.scope, self.replace_scope_data(read.scope, read.data or {}))

    def reload_scope(self, scope: FileScope) -> ScopeReload:
        """Re-read one scope's file and return the changed dotted paths, or the error."""
        if not self.is_active(scope):
            return ScopeReload(scope)
        return self.apply(self.read_scope(scope))

    def replace_scope_data(self, scope: FileScope, data: Mapping[str, Any]) -> tuple[str, ...]:
        """Set a scope's literal content in memory (no I/O) and return the changed dotted paths."""
        if not self.is_active(scope):
            return ()
        changed = tuple(changed_paths(self._data[scope], data))
        self._data[scope] = _copy(data)
        if changed:
            self._generation[scope] += 1
            self._invalidate()
            self._log_warnings()
        return changed

    def _invalidate(self) -> None:
        self._merged = None
        self._project = None

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
    def warnings(self) -> tuple[str, ...]:
        """Every current warning: invalid servers, unknown keys, undefined variables, trust problems."""
        return (*self.trust_warnings, *self.merged.warnings, *self.project.warnings)

    def _log_warnings(self) -> None:
        for warning in self.warnings:
            if warning not in self._logged:
                self._logged.add(warning)
                logger.warning("%s", warning)


def _read_json_any(path: Path) -> Any:
    """Any JSON value from a file (``None`` when it does not exist). Raises :class:`SettingsFileError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsFileError(SettingsError(path, f"cannot read the file: {exc}")) from exc
    try:
        return json5.loads(text)
    except ValueError as exc:
        raise SettingsFileError(SettingsError(path, str(exc))) from exc


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def load_settings(env: Mapping[str, str], root: Path | str | None = None) -> Settings:
    """Load the settings of a workspace (``root``: ``--workspace`` or the cwd, resolved to a real path)."""
    settings = Settings(env=env, root=_paths.workspace_root(root))
    settings.load()
    return settings
