"""Management commands that start no server: ``mcp list | approve | reject | add | remove | trust``
(``mcp import`` is :mod:`mcpvisor.cli.import_command`).

None of them imports the ``mcp`` SDK. They read the same settings, assemble the same server map
and compute gating with the same function as the running host, so what they say is what it does.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape

from mcpvisor.cli.fleet import approval_store, follow_fleet_settings, pin_store, token_store
from mcpvisor.core.config import Config
from mcpvisor.core.errors import ConfigError, name_word
from mcpvisor.core.gating import NameList, excluded_by, not_allowed_by
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host import paths
from mcpvisor.host.approvals import ApprovalStore, is_gated
from mcpvisor.host.decisions import Verdict
from mcpvisor.host.hot_reload import DesiredState, compute_desired_state
from mcpvisor.host.lsp.config import RUNS_WORKSPACE_CODE
from mcpvisor.host.private_files import PrivateJsonStore, write_atomically
from mcpvisor.host.settings.loader import Settings, load_settings, parse_trusted_folders
from mcpvisor.host.settings.mcp_servers import load_top_tier
from mcpvisor.host.settings.scopes import SettingsScope
from mcpvisor.host.settings.servers import SKIPPED_MCP_ENTRY, misspelt_servers_key_of, name_written_otherwise
from mcpvisor.host.settings.writer import delete_setting, set_setting
from mcpvisor.host.status import command_hints, describe_servers, home_words, plural
from mcpvisor.shell.approval import ApprovalRequest, approval_lines, approval_request
from mcpvisor.shell.consoles import new_console
from mcpvisor.shell.views import render_definition_changes, render_status

__all__ = [
    "add_server",
    "check_scope",
    "configured",
    "decide",
    "entry_skipped",
    "list_servers",
    "load_state",
    "remove_server",
    "trust_folder",
]


def load_state(
    env: Mapping[str, str],
    workspace: Path | None,
    mcp_config: Sequence[Path] = (),
    allowed: Sequence[str] | None = None,
    *,
    fleets_settings: bool = False,
) -> tuple[Settings, ApprovalStore, DesiredState]:
    """The configuration as read here; ``fleets_settings``: with the fleet's published settings when a fleet is
    named (what its replicas serve), for a command acting on the servers they run."""
    settings = load_settings(env, workspace)
    if fleets_settings:
        follow_fleet_settings(settings)
    approvals = approval_store(env)  # the fleet's with --fleet
    approvals.load()
    top_tier = load_top_tier(mcp_config, env)
    for layer in top_tier.mcp_config:
        if layer.error is not None:
            raise ConfigError(str(layer.error))
    state = compute_desired_state(settings, Config(allowed_mcp_server_names=allowed), approvals, top_tier)
    return settings, approvals, state


def config_problems(
    settings: Settings,
    approvals_error: str | None,
    *more: Iterable[str],
    home: str | None = None,
    language_servers: bool = False,
) -> list[str]:
    """Every problem of the configuration, each once: the files that cannot be read or parsed and the
    approvals store first, then the warnings (an invalid entry, an unknown key, an undefined variable); a fix
    to paste carries ``MCPVISOR_HOME=home`` (:func:`~mcpvisor.host.paths.named_home`). ``language_servers``: some
    are configured (a folder not trusted starts none of them either)."""
    errors = [str(error) for error in settings.errors.values()]
    problems = [*errors, *([approvals_error] if approvals_error else []), *settings.warnings]
    if not settings.trusted:  # else an empty list reads as if nothing were configured
        broken, root = ", ".join(settings.trust_unknown_in), shlex.quote(str(settings.root))
        trust = f"{home_words(home)}mcpvisor mcp trust --workspace {root}"
        fix = f" until {broken} is fixed" if broken else f"; if you trust it, run: {trust}"
        servers = "MCP server or language server" if language_servers else "MCP server"
        problems.append(
            f"folder {root} is not trusted: its own settings files are not read and no {servers} starts here{fix}"
        )
    for extra in more:
        problems.extend(extra)
    return list(dict.fromkeys(problems))


def _in_the_folders_own_files(settings: Settings, name: str, kind: str) -> bool:
    """Whether the folder's own files (read here even when it is not trusted) define server ``name``."""
    lsp = kind == "language server"
    for scope in ("lsp_project", "workspace") if lsp else ("project", "workspace"):
        data = settings.read_scope(scope).data or {}
        servers = data if scope == "lsp_project" else data.get("lspServers" if lsp else "mcpServers")
        if isinstance(servers, dict) and name in servers:
            return True
    return False


def store_problems(*stores: PrivateJsonStore) -> list[str]:
    """What is wrong with each store that cannot be read (a corrupt OAuth token store, say)."""
    return [problem for store in stores if (problem := store.read_error()) is not None]


def list_servers(
    *,
    env: Mapping[str, str],
    workspace: Path | None,
    mcp_config: Sequence[Path],
    allowed: Sequence[str] | None,
    as_json: bool,
) -> bool:
    """Print every configured server with its admission; whether a settings file or a store could not be read, or
    an entry is invalid (the command then exits 1, as ``status`` does)."""
    settings, approvals, state = load_state(env, workspace, mcp_config, allowed)
    from mcpvisor.host.oauth import sign_ins
    from mcpvisor.host.pins import held_names, pin_mode_of

    tokens = token_store(env)
    home = paths.named_home(env)
    approve, login = command_hints(
        settings.root, approvals_error=approvals.error, options=approvals.decided_with, home=home
    )
    signed = sign_ins(tokens, state.assembled.servers, login)  # its commands are the table's
    mode, pin_problems = pin_mode_of(settings)
    unreadable = store_problems(tokens)
    broken = bool(settings.errors) or approvals.error is not None or bool(unreadable)
    problems = config_problems(settings, approvals.error, state.assembled.warnings, pin_problems, unreadable, home=home)
    # an invalid entry (a row, or a warning when its name cannot be shown): as status, and lsp list, fail on it
    broken = broken or bool(state.assembled.skipped) or entry_skipped(problems)
    try:
        held = held_names(pin_store(env), settings.root, state.assembled.servers, mode)
    except ConfigError as exc:
        held, broken = {}, True
        problems.append(str(exc))
    rows = describe_servers(
        state.assembled,
        state.gating,
        approvals,
        settings.root,
        trusted=settings.trusted,
        sign_ins=signed,
        held=held,
    )
    if as_json:
        out: dict[str, Any] = {
            "workspace": str(settings.root),
            "trusted": settings.trusted,
            "servers": [
                {
                    "name": r.name,
                    "source": r.source,
                    "file": r.file,
                    "scope": r.scope,
                    "transport": r.transport,
                    "target": r.target,
                    "admission": "untrusted" if r.state == "untrusted" else r.reason or "allowed",
                    "error": r.error,  # why it is not admitted (an invalid entry, an allow-list), with the fix
                    "approval": r.approval,
                    "held_tools": list(r.held_tools),
                    "held_prompts": list(r.held_prompts),
                    "sign_in": r.sign_in,
                }
                for r in rows
            ],
            "problems": problems,
        }
        print(json.dumps(out, indent=2))  # noqa: T201 - the command's output
        return broken
    console = new_console(highlight=False)
    for problem in problems:
        console.print(f"[yellow]! {escape(problem)}[/]")
    head, bad = f"MCP servers for {settings.root}", bool(settings.errors)
    render_status(
        console, rows, live=False, title=head, show_target=True, approve_hint=approve, login_hint=login, unreadable=bad
    )
    return broken


def configured(settings: Settings, state: DesiredState, name: str, what: str) -> McpServerConfig:
    """Server ``name`` as configured, or :class:`ConfigError` saying why it is not."""
    cfg = state.assembled.servers.get(name)
    if cfg is None:
        warnings = (*settings.warnings, *state.assembled.warnings)
        from mcpvisor.host.lsp.desired import compute_lsp_state

        lsp = compute_lsp_state(settings, approval_store(settings.env), cli_allowed=None, cli_files=[]).servers
        other = (lsp, "language server", f"mcpvisor lsp {what}" if what in ("approve", "reject") else "")
        raise not_configured(settings, name, f"{what} server", "MCP server", state.assembled.servers, warnings, other)
    return cfg


def entry_skipped(problems: Iterable[str]) -> bool:
    """Whether ``problems`` say an MCP server entry was skipped as invalid (also one no row shows: its name is blank
    or cannot be shown)."""
    return any(problem.startswith(SKIPPED_MCP_ENTRY) for problem in problems)


def not_configured(
    settings: Settings,
    name: str,
    doing: str,
    kind: str,
    known: Iterable[str],
    warnings: Iterable[str],
    other: tuple[Iterable[str], str, str] = ((), "", ""),
) -> ConfigError:
    """Why ``name`` is not among the configured servers (``kind``: "MCP server" or "language server"), with
    the fix that applies: its entry is invalid, the folder is not trusted, it is a server of the ``other``
    kind (its names, that kind, and the command that decides on them), or no entry has that name."""
    head = f"cannot {doing} {name!r}"
    for warning in warnings:
        if warning.startswith(f"skipped {kind} {name!r}"):
            return ConfigError(f"{head}: its entry is not valid ({warning})")
    if not settings.trusted and _in_the_folders_own_files(settings, name, kind):
        return ConfigError(
            f"{head}: {settings.root} is not trusted, so its own settings files are not read; "
            f"if you trust it, run: mcpvisor mcp trust --workspace {shlex.quote(str(settings.root))}"
        )
    names, other_kind, command = other
    if name in set(names):
        run = f"; run: {command} {name_word(name)}" if command else ""
        return ConfigError(f"{head}: that name is {'an' if other_kind[0] == 'M' else 'a'} {other_kind}'s{run}")
    if (meant := name_written_otherwise(name, known)) is not None:
        return ConfigError(f"{head}: no {kind} of that name is configured for {settings.root}, but {meant}")
    listed = ", ".join(sorted(known)) or "none"
    return ConfigError(
        f"{head}: no {kind} of that name is configured for {settings.root} (configured: {listed}); "
        "check the name or pass --workspace"
    )


def decide(
    *,
    env: Mapping[str, str],
    workspace: Path | None,
    name: str,
    decision: Verdict,
    confirm: Callable[[str], bool] | None = None,
) -> None:
    """Approve or reject server ``name``. Definitions it changed since approval are shown first and accepted
    only when ``confirm`` says yes (``None``: accepted without asking, ``--yes``)."""
    from mcpvisor.host.decisions import decide
    from mcpvisor.host.pin_review import changes_since_approval
    from mcpvisor.host.pins import compared_note, is_pinned, pin_mode_of, pinned_before

    settings, approvals, state = load_state(env, workspace)
    cfg = configured(settings, state, name, decision)
    source = state.assembled.sources[name]
    pins, pin_mode = pin_store(env), pin_mode_of(settings)[0]
    changes = changes_since_approval(pins, settings.root, name, cfg, pin_mode) if decision == "approve" else []
    console = new_console(highlight=False)
    if changes:
        console.print(
            f"Server [bold]{name}[/] ({source.label}, {source.path}) changed {plural(len(changes), 'definition')} "
            "since approval:"
        )
        render_definition_changes(console, changes)
        if confirm is not None and not confirm(f"Accept what {name} offers now?"):
            raise ConfigError(f"nothing was changed: {name}'s changed definitions stay held (--yes accepts them)")
    stamp = approvals.stamp(settings.root, name)  # the decision as it is shown: another one meanwhile is refused
    approved = approvals.get_state(settings.root, name, cfg) == "approved"
    if is_gated(cfg) and not (changes and approved):
        console.print(f"Server [bold]{escape(name)}[/] ({escape(source.label)}, {escape(str(source.path))})")
        show_approval_lines(console, approval_request(name, cfg, source))
        if (replaces := state.assembled.shadowed.get(name)) is not None:
            console.print(f"[yellow]![/] {escape(replaces)}")
    approve = command_hints(settings.root, options=approvals.decided_with, home=paths.named_home(env))[0]
    decided = decide(
        approvals,
        pins,
        settings.root,
        name,
        cfg,
        decision,
        pin_mode=pin_mode,
        shown_hash=cfg.approval_hash,
        shown_stamp=stamp,
        shown_changes=changes if confirm is not None else None,  # --yes: as they are
        source=source.label,
        approve_command=approve,
    )
    if decided.accepted:
        console.print(f"[green]Accepted[/] what {escape(name)} offers now. A running mcpvisor serves it at once.")
    if decided.recorded and decision == "approve":
        blocked = will_not_start(settings, name)
        then = f"But {blocked}." if blocked else "A running mcpvisor connects it now."
        if approved:  # (this exact configuration was: approving again connects nothing)
            then = f"But {blocked}." if blocked else "Nothing changed."
            console.print(f"{escape(name)} was [green]approved[/] already for {escape(str(settings.root))}. {then}")
        else:
            console.print(f"[green]Approved[/] for {escape(str(settings.root))}. {escape(then)}")
        if is_pinned(pin_mode, cfg) and pinned_before(pins, settings.root, name, cfg):
            console.print(compared_note(name, approve), markup=False)
    elif decided.recorded:
        console.print(
            f"[red]Rejected[/] for {escape(str(settings.root))}. It stays disconnected until its configuration changes."
        )


def show_approval_lines(console: Console, request: ApprovalRequest) -> None:
    """What is approved, as the shell's dialog shows it: the entry as written, before ``${VAR}`` expansion."""
    for label, value in approval_lines(request):
        console.print(f"  {label + ':':<8} {escape(value)}")
    for note in request.notes:
        if note != RUNS_WORKSPACE_CODE:  # said with the decision
            console.print(f"  [yellow]{escape(note)}[/]", highlight=False)


def check_scope(scope: str) -> Literal["user", "workspace"]:
    if scope == "user":
        return "user"
    if scope == "workspace":
        return "workspace"
    raise ConfigError(f"invalid scope {scope!r}: use 'user' or 'workspace'")


def add_server(
    *,
    env: Mapping[str, str],
    workspace: Path | None,
    name: str,
    scope: str,
    command: Sequence[str],
    url: str | None,
    sse: bool,
    env_vars: Sequence[str],
    headers: Sequence[str] = (),
    force: bool = False,
) -> None:
    from mcpvisor.cli.add_entry import check_name_free, server_entry, values_in_clear

    file_scope = check_scope(scope)
    entry = server_entry(name, command=command, url=url, sse=sse, env_vars=env_vars, headers=headers)
    settings = load_settings(env, workspace)
    check_name_free(settings, file_scope, name, force=force)
    set_setting(settings, file_scope, ("mcpServers", name), entry)
    console = new_console(highlight=False)
    console.print(f"Added server [bold]{escape(name)}[/] to {escape(str(settings.paths.of(file_scope)))}")
    if file_scope == "workspace" and (clear := values_in_clear(entry)):
        new_console(stderr=True, highlight=False).print(
            f"[yellow]! {escape(str(settings.paths.of(file_scope)))} holds the value of {escape(', '.join(clear))} as "
            "written: the file belongs to the repository, where whoever reads the repository reads it; write "
            "${NAME} instead (the value then comes from your environment) or add it with --scope user[/]",
            soft_wrap=True,
        )
    if file_scope == "workspace" and not settings.trusted:  # the folder's own settings are not even read
        console.print(
            f"{settings.root} is not trusted, so its own settings are not read: if you trust it, run "
            f"mcpvisor mcp trust --workspace {shlex.quote(str(settings.root))}, then approve the server",
            markup=False,
        )
    elif (blocked := will_not_start(settings, name)) is not None:
        console.print(f"But {blocked}.", markup=False)
    elif file_scope == "workspace" and settings.is_active("workspace"):  # gated like .mcp.json (not: the home's)
        hint = f"mcpvisor mcp approve --workspace {shlex.quote(str(settings.root))} {name_word(name)}"
        console.print(f"It starts once approved: {hint}", markup=False)


def will_not_start(settings: Settings, name: str) -> str | None:
    """Why server ``name`` will not start whatever is decided on it, naming the files and the fix (None:
    nothing in the settings stops it)."""
    merged = settings.merged

    def lists(key: str, by_scope: Mapping[SettingsScope, tuple[str, ...]]) -> list[NameList]:
        return [
            NameList(key, p, str(settings.paths.of(s)), (key, s) in merged.invalid_lists) for s, p in by_scope.items()
        ]

    if (why := excluded_by(name, lists("mcp.excluded", merged.excluded_by_scope))) is not None:
        return f"it does not run: it is {why}"
    if (why := not_allowed_by(name, lists("mcp.allowed", merged.allowed_by_scope))) is not None:
        return f"it does not run: it is {why}"
    return None


def remove_server(*, env: Mapping[str, str], workspace: Path | None, name: str, scope: str) -> None:
    file_scope = check_scope(scope)
    settings = load_settings(env, workspace)
    path = settings.paths.of(file_scope)
    if not delete_setting(settings, file_scope, ("mcpServers", name)):
        other: Literal["user", "workspace"] = "workspace" if file_scope == "user" else "user"
        for scope_of_file in (file_scope, other):
            data = settings.data(scope_of_file)
            if (misspelt := misspelt_servers_key_of(data)) is not None and name in data[misspelt]:
                then = "" if scope_of_file == file_scope else f" with --scope {scope_of_file}"
                raise ConfigError(
                    f"cannot remove server {name!r}: in {settings.paths.of(scope_of_file)} it is under {misspelt!r}, "
                    f"which is not read (did you mean 'mcpServers'?); rename {misspelt!r} to 'mcpServers' there (a "
                    f"running mcpvisor keeps the file's last good servers until then), then remove it{then}"
                )
        _, _, state = load_state(env, workspace)
        source = state.assembled.sources.get(name)
        where = f"; it is defined in {source.path} ({source.label}): edit that file" if source and source.path else ""
        if source is not None and source.path == settings.paths.of(other):
            where = f"; it is in {source.path}: pass --scope {other}"
        elif source is None and (meant := name_written_otherwise(name, state.assembled.servers)) is not None:
            where = f", but {meant}"
        raise ConfigError(f"cannot remove server {name!r}: it is not in {path}{where}")
    new_console(highlight=False).print(f"Removed server [bold]{escape(name)}[/] from {escape(str(path))}")


def trust_folder(*, env: Mapping[str, str], workspace: Path | None) -> None:
    root = paths.workspace_root(workspace)
    path = paths.trusted_folders_path(env)
    try:
        existing = parse_trusted_folders(json.loads(path.read_text())) if path.exists() else []
    except (ValueError, OSError) as exc:
        raise ConfigError(f"cannot read trusted folders {str(path)!r}: {exc}; fix or delete the file") from exc
    if root in existing:
        new_console(highlight=False).print(f"{root} is already trusted", markup=False)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps([*map(str, existing), str(root)], indent=2) + "\n", new_mode=0o600)
    console = new_console(highlight=False)
    console.print(f"Trusted {root}", markup=False)
    settings = load_settings(env, root)
    if broken := ", ".join(settings.trust_unknown_in):
        console.print(
            f"[dim]Folder trust may be on: {escape(broken)} does not parse; until it is fixed no folder is trusted.[/]"
        )
    elif not settings.folder_trust_enabled:
        console.print("[dim]Folder trust is off (security.folderTrust.enabled), so every folder is trusted anyway.[/]")
