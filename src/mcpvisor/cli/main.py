"""The ``mcpvisor`` command: argv, logging, signals and exit codes live here and only here.

Commands that start no server (``mcp list``, ``mcp approve``, ...) never import the ``mcp`` SDK,
which costs about a second: everything that connects imports it lazily.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer
from rich.console import Console

from mcpvisor import __version__
from mcpvisor.core.errors import McpvisorError

if TYPE_CHECKING:
    from mcpvisor.cli.host import HostOptions

__all__ = ["app", "main"]

logger = logging.getLogger("mcpvisor")

app = typer.Typer(
    name="mcpvisor",
    help="Run MCP servers that follow their configuration files: edit a settings file and only what "
    "changed is connected, disconnected or restarted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
mcp_app = typer.Typer(help="Inspect and manage configured MCP servers (never starts one).", no_args_is_help=True)
app.add_typer(mcp_app, name="mcp")

WorkspaceOpt = Annotated[
    Path | None,
    typer.Option("--workspace", "-w", help="Workspace root (default: the current directory).", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON).")]
VerboseOpt = Annotated[int, typer.Option("--verbose", "-v", count=True, help="More log output on stderr (-vv: debug).")]
McpConfigOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--mcp-config",
        help="Extra server file (mcpServers format); repeatable; highest precedence; read once at start.",
    ),
]
AllowedOpt = Annotated[
    str | None,
    typer.Option(
        "--allowed-mcp-server-names",
        help="Comma-separated allow-list (globs allowed): a ceiling that settings can only narrow.",
    ),
]


def _setup_logging(verbose: int, *, narrated: bool = False) -> None:
    """Log to stderr. ``narrated``: the command already tells people every change and problem in
    its own words, so by default only errors are logged (no line says the same thing twice)."""
    quiet = logging.ERROR if narrated else logging.WARNING
    level = quiet if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    if verbose < 2:
        for noisy in ("mcp", "watchfiles", "uvicorn"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    # The HTTP client logs every request URL, credentials and query included: never let it.
    for secretive in ("httpx2", "httpcore2", "httpx", "httpcore"):
        logging.getLogger(secretive).setLevel(logging.WARNING)


def _fail(message: str, code: int = 1) -> typer.Exit:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def _own_error(exc: BaseException) -> McpvisorError | None:
    """mcpvisor's own error inside ``exc``, also when task groups wrapped it in exception groups."""
    if isinstance(exc, McpvisorError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _own_error(sub)
            if found is not None:
                return found
    return None


@contextmanager
def _reported() -> Iterator[None]:
    """Turn mcpvisor's own errors into one red line on stderr and exit code 1."""
    try:
        yield
    except (McpvisorError, BaseExceptionGroup) as exc:
        own = _own_error(exc)
        if own is None:
            raise
        raise _fail(str(own)) from None


def _host_options(
    workspace: Path | None, mcp_config: list[Path] | None, allowed: str | None, *, watch: bool = True
) -> HostOptions:
    """The host's options from the common command-line options and this process's environment."""
    from mcpvisor.cli.host import HostOptions

    return HostOptions(
        env=dict(os.environ),
        workspace=workspace,
        mcp_config=list(mcp_config or []),
        allowed_mcp_server_names=_split_names(allowed),
        watch=watch,
    )


def _split_names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [name.strip() for name in value.split(",") if name.strip()]


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mcpvisor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """mcpvisor: an MCP host runtime whose servers follow their configuration files while it runs."""


# --------------------------------------------------------------------------- run / status / demo


async def _run_host(
    *,
    env: dict[str, str],
    workspace: Path | None,
    mcp_config: list[Path],
    allowed: list[str] | None,
    as_json: bool,
    intro: str | None = None,
    approve_command: str | None = None,
) -> None:
    from mcpvisor.cli.host import Host, HostOptions
    from mcpvisor.cli.output import HumanOutput, JsonOutput

    console = Console(highlight=False)
    options = HostOptions(env=env, workspace=workspace, mcp_config=mcp_config, allowed_mcp_server_names=allowed)
    host = Host(options)

    def after_ready() -> None:
        files = [str(host.settings.paths.user), str(host.settings.paths.project)]
        if host.settings.is_active("workspace"):
            files.insert(1, str(host.settings.paths.workspace))
        console.print(f"[dim]Watching {', '.join(files)} — edit them and the servers follow. Ctrl-C to stop.[/]")
        if intro:
            console.print(intro)

    human = (
        HumanOutput(host, console, on_ready=after_ready, approve_command=approve_command)
        if approve_command
        else HumanOutput(host, console, on_ready=after_ready)
    )
    host.subscribe(JsonOutput(host) if as_json else human)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_on_signal, tg.cancel_scope)
        async with host:
            await anyio.sleep_forever()


@app.command()
def run(
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    allowed_mcp_server_names: AllowedOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Run the host in the foreground: connect every admitted server and follow settings edits.

    With --json, prints one JSON object per line: ready, server, reconcile, approval_needed,
    settings_error, restart_required, warning, error, prompts_changed.
    """
    _setup_logging(verbose, narrated=not as_json)
    with _reported():
        anyio.run(
            lambda: _run_host(
                env=dict(os.environ),
                workspace=workspace,
                mcp_config=list(mcp_config or []),
                allowed=_split_names(allowed_mcp_server_names),
                as_json=as_json,
            )
        )


@app.command()
def status(
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    allowed_mcp_server_names: AllowedOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Connect every admitted server once, show the status view, and exit.

    Exits 1 when an admitted server failed to connect (after the view), 0 otherwise.
    """
    _setup_logging(verbose, narrated=not as_json)
    if not as_json:
        Console(stderr=True, highlight=False).print("[dim]Connecting to the admitted servers…[/]")

    async def once() -> list[dict[str, Any]]:
        from mcpvisor.cli.host import Host
        from mcpvisor.cli.views import render_status

        options = _host_options(workspace, mcp_config, allowed_mcp_server_names, watch=False)
        async with Host(options) as host:
            rows = host.server_views()
            if not as_json:
                console = Console(highlight=False)
                for warning in host.settings.warnings:
                    console.print(f"[yellow]! {warning}[/]")
                render_status(console, rows, title=f"MCP servers for {host.root}")
        return [row.to_json() for row in rows]

    with _reported():
        rows = anyio.run(once)
    if as_json:
        typer.echo(json.dumps({"servers": rows}, indent=2))
    failed = [row["name"] for row in rows if row["state"] == "disconnected" and row["error"]]
    if failed:
        raise typer.Exit(1)


@app.command()
def demo(
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Where to create the demo (default: a new temporary folder).")
    ] = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Create a scratch workspace with bundled example servers and run the host on it."""
    from mcpvisor.cli.demo import create_demo

    _setup_logging(verbose, narrated=not as_json)
    layout = create_demo(directory)
    env = {**os.environ, "MCPVISOR_HOME": str(layout.home), "MCPVISOR_LOG_DIR": str(layout.logs)}
    intro = layout.instructions()
    with _reported():
        anyio.run(
            lambda: _run_host(
                env=env,
                workspace=layout.project,
                mcp_config=[],
                allowed=None,
                as_json=as_json,
                intro=intro,
                approve_command=f"MCPVISOR_HOME={layout.home} mcpvisor mcp approve {{name}} --workspace {{root}}",
            )
        )


def _parse_http(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    try:
        number = int(port)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not HOST:PORT or PORT", param_hint="--http") from None
    if not 1 <= number <= 65535:
        raise typer.BadParameter(f"port {number} is out of range: use 1 to 65535", param_hint="--http")
    host = host.strip("[]") or "127.0.0.1"
    if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127."):
        Console(stderr=True, soft_wrap=True).print(
            f"[yellow]! serving on {host}, not loopback: other machines can reach this port, and the gateway "
            "answers only requests addressed to a loopback name (DNS-rebinding protection)[/]"
        )
    return host, number


@app.command()
def serve(
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    allowed_mcp_server_names: AllowedOpt = None,
    http: Annotated[
        str | None,
        typer.Option("--http", help="Serve streamable HTTP on HOST:PORT (default host 127.0.0.1) instead of stdio."),
    ] = None,
    per_client_workspaces: Annotated[
        bool,
        typer.Option(
            "--per-client-workspaces",
            help="With --http: a client may name its workspace folder in the X-Mcpvisor-Workspace header and "
            "gets that workspace's servers; identical servers are shared.",
        ),
    ] = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Serve every connected tool and prompt as one MCP server (stdio, or streamable HTTP).

    Clients are told when the set changes (tools/list_changed, prompts/list_changed, in both
    protocol eras), so they never restart to pick up a configuration edit.
    """
    _setup_logging(verbose, narrated=True)
    address = _parse_http(http) if http is not None else None

    async def main() -> None:
        from mcpvisor.cli.gateway import run_gateway

        options = _host_options(workspace, mcp_config, allowed_mcp_server_names)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_signal, tg.cancel_scope)
            await run_gateway(options, http=address, per_client_workspaces=per_client_workspaces)
            tg.cancel_scope.cancel()

    with _reported():
        anyio.run(main)


@app.command()
def shell(
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    allowed_mcp_server_names: AllowedOpt = None,
    verbose: VerboseOpt = 0,
) -> None:
    """An interactive session: /mcp, /tools, /prompts, /call, /reload, and approvals as they come up."""
    from mcpvisor.cli.shell import run_shell

    _setup_logging(verbose, narrated=True)
    options = _host_options(workspace, mcp_config, allowed_mcp_server_names)

    async def main() -> int:
        with anyio.open_signal_receiver(signal.SIGINT) as sigint:
            return await run_shell(options, interrupts=sigint)

    with _reported():
        code = anyio.run(main)
    raise typer.Exit(code)


async def _cancel_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return


@app.command("settings-schema")
def settings_schema() -> None:
    """Print the JSON Schema of settings files (for editors)."""
    from mcpvisor.cli.settings.schema import settings_json_schema

    typer.echo(json.dumps(settings_json_schema(), indent=2))


# --------------------------------------------------------------------------- mcp management


@mcp_app.callback()
def _mcp_root() -> None:
    """Inspect and manage configured MCP servers (never starts one)."""
    _setup_logging(0, narrated=True)  # each command reports problems itself


@mcp_app.command("list")
def mcp_list(
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    allowed_mcp_server_names: AllowedOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List every configured server with its source, scope, admission and approval state."""
    from mcpvisor.cli.commands import list_servers

    with _reported():
        list_servers(
            env=dict(os.environ),
            workspace=workspace,
            mcp_config=list(mcp_config or []),
            allowed=_split_names(allowed_mcp_server_names),
            as_json=as_json,
        )


@mcp_app.command("approve")
def mcp_approve(
    name: Annotated[str, typer.Argument(help="The server to approve.")], workspace: WorkspaceOpt = None
) -> None:
    """Approve a project or workspace server's exact configuration (a running host connects it)."""
    from mcpvisor.cli.commands import decide

    with _reported():
        decide(env=dict(os.environ), workspace=workspace, name=name, decision="approve")


@mcp_app.command("reject")
def mcp_reject(
    name: Annotated[str, typer.Argument(help="The server to reject.")], workspace: WorkspaceOpt = None
) -> None:
    """Reject a project or workspace server: it stays disconnected until its configuration changes."""
    from mcpvisor.cli.commands import decide

    with _reported():
        decide(env=dict(os.environ), workspace=workspace, name=name, decision="reject")


@mcp_app.command("add", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def mcp_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Server name.")],
    scope: Annotated[str, typer.Option("--scope", help="Where to write it: user or workspace.")] = "user",
    url: Annotated[str | None, typer.Option("--url", help="Streamable HTTP URL instead of a command.")] = None,
    sse: Annotated[bool, typer.Option("--sse", help="The URL is an SSE endpoint.")] = False,
    env_vars: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE for the server's environment; repeatable.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a server of that name.")] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Add a server: mcpvisor mcp add NAME -- COMMAND [ARGS...]  or  --url URL."""
    from mcpvisor.cli.commands import add_server

    with _reported():
        add_server(
            env=dict(os.environ),
            workspace=workspace,
            name=name,
            scope=scope,
            command=list(ctx.args),
            url=url,
            sse=sse,
            env_vars=list(env_vars or []),
            force=force,
        )


@mcp_app.command("remove")
def mcp_remove(
    name: Annotated[str, typer.Argument(help="Server name.")],
    scope: Annotated[str, typer.Option("--scope", help="Where to remove it from: user or workspace.")] = "user",
    workspace: WorkspaceOpt = None,
) -> None:
    """Remove a server from a settings file (a running host disconnects it)."""
    from mcpvisor.cli.commands import remove_server

    with _reported():
        remove_server(env=dict(os.environ), workspace=workspace, name=name, scope=scope)


@mcp_app.command("trust")
def mcp_trust(workspace: WorkspaceOpt = None) -> None:
    """Trust a workspace folder (only matters when security.folderTrust.enabled is set)."""
    from mcpvisor.cli.commands import trust_folder

    with _reported():
        trust_folder(env=dict(os.environ), workspace=workspace)


def main() -> None:
    app()
