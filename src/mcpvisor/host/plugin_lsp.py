"""The language servers Claude Code's enabled plugins bring (``mcp import --from claude-code``, SPEC §10).

Claude Code takes language servers only from enabled plugins: ``enabledPlugins`` in its user settings
names them (``plugin@marketplace``), ``plugins/installed_plugins.json`` says where each is installed
(else its cache folder, ``plugins/cache/<marketplace>/<plugin>``), and a plugin declares them as
``lspServers`` in ``.claude-plugin/plugin.json`` (an object, a path to a file holding one, or a list of
either) or in a ``.lsp.json`` at its root. ``${CLAUDE_PLUGIN_ROOT}`` becomes the plugin's folder; an
entry using a plugin's ``${user_config.*}`` cannot be imported (Claude Code asks for those). Pure
reading: the caller writes what it imports into the user's ``lspServers``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpvisor.host import paths
from mcpvisor.host.lsp.config import LspServerConfig, camel_fields
from mcpvisor.host.settings.files import SettingsFileError, read_settings_file
from mcpvisor.host.settings.servers import describe_validation

__all__ = ["PluginLsp", "claude_dir", "scan_plugin_lsp_servers"]

_ROOT_VAR = "${CLAUDE_PLUGIN_ROOT}"
_USER_CONFIG = re.compile(r"\$\{user_config\.([^}]*)\}")


@dataclass(frozen=True, slots=True)
class PluginLsp:
    """One language server a plugin declares: its entry for mcpvisor, or why it cannot be imported."""

    name: str
    plugin: str
    file: Path
    entry: Mapping[str, Any] | None
    reason: str | None = None


def claude_dir(env: Mapping[str, str]) -> Path:
    """Claude Code's configuration folder: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    configured = env.get("CLAUDE_CONFIG_DIR")
    return Path(configured) if configured else paths.home(env) / ".claude"


def _read(path: Path) -> Any:
    try:
        return read_settings_file(path)
    except SettingsFileError:
        return None


def _enabled(base: Path) -> list[str]:
    settings = _read(base / "settings.json")
    plugins = settings.get("enabledPlugins") if isinstance(settings, Mapping) else None
    return [name for name, on in (plugins or {}).items() if on is True] if isinstance(plugins, Mapping) else []


def _install_paths(base: Path, key: str) -> list[Path]:
    installed = _read(base / "plugins" / "installed_plugins.json")
    records = installed.get("plugins") if isinstance(installed, Mapping) else None
    record = records.get(key) if isinstance(records, Mapping) else None
    entries = record if isinstance(record, list) else [record]
    paths = [
        Path(e["installPath"]) for e in entries if isinstance(e, Mapping) and isinstance(e.get("installPath"), str)
    ]
    if paths:
        return paths
    plugin, _, marketplace = key.partition("@")
    cache = base / "plugins" / "cache" / marketplace / plugin
    if (cache / ".claude-plugin").is_dir() or (cache / ".lsp.json").is_file():
        return [cache]
    versions = [d for d in cache.iterdir() if d.is_dir()] if cache.is_dir() else []
    return sorted(versions, key=lambda d: d.stat().st_mtime, reverse=True)[:1]


def _declared(root: Path) -> Iterator[tuple[Path, Any]]:
    """``(file, {name: entry})`` for each place the plugin at ``root`` declares language servers."""
    manifest = root / ".claude-plugin" / "plugin.json"
    data = _read(manifest)
    declared = data.get("lspServers") if isinstance(data, Mapping) else None
    if declared is None:
        lsp_json = root / ".lsp.json"
        if lsp_json.is_file():
            yield lsp_json, _read(lsp_json)
        return
    for item in declared if isinstance(declared, list) else [declared]:
        if isinstance(item, str):
            path = (root / item).resolve()
            yield path, _read(path) if path.is_relative_to(root.resolve()) else None
        else:
            yield manifest, item


def _substitute(value: Any, root: Path) -> Any:
    if isinstance(value, str):
        return value.replace(_ROOT_VAR, str(root))
    if isinstance(value, list):
        return [_substitute(v, root) for v in value]
    if isinstance(value, Mapping):
        return {k: _substitute(v, root) for k, v in value.items()}
    return value


def _entry(name: str, raw: Any, plugin: str, file: Path, root: Path) -> PluginLsp:
    if not isinstance(raw, Mapping):
        return PluginLsp(name, plugin, file, None, "the entry is not an object")
    settings = _USER_CONFIG.search(json.dumps(raw))
    if settings:
        return PluginLsp(
            name,
            plugin,
            file,
            None,
            f"uses ${{user_config.{settings[1]}}}, a plugin setting Claude Code asks for; write the value in its "
            "place and add the server to lspServers by hand",
        )
    entry = _substitute(dict(raw), root)
    try:
        LspServerConfig.model_validate(entry)
    except ValueError as exc:
        return PluginLsp(name, plugin, file, None, f"invalid entry: {camel_fields(describe_validation(exc))}")
    return PluginLsp(name, plugin, file, entry)


def scan_plugin_lsp_servers(env: Mapping[str, str]) -> tuple[Path, list[PluginLsp]]:
    """Claude Code's folder and every language server its enabled plugins declare. Two plugins declaring the
    same name: the later one's is named ``<plugin>-<name>``."""
    base = claude_dir(env)
    found: list[PluginLsp] = []
    taken: set[str] = set()
    for key in _enabled(base):
        plugin = key.partition("@")[0]
        for root in _install_paths(base, key):
            for file, servers in _declared(root):
                if not isinstance(servers, Mapping):
                    found.append(
                        PluginLsp("*", key, file, None, "declares lspServers that are not an object of servers")
                    )
                    continue
                for name, raw in servers.items():
                    unique = str(name) if str(name) not in taken else f"{plugin}-{name}"
                    taken.add(unique)
                    found.append(_entry(unique, raw, key, file, root))
    return base, found
