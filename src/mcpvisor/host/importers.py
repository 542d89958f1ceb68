"""Reading the MCP server entries other tools keep, translated to mcpvisor entries (``mcp import``).

Pure reading and planning: :func:`scan_source` finds a tool's files at their documented locations
(:mod:`mcpvisor.host.import_sources`) and turns each entry into an mcpvisor entry, or says why it cannot be imported;
:func:`plan_import` compares the result with what the settings already hold. Writing is the
caller's (through :mod:`mcpvisor.host.settings.writer`, which keeps comments).

Where an entry is found fixes where it goes: a user-level file lands in the user settings, a
project-level file in the workspace settings, where it stays gated by approval like every
workspace server.

Each tool's variables become mcpvisor's ``${VAR}``: VS Code and Cursor's ``${env:NAME}``,
``${userHome}`` and ``${workspaceFolder}`` are translated; a ``$`` that the source tool would keep
literally is escaped as ``$$``. An entry that needs something mcpvisor does not do (an
``${input:...}`` prompt, an ``envFile``, a command that prints headers) is listed with the reason
and left out, never dropped silently.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.import_sources import (
    SOURCES,
    ImportLevel,
    SourceSpec,
    dig,
    home_of,
    locations,
    off_in_project,
    read_quietly,
    turned_off,
)
from mcpvisor.host.oauth_settings import OAUTH_FIELDS
from mcpvisor.host.settings.files import SettingsFileError, read_settings_file
from mcpvisor.host.settings.servers import (
    REPOSITORY_RESERVED_NAMES,
    describe_validation,
    reserved_name,
    transport_conflict,
    unshowable_name,
)

__all__ = [
    "SOURCES",
    "Candidate",
    "ImportLevel",
    "ImportScan",
    "PlannedImport",
    "SourceFile",
    "plan_import",
    "scan_source",
]

# Fields each tool writes that mcpvisor reads the same way (before normalization).
_FIELDS = frozenset(
    {
        *McpServerConfig.model_fields,
        "type",
        "httpUrl",
        "includeTools",
        "excludeTools",
        "discoveryTimeoutMs",
        "oauth",
        "authProviderType",
    }
) - {"scope", "extension_name", "shared"}

# Fields that change how a server is started or reached, which mcpvisor cannot honour: the entry is
# left out, with the fix.
_UNSUPPORTED: Mapping[str, str] = {
    "envFile": "mcpvisor reads no env files: copy the variables into 'env' (or reference them as ${VAR})",
    "headersHelper": "mcpvisor runs no header helper: put the headers in 'headers', values as ${VAR}",
}

_GOOGLE_SIGN_IN = ("google_credentials", "service_account_impersonation")  # Gemini CLI's (dynamic_discovery: OAuth)

_CLIENT_FIELDS = {"CLIENT_ID": "clientId", "CLIENT_SECRET": "clientSecret", "scopes": "scopes"}
"""Cursor's ``auth`` (a pre-registered OAuth client) -> mcpvisor's ``oauth``."""

_STRING_FIELDS = ("command", "cwd", "url", "httpUrl", "http_url")
_STRING_MAP_FIELDS = ("env", "headers")


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file looked at: where it is, which level it belongs to, and whether it exists."""

    path: Path
    level: ImportLevel
    exists: bool
    note: str | None = None
    """Why the file is not read although it exists (``.mcp.json``, which mcpvisor reads itself)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One server entry found in a source file: its translated entry, or why it cannot be imported."""

    name: str
    file: Path
    level: ImportLevel
    entry: Mapping[str, Any] | None
    reason: str | None = None
    notes: tuple[str, ...] = ()
    """What was adjusted on the way: ignored fields, a guessed transport."""

    def config(self) -> McpServerConfig | None:
        return McpServerConfig.model_validate(self.entry) if self.entry is not None else None


@dataclass(frozen=True, slots=True)
class ImportScan:
    source: str
    title: str
    files: tuple[SourceFile, ...]
    candidates: tuple[Candidate, ...] = field(default=())
    looked: tuple[Path, ...] = ()
    """Every file looked for, once each: also one read that holds no servers (none for this folder)."""

    @property
    def found(self) -> tuple[SourceFile, ...]:
        return tuple(f for f in self.files if f.exists)


@dataclass(frozen=True, slots=True)
class PlannedImport:
    """What importing one candidate does: ``add``, ``replace``, nothing (``present``) or ``skip``."""

    candidate: Candidate
    action: Literal["add", "replace", "present", "skip"]
    destination: Path
    reason: str | None = None


# --------------------------------------------------------------------------- reading a tool's files


def scan_source(
    source: str,
    env: Mapping[str, str],
    root: Path,
    *,
    levels: Collection[ImportLevel] = ("user", "workspace"),
    platform: str = sys.platform,
) -> ImportScan:
    """Every server entry ``source`` keeps for ``root``, translated. A source file that does not parse is one
    candidate (``*``) that cannot be imported, whose reason names file, line and column: the others import."""
    spec = SOURCES.get(source)
    if spec is None:
        raise ValueError(f"unknown source {source!r}; use one of: {', '.join(SOURCES)}")
    files: list[SourceFile] = []
    candidates: list[Candidate] = []
    parsed: dict[Path, dict[str, Any] | None] = {}
    looked: dict[Path, None] = {}
    for path, level, key in locations(source, env, root, platform):
        if level not in levels:
            continue
        looked.setdefault(path)
        if path not in parsed:
            try:
                parsed[path] = read_settings_file(path)
            except SettingsFileError as exc:
                parsed[path] = None
                files.append(SourceFile(path, level, True))
                candidates.append(Candidate("*", path, level, None, f"{exc}; nothing imported from this file"))
                continue
        data = parsed[path]
        if key is None:
            note = "mcpvisor reads .mcp.json itself (its servers need approval): nothing to import"
            files.append(SourceFile(path, level, data is not None, note))
            continue
        servers = dig(data, key) if data is not None else None
        if data is not None and key.count("/") and servers is None:
            continue  # a settings file without MCP servers, or no entry for this project
        files.append(SourceFile(path, level, data is not None))
        if servers is None:
            continue
        if not isinstance(servers, Mapping):
            candidates.append(
                Candidate("*", path, level, None, f"'{key.rpartition('/')[2]}' is not an object; nothing imported")
            )
            continue
        inputs = _inputs(data) if spec.dialect == "vscode" and data is not None else {}
        lists = [(path, data)]
        user_file = locations(source, env, root, platform)[0][0]
        if level == "workspace" and spec.off_lists:  # the user's lists apply to a project's servers too
            lists.append((user_file, read_quietly(user_file, parsed)))
        off = turned_off(spec, lists, [str(name) for name in servers], user_file.parent)
        here = off_in_project(spec, read_quietly(user_file, parsed), root, user_file)
        if level == "workspace":  # turned off in this folder: as if listed in its settings
            off |= {
                n: f"it is turned off here in {spec.title} ({w}); add it by hand if you want it"
                for n, w in here.items()
            }
        context = _Context(spec, env, root, level, inputs, off)
        for name, raw in servers.items():
            found = _translate(str(name), raw, path, context)
            if found.entry is not None and str(name) in here:  # a user's server: it runs in other folders
                note = f"turned off in this folder in {spec.title} ({here[str(name)]}): to do the same, add it to "
                found = replace(found, notes=(*found.notes, f"{note}'mcp.excluded' in this folder's settings"))
            candidates.append(found)
    return ImportScan(source, spec.title, tuple(files), tuple(candidates), tuple(looked))


def _inputs(data: Mapping[str, Any]) -> dict[str, str]:
    """VS Code's ``inputs``: id -> description, for naming what an ``${input:id}`` would ask."""
    raw = data.get("inputs")
    if raw is None and isinstance(data.get("mcp"), Mapping):
        raw = data["mcp"].get("inputs")
    out: dict[str, str] = {}
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("id"), str):
            out[item["id"]] = str(item.get("description") or "")
    return out


# --------------------------------------------------------------------------- translating one entry


@dataclass(frozen=True, slots=True)
class _Context:
    spec: SourceSpec
    env: Mapping[str, str]
    root: Path
    level: ImportLevel
    inputs: Mapping[str, str]
    turned_off: Mapping[str, str] = field(default_factory=dict)


class _Untranslatable(Exception):
    pass


_VSCODE_VAR = re.compile(r"\$\{([^}]*)\}")
_BRACED_VAR = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}")
_SHELL_VAR = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}|[A-Za-z_][A-Za-z0-9_]*)")


def _substitute(text: str, pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str]) -> str:
    """``text`` with each ``pattern`` match replaced and every other ``$`` escaped as ``$$``
    (the source tool keeps it literally; mcpvisor would expand it)."""
    out: list[str] = []
    pos = 0
    for match in pattern.finditer(text):
        out.append(text[pos : match.start()].replace("$", "$$"))
        out.append(replace(match))
        pos = match.end()
    out.append(text[pos:].replace("$", "$$"))
    return "".join(out)


def _vscode_variable(name: str, ctx: _Context) -> str:
    kind, _, arg = name.partition(":")
    if kind == "env" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", arg):
        return f"${{{arg}}}"
    if kind == "input":
        described = f" ({ctx.inputs[arg]!r})" if ctx.inputs.get(arg) else ""
        raise _Untranslatable(
            f"uses ${{input:{arg}}}{described}, which {ctx.spec.title} asks for when it starts the server; "
            "mcpvisor asks for nothing: set an environment variable, write ${VAR} in its place and add the "
            "server with mcpvisor mcp add"
        )
    if name == "userHome":
        return str(home_of(ctx.env)).replace("$", "$$")
    if name in ("pathSeparator", "/"):
        return os.sep
    if name in ("workspaceFolder", "workspaceFolderBasename", "workspaceRoot"):
        if ctx.level == "user":
            raise _Untranslatable(
                f"uses ${{{name}}} in a user-level server (it means whichever folder is open); mcpvisor has "
                "no such variable: add the server to each workspace that needs it instead"
            )
        folder = ctx.root.name if name == "workspaceFolderBasename" else str(ctx.root)
        return folder.replace("$", "$$")
    raise _Untranslatable(f"uses ${{{name}}}, a {ctx.spec.title} variable mcpvisor does not have")


def _string(text: str, ctx: _Context) -> str:
    if ctx.spec.dialect == "literal":
        return text.replace("$", "$$")
    if ctx.spec.dialect == "vscode":
        return _substitute(text, _VSCODE_VAR, lambda m: _vscode_variable(m[1], ctx))
    if ctx.spec.dialect == "braced":  # Claude Code expands only ${VAR} and ${VAR:-default}
        return _substitute(text, _BRACED_VAR, lambda m: m[0])
    return _substitute(text, _SHELL_VAR, lambda m: m[0])  # Gemini and Qwen expand $VAR and ${VAR}, keep '$$'


def _translate(name: str, raw: Any, path: Path, ctx: _Context) -> Candidate:
    def skipped(reason: str, notes: tuple[str, ...] = ()) -> Candidate:
        return Candidate(name, path, ctx.level, None, reason, notes)

    if not name.strip():
        return skipped(f"it has no name, which mcpvisor needs: give it one in {ctx.spec.title} and import again")
    if (unshowable := unshowable_name(name)) is not None:
        return skipped(f"{unshowable}: rename it in {ctx.spec.title} and import again")
    if not isinstance(raw, Mapping):
        return skipped(f"the entry is not an object (found {type(raw).__name__})")
    if raw.get("disabled") is True or raw.get("enabled") is False:
        return skipped(f"it is turned off in {ctx.spec.title}; add it by hand if you want it")
    if name in ctx.turned_off:
        return skipped(ctx.turned_off[name])
    for key, why in _UNSUPPORTED.items():
        if key in raw:
            return skipped(f"it uses '{key}': {why}")
    if isinstance(kind := raw.get("type"), str) and kind.lower() in ("ws", "websocket"):
        why = (
            "which mcpvisor does not speak (nor MCP's standard transports): add the server's stdio or HTTP form by hand"
        )
        return skipped(f"it connects over WebSocket ('type': {kind!r}), {why}")
    if (provider := raw.get("authProviderType")) in _GOOGLE_SIGN_IN:
        why = "mcpvisor signs in with no Google credentials: send a token in 'headers' as ${VAR}, or use 'oauth'"
        return skipped(f"it uses 'authProviderType' {provider!r}: {why}")
    client = ctx.spec.auth_client and "auth" in raw and "oauth" not in raw
    ignored = sorted(k for k in raw if k not in _FIELDS and k not in ("disabled", "enabled", *(["auth"] * client)))
    notes: list[str] = [f"ignored {', '.join(repr(k) for k in ignored)} (no mcpvisor equivalent)"] if ignored else []
    entry: dict[str, Any] = {k: v for k, v in raw.items() if k in _FIELDS}
    guess = ctx.spec.url_means == "guess" and not {"type", "httpUrl", "command"} & entry.keys()
    if "url" in entry and guess:  # with a command, the command runs: nothing to guess
        sse = entry["url"].rstrip("/").endswith("/sse") if isinstance(entry["url"], str) else False
        entry["type"] = "sse" if sse else "http"
        notes.append(f"no 'type': taken as {'SSE (the path ends in /sse)' if sse else 'streamable HTTP'}")
    if isinstance(entry.get("type"), str) and entry["type"].lower() == "stdio" and "command" in entry:
        del entry["type"]
    try:
        for key in _STRING_FIELDS:
            if isinstance(entry.get(key), str):
                entry[key] = _string(entry[key], ctx)
        if isinstance(entry.get("args"), list):
            entry["args"] = [_string(a, ctx) if isinstance(a, str) else a for a in entry["args"]]
        for key in _STRING_MAP_FIELDS:
            if isinstance(entry.get(key), Mapping):
                entry[key] = {k: _string(v, ctx) if isinstance(v, str) else v for k, v in entry[key].items()}
        if client:
            entry["oauth"] = _client_block(raw["auth"], ctx, notes)
        elif isinstance(block := entry.get("oauth"), Mapping) and (extra := sorted(set(block) - OAUTH_FIELDS)):
            entry["oauth"] = {k: v for k, v in block.items() if k in OAUTH_FIELDS}
            why = "mcpvisor finds the authorization server's endpoints from the server, and has its own redirect"
            notes.append(f"ignored {', '.join(repr(k) for k in extra)} of 'oauth' ({why})")
    except _Untranslatable as exc:
        return skipped(str(exc), tuple(notes))
    try:
        cfg = McpServerConfig.model_validate(entry)
    except ValueError as exc:
        return skipped(f"invalid entry: {describe_validation(exc)}", tuple(notes))
    if (conflict := transport_conflict(entry, cfg)) is not None:
        notes.append(f"it {conflict}")
    return Candidate(name, path, ctx.level, entry, None, tuple(notes))


def _client_block(auth: Any, ctx: _Context, notes: list[str]) -> dict[str, Any]:
    """Cursor's ``auth`` as mcpvisor's ``oauth`` block, its strings translated; what else it holds is noted as
    ignored."""
    if not isinstance(auth, Mapping):
        raise _Untranslatable(f"its 'auth' is not an object (found {type(auth).__name__})")
    block: dict[str, Any] = {}
    for key, value in auth.items():
        if key not in _CLIENT_FIELDS:
            continue
        if key == "scopes" and isinstance(value, list) and all(isinstance(v, str) for v in value):
            block["scopes"] = [_string(v, ctx) for v in value]
        elif key != "scopes" and isinstance(value, str):
            block[_CLIENT_FIELDS[key]] = _string(value, ctx)
        else:  # the value is not shown: it may be the secret
            kind = "a list of strings" if key == "scopes" else "a string"
            raise _Untranslatable(f"'auth.{key}' must be {kind} (found {type(value).__name__})")
    if ignored := sorted(str(k) for k in auth if k not in _CLIENT_FIELDS):
        notes.append(f"ignored {', '.join(repr(f'auth.{k}') for k in ignored)} (no mcpvisor equivalent)")
    notes.append(
        f"'auth' taken as 'oauth' (a pre-registered client): besides {ctx.spec.title}'s redirect, the client must "
        "allow mcpvisor's, http://127.0.0.1/callback (on any port)"
    )
    return block


# --------------------------------------------------------------------------- against the settings


def plan_import(
    scan: ImportScan,
    existing: Mapping[ImportLevel, Mapping[str, Any]],
    destinations: Mapping[ImportLevel, Path],
    *,
    force: bool = False,
) -> list[PlannedImport]:
    """What importing ``scan`` into settings holding ``existing`` servers (per level) does. ``destinations``: the
    file of each level (a workspace's that is not the user's is a repository's: some names are not its to take)."""
    planned: list[PlannedImport] = []
    taken: dict[tuple[ImportLevel, str], Path] = {}
    for cand in scan.candidates:
        dest = destinations[cand.level]
        if cand.entry is None:
            planned.append(PlannedImport(cand, "skip", dest, cand.reason))
            continue
        if cand.level == "workspace" and cand.name in REPOSITORY_RESERVED_NAMES and dest != destinations.get("user"):
            planned.append(PlannedImport(cand, "skip", dest, f"{reserved_name(cand.name)}; add it under another name"))
            continue
        first = taken.setdefault((cand.level, cand.name), cand.file)
        if first != cand.file:
            reason = f"{first} defines a server of the same name, which is imported instead"
            planned.append(PlannedImport(cand, "skip", dest, reason))
            continue
        current = existing.get(cand.level, {}).get(cand.name)
        if current is None:
            planned.append(PlannedImport(cand, "add", dest))
        elif _same(current, cand.entry):
            planned.append(PlannedImport(cand, "present", dest, f"already in {dest}"))
        elif force:
            planned.append(PlannedImport(cand, "replace", dest, f"replaces the entry in {dest}"))
        else:
            reason = f"{dest} already has a different {cand.name!r}; pass --force to replace it"
            planned.append(PlannedImport(cand, "skip", dest, reason))
    return planned


def _same(current: Any, entry: Mapping[str, Any]) -> bool:
    if not isinstance(current, Mapping):
        return False
    try:
        return McpServerConfig.model_validate(current).entry() == McpServerConfig.model_validate(entry).entry()
    except ValueError:
        return False
