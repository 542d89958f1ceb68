"""Merging the settings scopes: allow-lists narrow, exclusions unite, folder trust."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpvisor.core.gating import escape_glob, matches_any
from mcpvisor.host.settings.expand import expand_vars, expansion_warnings
from mcpvisor.host.settings.schema import type_mismatches, unknown_keys
from mcpvisor.host.settings.scopes import SCOPE_STAMPS, TRUST_SCOPES, SettingsScope
from mcpvisor.host.settings.servers import ServerEntry, SkippedServer, build_server_entries, servers_key_hint

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- allow-lists and trust


def allowed_by_all(name: str, allowed_lists: Iterable[Sequence[str]]) -> bool:
    """Whether ``name`` matches the allow-list of every scope that sets one (no list: allowed)."""
    return all(matches_any(name, patterns) for patterns in allowed_lists)


def narrow_allowed(names: Iterable[str], allowed_lists: Sequence[Sequence[str]]) -> tuple[str, ...] | None:
    """One allow-list for a known set of names: those allowed by every scope's list, glob-escaped.

    ``None`` (admit all) when no scope sets a list; ``()`` (admit none) when nothing matches all.
    """
    if not allowed_lists:
        return None
    return tuple(escape_glob(n) for n in sorted(set(names)) if allowed_by_all(n, allowed_lists))


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
    excluded_by_scope: Mapping[SettingsScope, tuple[str, ...]]
    """The ``mcp.excluded`` of each scope that sets one (``excluded`` is their union)."""
    warnings: tuple[str, ...] = ()
    skipped: Mapping[str, SkippedServer] = field(default_factory=dict)
    """The invalid server entries by name, the highest scope's for a name given in several."""
    invalid_lists: frozenset[tuple[str, SettingsScope]] = frozenset()
    """``("mcp.allowed" | "mcp.excluded", scope)`` of each list whose value is no list of patterns (read as deny
    all, exclude all)."""

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
            base[key] = deep_copy(value)


def deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [deep_copy(v) for v in value]
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


SAID_WHEN_READ = frozenset({"mcpServers", "mcp.allowed", "mcp.excluded"})
"""Keys whose reading below says what a value of the wrong type becomes (ignored, deny all, exclude all)."""
SAID_BY_LSP = frozenset({"lspServers", "lsp.allowed", "lsp.excluded", "lsp.startup", "lsp.idleStopSeconds"})
"""Keys the language servers' reading says the same of (``mcpvisor.host.lsp.desired``)."""


def merge_settings(layers: Sequence[ScopeLayer], env: Mapping[str, str]) -> MergedSettings:
    """Merge settings scopes (lowest precedence first) with the strategies in the module docstring.

    A malformed ``mcp.allowed`` fails closed (deny all) and a malformed ``mcp.excluded`` too
    (exclude all), each with a warning; a bare string is read as a one-item list.
    """
    data: dict[str, Any] = {}
    servers: dict[str, ServerEntry] = {}
    skipped: dict[str, SkippedServer] = {}
    excluded_by_scope: dict[SettingsScope, tuple[str, ...]] = {}
    allowed: dict[SettingsScope, tuple[str, ...]] = {}
    warnings: list[str] = []
    not_lists: set[tuple[str, SettingsScope]] = set()
    for layer in layers:
        where = layer.path
        warnings.extend(
            f"unknown setting {key!r} in {where}{servers_key_hint(key, layer.data[key]) if key in layer.data else ''}"
            for key in unknown_keys(layer.data)
        )
        # (a null mcpServers or lspServers reads as none at all, silently: the type check says it)
        nulls = {key for key in ("mcpServers", "lspServers") if layer.data.get(key) is None}
        read = (SAID_WHEN_READ | SAID_BY_LSP) - nulls
        said = type_mismatches(layer.data, said_when_read=read)
        warnings.extend(f"{problem} in {where}" for problem in said)
        missing: set[str] = set()
        rest = {k: v for k, v in layer.data.items() if k != "mcpServers"}
        mcp = rest.get("mcp")
        if isinstance(mcp, Mapping):
            if "allowed" in mcp:
                allowed[layer.scope], problem = _pattern_list(
                    expand_vars(mcp["allowed"], env, missing), what="mcp.allowed", where=where, on_invalid=()
                )
                not_lists |= {("mcp.allowed", layer.scope)} if problem else set()
                warnings.extend([problem] if problem else [])
            if "excluded" in mcp:
                excluded_by_scope[layer.scope], problem = _pattern_list(
                    expand_vars(mcp["excluded"], env, missing), what="mcp.excluded", where=where, on_invalid=("*",)
                )
                not_lists |= {("mcp.excluded", layer.scope)} if problem else set()
                warnings.extend([problem] if problem else [])
            rest["mcp"] = {k: v for k, v in mcp.items() if k not in ("allowed", "excluded")}
        _deep_merge(data, expand_vars(rest, env, missing))
        warnings.extend(expansion_warnings(missing, where))
        built, more, invalid = build_server_entries(
            layer.data.get("mcpServers"), path=where, scope=layer.scope, stamp=SCOPE_STAMPS[layer.scope], env=env
        )
        servers.update(built)
        skipped.update(invalid)
        warnings.extend(more)
    all_excluded = [p for patterns in excluded_by_scope.values() for p in patterns]
    excluded = list(dict.fromkeys(all_excluded)) if excluded_by_scope else None
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
        excluded_by_scope=excluded_by_scope,
        skipped=skipped,
        invalid_lists=frozenset(not_lists),
    )


def folder_trust_enabled(layers: Iterable[ScopeLayer]) -> bool:
    """``security.folderTrust.enabled`` from system defaults, user and system settings (never the workspace)."""
    enabled = False
    for layer in layers:
        if layer.scope not in TRUST_SCOPES:
            continue
        security = layer.data.get("security")
        trust = security.get("folderTrust") if isinstance(security, Mapping) else None
        value = trust.get("enabled") if isinstance(trust, Mapping) else None
        if isinstance(value, bool):
            enabled = value
    return enabled
