"""The ``mcpvisor`` command: argv, logging, signals and exit codes live here and only here.

Commands that start no server (``mcp list``, ``mcp approve``, ...) never import the ``mcp`` SDK,
which costs about a second: everything that connects imports it lazily.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer

from mcpvisor import __version__
from mcpvisor.cli.lsp_app import lsp_app
from mcpvisor.cli.mcp_app import mcp_app
from mcpvisor.cli.options import (
    AllowedLspOpt,
    AllowedOpt,
    JsonOpt,
    LspConfigOpt,
    McpConfigOpt,
    VerboseOpt,
    WorkspaceOpt,
    host_options,
    reported,
    setup_logging,
    split_names,
)
from mcpvisor.core.errors import ConfigError
from mcpvisor.gateway.limits import (
    DEFAULT_NAME_BUDGET,
    HEADER_TIMEOUT_S,
    MAX_CONNECTIONS,
    MAX_SESSIONS,
    MIN_NAME_BUDGET,
    SESSION_IDLE_TIMEOUT_S,
)
from mcpvisor.shell.consoles import new_console

if TYPE_CHECKING:
    pass

__all__ = ["app", "main"]

logger = logging.getLogger("mcpvisor")

app = typer.Typer(
    name="mcpvisor",
    help="Run MCP servers that follow their configuration files: edit a settings file and only what "
    "changed is connected, disconnected or restarted.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    # Plain help: typer's boxed help shows a stray "<bool>" metavar on every flag with click >= 8.2,
    # and plain text fits any width and never colours.
    rich_markup_mode=None,
)
app.add_typer(mcp_app, name="mcp")
app.add_typer(lsp_app, name="lsp")


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
    lsp_config: list[Path] | None = None,
    allowed_lsp: list[str] | None = None,
    intro: str | None = None,
    approve_command: str | None = None,
) -> None:
    from mcpvisor.cli.output import JsonOutput
    from mcpvisor.host.host import Host, HostOptions
    from mcpvisor.shell.narration import HumanOutput

    console = new_console(highlight=False)
    options = HostOptions(
        env=env,
        workspace=workspace,
        mcp_config=mcp_config,
        allowed_mcp_server_names=allowed,
        lsp_config=list(lsp_config or []),
        allowed_lsp_server_names=allowed_lsp,
    )
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
    lsp_config: LspConfigOpt = None,
    allowed_lsp_server_names: AllowedLspOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Run the host in the foreground: connect every admitted server and follow settings edits.

    With --json, prints one JSON object per line: ready, server, reconcile, approval_needed,
    settings_error, restart_required, warning, error, prompts_changed.
    """
    setup_logging(verbose, narrated=not as_json)
    with reported():
        anyio.run(
            lambda: _run_host(
                env=dict(os.environ),
                workspace=workspace,
                mcp_config=list(mcp_config or []),
                allowed=split_names(allowed_mcp_server_names),
                as_json=as_json,
                lsp_config=list(lsp_config or []),
                allowed_lsp=split_names(allowed_lsp_server_names),
            )
        )


@app.command()
def status(
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    allowed_mcp_server_names: AllowedOpt = None,
    lsp_config: LspConfigOpt = None,
    allowed_lsp_server_names: AllowedLspOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Connect every admitted server once, show the status view, and exit.

    Exits 1 when an admitted server failed to connect (after the view), 0 otherwise.
    """
    setup_logging(verbose, narrated=not as_json)
    if not as_json:
        new_console(stderr=True, highlight=False).print("[dim]Connecting to the admitted servers…[/]")

    async def once() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        from mcpvisor.host.host import Host
        from mcpvisor.shell.views import render_lsp_status, render_status

        options = host_options(
            workspace,
            mcp_config,
            allowed_mcp_server_names,
            watch=False,
            lsp_config=lsp_config,
            allowed_lsp=allowed_lsp_server_names,
        )
        async with Host(options) as host:
            rows = host.server_views()
            lsp_rows = host.lsp.views()
            if not as_json:
                console = new_console(highlight=False)
                for warning in host.settings.warnings:
                    console.print(f"[yellow]! {warning}[/]")
                render_status(console, rows, title=f"MCP servers for {host.root}")
                render_lsp_status(console, lsp_rows, show_target=True)
        return [row.to_json() for row in rows], [row.to_json() for row in lsp_rows]

    with reported():
        rows, lsp_rows = anyio.run(once)
    if as_json:
        typer.echo(json.dumps({"servers": rows, "language_servers": lsp_rows}, indent=2))
    failed = [row["name"] for row in rows if row["state"] == "disconnected" and row["error"]]
    if failed:
        raise typer.Exit(1)


@app.command()
def demo(
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Where to create the demo, kept afterwards (default: a new temporary folder, removed when the "
            "demo stops).",
            metavar="DIR",
        ),
    ] = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Create a scratch workspace with bundled example servers and run the host on it."""
    import shlex
    import shutil

    from mcpvisor.cli.demo import cli_command, create_demo

    setup_logging(verbose, narrated=not as_json)
    layout = create_demo(directory)
    env = {**os.environ, "MCPVISOR_HOME": str(layout.home), "MCPVISOR_LOG_DIR": str(layout.logs)}
    command = cli_command()
    home = shlex.quote(str(layout.home))
    try:
        with reported():
            anyio.run(
                lambda: _run_host(
                    env=env,
                    workspace=layout.project,
                    mcp_config=[],
                    allowed=None,
                    as_json=as_json,
                    intro=layout.instructions(command),
                    approve_command=f"MCPVISOR_HOME={home} {command} mcp approve {{name}} --workspace {{root}}",
                )
            )
    finally:
        err = new_console(stderr=True, highlight=False, soft_wrap=True)
        if directory is None:  # a scratch folder of its own: nothing in it is anyone else's
            shutil.rmtree(layout.root, ignore_errors=True)
            err.print(f"[dim]Removed the demo folder {layout.root}.[/]")
        else:
            err.print(
                f"[dim]The demo folder {layout.root} is kept; run it again with: {command} demo --dir "
                f"{shlex.quote(str(layout.root))}[/]"
            )


def _parse_http(value: str) -> tuple[str, int]:
    from mcpvisor.gateway.http import is_loopback

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
    if not is_loopback(host):
        new_console(stderr=True, soft_wrap=True).print(
            f"[yellow]! serving on {host}, not loopback: other machines can reach this port; every request "
            "needs the gateway's token[/]"
        )
    return host, number


@app.command()
def serve(
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    allowed_mcp_server_names: AllowedOpt = None,
    lsp_config: LspConfigOpt = None,
    allowed_lsp_server_names: AllowedLspOpt = None,
    http: Annotated[
        str | None,
        typer.Option(
            "--http",
            help="Serve streamable HTTP on HOST:PORT (default host 127.0.0.1) instead of stdio.",
            metavar="HOST:PORT",
        ),
    ] = None,
    per_client_workspaces: Annotated[
        bool,
        typer.Option(
            "--per-client-workspaces",
            help="With --http: a client may name its workspace folder in the X-Mcpvisor-Workspace header and "
            "gets that workspace's servers; identical servers are shared.",
        ),
    ] = False,
    workspace_root: Annotated[
        Path | None,
        typer.Option(
            "--workspace-root",
            help="With --per-client-workspaces: clients may name only folders inside DIR "
            "(default: only folders you own under your home folder; never system folders).",
            metavar="DIR",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="With --http: the bearer token clients must send, read from FILE (mode 0600). Default: "
            "$MCPVISOR_GATEWAY_TOKEN, else ~/.mcpvisor/gateway-token (made on first use).",
            metavar="FILE",
        ),
    ] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="With --http on a loopback address: accept clients without a token.")
    ] = False,
    max_sessions: Annotated[
        int,
        typer.Option(
            "--max-sessions",
            min=1,
            help="With --http: handshake-era client sessions at most, across workspaces. At the cap the least "
            "recently used idle session is closed (its client gets 404 and starts a new one); when all are busy "
            "a new client gets 503 with Retry-After.",
            metavar="N",
        ),
    ] = MAX_SESSIONS,
    session_idle_timeout: Annotated[
        float,
        typer.Option(
            "--session-idle-timeout",
            min=0.001,
            help="With --http: a session with no request in flight for SECONDS ends (then 404); a workspace whose "
            "last session ended closes after as long.",
            metavar="SECONDS",
        ),
    ] = SESSION_IDLE_TIMEOUT_S,
    max_connections: Annotated[
        int,
        typer.Option(
            "--max-connections",
            min=1,
            help="With --http: open connections at most; one more is closed as it arrives. Keep it under the "
            "file limit (ulimit -n).",
            metavar="N",
        ),
    ] = MAX_CONNECTIONS,
    header_timeout: Annotated[
        float,
        typer.Option(
            "--header-timeout",
            min=0.001,
            help="With --http: a connection that has not sent a request's headers within SECONDS is closed.",
            metavar="SECONDS",
        ),
    ] = HEADER_TIMEOUT_S,
    name_budget: Annotated[
        int,
        typer.Option(
            "--name-budget",
            min=MIN_NAME_BUDGET,
            help="The longest tool and prompt name served; longer ones are shortened to their start and a "
            "hash (stable across reloads, never two alike). Model APIs refuse tool names over 64 "
            "characters and clients prefix ours with their own: pick 64 minus the length of the prefix "
            "your client adds, e.g. 49 for Claude Code's 'mcp__mcpvisor__' when you name the gateway "
            "mcpvisor (a name of 5 more characters: 44).",
            metavar="N",
        ),
    ] = DEFAULT_NAME_BUDGET,
    verbose: VerboseOpt = 0,
) -> None:
    """Serve every connected server's tools, prompts and resources as one MCP server (stdio, or
    streamable HTTP).

    Clients are told when the set changes (list_changed notices, in both protocol eras), so they
    never restart to pick up a configuration edit. Tools and prompts are named
    mcp__<server>__<name>. What a server asks of its client (sampling, elicitation, roots) goes to
    the client whose call caused it; progress, cancellation, log messages and resource
    subscriptions pass through. Over HTTP every request needs 'Authorization: Bearer <token>'; the
    start-up line says where the token is. No server's message may exceed 64 MiB (maxMessageBytes);
    SIGTERM or Ctrl-C lets calls in flight finish for up to 5 s, then answers them that the gateway
    is shutting down.
    """
    setup_logging(verbose, narrated=True)
    address = _parse_http(http) if http is not None else None
    from mcpvisor.gateway.limits import HttpLimits

    limits = HttpLimits(
        max_sessions=max_sessions,
        session_idle_timeout_s=session_idle_timeout,
        max_connections=max_connections,
        header_timeout_s=header_timeout,
    )

    async def main() -> None:
        from mcpvisor.cli.serve import run_gateway
        from mcpvisor.gateway.auth import load_gateway_token

        options = host_options(
            workspace, mcp_config, allowed_mcp_server_names, lsp_config=lsp_config, allowed_lsp=allowed_lsp_server_names
        )
        if address is None and (no_auth or token_file is not None):
            raise ConfigError("--no-auth and --token-file apply to --http: over stdio the client is the parent process")
        token = None if address is None or no_auth else load_gateway_token(options.env, token_file)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, stop, tg.cancel_scope)
            await run_gateway(
                options,
                http=address,
                per_client_workspaces=per_client_workspaces,
                token=token,
                workspace_root=workspace_root,
                limits=limits,
                stop=stop,
                name_budget=name_budget,
            )
            tg.cancel_scope.cancel()

    with reported():
        anyio.run(main, backend_options=fast_event_loop())


@app.command()
def shell(
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    allowed_mcp_server_names: AllowedOpt = None,
    lsp_config: LspConfigOpt = None,
    allowed_lsp_server_names: AllowedLspOpt = None,
    verbose: VerboseOpt = 0,
) -> None:
    """An interactive session: /mcp, /tools, /prompts, /call, /reload, and approvals as they come up."""
    from mcpvisor.shell import run_shell

    setup_logging(verbose, narrated=True)
    options = host_options(
        workspace, mcp_config, allowed_mcp_server_names, lsp_config=lsp_config, allowed_lsp=allowed_lsp_server_names
    )

    async def main() -> int:
        with anyio.open_signal_receiver(signal.SIGINT) as sigint:
            return await run_shell(options, interrupts=sigint)

    with reported():
        code = anyio.run(main)
    raise typer.Exit(code)


def fast_event_loop() -> dict[str, Any]:
    """anyio's asyncio options for the gateway: uvloop's event loop where it is installed (it is not on
    Windows), which cuts the loop's share of every proxied call; asyncio's own loop otherwise."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


async def _stop_on_signal(stop: anyio.Event, scope: anyio.CancelScope) -> None:
    """The first SIGINT or SIGTERM asks for an orderly stop (``stop``); a second one cancels at once."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            if stop.is_set():
                scope.cancel()
                return
            stop.set()


async def _cancel_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return


@app.command("settings-schema")
def settings_schema() -> None:
    """Print the JSON Schema of settings files (for editors)."""
    from mcpvisor.host.settings.schema import settings_json_schema

    typer.echo(json.dumps(settings_json_schema(), indent=2))


def main() -> None:
    app(prog_name="mcpvisor")  # also under ``python -m mcpvisor``: usage lines and shell completion
