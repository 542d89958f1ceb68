"""``mcpvisor lsp ...``: inspect and decide on language servers. None of these starts a server or imports
the SDK."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from mcpvisor.cli.fleet import FleetNameOpt, FleetOpt
from mcpvisor.cli.options import (
    AllowedLspOpt,
    JsonOpt,
    LspConfigOpt,
    WorkspaceOpt,
    reported,
    setup_logging,
    split_names,
)

__all__ = ["lsp_app"]

lsp_app = typer.Typer(
    help="Inspect language servers (.lsp.json, lspServers) and approve or reject a repository's.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@lsp_app.callback()
def _lsp_root() -> None:
    """Inspect language servers (.lsp.json, lspServers) and approve or reject a repository's."""
    setup_logging(0, narrated=True)


@lsp_app.command("list")
def lsp_list(
    workspace: WorkspaceOpt = None,
    lsp_config: LspConfigOpt = None,
    allowed_lsp_server_names: AllowedLspOpt = None,
    as_json: JsonOpt = False,
    fleet: FleetOpt = None,
    fleet_name: FleetNameOpt = None,
) -> None:
    """List every configured language server with its source, command, files and admission (with --fleet:
    as the fleet's approvals decide). Exits 1 when a settings file, .lsp.json or the approvals store cannot be
    read, or a language server entry is invalid (not started)."""
    from mcpvisor.cli.lsp_commands import list_lsp_servers

    with reported(json_problems=as_json):
        readable = list_lsp_servers(
            env=dict(os.environ),
            workspace=workspace,
            lsp_config=list(lsp_config or []),
            allowed=split_names(allowed_lsp_server_names),
            as_json=as_json,
        )
    if not readable:
        raise typer.Exit(1)


_NAME = Annotated[str, typer.Argument(help="The language server (its key in .lsp.json or lspServers).", metavar="NAME")]


@lsp_app.command("approve")
def lsp_approve(
    name: _NAME, workspace: WorkspaceOpt = None, fleet: FleetOpt = None, fleet_name: FleetNameOpt = None
) -> None:
    """Approve a project or workspace language server's exact configuration. An approved language server runs
    code from the workspace; a running mcpvisor may start it at once."""
    from mcpvisor.cli.lsp_commands import decide_lsp

    with reported():
        decide_lsp(env=dict(os.environ), workspace=workspace, name=name, decision="approve")


@lsp_app.command("reject")
def lsp_reject(
    name: _NAME, workspace: WorkspaceOpt = None, fleet: FleetOpt = None, fleet_name: FleetNameOpt = None
) -> None:
    """Reject a project or workspace language server: it never starts until its configuration changes."""
    from mcpvisor.cli.lsp_commands import decide_lsp

    with reported():
        decide_lsp(env=dict(os.environ), workspace=workspace, name=name, decision="reject")
