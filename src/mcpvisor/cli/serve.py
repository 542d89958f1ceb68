"""``mcpvisor serve``: a watching host served as one MCP server, with its notices on stderr (SPEC §0.3)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import anyio
from mcp.server.stdio import stdio_server
from rich.console import Console

from mcpvisor.core.errors import ConfigError
from mcpvisor.gateway.auth import GatewayToken
from mcpvisor.gateway.http import WORKSPACE_HEADER, bind_http_socket, http_url, refuse_without_token
from mcpvisor.gateway.server import Gateway
from mcpvisor.gateway.workspaces import WorkspaceGateway
from mcpvisor.host.host import Host, HostOptions
from mcpvisor.shell.narration import HumanOutput

__all__ = ["run_gateway"]


async def run_gateway(
    options: HostOptions,
    *,
    http: tuple[str, int] | None,
    per_client_workspaces: bool = False,
    token: GatewayToken | None = None,
    workspace_root: Path | None = None,
) -> None:
    """``mcpvisor serve``: run a watching :class:`Host` and serve it as one MCP server until cancelled
    (stdio: until the client closes stdin). Over stdio, stdout carries nothing but the protocol;
    notices and the status table go to stderr. Errors found before serving (a bad ``--mcp-config``,
    a busy port) raise :class:`ConfigError` as is, before any server starts where possible.

    ``per_client_workspaces`` (HTTP only): each client may name its workspace with a header and gets
    that workspace's own host, limited to folders under ``workspace_root`` when given (else to
    folders the user owns); see :mod:`mcpvisor.gateway.workspaces`.

    ``token`` (HTTP only): every request needs ``Authorization: Bearer <token>``; without one the
    gateway serves only on a loopback address."""
    options = dataclasses.replace(options, watch=True, client_requests=True)
    console = Console(stderr=True, highlight=False)
    if http is not None:
        refuse_without_token(http[0], token.value if token is not None else None)  # before any server starts
    if workspace_root is not None and not per_client_workspaces:
        raise ConfigError("--workspace-root limits the folders clients may name: it needs --per-client-workspaces")
    if workspace_root is not None and not await anyio.Path(workspace_root).is_dir():
        raise ConfigError(f"cannot use --workspace-root {workspace_root}: no such folder")
    secret = token.value if token is not None else None

    def serving(host: Host, where: str) -> None:
        tools = len(host.config.tool_registry.get_all_tools())
        console.print(f"[dim]mcpvisor gateway: serving {tools} tools on {where}; settings edits apply live.[/]")
        if http is not None:
            auth = token.hint() if token is not None else "no authentication (--no-auth): any local program may connect"
            console.print(f"[dim]Authentication: {auth}.[/]", soft_wrap=True)

    if per_client_workspaces:
        if http is None:
            raise ConfigError("per-client workspaces need --http: over stdio the gateway has one client")
        await _run_workspace_gateway(options, http, console, serving, token=secret, workspace_root=workspace_root)
        return
    host = Host(options)
    host.subscribe(HumanOutput(host, console))
    if http is None:
        # Nothing in mcpvisor writes to stdout, and while serving the SDK points fd 1 at stderr.
        async with host, Gateway(host.config) as gateway, stdio_server() as (read, write):
            serving(host, "stdio")
            await gateway.serve_streams(read, write)
    else:
        sock = bind_http_socket(*http)
        try:
            async with host, Gateway(host.config) as gateway:
                serving(host, http_url(sock))  # already listening: early clients wait in the backlog
                await gateway.serve_http_socket(sock, only_workspace=host.root, token=secret)
        finally:
            sock.close()


async def _run_workspace_gateway(
    options: HostOptions,
    http: tuple[str, int],
    console: Console,
    serving: Callable[[Host, str], None],
    *,
    token: str | None,
    workspace_root: Path | None,
) -> None:
    def opened(host: Host) -> None:
        if workspaces is not None:  # the default workspace opens inside __aenter__, before this is set
            where = host.options.workspace
            console.print(f"[dim]mcpvisor gateway: opening workspace {where} for a client[/]", soft_wrap=True)
        host.subscribe(HumanOutput(host, console))

    workspaces: WorkspaceGateway | None = None
    sock = bind_http_socket(*http)
    try:
        async with WorkspaceGateway(
            options, http_host=sock.getsockname()[0], on_open=opened, workspace_root=workspace_root
        ) as workspaces:
            serving(workspaces.default, http_url(sock))
            allowed = f"a folder under {workspace_root}" if workspace_root is not None else "a folder they own"
            console.print(f"[dim]Clients may name {allowed} in the {WORKSPACE_HEADER} header.[/]", soft_wrap=True)
            await workspaces.serve_http_socket(sock, token=token)
    finally:
        sock.close()
