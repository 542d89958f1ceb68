"""``mcpvisor mcp ...``: inspect and manage configured servers. None of these starts a server or imports the
SDK, except ``login``, which connects to the one server it signs in to."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from mcpvisor.cli.fleet import FleetNameOpt, FleetOpt
from mcpvisor.cli.options import AllowedOpt, JsonOpt, McpConfigOpt, WorkspaceOpt, reported, setup_logging, split_names

__all__ = ["mcp_app"]

mcp_app = typer.Typer(
    help="Inspect and manage configured MCP servers (only login connects to one).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@mcp_app.callback()
def _mcp_root() -> None:
    """Inspect and manage configured MCP servers (only login connects to one)."""
    setup_logging(0, narrated=True)  # each command reports problems itself


@mcp_app.command("list")
def mcp_list(
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    allowed_mcp_server_names: AllowedOpt = None,
    as_json: JsonOpt = False,
    fleet: FleetOpt = None,
    fleet_name: FleetNameOpt = None,
) -> None:
    """List every configured server with its source, scope, admission and approval state (with --fleet:
    as the fleet's approvals decide). Exits 1 when a settings file or a store cannot be read, or a server entry is
    invalid (not started)."""
    from mcpvisor.cli.commands import list_servers

    with reported(json_problems=as_json):
        broken = list_servers(
            env=dict(os.environ),
            workspace=workspace,
            mcp_config=list(mcp_config or []),
            allowed=split_names(allowed_mcp_server_names),
            as_json=as_json,
        )
    if broken:
        raise typer.Exit(1)


@mcp_app.command("approve")
def mcp_approve(
    name: Annotated[str, typer.Argument(help="The server to approve.", metavar="NAME")],
    workspace: WorkspaceOpt = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Accept tool and prompt definitions the server changed since approval without asking "
            "(without a terminal, they are only shown).",
        ),
    ] = False,
    fleet: FleetOpt = None,
    fleet_name: FleetNameOpt = None,
) -> None:
    """Approve a project or workspace server's exact configuration (a running host connects it; with
    --fleet, every replica of the fleet whose configuration of it is the same). Tool and
    prompt definitions it changed since approval are shown as a diff, then accepted once you say yes."""
    from mcpvisor.cli.commands import decide

    with reported():
        decide(env=dict(os.environ), workspace=workspace, name=name, decision="approve", confirm=None if yes else ask)


def ask(question: str) -> bool:
    """A yes/no question at the terminal; no terminal: no (nothing is accepted unseen by a person)."""
    if not sys.stdin.isatty():
        return False
    return typer.confirm(question, default=False)


@mcp_app.command("login")
def mcp_login(
    name: Annotated[str, typer.Argument(help="The remote server to sign in to.", metavar="NAME")],
    timeout: Annotated[
        float,
        typer.Option("--timeout", help="How long to wait for the browser sign-in.", metavar="SECONDS", min=1),
    ] = 300.0,
    browser: Annotated[
        bool, typer.Option("--browser/--no-browser", help="Open a browser (otherwise only print the URL).")
    ] = True,
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    fleet: FleetOpt = None,
    fleet_name: FleetNameOpt = None,
) -> None:
    """Sign in to a remote server with OAuth (browser, then a redirect to this machine); tokens are kept
    0600 in the user directory and refreshed by themselves (with --fleet and a fleet key in
    MCPVISOR_FLEET_KEY: sealed in the fleet store, for every replica, refreshed by one at a time)."""
    from mcpvisor.cli.sign_in_commands import login

    with reported():
        login(
            env=dict(os.environ),
            workspace=workspace,
            name=name,
            timeout_s=timeout,
            browser=browser,
            mcp_config=list(mcp_config or []),
        )


@mcp_app.command("logout")
def mcp_logout(
    name: Annotated[str, typer.Argument(help="The remote server to sign out of.", metavar="NAME")],
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    fleet: FleetOpt = None,
    fleet_name: FleetNameOpt = None,
) -> None:
    """Sign out of a remote server: revoke its OAuth tokens at the authorization server where it offers
    revocation, and forget them (with --fleet and a fleet key: the fleet's)."""
    from mcpvisor.cli.sign_in_commands import logout

    with reported():
        logout(env=dict(os.environ), workspace=workspace, name=name, mcp_config=list(mcp_config or []))


@mcp_app.command("reject")
def mcp_reject(
    name: Annotated[str, typer.Argument(help="The server to reject.", metavar="NAME")],
    workspace: WorkspaceOpt = None,
    fleet: FleetOpt = None,
    fleet_name: FleetNameOpt = None,
) -> None:
    """Reject a project or workspace server: it stays disconnected until its configuration changes (with
    --fleet: on every replica of the fleet)."""
    from mcpvisor.cli.commands import decide

    with reported():
        decide(env=dict(os.environ), workspace=workspace, name=name, decision="reject")


# Unknown options are errors (a misspelt --scope must not end up in the command); what follows `--` is the command.
class _AddCommand(TyperCommand):
    """``mcp add``: an option it does not know, after what reads as a name and a command (``x npx -y pkg``,
    ``x python -m pkg`` typed without ``--``), is most likely the server's: the error says where those go."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # (typer's own click Context)
        given = list(args)  # (the parser consumes the list)
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:  # typer's own copy of click's NoSuchOption (not exported)
            option = getattr(exc, "option_name", None)
            if option and len(self._words_before(given, option)) >= 2:
                exc.message = (  # type: ignore[attr-defined]
                    f"{exc.message}. A server's own options follow its command after --: "  # type: ignore[attr-defined]
                    "mcpvisor mcp add [OPTIONS] NAME -- COMMAND [ARGS]..."
                )
            raise

    def _words_before(self, args: list[str], option: str) -> list[str]:
        """The arguments before ``option`` that are neither options nor an option's value."""
        valued = {name for param in self.params if not getattr(param, "is_flag", True) for name in param.opts}
        words: list[str] = []
        value_next = False
        for arg in args:
            if arg.startswith(option):
                break
            if not value_next and not arg.startswith("-"):
                words.append(arg)
            value_next = arg in valued
        return words


@mcp_app.command("add", cls=_AddCommand, context_settings={"allow_extra_args": True})
def mcp_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Server name.", metavar="NAME")],
    scope: Annotated[
        str, typer.Option("--scope", help="Where to write it: user or workspace.", metavar="SCOPE")
    ] = "user",
    url: Annotated[
        str | None, typer.Option("--url", help="Streamable HTTP URL instead of a command.", metavar="URL")
    ] = None,
    sse: Annotated[bool, typer.Option("--sse", help="The URL is an SSE endpoint.")] = False,
    env_vars: Annotated[
        list[str] | None,
        typer.Option("--env", "-e", help="KEY=VALUE for the server's environment; repeatable.", metavar="KEY=VALUE"),
    ] = None,
    headers: Annotated[
        list[str] | None,
        typer.Option(
            "--header", "-H", help="'NAME: VALUE' sent to a remote server (--url); repeatable.", metavar="'NAME: VALUE'"
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a server of that name.")] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Add a server: mcpvisor mcp add NAME -- COMMAND [ARGS...]  or  --url URL. A secret is best written as
    ${VAR} (-e 'TOKEN=${GITHUB_TOKEN}'): the value then comes from the environment, not the file."""
    from mcpvisor.cli.commands import add_server

    with reported():
        add_server(
            env=dict(os.environ),
            workspace=workspace,
            name=name,
            scope=scope,
            command=list(ctx.args),
            url=url,
            sse=sse,
            env_vars=list(env_vars or []),
            headers=list(headers or []),
            force=force,
        )


@mcp_app.command("remove")
def mcp_remove(
    name: Annotated[str, typer.Argument(help="Server name.", metavar="NAME")],
    scope: Annotated[
        str, typer.Option("--scope", help="Where to remove it from: user or workspace.", metavar="SCOPE")
    ] = "user",
    workspace: WorkspaceOpt = None,
) -> None:
    """Remove a server from a settings file (a running host disconnects it)."""
    from mcpvisor.cli.commands import remove_server

    with reported():
        remove_server(env=dict(os.environ), workspace=workspace, name=name, scope=scope)


_SOURCES_HELP = "claude-desktop, claude-code, vscode, cursor, gemini or qwen"


@mcp_app.command("import")
def mcp_import(
    source: Annotated[str, typer.Option("--from", help=f"The tool to import from: {_SOURCES_HELP}.", metavar="TOOL")],
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope",
            help="Only its user-level servers (user) or only its project-level ones (workspace); default: both.",
            metavar="SCOPE",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be imported; write nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace servers of the same name.")] = False,
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import the MCP servers another tool has configured into mcpvisor's settings.

    User-level servers go to your user settings; project-level ones to the workspace settings,
    where they start only once approved. Entries that need what mcpvisor does not do (an input
    prompt, an env file) are listed with the reason; the exit code is then 1.
    """
    from mcpvisor.cli.import_command import import_servers

    with reported():
        code = import_servers(
            env=dict(os.environ),
            workspace=workspace,
            source=source,
            scope=scope,
            dry_run=dry_run,
            force=force,
            as_json=as_json,
        )
    raise typer.Exit(code)


@mcp_app.command("trust")
def mcp_trust(workspace: WorkspaceOpt = None) -> None:
    """Trust a workspace folder (only matters when security.folderTrust.enabled is set)."""
    from mcpvisor.cli.commands import trust_folder

    with reported():
        trust_folder(env=dict(os.environ), workspace=workspace)
