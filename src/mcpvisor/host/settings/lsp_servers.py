"""Where language servers come from, and the one desired map they make (SPEC §10; LSP.md §6.1).

Lowest to highest precedence, a later source replacing an entry by its **key** (the server's name):
``lspServers`` of the system defaults and the user's settings < ``<workspace>/.lsp.json`` (project,
gated) < ``lspServers`` of the workspace's settings (gated) and of the enforced system settings <
``--lsp-config FILE``. ``.lsp.json`` is the keyed object itself (Claude Code's and Qwen Code's format);
mcpvisor's own policy (``lsp.allowed`` ...) lives only in settings, so the file stays valid for them.

Pure functions over parsed file contents; :class:`~mcpvisor.host.settings.loader.Settings` holds the
contents (and keeps the last good ones when a save does not parse).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from mcpvisor.core.server_config import canonical_json
from mcpvisor.host.lsp.config import LspScope, LspServerConfig, camel_fields
from mcpvisor.host.settings.expand import expand_vars, expansion_warnings
from mcpvisor.host.settings.files import SettingsError, SettingsFileError, read_settings_document
from mcpvisor.host.settings.servers import describe_validation, look_alike, unshowable_name

__all__ = [
    "LSP_KEY",
    "AssembledLsp",
    "LspEntry",
    "LspFile",
    "LspSourceLabel",
    "SkippedLsp",
    "assemble_lsp_servers",
    "build_lsp_entries",
    "keep_last_good_lsp_entries",
    "load_lsp_file",
]

LSP_KEY = "lspServers"
"""Where a settings file keeps its language servers."""

LspSourceLabel = str
"""``user``, ``system_defaults``, ``project``, ``workspace``, ``system`` or ``cli``."""

_STAMPS: dict[str, LspScope | None] = {
    "system_defaults": None,
    "user": None,
    "project": "project",
    "workspace": "workspace",
    "system": "system",
    "cli": "cli",
}
_KNOWN = frozenset(
    {*LspServerConfig.model_fields, "extensionToLanguage", "initializationOptions", "workspaceFolder"}
    | {"startupTimeout", "shutdownTimeout", "restartOnCrash", "maxRestarts"}
)


_CAMEL = sorted(k for k in _KNOWN if "_" not in k)
SECONDS_LIKE_MS = 1000
"""A timeout below this many milliseconds was most likely meant in seconds: it is warned about."""


def _did_you_mean(field: str) -> str:
    """``: did you mean 'command'?`` for a field that is not one but close to one (else "")."""
    if field in _KNOWN:
        return ""
    close = difflib.get_close_matches(field, _CAMEL, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


@dataclass(frozen=True, slots=True)
class LspEntry:
    """One configured language server and where it came from."""

    config: LspServerConfig
    source: LspSourceLabel
    path: Path | None


@dataclass(frozen=True, slots=True)
class SkippedLsp:
    """A language server entry that is not valid, so no server runs for it: kept so status views can show it after
    its warning scrolled away (as :class:`~mcpvisor.host.settings.servers.SkippedServer` for an MCP server).
    ``problem``: why, and the fix (never a value); ``extensions``: the files it claims, when it says so readably."""

    name: str
    source: LspSourceLabel
    path: Path | None
    problem: str
    extensions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LspFile:
    """The language servers of one file (a ``.lsp.json`` or ``--lsp-config FILE``)."""

    source: LspSourceLabel
    path: Path | None
    servers: Mapping[str, LspEntry] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    error: SettingsError | None = None
    skipped: Mapping[str, SkippedLsp] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AssembledLsp:
    """The desired language servers, their provenance, and what could not be read."""

    servers: Mapping[str, LspServerConfig] = field(default_factory=dict)
    sources: Mapping[str, LspEntry] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    errors: tuple[SettingsError, ...] = ()
    shadowed: Mapping[str, str] = field(default_factory=dict)
    """A repository's ``.lsp.json`` server that takes the place of one of the user's own, by name: what to say."""
    skipped: Mapping[str, SkippedLsp] = field(default_factory=dict)
    """The invalid entries of names no valid entry configures, by name (the highest-precedence one of each)."""


_cache: dict[tuple[str, str, int], tuple[LspServerConfig, frozenset[str]] | str] = {}
_CACHE_MAX = 1024


def _build(
    entry: Mapping[str, Any], source: LspSourceLabel, env: Mapping[str, str]
) -> tuple[LspServerConfig, frozenset[str]] | str:
    """One config from a literal entry (or why it is invalid), remembered by content so that an unchanged
    entry gives the same frozen object on every reload."""
    try:
        key = (canonical_json(entry), source, hash(frozenset(env.items())))
    except TypeError:
        return "expected JSON values only"
    if (hit := _cache.get(key)) is not None:
        return hit
    missing: set[str] = set()
    result: tuple[LspServerConfig, frozenset[str]] | str
    try:
        stamp = _STAMPS.get(source)
        cfg = LspServerConfig.from_entry(
            entry, expand=partial(expand_vars, env=env, missing=missing), **({"scope": stamp} if stamp else {})
        )
        result = (cfg, frozenset(missing))
    except ValueError as exc:
        result = camel_fields(describe_validation(exc))
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    _cache[key] = result
    return result


def _claimed(entry: Any) -> tuple[str, ...]:
    """The extensions an invalid entry claims, when its ``extensionToLanguage`` says so readably (else none)."""
    value = entry.get("extensionToLanguage", entry.get("extension_to_language")) if isinstance(entry, Mapping) else None
    if not isinstance(value, Mapping):
        return ()
    return tuple(
        sorted(
            {"." + ext.strip().lstrip(".").lower() for ext in value if isinstance(ext, str) and ext.strip(".").strip()}
        )
    )


def build_lsp_entries(
    entries: Any, *, path: Path | None, source: LspSourceLabel, env: Mapping[str, str], key: str | None = LSP_KEY
) -> tuple[dict[str, LspEntry], list[str], dict[str, SkippedLsp]]:
    """Validate a ``{name: entry}`` object (``key`` names where it sits, for messages; ``None``: the file's
    top level). An invalid entry is skipped with a warning naming the file, the server and the fix; returns the
    entries, the warnings and the skipped entries that can be shown by name."""
    where = str(path) if path is not None else source
    if entries is None:
        return {}, [], {}
    if not isinstance(entries, Mapping):
        return {}, [f"ignored {key or 'the file'!s} in {where}: expected an object of language servers by name"], {}
    servers: dict[str, LspEntry] = {}
    warnings: list[str] = []
    skipped: dict[str, SkippedLsp] = {}
    for name, entry in entries.items():
        at = f"{key}.{name}" if key else str(name)
        if name == "$schema":
            continue
        if not str(name).strip():  # (a row shows it by its key as written: '')
            problem = f"a language server needs a name; {f'fix {key}' if key else 'give it a name (its key)'}"
            warnings.append(f"skipped a language server named {name!r} in {where}: {problem}")
            skipped[str(name)] = SkippedLsp(str(name), source, path, problem, _claimed(entry))
            continue
        if (unshowable := unshowable_name(str(name))) is not None:
            warnings.append(
                f"skipped language server {name!r} in {where}: {unshowable}; rename it in {key or 'the file'}"
            )
            continue
        if not isinstance(entry, Mapping):
            warnings.append(f"skipped language server {name!r} in {where}: expected an object; fix {at}")
            skipped[str(name)] = SkippedLsp(str(name), source, path, f"expected an object; fix {at}")
            continue
        built = _build(entry, source, env)
        if isinstance(built, str) and key is None and str(name).casefold() in _WRAPPERS:
            warnings.append(
                f"skipped {name!r} in {where}: this file is itself the object of language servers by name; move "
                f"the servers inside {name!r} to the top level ({LSP_KEY!r} is the key of settings files)"
            )
            continue
        if isinstance(built, str):
            typos = "".join(
                f" (its field {k!r}{_did_you_mean(k)})" for k in sorted(map(str, entry)) if _did_you_mean(k)
            )
            problem = f"{built}{typos}; fix {at}"
            warnings.append(f"skipped language server {name!r} in {where}: {problem}")
            skipped[str(name)] = SkippedLsp(str(name), source, path, problem, _claimed(entry))
            continue
        cfg, missing = built
        warnings.extend(
            f"unknown field {extra!r} in language server {name!r} ({where}) is ignored{_did_you_mean(extra)}"
            for extra in sorted(cfg.model_extra or {})
            if extra not in _KNOWN
        )
        warnings.extend(
            f"{field!r} of language server {name!r} ({where}) is in milliseconds: {ms} means {ms / 1000:g} s; "
            f"for {ms} s write {ms * 1000}"
            for field, ms in (("startupTimeout", cfg.startup_timeout), ("shutdownTimeout", cfg.shutdown_timeout))
            if ms is not None and ms < SECONDS_LIKE_MS
        )
        warnings.extend(expansion_warnings(missing, f"language server {name!r} ({where})"))
        servers[str(name)] = LspEntry(cfg, source, path)
    return servers, warnings, skipped


_WRAPPERS = frozenset({"lspservers", "lsp_servers", "languageservers", "servers"})
"""Keys that, at the top level of a ``.lsp.json``, wrap its servers rather than name one (``{"lspServers": {...}}``)."""


def keep_last_good_lsp_entries(
    entries: Any, previous: Any, *, path: Path | None, source: LspSourceLabel, env: Mapping[str, str], key: str | None
) -> tuple[Any, dict[str, str]]:
    """``entries`` with each invalid entry replaced by the same server's entry in ``previous`` when that one
    was valid: a typo in one server's entry keeps it on its last good configuration while the rest of the
    save applies. Returns the entries and the notice of each kept entry, by name."""
    if not isinstance(entries, Mapping) or not isinstance(previous, Mapping):
        return entries, {}
    kept: dict[str, Any] = {}
    notices: dict[str, str] = {}
    for name, entry in entries.items():
        old = previous.get(name)
        if name == "$schema" or not isinstance(old, Mapping) or isinstance(_build(old, source, env), str):
            continue
        problem = "expected an object" if not isinstance(entry, Mapping) else _build(entry, source, env)
        if isinstance(problem, str):
            kept[name] = old
            at = f"{key}.{name}" if key else str(name)
            notices[str(name)] = (
                f"invalid entry in {path} ({at}: {problem}) — the last good configuration of "
                f"language server {name!r} stays in force; fix the entry and save to apply it"
            )
    if not kept:
        return entries, {}
    return {**entries, **kept}, notices


def lsp_file_from_data(data: Any, path: Path | None, *, source: LspSourceLabel, env: Mapping[str, str]) -> LspFile:
    """The servers of a ``.lsp.json``-shaped file's parsed content (the top level is the keyed object)."""
    if not data:
        return LspFile(source, path)
    servers, warnings, skipped = build_lsp_entries(data, path=path, source=source, env=env, key=None)
    return LspFile(source, path, servers, tuple(warnings), skipped=skipped)


def load_lsp_file(path: Path, env: Mapping[str, str], *, source: LspSourceLabel = "cli") -> LspFile:
    """Read a ``--lsp-config FILE`` (a missing file is an error naming it)."""
    try:
        data, duplicates = read_settings_document(path)
    except SettingsFileError as exc:
        return LspFile(source, path, error=exc.report)
    if data is None:
        missing = "the file does not exist; check the path given with --lsp-config"
        return LspFile(source, path, error=SettingsError(path, missing))
    read = lsp_file_from_data(data, path, source=source, env=env)
    return replace(read, warnings=(*duplicates, *read.warnings)) if duplicates else read


def assemble_lsp_servers(
    settings_layers: Iterable[tuple[LspSourceLabel, Path, Mapping[str, Any]]],
    project: LspFile,
    cli_files: Iterable[LspFile] = (),
    *,
    env: Mapping[str, str],
) -> AssembledLsp:
    """The desired map: ``settings_layers`` are ``(scope, file, content)`` of the active settings scopes in
    merge order; ``project`` is the ``.lsp.json`` as last read; ``cli_files`` the ``--lsp-config`` files."""
    below: dict[str, LspEntry] = {}
    above: dict[str, LspEntry] = {}
    bad_below: dict[str, SkippedLsp] = {}
    bad_above: dict[str, SkippedLsp] = {}
    warnings: list[str] = []
    for source, path, data in settings_layers:
        servers, more, bad = build_lsp_entries(data.get(LSP_KEY), path=path, source=source, env=env)
        (below if source in ("system_defaults", "user") else above).update(servers)
        (bad_below if source in ("system_defaults", "user") else bad_above).update(bad)
        warnings.extend(more)
    chosen: dict[str, LspEntry] = {**below, **project.servers, **above}
    skipped: dict[str, SkippedLsp] = {**bad_below, **project.skipped, **bad_above}
    files = [project, *cli_files]
    for cli in cli_files:
        chosen.update(cli.servers)
        skipped.update(cli.skipped)
    shadowed = {
        name: f"language server {name!r} of {project.path or '.lsp.json'} replaces your own of that name (in "
        f"{below[name].path}) in this workspace: it runs only once approved, and yours does not run here meanwhile; "
        "rename one of them to keep both"
        for name in sorted(below.keys() & project.servers.keys())
        if chosen[name] is project.servers[name]
    }
    return AssembledLsp(
        servers={name: entry.config for name, entry in chosen.items()},
        sources=chosen,
        warnings=(
            *warnings,
            *(w for f in files for w in f.warnings),
            *shadowed.values(),
            *look_alike("language servers", ((name, entry.path) for name, entry in chosen.items())),
        ),
        errors=tuple(f.error for f in files if f.error is not None),
        shadowed=shadowed,
        skipped={name: bad for name, bad in skipped.items() if name not in chosen},
    )
