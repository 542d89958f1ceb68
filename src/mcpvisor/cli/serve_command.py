"""``mcpvisor serve``: its options and the command (the gateway itself runs in :mod:`mcpvisor.cli.serve`)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import anyio
import typer

from mcpvisor.cli.fleet import FleetNameOpt, FleetOpt
from mcpvisor.cli.options import (
    AllowedLspOpt,
    AllowedOpt,
    LspConfigOpt,
    McpConfigOpt,
    Signals,
    VerboseOpt,
    WorkspaceOpt,
    host_options,
    reported,
    setup_logging,
    show_fleet_operation,
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

__all__ = ["fast_event_loop", "serve"]


def _parse_http(value: str) -> tuple[str, int]:
    from mcpvisor.gateway.listen import unresolvable

    if "://" in value:
        address = urlsplit(value).netloc.rpartition("@")[2] or "127.0.0.1:8080"
        raise typer.BadParameter(f"give HOST:PORT or PORT, not a URL: --http {address}", param_hint="--http")
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    if not port.strip() or (not sep and not port.strip().isdigit()):  # 'localhost:', or a host alone
        example = f"{(host if sep else value).strip() or 'localhost'}:8080"
        raise typer.BadParameter(
            f"{value!r} gives no port: give HOST:PORT or PORT, e.g. --http {example}", param_hint="--http"
        )
    try:
        number = int(port)
    except ValueError:
        raise typer.BadParameter(
            f"the port {port!r} of {value!r} is not a number: give HOST:PORT or PORT, e.g. --http {host}:8080",
            param_hint="--http",
        ) from None
    if number == 0:
        raise typer.BadParameter("port 0 picks no port: a port must be given (1 to 65535)", param_hint="--http")
    if not 1 <= number <= 65535:
        raise typer.BadParameter(f"port {number} is out of range: use 1 to 65535", param_hint="--http")
    host = host.strip("[]") or "127.0.0.1"
    if (why := unresolvable(host, number)) is not None:
        raise typer.BadParameter(why, param_hint="--http")
    return host, number


def serve(
    ctx: typer.Context,
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
            "$MCPVISOR_GATEWAY_TOKEN, else gateway-token in $MCPVISOR_HOME (~/.mcpvisor by default), made once.",
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
    fleet: FleetOpt = None,
    fleet_name: FleetNameOpt = None,
    replica_id: Annotated[
        str | None,
        typer.Option(
            "--replica-id",
            metavar="ID",
            help="With --fleet: this replica's id in the fleet (unique per process; no dot). Default: host, "
            "process id and 6 random characters.",
        ),
    ] = None,
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
    SIGTERM, SIGHUP or Ctrl-C lets calls in flight finish for up to 5 s, then answers them that the
    gateway is shutting down.

    With --fleet, this gateway is one replica of several sharing a Redis: approvals come from the
    fleet, one replica publishes its settings files and every replica applies them, a handshake
    session is named after the replica that holds it (another replica forwards it there, or answers
    404 at once when that replica is gone), and GET /readyz answers 200 once the fleet's settings
    are applied.
    """
    setup_logging(verbose, narrated=True)
    show_fleet_operation(verbose)
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
        if address is None and (given := _http_limits_given(ctx)):
            one = " and " not in given
            raise ConfigError(
                f"{given} {'applies' if one else 'apply'} to --http: over stdio the gateway has one client and no "
                f"connections to bound; drop {'it' if one else 'them'}, or serve with --http HOST:PORT"
            )
        token = None if address is None or no_auth else load_gateway_token(options.env, token_file)
        stop = anyio.Event()
        with Signals((signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) as signals:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_stop_on_signal, signals, stop, tg.cancel_scope)
                await run_gateway(
                    options,
                    http=address,
                    per_client_workspaces=per_client_workspaces,
                    token=token,
                    workspace_root=workspace_root,
                    limits=limits,
                    stop=stop,
                    name_budget=name_budget,
                    replica_id=replica_id,
                )
                tg.cancel_scope.cancel()

    with reported():
        anyio.run(main, backend_options=fast_event_loop())


def fast_event_loop() -> dict[str, Any]:
    """anyio's asyncio options for the gateway: uvloop's event loop where it is installed (it is not on
    Windows), which cuts the loop's share of every proxied call; asyncio's own loop otherwise."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


async def _stop_on_signal(signals: Signals, stop: anyio.Event, scope: anyio.CancelScope) -> None:
    """The first SIGINT, SIGTERM or SIGHUP (its terminal closed) asks for an orderly stop (``stop``); a second one
    cancels at once."""
    await signals.wait(1)
    stop.set()
    await signals.wait(2)
    scope.cancel()  # a third changes nothing while it stops


def _http_limits_given(ctx: typer.Context) -> str:
    """The HTTP listener's limits given to the command (their flags, as said; whatever their value), or ``""``."""
    given = [
        flag
        for flag, name in (
            ("--max-sessions", "max_sessions"),
            ("--session-idle-timeout", "session_idle_timeout"),
            ("--max-connections", "max_connections"),
            ("--header-timeout", "header_timeout"),
        )
        if (source := ctx.get_parameter_source(name)) is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")
    ]
    return " and ".join([", ".join(given[:-1]), given[-1]] if len(given) > 1 else given)
