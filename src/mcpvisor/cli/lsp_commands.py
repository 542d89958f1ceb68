"""``mcpvisor lsp list | approve | reject``: inspect and decide on language servers (SPEC §10).

None of them starts a server or imports the ``mcp`` SDK. They compute the desired language servers
with the same function as a running host, so what they say is what it does; a running host follows
a decision at once (it watches the approvals store).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from mcpvisor.cli.commands import load_state, not_configured, show_approval_lines
from mcpvisor.cli.fleet import approval_store
from mcpvisor.core.errors import ConfigError
from mcpvisor.host.approvals import ApprovalStore, is_gated
from mcpvisor.host.lsp.config import RUNS_WORKSPACE_CODE, LspServerConfig
from mcpvisor.host.lsp.desired import LspDesiredState, compute_lsp_state
from mcpvisor.host.lsp.status import left_out_state, missing_command, untrusted_state
from mcpvisor.host.paths import named_home
from mcpvisor.host.settings.loader import Settings, load_settings
from mcpvisor.host.settings.lsp_servers import load_lsp_file
from mcpvisor.host.status import invalid_entry_text, lsp_approve_hint
from mcpvisor.shell.approval import lsp_approval_request
from mcpvisor.shell.consoles import new_console

__all__ = ["RUNS_WORKSPACE_CODE", "decide_lsp", "list_lsp_servers", "load_lsp_state"]


_STATES = {
    "rejected": "rejected — edit config to re-approve",
    "excluded": "disabled (in lsp.excluded)",
    "not_allowed": "not allowed",
}


def load_lsp_state(
    env: Mapping[str, str],
    workspace: Path | None,
    lsp_config: Sequence[Path] = (),
    allowed: Sequence[str] | None = None,
) -> tuple[Settings, ApprovalStore, LspDesiredState]:
    settings = load_settings(env, workspace)
    approvals = approval_store(env)  # the fleet's with --fleet
    approvals.load()
    files = [load_lsp_file(Path(p), env) for p in lsp_config]
    for file in files:
        if file.error is not None:
            raise ConfigError(str(file.error))
    state = compute_lsp_state(settings, approvals, cli_allowed=allowed, cli_files=files)
    return settings, approvals, state


def configured_state(
    state: LspDesiredState, name: str, trusted: bool, root: Path, options: str = "", home: str | None = None
) -> str:
    """What a host would do with ``name`` (nothing runs here; ``home``: the ``MCPVISOR_HOME`` a fix names)."""
    if not trusted:
        return untrusted_state(root, options, home)
    reason = state.reason(name)
    if reason == "pending_approval":
        return f"needs approval — run: {lsp_approve_hint(root, name, options, home)}"
    if (left_out := left_out_state(state.gating, name, reason)) is not None:
        return left_out
    if reason is not None:
        return _STATES[reason].format(name=name)
    if missing := missing_command(name, state.servers[name]):
        return f"stopped — {missing}"
    return "approved; starts on first use" if is_gated(state.servers[name]) else "starts on first use"


def list_lsp_servers(
    *,
    env: Mapping[str, str],
    workspace: Path | None,
    lsp_config: Sequence[Path],
    allowed: Sequence[str] | None,
    as_json: bool,
) -> bool:
    """Print the list; whether every file it reads could be read and every entry is valid."""
    settings, approvals, state = load_lsp_state(env, workspace, lsp_config, allowed)
    unreadable = [str(e) for s, e in settings.errors.items() if s != "project"]
    problems = [*unreadable, *settings.duplicates, *state.warnings]  # (a server pasted twice in .lsp.json)
    if approvals.error:
        problems.append(approvals.error)
    rows: list[dict[str, Any]] = []
    for name in sorted(state.servers):
        cfg = state.servers[name]
        entry = state.assembled.sources[name]
        rows.append(
            {
                "name": name,
                "source": entry.source,
                "file": str(entry.path) if entry.path is not None else None,
                "command": cfg.target(),
                "args": cfg.written_args() if cfg.transport == "stdio" else [],
                "extensions": sorted(cfg.extension_to_language),
                "state": configured_state(
                    state, name, settings.trusted, settings.root, approvals.decided_with, named_home(env)
                ),
                "admission": state.reason(name) or "allowed",
                "error": None,
            }
        )
    for bad in state.assembled.skipped.values():  # (no server runs for it: where, why and the fix)
        file = str(bad.path) if bad.path is not None else None
        rows.append(
            {
                "name": bad.name,
                "source": bad.source,
                "file": file,
                "command": "",
                "args": [],
                "extensions": list(bad.extensions),
                "state": invalid_entry_text(file, bad.problem),
                "admission": "invalid",
                "error": bad.problem,
            }
        )
    rows.sort(key=lambda row: row["name"])
    ok = not unreadable and not approvals.error and not state.assembled.skipped
    if as_json:
        out = {"workspace": str(settings.root), "trusted": settings.trusted, "servers": rows, "problems": problems}
        print(json.dumps(out, indent=2))  # noqa: T201 - the command's output
        return ok
    console = new_console(highlight=False)
    for problem in problems:
        console.print(f"[yellow]! {escape(problem)}[/]")
    console.print(f"[bold]Language servers for {escape(str(settings.root))}[/]")
    if not rows:
        console.print("  No language servers configured (.lsp.json, or lspServers in the settings).")
    for row in rows:
        invalid = row["admission"] == "invalid"
        shown = f"[red]✗ {escape(row['state'])}[/]" if invalid else escape(row["state"])
        name = row["name"] if row["name"].strip() else repr(row["name"])  # (an entry with a blank name)
        console.print(f"  [bold]{escape(name)}[/] · {shown}")
        if not invalid:  # (its row says where already)
            console.print(
                f"    [dim]{escape(row['command'])}  ({' '.join(row['extensions'])}; {row['source']}"
                f"{', ' + escape(row['file']) if row['file'] else ''})[/]"
            )
    return ok


def _show(console: Console, name: str, cfg: LspServerConfig, source: str, path: Path | None) -> None:
    console.print(f"Language server [bold]{escape(name)}[/] ({escape(source)}, {escape(str(path))})")
    show_approval_lines(console, lsp_approval_request(name, cfg, source, str(path) if path else None))


def decide_lsp(*, env: Mapping[str, str], workspace: Path | None, name: str, decision: str) -> None:
    settings, approvals, state = load_lsp_state(env, workspace)
    cfg = state.servers.get(name)
    if cfg is None:
        warnings = (*settings.warnings, *state.warnings)
        mcp = load_state(env, workspace)[2].assembled.servers
        other = (mcp, "MCP server", f"mcpvisor mcp {decision}")
        raise not_configured(
            settings, name, f"{decision} language server", "language server", state.servers, warnings, other
        )
    entry = state.assembled.sources[name]
    if not is_gated(cfg):
        raise ConfigError(
            f"cannot {decision} language server {name!r}: it comes from your own settings ({entry.source}), which "
            "need no approval; only project (.lsp.json) and workspace language servers are approved"
        )
    if approvals.error:
        raise ConfigError(approvals.error)
    console = new_console(highlight=False)
    _show(console, name, cfg, entry.source, entry.path)
    if (replaces := state.assembled.shadowed.get(name)) is not None:
        console.print(f"[yellow]![/] {escape(replaces)}")
    if decision == "approve":
        console.print(f"[yellow]{RUNS_WORKSPACE_CODE}[/]")
        approved = approvals.get_state(settings.root, name, cfg, "lsp") == "approved"  # (again: nothing changes)
        approvals.approve(settings.root, name, cfg, "lsp")
        if approved:
            console.print(
                f"{escape(name)} was [green]approved[/] already for {escape(str(settings.root))}. Nothing changed."
            )
        else:
            console.print(f"[green]Approved[/] for {escape(str(settings.root))}. A running mcpvisor may start it now.")
    else:
        approvals.reject(settings.root, name, cfg, "lsp")
        console.print(
            f"[red]Rejected[/] for {escape(str(settings.root))}. It never starts until its configuration changes."
        )
