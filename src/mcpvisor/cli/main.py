"""The ``mcpvisor`` command: argv, logging, signals and exit codes live here and only here.

Commands that start no server (``mcp list``, ``mcp approve``, ...) never import the ``mcp`` SDK,
which costs about a second: everything that connects imports it lazily.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer
from rich.markup import escape

from mcpvisor import __version__
from mcpvisor.cli.fleet import FleetNameOpt, FleetOpt, joined, with_fleet_stores
from mcpvisor.cli.fleet_app import fleet_app
from mcpvisor.cli.lsp_app import lsp_app
from mcpvisor.cli.mcp_app import mcp_app
from mcpvisor.cli.options import (
    STARTUP_WAIT_S,
    AllowedLspOpt,
    AllowedOpt,
    JsonOpt,
    LspConfigOpt,
    McpConfigOpt,
    Signals,
    VerboseOpt,
    WorkspaceOpt,
    fail,
    host_options,
    reported,
    setup_logging,
    split_names,
)
from mcpvisor.cli.serve_command import serve
from mcpvisor.shell.consoles import new_console

if TYPE_CHECKING:
    from rich.console import Console

    from mcpvisor.host.host import Host

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
app.add_typer(fleet_app, name="fleet")
app.command()(serve)


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
    from mcpvisor.host.host import Host, HostOptions
    from mcpvisor.host.paths import named_home
    from mcpvisor.host.status import APPROVE_HINT, in_home

    console = new_console(highlight=False)
    if approve_command is None and (home := named_home(env)):  # (pasted elsewhere, it must decide in this home)
        approve_command = in_home(APPROVE_HINT, home)
    options = HostOptions(
        env=env,
        workspace=workspace,
        mcp_config=mcp_config,
        allowed_mcp_server_names=allowed,
        lsp_config=list(lsp_config or []),
        allowed_lsp_server_names=allowed_lsp,
        startup_wait_s=STARTUP_WAIT_S,  # then it follows edits; a server still starting comes in later
    )
    async with joined(options) as (options, _):
        await _follow(Host(options), console, as_json=as_json, intro=intro, approve_command=approve_command)


async def _follow(
    host: Host, console: Console, *, as_json: bool, intro: str | None, approve_command: str | None
) -> None:
    from mcpvisor.cli.output import JsonOutput
    from mcpvisor.shell.narration import HumanOutput

    def after_ready() -> None:
        paths = host.settings.paths
        files = [str(paths.user), str(paths.project), str(paths.lsp_project), *map(str, host.options.lsp_config)]
        if host.settings.is_active("workspace"):
            files.insert(1, str(paths.workspace))
        console.print(
            f"[dim]Watching {escape(', '.join(files))} — edit them and the servers follow. Ctrl-C to stop.[/]"
        )
        if intro:
            console.print(intro, soft_wrap=True)  # its commands stay one line each, to copy

    human = (
        HumanOutput(host, console, on_ready=after_ready, approve_command=approve_command)
        if approve_command
        else HumanOutput(host, console, on_ready=after_ready)
    )
    with Signals((signal.SIGINT, *_ENDING)) as signals:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_signal, signals, tg.cancel_scope)
            host.subscribe(JsonOutput(host, on_closed=tg.cancel_scope.cancel) if as_json else human)
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
    fleet: FleetOpt = None,
    fleet_name: FleetNameOpt = None,
    verbose: VerboseOpt = 0,
) -> None:
    """Run the host in the foreground: connect every admitted server and follow settings edits.
    With --fleet, approvals are the fleet's and decisions made anywhere in it apply at once.

    With --json, prints one JSON object per line: ready, server, reconcile, approval_needed,
    settings_error, settings_ok, restart_required, warning, error, prompts_changed,
    definitions_accepted, lsp_server, lsp_approval_needed; an error that stops it is an error event
    with "fatal": true.
    """
    setup_logging(verbose, narrated=not as_json)
    with reported(json_events=as_json):
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
    fleet: FleetOpt = None,
    fleet_name: FleetNameOpt = None,
    verbose: VerboseOpt = 0,
) -> None:
    """Connect every admitted server once, show the status view, and exit (with --fleet: as the
    fleet's approvals decide).

    Exits 1 when a settings file or a store (approvals, sign-ins, tool pins) cannot be read, a server entry is
    invalid (skipped), or an admitted server failed to connect or needs a sign-in, or a language server entry is
    invalid or a language server started at start-up failed (after the view), 0 otherwise.
    """
    setup_logging(verbose, narrated=not as_json)
    if not as_json:
        new_console(stderr=True, highlight=False).print("[dim]Connecting to the admitted servers…[/]")

    async def once() -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None, list[str], bool]:
        from mcpvisor.cli.commands import config_problems, entry_skipped, store_problems
        from mcpvisor.host.host import Host
        from mcpvisor.host.paths import named_home
        from mcpvisor.host.status import ONCE_PINS_READABLE, command_hints, with_options
        from mcpvisor.shell.views import render_lsp_status, render_status

        options = host_options(
            workspace,
            mcp_config,
            allowed_mcp_server_names,
            watch=False,
            lsp_config=lsp_config,
            allowed_lsp=allowed_lsp_server_names,
        )
        async with Host(with_fleet_stores(options)) as host:
            await host.lsp.wait_started()  # those lsp.startup "eager" started: ready, or failed and why
            rows = host.server_views()
            lsp_rows = host.lsp.views()
            lsp_tools = host.lsp.tools_served_as()  # mcp__lsp_1__* while an MCP server is named lsp
            unreadable, pins_unread = store_problems(host.tokens), store_problems(host.pins)
            warnings = (*host.state.assembled.warnings, *host.lsp.warnings())
            home = named_home(host.options.env)
            problems = config_problems(
                host.settings,
                host.approvals.error,
                warnings,
                [*unreadable, *pins_unread],
                home=home,
                language_servers=host.lsp.manager.configured(),
            )
            broken = bool(host.settings.errors) or host.approvals.error is not None or bool(unreadable or pins_unread)
            # an invalid entry no row shows: one whose name is blank or cannot be shown
            broken = broken or entry_skipped(problems)
            broken = broken or any(row.held_why for row in rows)  # its pins could not be saved: held, row says why
            if not as_json:
                console = new_console(highlight=False)
                for problem in problems:
                    console.print(f"[yellow]! {escape(problem)}[/]")
                approvals = host.approvals
                approve_hint, login_hint = command_hints(
                    host.root, approvals_error=approvals.error, options=approvals.decided_with, home=home
                )
                files = "".join(f" --mcp-config {shlex.quote(str(file))}" for file in mcp_config or [])
                login_hint = with_options(login_hint, files)  # a server of those files is signed in to with them
                if unreadable:  # a sign-in cannot be kept until the store is fixed
                    login_hint += ", once the token store can be read again (see above)"
                if pins_unread:  # (every tool of a pinned server is held meanwhile)
                    approve_hint += ONCE_PINS_READABLE
                title = f"MCP servers for {host.root}"
                unread = bool(host.settings.errors)
                render_status(
                    console, rows, title=title, approve_hint=approve_hint, login_hint=login_hint, unreadable=unread
                )
                render_lsp_status(console, lsp_rows, show_target=True, tools=lsp_tools)
        return [row.to_json() for row in rows], [row.to_json() for row in lsp_rows], lsp_tools, problems, broken

    interrupted = False

    async def until_told_to_stop() -> (
        tuple[list[dict[str, Any]], list[dict[str, Any]], str | None, list[str], bool] | None
    ):
        nonlocal interrupted
        found = None
        # SIGTERM, SIGHUP and Ctrl-C: its servers stop (also while one is still starting: it may take 30 s)
        with Signals(_ENDING) as ending, Signals((signal.SIGINT,)) as ctrl_c:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_signal, ending, tg.cancel_scope)
                tg.start_soon(_cancel_on_signal, ctrl_c, tg.cancel_scope)
                found = await once()
                tg.cancel_scope.cancel()
        interrupted = bool(ctrl_c.count)
        return found

    with reported(json_problems=as_json):
        found = anyio.run(until_told_to_stop)
    if found is None:
        raise typer.Exit(130 if interrupted else 1)
    rows, lsp_rows, lsp_tools, problems, broken = found
    if as_json:
        shown = {
            "servers": rows,
            "language_servers": lsp_rows,
            "language_server_tools": lsp_tools,
            "problems": problems,
        }
        typer.echo(json.dumps(shown, indent=2))
    failed = [row["name"] for row in rows if row["state"] in ("disconnected", "needs_auth") and row["error"]]
    failed += [row["name"] for row in rows if row["state"] == "invalid"]
    failed += [row["name"] for row in lsp_rows if row["error"]]
    if failed or broken:
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
    """Create a scratch workspace with bundled example servers and run the host on it.

    With --json, prints run's events after a first one, demo, that says where the demo's folder and files are.
    """
    import shlex
    import shutil

    from mcpvisor.cli.demo import cli_command, create_demo

    setup_logging(verbose, narrated=not as_json)
    try:
        layout = create_demo(directory)
    except OSError as exc:
        said = f"cannot make the demo in {directory}: {exc.strerror or exc}; name a folder (or a new one) with --dir"
        if as_json:  # as run --json tells an error that stops it
            typer.echo(json.dumps({"event": "error", "message": said, "fatal": True}))
        raise fail(said) from None
    if as_json:  # (the human output names its files in the instructions it prints once the servers are up)
        typer.echo(json.dumps(layout.to_json(kept=directory is not None)))
    env = {**os.environ, "MCPVISOR_HOME": str(layout.home), "MCPVISOR_LOG_DIR": str(layout.logs)}
    command = cli_command()
    home = shlex.quote(str(layout.home))
    try:
        with reported(json_events=as_json):
            anyio.run(
                lambda: _run_host(
                    env=env,
                    workspace=layout.project,
                    mcp_config=[],
                    allowed=None,
                    as_json=as_json,
                    intro=layout.instructions(command),
                    approve_command=f"MCPVISOR_HOME={home} {command} mcp approve {{name}}",
                )
            )
    finally:
        err = new_console(stderr=True, highlight=False, soft_wrap=True)
        if directory is None:  # a scratch folder of its own: nothing in it is anyone else's
            shutil.rmtree(layout.root, ignore_errors=True)
            err.print(f"[dim]Removed the demo folder {escape(str(layout.root))}.[/]")
        else:
            err.print(
                f"[dim]The demo folder {escape(str(layout.root))} is kept; run it again with: "
                f"{escape(f'{command} demo --dir {shlex.quote(str(layout.root))}')}[/]"
            )


@app.command()
def shell(
    workspace: WorkspaceOpt = None,
    mcp_config: McpConfigOpt = None,
    allowed_mcp_server_names: AllowedOpt = None,
    lsp_config: LspConfigOpt = None,
    allowed_lsp_server_names: AllowedLspOpt = None,
    fleet: FleetOpt = None,
    fleet_name: FleetNameOpt = None,
    verbose: VerboseOpt = 0,
) -> None:
    """An interactive session: /mcp, /tools, /prompts, /call, /reload, and approvals as they come up
    (with --fleet: the fleet's approvals, and decisions made here reach every replica).

    Commands may be piped in, one per line; the session then exits 1 if any of them failed (or a tool
    reported an error), 130 when interrupted, 0 otherwise."""
    from mcpvisor.shell import run_shell

    setup_logging(verbose, narrated=True)
    options = host_options(
        workspace, mcp_config, allowed_mcp_server_names, lsp_config=lsp_config, allowed_lsp=allowed_lsp_server_names
    )
    options = dataclasses.replace(options, startup_wait_s=STARTUP_WAIT_S)  # the user waits for none but a few s

    async def main() -> int:
        async with joined(options) as (fleet_options, _):
            with anyio.open_signal_receiver(signal.SIGINT) as sigint, Signals(_ENDING) as ending:
                code = 0  # SIGTERM, or SIGHUP (its terminal closed): ends it as /quit does
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_cancel_on_signal, ending, tg.cancel_scope)
                    code = await run_shell(fleet_options, interrupts=sigint)
                    tg.cancel_scope.cancel()
                return code

    with reported():
        code = anyio.run(main)
    raise typer.Exit(code)


_ENDING = (signal.SIGTERM, signal.SIGHUP)
"""The signals that end a session as its own way out does (stopping its servers): a kill, a terminal that closed."""


async def _cancel_on_signal(signals: Signals, scope: anyio.CancelScope) -> None:
    await signals.wait(1)  # more while the servers stop (a bounded stop) change nothing
    scope.cancel()


@app.command("settings-schema")
def settings_schema() -> None:
    """Print the JSON Schema of settings files (for editors)."""
    from mcpvisor.host.settings.schema import settings_json_schema

    typer.echo(json.dumps(settings_json_schema(), indent=2))


def main() -> None:
    app(prog_name="mcpvisor")  # also under ``python -m mcpvisor``: usage lines and shell completion
