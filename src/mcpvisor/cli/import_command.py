"""``mcpvisor mcp import``: servers (and plugins' language servers) from other hosts' configuration files,
planned, shown and written into mcpvisor's settings. Imports nothing of the ``mcp`` SDK."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding

from mcpvisor.cli.add_entry import check_servers_key, values_in_clear
from mcpvisor.cli.commands import check_scope
from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.importers import SOURCES, ImportLevel, PlannedImport, plan_import, scan_source
from mcpvisor.host.plugin_lsp import PluginLsp, scan_plugin_lsp_servers
from mcpvisor.host.settings.loader import Settings, load_settings
from mcpvisor.host.settings.servers import unshowable_name
from mcpvisor.host.settings.writer import set_setting
from mcpvisor.host.status import command_hints, fill_hint
from mcpvisor.shell.consoles import new_console

__all__ = ["import_servers"]


def import_servers(
    *,
    env: Mapping[str, str],
    workspace: Path | None,
    source: str,
    scope: str | None,
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> int:
    """Import another tool's servers; the exit code is 1 when an entry could not be imported."""
    if source not in SOURCES:
        raise ConfigError(f"unknown source {source!r} for --from: use one of {', '.join(SOURCES)}")
    levels: tuple[ImportLevel, ...] = (check_scope(scope),) if scope is not None else ("user", "workspace")
    settings = load_settings(env, workspace)
    scan = scan_source(source, env, settings.root, levels=levels)
    plugin_lsp = _plan_plugin_lsp(env, settings, force) if source == "claude-code" and "user" in levels else []
    if not scan.found and not plugin_lsp:
        if not scan.looked:  # Claude Desktop's servers are the user's only
            raise ConfigError(
                f"{scan.title} keeps no {levels[0]} servers, only your own: nothing to import with --scope "
                f"{levels[0]}; import without --scope (they go to your user settings)"
            )
        looked = "\n  ".join(map(str, scan.looked))
        if any(path.is_file() for path in scan.looked):
            raise ConfigError(f"no {scan.title} MCP servers for {settings.root}; looked in:\n  {looked}")
        raise ConfigError(f"no {scan.title} configuration found; looked in:\n  {looked}")
    for level in levels:
        if level in settings.errors:
            raise ConfigError(f"cannot import into {settings.errors[level]}; fix that file first (nothing was written)")
    existing = {level: _servers_of(settings.data(level)) for level in levels}
    destinations = {level: settings.paths.of(level) for level in get_args(ImportLevel)}
    planned = plan_import(scan, existing, destinations, force=force)
    for level in sorted({item.candidate.level for item in planned if item.action in ("add", "replace")}):
        check_servers_key(settings, level, "cannot import")
    if not dry_run:
        for item in planned:
            if item.action in ("add", "replace") and item.candidate.entry is not None:
                set_setting(settings, item.candidate.level, ("mcpServers", item.candidate.name), item.candidate.entry)
        for lsp, action, _ in plugin_lsp:
            if action in ("add", "replace") and lsp.entry is not None:
                set_setting(settings, "user", ("lspServers", lsp.name), dict(lsp.entry))
    exposed = _written_in_clear(planned, dry_run)
    if as_json:
        out = _import_json(scan.source, planned, dry_run)
        out["warnings"] = exposed
        if source == "claude-code":
            out["language_servers"] = [
                {"name": lsp.name, "plugin": lsp.plugin, "file": str(lsp.file), "action": action, "reason": reason}
                for lsp, action, reason in plugin_lsp
            ]
        print(json.dumps(out, indent=2))  # noqa: T201 - the command's output
    else:
        console = new_console(highlight=False)
        _print_import(console, scan.title, scan.files, planned, dry_run, settings.root)
        _print_plugin_lsp(console, plugin_lsp, settings.paths.user, dry_run)
        for warning in exposed:
            new_console(stderr=True, highlight=False).print(f"[yellow]! {escape(warning)}[/]", soft_wrap=True)
    skipped = any(item.action == "skip" for item in planned) or any(a == "skip" for _, a, _ in plugin_lsp)
    return 1 if skipped else 0


def _plan_plugin_lsp(
    env: Mapping[str, str], settings: Settings, force: bool
) -> list[tuple[PluginLsp, str, str | None]]:
    """``(language server, action, reason)`` for each one Claude Code's enabled plugins declare."""
    _, found = scan_plugin_lsp_servers(env)
    current = settings.data("user").get("lspServers")
    existing = current if isinstance(current, Mapping) else {}
    planned: list[tuple[PluginLsp, str, str | None]] = []
    for lsp in found:
        if lsp.entry is None:
            planned.append((lsp, "skip", lsp.reason))
        elif lsp.name not in existing:
            planned.append((lsp, "add", None))
        elif existing[lsp.name] == lsp.entry:
            planned.append((lsp, "present", "already in your settings"))
        elif force:
            planned.append((lsp, "replace", "replaces the entry in your settings"))
        else:
            planned.append((lsp, "skip", f"your settings already have a different {lsp.name!r}; pass --force"))
    return planned


def _print_plugin_lsp(
    console: Console, planned: Sequence[tuple[PluginLsp, str, str | None]], destination: Path, dry_run: bool
) -> None:
    if not planned:
        return
    console.print(f"[bold]Language servers of enabled Claude Code plugins[/] -> {escape(str(destination))}")
    for lsp, action, reason in planned:
        line = f"{_MARKS[action]} [bold]{escape(lsp.name)}[/]"
        if lsp.entry is not None:
            command = " ".join([str(lsp.entry.get("command", "")), *map(str, lsp.entry.get("args") or [])])
            line += f"  lsp: {escape(command)} (plugin {escape(lsp.plugin)})"
        console.print(Padding(line, (0, 0, 0, 2), expand=False))
        if reason and action != "present":
            style = "red" if action == "skip" else "dim"
            console.print(Padding(f"[{style}]{escape(reason)}[/]", (0, 0, 0, 4), expand=False))
    written = sum(1 for _, a, _ in planned if a in ("add", "replace"))
    verb = "Would import" if dry_run else "Imported"
    console.print(f"{verb} {written} language server{'s' if written != 1 else ''} (your own: no approval needed)")


def _servers_of(data: Mapping[str, Any]) -> Mapping[str, Any]:
    servers = data.get("mcpServers")
    return servers if isinstance(servers, Mapping) else {}


def _import_json(source: str, planned: Sequence[PlannedImport], dry_run: bool) -> dict[str, Any]:
    servers = []
    for item in planned:
        cand = item.candidate
        cfg = cand.config()
        servers.append(
            {
                "name": cand.name,
                "file": str(cand.file),
                "scope": cand.level,
                "destination": str(item.destination),
                "action": item.action,
                "reason": item.reason,
                "notes": list(cand.notes),
                "transport": cfg.transport if cfg else None,
                "target": _shown_target(cfg) if cfg else None,
                "env": sorted(cfg.env or {}) if cfg else [],
                "headers": sorted(cfg.headers or {}) if cfg else [],
                "oauth": _oauth_fields(cfg) if cfg else [],
            }
        )
    return {"source": source, "dry_run": dry_run, "servers": servers}


def _shown_target(cfg: McpServerConfig) -> str:
    """The command line or URL as the server is given it: each ``$$`` the file holds (a literal ``$``) shown as
    that ``$``; a ``${VAR}`` stays as written (it may stand for a secret)."""
    return cfg.target().replace("$$", "$")


def _oauth_fields(cfg: McpServerConfig) -> list[str]:
    """The fields of the entry's ``oauth`` block, whose values are not shown (one is a client secret)."""
    block = (cfg.model_extra or {}).get("oauth")
    return sorted(map(str, block)) if isinstance(block, Mapping) else []


_MARKS = {"add": "[green]+[/]", "replace": "[yellow]~[/]", "present": "[dim]=[/]", "skip": "[red]![/]"}


def _written_in_clear(planned: Sequence[PlannedImport], dry_run: bool) -> list[str]:
    """A warning for each server whose env or header values go as written into a workspace's settings file,
    which lives in the repository (a ``${VAR}`` reference is not a value)."""
    warnings = []
    for item in planned:
        entry = item.candidate.entry
        if item.candidate.level != "workspace" or item.action not in ("add", "replace") or entry is None:
            continue
        if keys := values_in_clear(entry):
            warnings.append(
                f"{item.destination} {'would get' if dry_run else 'gets'} the value of {', '.join(keys)} of server "
                f"{item.candidate.name!r} as "
                "written: the file belongs to the repository, where whoever reads the repository reads it; write "
                "${NAME} instead (the value then comes from your environment) or import with --scope user"
            )
    return warnings


def _print_import(
    console: Console, title: str, files: Sequence[Any], planned: Sequence[PlannedImport], dry_run: bool, root: Path
) -> None:
    for f in files:
        if f.exists and f.note:
            console.print(f"[dim]{escape(str(f.path))}: {escape(f.note)}[/]")
    groups: dict[tuple[Path, str], list[PlannedImport]] = {}
    for item in planned:
        groups.setdefault((item.candidate.file, item.candidate.level), []).append(item)
    if not planned:
        found = ", ".join(str(f.path) for f in files if f.exists and not f.note)  # a noted file is said above
        console.print(
            f"No MCP servers in {escape(found)}: nothing to import from {title}."
            if found
            else f"Nothing else to import from {title}."
        )
        return
    for (path, level), items in groups.items():
        console.print(f"[bold]{escape(str(path))}[/] ({level}) -> {escape(str(items[0].destination))}")
        for item in items:
            cand = item.candidate
            cfg = cand.config()
            shown = cand.name if cand.name.strip() and unshowable_name(cand.name) is None else repr(cand.name)
            line = f"{_MARKS[item.action]} [bold]{escape(shown)}[/]"
            if cfg is not None:
                line += f"  {cfg.transport}: {escape(_shown_target(cfg))}"
                fields = (("env", cfg.env), ("headers", cfg.headers), ("oauth", _oauth_fields(cfg)))
                hidden = [f"{k}: {', '.join(sorted(v))}" for k, v in fields if v]
                if hidden:
                    line += f" ({escape('; '.join(hidden))}; values hidden)"
            console.print(Padding(line, (0, 0, 0, 2), expand=False))
            notes = [] if item.action == "present" else list(cand.notes)
            for text in [*notes, *([item.reason] if item.reason else [])]:
                style = "red" if item.action == "skip" else "dim"
                console.print(Padding(f"[{style}]{escape(text)}[/]", (0, 0, 0, 4), expand=False))
    counts = {a: sum(1 for i in planned if i.action == a) for a in _MARKS}
    written = counts["add"] + counts["replace"]
    verb = "Would import" if dry_run else "Imported"
    summary = f"{verb} {written} server{'s' if written != 1 else ''} from {title}"
    extra = [f"{counts['present']} already present"] if counts["present"] else []
    extra += [f"{counts['skip']} not imported (reasons above)"] if counts["skip"] else []
    extra += ["nothing written (dry run)"] if dry_run else []
    console.print(summary + "".join(f"; {part}" for part in extra))
    gated = [i.candidate.name for i in planned if i.candidate.level == "workspace" and i.action in ("add", "replace")]
    if gated:
        console.print(
            "Workspace servers start only once approved: "
            + escape(fill_hint(command_hints(root)[0], gated[0]))
            + (f" (and {len(gated) - 1} more)" if len(gated) > 1 else "")
        )
