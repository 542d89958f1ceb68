"""Management commands that start no server: ``mcp list | approve | reject | add | remove | trust``.

None of them imports the ``mcp`` SDK. They read the same settings, assemble the same server map
and compute gating with the same function as the running host, so what they say is what it does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from rich.console import Console

from mcpvisor.core.config import Config
from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host import paths
from mcpvisor.host.approvals import ApprovalStore, is_gated
from mcpvisor.host.hot_reload import DesiredState, compute_desired_state
from mcpvisor.host.settings.loader import Settings, load_settings, parse_trusted_folders
from mcpvisor.host.settings.mcp_servers import load_top_tier
from mcpvisor.host.settings.writer import delete_setting, set_setting, write_atomically
from mcpvisor.host.status import describe_servers
from mcpvisor.shell.views import render_status

__all__ = ["add_server", "decide", "list_servers", "load_state", "remove_server", "trust_folder"]


def load_state(
    env: Mapping[str, str],
    workspace: Path | None,
    mcp_config: Sequence[Path] = (),
    allowed: Sequence[str] | None = None,
) -> tuple[Settings, ApprovalStore, DesiredState]:
    settings = load_settings(env, workspace)
    approvals = ApprovalStore(paths.approvals_path(env))
    approvals.load()
    top_tier = load_top_tier(mcp_config, env)
    for layer in top_tier.mcp_config:
        if layer.error is not None:
            raise ConfigError(str(layer.error))
    state = compute_desired_state(settings, Config(allowed_mcp_server_names=allowed), approvals, top_tier)
    return settings, approvals, state


def list_servers(
    *,
    env: Mapping[str, str],
    workspace: Path | None,
    mcp_config: Sequence[Path],
    allowed: Sequence[str] | None,
    as_json: bool,
) -> None:
    settings, approvals, state = load_state(env, workspace, mcp_config, allowed)
    rows = describe_servers(state.assembled, state.gating, approvals, settings.root, trusted=settings.trusted)
    problems = [*(str(e) for e in settings.errors.values()), *settings.warnings, *state.assembled.warnings]
    if approvals.error:
        problems.append(approvals.error)
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
                    "approval": r.approval,
                }
                for r in rows
            ],
            "problems": problems,
        }
        print(json.dumps(out, indent=2))  # noqa: T201 - the command's output
        return
    console = Console(highlight=False)
    for problem in problems:
        console.print(f"[yellow]! {problem}[/]")
    render_status(console, rows, live=False, title=f"MCP servers for {settings.root}", show_target=True)


def decide(*, env: Mapping[str, str], workspace: Path | None, name: str, decision: str) -> None:
    settings, approvals, state = load_state(env, workspace)
    cfg = state.assembled.servers.get(name)
    if cfg is None:
        known = ", ".join(sorted(state.assembled.servers)) or "none"
        raise ConfigError(
            f"cannot {decision} server {name!r}: no server of that name is configured for {settings.root} "
            f"(configured: {known}); check the name or pass --workspace"
        )
    if not is_gated(cfg):
        raise ConfigError(
            f"cannot {decision} server {name!r}: it comes from your own settings "
            f"({state.assembled.sources[name].label}), which need no approval; "
            "only project (.mcp.json) and workspace servers are approved"
        )
    if approvals.error:
        raise ConfigError(approvals.error)
    source = state.assembled.sources[name]
    console = Console(highlight=False)
    console.print(f"Server [bold]{name}[/] ({source.label}, {source.path})")
    _show_config(console, cfg)
    if decision == "approve":
        approvals.approve(settings.root, name, cfg)
        console.print(f"[green]Approved[/] for {settings.root}. A running mcpvisor connects it now.")
    else:
        approvals.reject(settings.root, name, cfg)
        console.print(f"[red]Rejected[/] for {settings.root}. It stays disconnected until its configuration changes.")


def _show_config(console: Console, cfg: McpServerConfig) -> None:
    if cfg.command is not None:
        console.print(f"  command: {cfg.command}")
        if cfg.args:
            console.print(f"  args:    {json.dumps(list(cfg.args))}")
        if cfg.cwd:
            console.print(f"  cwd:     {cfg.cwd}")
    else:
        console.print(f"  url:     {cfg.http_url or cfg.url} ({cfg.transport})")
    if cfg.env:
        console.print(f"  env:     {', '.join(sorted(cfg.env))} (values hidden)")
    if cfg.headers:
        console.print(f"  headers: {', '.join(sorted(cfg.headers))} (values hidden)")


def _check_scope(scope: str) -> Literal["user", "workspace"]:
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
    force: bool = False,
) -> None:
    file_scope = _check_scope(scope)
    entry: dict[str, Any] = {}
    if url and command:
        raise ConfigError(f"cannot add server {name!r}: give either a command (after --) or --url, not both")
    if url:
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise ConfigError(f"cannot add server {name!r}: {url!r} is not an http:// or https:// URL")
        entry["type"] = "sse" if sse else "http"
        entry["url"] = url
    elif command:
        entry["command"] = command[0]
        if command[1:]:
            entry["args"] = list(command[1:])
    else:
        raise ConfigError(f"cannot add server {name!r}: give a command (mcpvisor mcp add {name} -- CMD ARGS) or --url")
    if env_vars:
        pairs = {}
        for item in env_vars:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ConfigError(f"cannot add server {name!r}: --env {key!r} must look like KEY=VALUE")
            pairs[key] = value
        entry["env"] = pairs
    McpServerConfig.model_validate(entry)  # fail before writing anything
    settings = load_settings(env, workspace)
    existing = settings.data(file_scope).get("mcpServers")
    if not force and isinstance(existing, dict) and name in existing:
        raise ConfigError(
            f"cannot add server {name!r}: {settings.paths.of(file_scope)} already defines it; "
            "pass --force to replace it, or pick another name"
        )
    set_setting(settings, file_scope, ("mcpServers", name), entry)
    Console(highlight=False).print(f"Added server [bold]{name}[/] to {settings.paths.of(file_scope)}")


def remove_server(*, env: Mapping[str, str], workspace: Path | None, name: str, scope: str) -> None:
    file_scope = _check_scope(scope)
    settings = load_settings(env, workspace)
    path = settings.paths.of(file_scope)
    if not delete_setting(settings, file_scope, ("mcpServers", name)):
        _, _, state = load_state(env, workspace)
        source = state.assembled.sources.get(name)
        where = f"; it is defined in {source.path} ({source.label}): edit that file" if source and source.path else ""
        raise ConfigError(f"cannot remove server {name!r}: it is not in {path}{where}")
    Console(highlight=False).print(f"Removed server [bold]{name}[/] from {path}")


def trust_folder(*, env: Mapping[str, str], workspace: Path | None) -> None:
    root = paths.workspace_root(workspace)
    path = paths.trusted_folders_path(env)
    try:
        existing = parse_trusted_folders(json.loads(path.read_text())) if path.exists() else []
    except (ValueError, OSError) as exc:
        raise ConfigError(f"cannot read trusted folders {str(path)!r}: {exc}; fix or delete the file") from exc
    if root in existing:
        Console(highlight=False).print(f"{root} is already trusted")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps([*map(str, existing), str(root)], indent=2) + "\n", new_mode=0o600)
    console = Console(highlight=False)
    console.print(f"Trusted {root}")
    if not load_settings(env, root).folder_trust_enabled:
        console.print("[dim]Folder trust is off (security.folderTrust.enabled), so every folder is trusted anyway.[/]")
