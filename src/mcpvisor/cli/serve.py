"""``mcpvisor serve``: a watching host served as one MCP server, with its notices on stderr (SPEC §0.3)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from rich.console import Console
from rich.markup import escape

from mcpvisor.cli.fleet import joined
from mcpvisor.cli.options import STARTUP_WAIT_S
from mcpvisor.core.errors import ConfigError
from mcpvisor.gateway.limits import DEFAULT_HTTP_LIMITS, DEFAULT_NAME_BUDGET, HttpLimits
from mcpvisor.gateway.listen import bind_http_socket, http_url, is_loopback, refuse_without_token
from mcpvisor.host import paths
from mcpvisor.host.host import Host, HostOptions
from mcpvisor.host.status import plural
from mcpvisor.shell.consoles import new_console
from mcpvisor.shell.narration import HumanOutput

if TYPE_CHECKING:
    from mcp.server.subscriptions import SubscriptionBus

    from mcpvisor.fleet.replica import Replica
    from mcpvisor.gateway.auth import GatewayToken
    from mcpvisor.gateway.server import Gateway
    from mcpvisor.gateway.workspaces import WorkspaceGateway

__all__ = ["run_gateway"]


async def run_gateway(
    options: HostOptions,
    *,
    http: tuple[str, int] | None,
    per_client_workspaces: bool = False,
    token: GatewayToken | None = None,
    workspace_root: Path | None = None,
    limits: HttpLimits = DEFAULT_HTTP_LIMITS,
    stop: anyio.Event | None = None,
    name_budget: int = DEFAULT_NAME_BUDGET,
    replica_id: str | None = None,
) -> None:
    """``mcpvisor serve``: run a watching :class:`Host` and serve it as one MCP server until cancelled
    (stdio: until the client closes stdin) or until ``stop`` is set: then calls in flight get
    :data:`DRAIN_S` to finish before they are answered that the gateway is shutting down, and the
    servers stop. Over stdio, stdout carries nothing but the protocol; notices and the status table
    go to stderr. Errors found before serving (a bad ``--mcp-config``, a busy port) raise
    :class:`ConfigError` as is, before any server starts where possible. ``limits`` bound what HTTP
    clients may cost (:class:`HttpLimits`).

    ``per_client_workspaces`` (HTTP only): each client may name its workspace with a header and gets
    that workspace's own host, limited to folders under ``workspace_root`` when given (else to
    folders the user owns); see :mod:`mcpvisor.gateway.workspaces`.

    ``token`` (HTTP only): every request needs ``Authorization: Bearer <token>``; without one the
    gateway serves only on a loopback address.

    With a fleet (``MCPVISOR_FLEET`` in ``options.env``) this process is one of its replicas
    (:mod:`mcpvisor.fleet`): decisions come from the fleet, settings follow the fleet's publisher, and
    handshake sessions are named after ``replica_id`` (default: made up per process)."""
    wait_s = options.startup_wait_s if options.startup_wait_s is not None else STARTUP_WAIT_S
    options = dataclasses.replace(options, watch=True, client_requests=True, startup_wait_s=wait_s)
    async with joined(options, replica_id=replica_id, register=http is not None, follow_settings=True) as (
        options,
        replica,
    ):
        await _serve(
            options,
            replica,
            http=http,
            per_client_workspaces=per_client_workspaces,
            token=token,
            workspace_root=workspace_root,
            limits=limits,
            stop=stop,
            name_budget=name_budget,
        )


async def _serve(
    options: HostOptions,
    replica: Replica | None,
    *,
    http: tuple[str, int] | None,
    per_client_workspaces: bool,
    token: GatewayToken | None,
    workspace_root: Path | None,
    limits: HttpLimits,
    stop: anyio.Event | None,
    name_budget: int,
) -> None:
    # A client that closed its end of stderr (what is said there goes nowhere now) is still served: rich's way, exit
    # code 1 at the first line narrated, ended the gateway before it answered initialize.
    console = new_console(stderr=True, highlight=False, on_closed=lambda: None)
    if http is not None:
        refuse_without_token(http[0], token.value if token is not None else None)  # before any server starts
        if not is_loopback(http[0]):  # (said once it is known to be served: with a token)
            console.print(
                f"[yellow]! serving on {escape(http[0])}, not loopback: other machines can reach this port; every "
                "request needs the gateway's token[/]",
                soft_wrap=True,
            )
    if workspace_root is not None and not per_client_workspaces:
        raise ConfigError("--workspace-root limits the folders clients may name: it needs --per-client-workspaces")
    secret = token.value if token is not None else None

    def serving(host: Host, where: str) -> None:
        tools = plural(len(host.config.tool_registry.get_all_tools()), "tool")
        console.print(f"[dim]mcpvisor gateway: serving {tools} on {escape(where)}; settings edits apply live.[/]")
        if http is not None:
            auth = token.hint() if token is not None else "no authentication (--no-auth): any local program may connect"
            console.print(f"[dim]Authentication: {escape(auth)}.[/]", soft_wrap=True)

    if per_client_workspaces:
        if http is None:
            raise ConfigError("per-client workspaces need --http: over stdio the gateway has one client")
        await _run_workspace_gateway(
            options,
            http,
            console,
            serving,
            token=secret,
            workspace_root=workspace_root,
            limits=limits,
            stop=stop,
            name_budget=name_budget,
            replica=replica,
        )
        return
    host = Host(options)
    host.subscribe(HumanOutput(host, console))
    if http is None:
        # Nothing in mcpvisor writes to stdout, and while serving the SDK points fd 1 at stderr.
        served_as = replica.round_state if replica is not None else None
        async with (
            _stopped_while_starting(stop) as started,
            host,
            _gateway()(host.config, name_budget=name_budget, round_state=served_as, bus=_bus(replica, host)) as gateway,
            _stdio_streams() as (read, write),
        ):
            if replica is not None:
                await replica.publish_from(host.options.env, host.root)
            started()
            serving(host, "stdio")

            async def drain() -> int:
                ended = await gateway.drain()
                await write.settle()  # the answers of the calls it ended reach the client before its reading is cut
                return ended

            async with _until_stopped(stop, drain, console):
                await gateway.serve_streams(read, write)
    else:
        sock = bind_http_socket(*http)
        try:
            served_as = replica.round_state if replica is not None else None
            bus = _bus(replica, host)
            async with (
                _stopped_while_starting(stop) as started,
                host,
                _gateway()(host.config, name_budget=name_budget, round_state=served_as, bus=bus) as gateway,
            ):
                if replica is not None:
                    await replica.publish_from(host.options.env, host.root)
                    replica.serve_at(http_url(sock))
                started()
                serving(host, http_url(sock))  # already listening: early clients wait in the backlog
                async with _until_stopped(stop, gateway.drain, console):
                    await gateway.serve_http_socket(
                        sock,
                        only_workspace=host.root,
                        token=secret,
                        limits=limits,
                        wrap=replica.router if replica is not None else None,
                    )
        finally:
            sock.close()


def _gateway() -> type[Gateway]:
    """The gateway, imported once its host entered: the host's first starts load the SDK and the web stack in a
    worker thread, each spawning its server first (:func:`~mcpvisor.core.processes.loading_sdk`), so that the
    servers start while the imports run, not after them."""
    from mcpvisor.gateway.server import Gateway

    return Gateway


def _stdio_streams() -> AbstractAsyncContextManager[tuple[Any, Any]]:
    """This process's stdin and stdout as the SDK's streams, imported once the host entered (see :func:`_gateway`)."""
    from mcpvisor.gateway.stdio import stdio_streams

    return stdio_streams()


def _bus(replica: Replica | None, host: Host) -> SubscriptionBus | None:
    """The listen bus of a fleet replica's workspace (its root as the host will resolve it)."""
    if replica is None:
        return None
    return replica.bus_for(paths.workspace_root(host.options.workspace))


@asynccontextmanager
async def _stopped_while_starting(stop: anyio.Event | None) -> AsyncIterator[Callable[[], None]]:
    """The body, cancelled if ``stop`` is set before it calls the function it is given (as it begins to serve): while
    the servers start no call is in flight to let finish, so a stop then does not wait for a server still
    handshaking (up to the start-up wait) before it stops them all."""
    watching = anyio.CancelScope()
    with anyio.CancelScope() as whole:

        async def watch() -> None:
            with watching:
                if stop is not None:
                    await stop.wait()
                    whole.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                try:
                    yield watching.cancel
                finally:
                    watching.cancel()
        except BaseExceptionGroup as group:  # what the body raised (a ConfigError), as itself
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise


@asynccontextmanager
async def _until_stopped(
    stop: anyio.Event | None, drain: Callable[[], Awaitable[int]], console: Console
) -> AsyncIterator[None]:
    """Run the body until it ends or ``stop`` is set; then ``drain()`` (calls in flight finish or are told
    the gateway is shutting down) and cancel the body."""
    from mcpvisor.gateway.server import DRAIN_S

    async with anyio.create_task_group() as tg:
        body = anyio.CancelScope()

        async def watch() -> None:
            if stop is None:
                return
            await stop.wait()
            console.print(f"[dim]mcpvisor gateway: stopping; calls in flight get up to {DRAIN_S:g} s to finish[/]")
            ended = await drain()
            if ended:
                console.print(f"[dim]mcpvisor gateway: {ended} call(s) were told the gateway is shutting down[/]")
            body.cancel()

        tg.start_soon(watch)
        with body:
            yield
        tg.cancel_scope.cancel()


async def _run_workspace_gateway(
    options: HostOptions,
    http: tuple[str, int],
    console: Console,
    serving: Callable[[Host, str], None],
    *,
    token: str | None,
    workspace_root: Path | None,
    limits: HttpLimits,
    stop: anyio.Event | None,
    name_budget: int,
    replica: Replica | None,
) -> None:
    from mcpvisor.gateway.http import WORKSPACE_HEADER
    from mcpvisor.gateway.workspaces import WorkspaceGateway

    def opened(host: Host) -> None:
        where = None
        if workspaces is not None:  # the default workspace opens inside __aenter__, before this is set
            where = str(host.options.workspace)
            console.print(f"[dim]mcpvisor gateway: opening workspace {escape(where)} for a client[/]", soft_wrap=True)
        host.subscribe(HumanOutput(host, console, where=where))  # a client's workspace is named on each line

    workspaces: WorkspaceGateway | None = None
    sock = bind_http_socket(*http)
    try:
        async with (
            _stopped_while_starting(stop) as started,
            WorkspaceGateway(
                options,
                http_host=sock.getsockname()[0],
                on_open=opened,
                workspace_root=workspace_root,
                limits=limits,
                name_budget=name_budget,
                round_state=replica.round_state if replica else None,
                bus_for=replica.workspace_bus if replica else None,
            ) as workspaces,
        ):
            if replica is not None:  # the default workspace's files are the ones published
                await replica.publish_from(workspaces.default.options.env, workspaces.default.root)
                replica.serve_at(http_url(sock))
            started()
            serving(workspaces.default, http_url(sock))
            allowed = (
                f"a folder under {workspace_root}"
                if workspace_root is not None
                else "a folder they own under their home folder"
            )
            console.print(
                f"[dim]Clients may name {escape(allowed)} in the {WORKSPACE_HEADER} header.[/]", soft_wrap=True
            )
            async with _until_stopped(stop, workspaces.drain, console):
                await workspaces.serve_http_socket(sock, token=token, wrap=replica.router if replica else None)
    finally:
        sock.close()
