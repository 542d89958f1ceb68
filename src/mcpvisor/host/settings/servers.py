"""Server entries of settings and server files, with their provenance."""

from __future__ import annotations

import difflib
import json
import logging
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mcpvisor.core.server_config import (
    REPOSITORY_SCOPES,
    McpServerConfig,
    Scope,
    canonical_json,
    normalize_server_entry,
)
from mcpvisor.core.spellings import ALIASES, TYPE_TRANSPORTS, file_name, written_names
from mcpvisor.host.oauth_settings import OAUTH_FIELDS
from mcpvisor.host.settings.expand import expand_vars, expansion_warnings
from mcpvisor.host.settings.files import SettingsError, SettingsFileError, read_settings_document
from mcpvisor.host.settings.schema import SETTINGS_SCHEMA
from mcpvisor.host.settings.scopes import ServerScope

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- servers


@dataclass(frozen=True, slots=True)
class ServerEntry:
    """One configured server and where it came from (``path`` is ``None`` for session-injected ones)."""

    config: McpServerConfig
    scope: ServerScope
    path: Path | None


@dataclass(frozen=True, slots=True)
class SkippedServer:
    """A server entry that is not valid, so no server runs for it: kept so status views can show it after its
    warning scrolled away. ``problem`` is the warning's words after its file (why, and the fix; never a value)."""

    name: str
    scope: ServerScope
    path: Path | None
    problem: str


@dataclass(frozen=True, slots=True)
class ServerLayer:
    """The servers of one server file (``.mcp.json`` or ``--mcp-config``)."""

    scope: ServerScope
    path: Path | None
    servers: Mapping[str, ServerEntry] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    error: SettingsError | None = None
    skipped: Mapping[str, SkippedServer] = field(default_factory=dict)


SKIPPED_MCP_ENTRY = ("skipped MCP server ", "skipped an MCP server named ")
"""How the warning of each MCP server entry skipped as invalid starts (also one no status row can show by name)."""

REPOSITORY_RESERVED_NAMES = frozenset({"lsp"})
"""Names a repository's server may not take: the host's own tools' (``mcp__lsp__*``, the language server tools).
A user's server may (the tools then move to ``mcp__lsp_1__*``); a repository's would move them before it is even
approved, and take over calls, allow-lists and instructions that name them once it is."""


def unshowable_name(name: str) -> str | None:
    """Why ``name`` cannot name a server, when it holds a control character (a line break, a tab, an escape), a
    line or paragraph separator, or an invisible one (zero-width, a bidirectional override): shown, it would split
    the line it is on or read as another name; or half of a UTF-16 surrogate pair (JSON may spell ``\\ud800``),
    which is no character and cannot be written out at all. None: it may name one."""
    halves = dict.fromkeys(ascii(c)[1:-1] for c in name if unicodedata.category(c) == "Cs")
    if halves:
        return (
            f"its name holds {', '.join(halves)}, half of a surrogate pair, which is no character and cannot be shown"
        )
    odd = dict.fromkeys(ascii(c)[1:-1] for c in name if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp"))
    return f"its name holds {', '.join(odd)}, which would show it as another name or split its line" if odd else None


def reserved_name(name: str) -> str:
    """Why a repository's server may not be named ``name`` (one of :data:`REPOSITORY_RESERVED_NAMES`)."""
    return f"{name!r} names the language server tools (mcp__{name}__*), which a repository's server may not take"


def look_alike(kind: str, places: Iterable[tuple[str, Path | str | None]]) -> list[str]:
    """A warning for each set of names, among ``(name, where it is defined)``, that differ only in how their letters
    are composed in Unicode (``café`` as one character or as ``e`` and an accent): they look the same everywhere
    they are shown, yet are servers apart (``kind``: "MCP servers" or "language servers")."""
    groups: dict[str, list[tuple[str, Path | str | None]]] = {}
    for name, where in places:
        groups.setdefault(unicodedata.normalize("NFC", name), []).append((name, where))
    warnings = []
    for group in (sorted(g, key=lambda place: place[0]) for g in groups.values() if len(g) > 1):
        names = " and ".join(repr(name) for name, _ in group)
        files = " and ".join(dict.fromkeys(str(where) for _, where in group if where is not None))
        spelt = ", ".join(ascii(name) for name, _ in group)
        warnings.append(
            f"{kind} {names}{f' in {files}' if files else ''} look the same but are written with different "
            f"characters ({spelt}): each is a server of its own; rename one of them"
        )
    return warnings


def name_written_otherwise(name: str, names: Iterable[str]) -> str | None:
    """The end of a sentence saying which of ``names`` a ``name`` that is none of them was likely meant as: one that
    differs only in the case of its letters, or only in how they are composed in Unicode (None: none does)."""
    composed = unicodedata.normalize("NFC", name)
    for other in sorted(set(names)):
        if other == name or unicodedata.normalize("NFC", other).casefold() != composed.casefold():
            continue
        if unicodedata.normalize("NFC", other) == composed:
            return (
                f"{other!r} is, written with other characters ({ascii(other)}; the name given is {ascii(name)}): "
                "paste its name as mcpvisor lists it"
            )
        return f"{other!r} is (names are case-sensitive): give it as {other!r}"
    return None


SECONDS_LIKE_TIMEOUT_MS = 1000
"""A ``timeout`` below this many milliseconds was most likely meant in seconds: it is warned about."""


def describe_validation(exc: ValueError, names: Mapping[str, str] | None = None) -> str:
    """A validation problem in words, never echoing the input (it may hold secrets). Each field is named as the entry
    wrote it (``names``: canonical field name -> its spelling in the entry, :func:`written_fields`), else as a
    settings file spells it (``excludeTools``, not ``exclude_tools``)."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors(include_input=False, include_url=False):
            path = [str(p) for p in err["loc"]]
            if path:
                path[0] = (names or {}).get(path[0]) or file_name(path[0])
            loc = ".".join(path)
            msg = _EXPECTED.get(err["type"]) or err["msg"].removeprefix("Value error, ")
            parts.append(f"{loc}: {msg}" if loc else msg)
        return "; ".join(parts)
    return str(exc)


def written_fields(entry: Mapping[str, Any]) -> dict[str, str]:
    """Canonical field names -> their spelling in a server ``entry`` (``cwd`` -> ``workingDirectory``)."""
    try:
        normalized = normalize_server_entry(entry)
    except ValueError:  # (a 'type' that is not one: no field is renamed by it)
        normalized = {}
    return written_names(entry, normalized)


# Pydantic's words for a wrong JSON type, in the words of the settings file.
_EXPECTED = {
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "dict_type": "expected an object",
    "string_type": "expected a string",
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
}

# Fields people write that are not McpServerConfig fields but are understood (auth settings).
_EXTRA_OK = frozenset({"oauth", "auth", "auth_provider_type", "authProviderType"})
_KNOWN_FIELDS = (
    *McpServerConfig.model_fields,
    "type",
    "httpUrl",
    "includeTools",
    "excludeTools",
    "discoveryTimeoutMs",
    "extensionName",
)


def _did_you_mean(field: str, fields: tuple[str, ...] = _KNOWN_FIELDS) -> str:
    if field in ("disabled", "enabled") and fields is _KNOWN_FIELDS:
        return "; to turn a server off, list its name in mcp.excluded"
    close = [known for known in fields if known.casefold() == field.casefold()]
    close = close or difflib.get_close_matches(field, fields, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _typos(entry: Mapping[str, Any]) -> str:
    """`` (its field 'comand'; did you mean 'command'?)`` for each unknown field of an invalid entry that reads as a
    misspelling of a known one, to go after why it is invalid (else "")."""
    unknown = (
        str(k)
        for k in entry
        if ALIASES.get(str(k), str(k)) not in McpServerConfig.model_fields and k not in ("type", *_EXTRA_OK)
    )
    return "".join(f" (its field {k!r}{hint})" for k in sorted(unknown) if (hint := _did_you_mean(k)))


_CACHE_MAX = 4096
_cache: dict[tuple[str, str | None, int], tuple[McpServerConfig, frozenset[str]] | str] = {}


def _build_config(
    entry: Mapping[str, Any], stamp: Scope | None, env: Mapping[str, str]
) -> tuple[McpServerConfig, frozenset[str]] | str:
    """One config from a literal entry (or why it is invalid), remembered by content: an unchanged
    entry gives the very same (frozen) object on every reload, so comparing maps is cheap."""
    try:
        cache_key = (canonical_json(entry), stamp, hash(frozenset(env.items())))
    except TypeError:
        cache_key = None
    if cache_key is not None and (hit := _cache.get(cache_key)) is not None:
        return hit
    missing: set[str] = set()
    result: tuple[McpServerConfig, frozenset[str]] | str
    try:
        cfg = McpServerConfig.from_entry(entry, expand=partial(expand_vars, env=env, missing=missing), scope=stamp)
        result = (cfg, frozenset(missing))
    except ValueError as exc:
        result = describe_validation(exc, written_fields(entry))
    if cache_key is not None:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[cache_key] = result
    return result


def build_server_entries(
    entries: Any,
    *,
    path: Path | None,
    scope: ServerScope,
    stamp: Scope | None,
    env: Mapping[str, str],
    key: str = "mcpServers",
) -> tuple[dict[str, ServerEntry], list[str], dict[str, SkippedServer]]:
    """Validate a ``{name: entry}`` object into server entries, hashing each literal entry before expansion.

    An invalid entry is skipped with a warning naming the file, the server and the fix; the others
    load. Returns the entries, the warnings and the skipped entries that can be shown by name.
    """
    where = str(path) if path is not None else scope
    if entries is None:
        return {}, [], {}
    if not isinstance(entries, Mapping):
        return {}, [f"ignored {key!r} in {where}: expected an object of servers by name"], {}
    servers: dict[str, ServerEntry] = {}
    warnings: list[str] = []
    skipped: dict[str, SkippedServer] = {}

    def skip(name: str, problem: str) -> None:
        warnings.append(f"{SKIPPED_MCP_ENTRY[0]}{name!r} in {where}: {problem}")
        skipped[name] = SkippedServer(name, scope, path, problem)

    for name, entry in entries.items():
        if not str(name).strip():  # (a row shows it by its key as written: '')
            warnings.append(f"{SKIPPED_MCP_ENTRY[1]}{name!r} in {where}: a server needs a name; fix {key}")
            skipped[str(name)] = SkippedServer(str(name), scope, path, f"a server needs a name; fix {key}")
            continue
        if (unshowable := unshowable_name(str(name))) is not None:  # (no row can show its name)
            warnings.append(f"{SKIPPED_MCP_ENTRY[0]}{name!r} in {where}: {unshowable}; rename it in {key}")
            continue
        if not isinstance(entry, Mapping):
            skip(name, f"expected an object; fix {key}.{name}")
            continue
        if stamp in REPOSITORY_SCOPES and name in REPOSITORY_RESERVED_NAMES:
            skip(name, f"{reserved_name(name)}; rename it in {key}.{name}")
            continue
        built = _build_config(entry, stamp, env)
        if isinstance(built, str):
            skip(name, f"{built}{_typos(entry)}; fix {key}.{name}")
            continue
        cfg, missing = built
        warnings.extend(
            f"unknown field {field!r} in MCP server {name!r} ({where}) is ignored{_did_you_mean(field)}"
            for field in sorted(cfg.model_extra or {})
            if field not in _EXTRA_OK
        )
        if isinstance(block := (cfg.model_extra or {}).get("oauth"), Mapping):
            warnings.extend(
                f"unknown field {field!r} in the oauth block of MCP server {name!r} ({where}) is ignored"
                f"{_did_you_mean(field, tuple(sorted(OAUTH_FIELDS)))}"
                for field in sorted(map(str, block))
                if field not in OAUTH_FIELDS
            )
        if (conflict := transport_conflict(entry, cfg)) is not None:
            warnings.append(f"MCP server {name!r} ({where}) {conflict} in {key}.{name}")
        warnings.extend(expansion_warnings(missing, f"MCP server {name!r} ({where})"))
        if (oauth := entry.get("oauth")) and isinstance(oauth, Mapping) and unpinned_credentials(oauth):
            warnings.append(
                f"MCP server {name!r} ({where}) sends its client credentials to whichever authorization server the "
                f"MCP server names: set {key}.{name}.oauth.issuer to that server's issuer URL to pin them"
            )
        if cfg.timeout is not None and cfg.timeout < SECONDS_LIKE_TIMEOUT_MS:
            warnings.append(
                f"'timeout' of MCP server {name!r} ({where}) is in milliseconds: {cfg.timeout} means "
                f"{cfg.timeout / 1000:g} s; for {cfg.timeout} s write {cfg.timeout * 1000}"
            )
        servers[name] = ServerEntry(cfg, scope, path)
    return servers, warnings, skipped


_TRANSPORT_NAMES = {"stdio": "stdio", "sse": "SSE", "http": "streamable HTTP"}


def unpinned_credentials(oauth: Mapping[str, Any]) -> bool:
    """Whether an ``oauth`` block's client credentials may go to any authorization server (no ``issuer``)."""
    return oauth.get("grant") == "client_credentials" and not oauth.get("issuer")


def transport_conflict(entry: Mapping[str, Any], cfg: McpServerConfig) -> str | None:
    """The end of a sentence saying which transport an entry that names more than one runs over (``command``
    with ``url``, or a ``type`` of ``sse`` with a ``command``), and what to fix; None: it names one."""
    written = [k for k, v in entry.items() if v is not None and ALIASES.get(k, k) in ("command", "url", "http_url")]
    used = cfg.transport
    if used == "stdio":
        used_key = "command"
    elif used == "sse":
        used_key = "url"
    else:
        used_key = next((k for k in written if ALIASES.get(k, k) == "http_url"), "url")
    how = f"{used_key!r} is used ({_TRANSPORT_NAMES[used]})"
    if others := [k for k in written if k != used_key]:
        ignored = " and ".join(repr(k) for k in others)
        return f"sets both {used_key!r} and {ignored}: {how}, {ignored} ignored; remove the one not meant"
    kind = entry.get("type")
    if isinstance(kind, str) and TYPE_TRANSPORTS.get(kind.lower(), used) != used:
        return f'has "type": {json.dumps(kind)} but {how}; fix "type" or {used_key!r}'
    return None


def servers_key(data: Mapping[str, Any]) -> str:
    """Where a settings or server file keeps its servers: ``mcpServers``, or VS Code's ``servers``."""
    return "servers" if "mcpServers" not in data and "servers" in data else "mcpServers"


def keep_last_good_entries(
    data: Mapping[str, Any],
    previous: Mapping[str, Any],
    *,
    path: Path | None,
    env: Mapping[str, str],
    settings_file: bool = False,
) -> tuple[Mapping[str, Any], dict[str, str]]:
    """``data`` with each invalid server entry replaced by that server's entry in ``previous`` when that
    one was valid: a typo in one server's ``args`` keeps it running on its last good configuration,
    while every other change of the same save applies. Returns the data and a notice per kept entry, by name.

    A save whose servers sit under a misspelling of ``mcpServers`` (and none under ``mcpServers``, nor, in a server
    file such as ``.mcp.json``, under VS Code's ``servers``) keeps all the last good servers of the file, with one
    notice. ``settings_file``: ``data`` is a settings file's, where ``servers`` is no servers key.

    ``data`` is returned as is when nothing is kept; only its servers object is ever copied."""
    if (misspelt := _keep_servers_of_misspelt_key(data, previous, path, settings_file)) is not None:
        return misspelt
    key = servers_key(data)
    entries, before = data.get(key), previous.get(servers_key(previous))
    if not isinstance(entries, Mapping) or not isinstance(before, Mapping):
        return data, {}
    kept: dict[str, Any] = {}
    notices: dict[str, str] = {}
    for name, entry in entries.items():
        old = before.get(name)
        if not isinstance(old, Mapping) or isinstance(_build_config(old, None, env), str):
            continue
        problem = "expected an object" if not isinstance(entry, Mapping) else _build_config(entry, None, env)
        if isinstance(problem, str):
            kept[name] = old
            notices[name] = (
                f"invalid entry in {path} ({_located(key, name, problem)}{_typos(entry)}) — the last good "
                f"configuration of MCP server {name!r} stays in force; fix the entry and save to apply it"
            )
    if not kept:
        return data, {}
    return {**data, key: {**entries, **kept}}, notices


def _keep_servers_of_misspelt_key(
    data: Mapping[str, Any], previous: Mapping[str, Any], path: Path | None, settings_file: bool
) -> tuple[Mapping[str, Any], dict[str, str]] | None:
    """``data`` with the last good servers of ``previous`` when ``data`` has none but holds an object under a
    misspelling of ``mcpServers`` (``mcpservers``, ``mcp_servers``): a renamed key is a typo, not every server
    deleted."""
    keys = ("mcpServers",) if settings_file else ("mcpServers", "servers")
    before_key = "mcpServers" if settings_file else servers_key(previous)
    before = previous.get(before_key)
    if any(key in data for key in keys) or not isinstance(before, Mapping) or not before:
        return None
    misspelt = misspelt_servers_key_of(data)
    if misspelt is None:
        return None
    names = ", ".join(repr(name) for name in before)
    notice = (
        f"kept the last good servers of {path} ({names}) until {misspelt!r} there is renamed 'mcpServers' "
        f"(did you mean 'mcpServers'?); to stop them instead, remove {misspelt!r}"
    )
    return {**data, before_key: before}, dict.fromkeys(map(str, before), notice)


def _located(key: str, name: str, problem: str) -> str:
    """``problem`` (``args: expected a list``, or several joined by ``; ``) prefixed with the entry's path."""
    parts = problem.split("; ")
    return "; ".join(f"{key}.{name}{'.' if _FIELD_PROBLEM.match(p) else ': '}{p}" for p in parts)


_FIELD_PROBLEM = re.compile(r"[A-Za-z_][\w.]*: ")
"""A problem of one field (``args: expected a list``), as :func:`describe_validation` words it."""


def server_layer_from_data(
    data: Mapping[str, Any] | None, path: Path | None, *, scope: ServerScope, env: Mapping[str, str]
) -> ServerLayer:
    """Servers of a server file's parsed content: Claude Code ``mcpServers`` or VS Code ``servers``.

    ``.mcp.json`` servers (``scope="project"``) are stamped ``scope: "project"``.
    """
    if not data:
        return ServerLayer(scope, path)
    warnings: list[str] = []
    key = servers_key(data)
    if key == "mcpServers" and "servers" in data:
        warnings.append(f"ignored 'servers' in {path}: 'mcpServers' is also set and wins")
    warnings.extend(  # only those meant as servers: the file may be another tool's, with settings of its own
        f"unknown key {other!r} in {path} is ignored{hint}"
        for other in data
        if other not in _SERVER_FILE_KEYS and (hint := servers_key_hint(other, data[other]))
    )
    stamp: Scope | None = "project" if scope == "project" else None
    servers, more, skipped = build_server_entries(data.get(key), path=path, scope=scope, stamp=stamp, env=env, key=key)
    return ServerLayer(scope, path, servers, tuple(warnings + more), skipped=skipped)


_SERVER_FILE_KEYS = frozenset({"mcpServers", "servers", "inputs", "$schema"})
"""Top-level keys of a server file: Claude Code's servers, VS Code's servers and the inputs they ask for, a schema.
Another key is warned about only when it reads as meant for the servers: a ``--mcp-config`` file may be another
tool's configuration (Claude Desktop's ``globalShortcut``, Gemini CLI's ``theme``), which is not for mcpvisor to fix."""

_TRANSPORT_FIELDS = ("command", "url", "httpUrl")


def servers_key_hint(key: str, value: Any) -> str:
    """``; did you mean 'mcpServers'?`` for a top-level ``key`` that was meant to hold the servers (a misspelling
    of it), or the advice to move an entry written at the top level (one with a command or URL) into it; else ""."""
    if isinstance(value, Mapping) and any(field in value for field in _TRANSPORT_FIELDS):
        return f'; it looks like a server: put it inside "mcpServers": {{{json.dumps(key)}: {{...}}}}'
    return "; did you mean 'mcpServers'?" if misspelt_servers_key(key) else ""


def misspelt_servers_key(key: str) -> bool:
    """Whether a top-level ``key`` reads as a misspelling of ``mcpServers``: never a key settings files know
    (``lspServers`` is as close to it as a typo, and is a setting of its own)."""
    if key in SETTINGS_SCHEMA:
        return False
    squashed = key.casefold().replace("_", "").replace("-", "")
    return squashed in ("mcpservers", "mcpserver", "servers") or bool(
        difflib.get_close_matches(key, ["mcpServers"], cutoff=0.8)
    )


def misspelt_servers_key_of(data: Mapping[str, Any]) -> str | None:
    """The first top-level key of a file's content that holds an object under a misspelling of ``mcpServers``
    (``mcpservers``, ``mcp_servers``; None: no key does)."""
    return next((k for k, v in data.items() if isinstance(v, Mapping) and misspelt_servers_key(k)), None)


def load_server_file(path: Path, env: Mapping[str, str], *, scope: ServerScope, missing_ok: bool = True) -> ServerLayer:
    """Read a server file (``.mcp.json``, ``--mcp-config FILE``). Errors are returned in ``error``."""
    try:
        data, duplicates = read_settings_document(path)
    except SettingsFileError as exc:
        return ServerLayer(scope, path, error=exc.report)
    if data is None and not missing_ok:
        missing = "the file does not exist; check the path given with --mcp-config"
        return ServerLayer(scope, path, error=SettingsError(path, missing))
    layer = server_layer_from_data(data, path, scope=scope, env=env)
    return replace(layer, warnings=(*duplicates, *layer.warnings)) if duplicates else layer
