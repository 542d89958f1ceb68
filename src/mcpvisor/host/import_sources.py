"""Where each tool ``mcp import`` reads keeps its MCP servers, and which of them it turns off.

Pure reading: :func:`locations` names a tool's files at their documented places (per platform),
:func:`turned_off` says which servers the tool itself does not run, from the lists in its settings and,
for Gemini CLI, from the file ``gemini mcp disable`` writes. :mod:`mcpvisor.host.importers` translates
the entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mcpvisor.host import paths as _paths
from mcpvisor.host.settings.files import SettingsFileError, read_settings_file

__all__ = [
    "SOURCES",
    "Dialect",
    "ImportLevel",
    "SourceSpec",
    "dig",
    "home_of",
    "off_in_project",
    "locations",
    "read_quietly",
    "turned_off",
]

ImportLevel = Literal["user", "workspace"]
Dialect = Literal["literal", "vscode", "braced", "shell"]


@dataclass(frozen=True, slots=True)
class SourceSpec:
    title: str
    dialect: Dialect
    url_means: Literal["sse", "guess"]
    """What a ``url`` without ``type`` is: SSE (Gemini, Claude) or guessed from the path (Cursor, VS Code)."""
    off_lists: tuple[str, ...] = ()
    """Where the tool's settings list the names of servers it turns off (``/``-separated paths)."""
    on_lists: tuple[str, ...] = ()
    """Where they list the only servers it runs: a file's first one set counts; the lists of the files that apply are
    intersected, and an empty result restricts nothing (as an empty list does in the tool)."""
    auth_client: bool = False
    """Whether an entry's ``auth`` is a pre-registered OAuth client (Cursor's ``CLIENT_ID``, ``CLIENT_SECRET``,
    ``scopes``), which becomes mcpvisor's ``oauth`` block."""
    enablement: tuple[str, str] | None = None
    """``(file, command)``: the file beside the user's settings where the tool's command keeps the servers it turned
    off, ``{name: {"enabled": false}}`` with the name lowercased and trimmed; it applies to every file's servers."""
    project_off: str | None = None
    """The list, in the project's entry of the user's file (``projects/<folder>/...``), of the servers the tool turns
    off in this folder whatever their scope (Claude Code's ``/mcp`` disable)."""


_GEMINI_OFF = ("mcp/excluded", "excludeMCPServers")  # the second: versions before the mcp settings object
_GEMINI_ON = ("mcp/allowed", "allowMCPServers")

SOURCES: Mapping[str, SourceSpec] = {
    "claude-desktop": SourceSpec("Claude Desktop", "literal", "guess"),
    "claude-code": SourceSpec("Claude Code", "braced", "sse", project_off="disabledMcpServers"),
    "vscode": SourceSpec("VS Code", "vscode", "guess"),
    "cursor": SourceSpec("Cursor", "vscode", "guess", auth_client=True),
    "gemini": SourceSpec(
        "Gemini CLI",
        "shell",
        "sse",
        _GEMINI_OFF,
        _GEMINI_ON,
        enablement=("mcp-server-enablement.json", "gemini mcp disable"),
    ),
    # 'qwen mcp disable' writes 'mcp.excluded': Qwen Code keeps no enablement file.
    "qwen": SourceSpec("Qwen Code", "shell", "sse", _GEMINI_OFF, _GEMINI_ON),
}
"""The tools ``mcp import --from`` reads, with how each spells its entries."""


def home_of(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())


def _app_dir(env: Mapping[str, str], platform: str, *parts: str) -> Path:
    """A desktop application's per-user folder: ~/Library/Application Support on macOS, %APPDATA%
    on Windows, $XDG_CONFIG_HOME (~/.config) elsewhere."""
    home = home_of(env)
    if platform == "darwin":
        base = home / "Library" / "Application Support"
    elif platform.startswith("win"):
        base = Path(env.get("APPDATA") or home / "AppData" / "Roaming")
    else:
        base = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    return base.joinpath(*parts)


def locations(
    source: str, env: Mapping[str, str], root: Path, platform: str
) -> list[tuple[Path, ImportLevel, str | None]]:
    """``(file, level, key)`` for each place ``source`` keeps servers, the user's first; key ``None`` is
    ``.mcp.json``."""
    home = home_of(env)
    if source == "claude-desktop":
        return [(_app_dir(env, platform, "Claude", "claude_desktop_config.json"), "user", "mcpServers")]
    if source == "claude-code":
        config_dir = env.get("CLAUDE_CONFIG_DIR")
        claude_json = Path(config_dir) / ".claude.json" if config_dir else home / ".claude.json"
        return [
            (claude_json, "user", "mcpServers"),
            (claude_json, "workspace", f"projects/{root}/mcpServers"),
            (_paths.workspace_mcp_json_path(root), "workspace", None),
        ]
    if source == "vscode":
        user = _app_dir(env, platform, "Code", "User")
        return [
            (user / "mcp.json", "user", "servers"),
            (user / "settings.json", "user", "mcp/servers"),
            (root / ".vscode" / "mcp.json", "workspace", "servers"),
            (root / ".vscode" / "settings.json", "workspace", "mcp/servers"),
        ]
    if source in ("cursor", "gemini", "qwen"):
        folder = {"cursor": ".cursor", "gemini": ".gemini", "qwen": ".qwen"}[source]
        name = "mcp.json" if source == "cursor" else "settings.json"
        if source == "gemini" and env.get("GEMINI_CLI_HOME"):  # Gemini CLI's home instead of the user's
            home = Path(env["GEMINI_CLI_HOME"])
        return [(home / folder / name, "user", "mcpServers"), (root / folder / name, "workspace", "mcpServers")]
    raise ValueError(f"unknown source {source!r}")


def dig(data: Mapping[str, Any], key: str) -> Any:
    """``data`` at a ``/``-separated path whose last-but-one part may hold slashes (a project folder)."""
    head, _, rest = key.partition("/")
    if not rest:
        return data.get(head)
    if head == "projects":
        folder, _, tail = rest.rpartition("/")
        projects = data.get("projects")
        node = projects.get(folder) if isinstance(projects, Mapping) else None
        return node.get(tail) if isinstance(node, Mapping) else None
    node = data.get(head)
    return dig(node, rest) if isinstance(node, Mapping) else None


def read_quietly(path: Path, parsed: Mapping[Path, dict[str, Any] | None]) -> dict[str, Any] | None:
    """``path``'s settings as read already, or read now; None if it is missing or does not parse."""
    if path in parsed:
        return parsed[path]
    try:
        return read_settings_file(path)
    except SettingsFileError:
        return None


def turned_off(
    spec: SourceSpec, lists: Sequence[tuple[Path, Mapping[str, Any] | None]], names: Sequence[str], user_folder: Path
) -> dict[str, str]:
    """Server name -> why it is not imported, given the settings that apply (``(path, data)``, the nearest first) and
    the folder of the user's (``spec.enablement``'s file is there): the tool does not run it, being listed in an off
    list (``listed in 'mcp.excluded' in <path>``), left out of the allow-lists or turned off by the tool's command;
    or whether it does cannot be told (that command's file does not parse)."""
    off: dict[str, str] = {}
    allowed: list[tuple[set[str], str]] = []
    for path, data in lists:
        for key in spec.off_lists:
            listed = dig(data, key) if data is not None else None
            for name in listed if isinstance(listed, list) else []:
                if isinstance(name, str):
                    off.setdefault(name, f"listed in '{key.replace('/', '.')}' in {path}")
        on = [(key, dig(data, key)) for key in spec.on_lists] if data is not None else []
        key, listed = next(((k, v) for k, v in on if isinstance(v, list)), ("", None))
        if listed is not None:
            allowed.append(({n for n in listed if isinstance(n, str) and n}, f"'{key.replace('/', '.')}' in {path}"))
    common = set.intersection(*(kept for kept, _ in allowed)) if allowed else set()
    if common:  # no list, or none in common: the tool runs every server
        where = " and ".join(where for _, where in allowed)
        for name in names:
            if name not in common:
                off.setdefault(name, f"not in {where}")
    unknown: dict[str, str] = {}
    if spec.enablement is not None:
        file, command = spec.enablement
        try:
            enablement = read_settings_file(user_folder / file)
        except SettingsFileError as exc:
            why = f"whether {spec.title} runs it cannot be told: {exc} ('{command}' keeps there the servers it turned "
            unknown = dict.fromkeys(names, f"{why}off); fix the file and import again")
            enablement = None
        for name in names:
            state = enablement.get(name.strip().lower()) if enablement is not None else None
            if isinstance(state, Mapping) and state.get("enabled") is False:
                off.setdefault(name, f"by '{command}', kept in {user_folder / file}")
    reasons = {
        name: f"it is turned off in {spec.title} ({why}); add it by hand if you want it" for name, why in off.items()
    }
    return {**unknown, **reasons}


def off_in_project(
    spec: SourceSpec, user_data: Mapping[str, Any] | None, root: Path, user_file: Path
) -> dict[str, str]:
    """Server name -> where ``spec.project_off`` lists it as turned off in ``root`` (none without such a list)."""
    if spec.project_off is None or user_data is None:
        return {}
    listed = dig(user_data, f"projects/{root}/{spec.project_off}")
    where = f"listed in '{spec.project_off}' of this folder's entry in {user_file}"
    return {name: where for name in listed if isinstance(name, str)} if isinstance(listed, list) else {}
