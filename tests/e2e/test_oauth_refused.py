"""Requests of a gateway client that reach a server whose sign-in was refused (revoked at the authorization server):
each is answered at once, with the command that signs in again. Against the OAuth example server (see
``tests.e2e.test_oauth``)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcpvisor.gateway.server import Gateway
from mcpvisor.gateway.workspaces import WorkspaceGateway
from mcpvisor.host.host import Host, HostOptions
from tests.e2e.test_oauth import FOLLOW, Server, cli, setup, start_server, text_of
from tests.gateway.test_resources import subscribe
from tests.gateway.test_workspaces import client_for
from tests.helpers import mcpvisor_command, wait_until
from tests.layout import make_layout, write_json

BOUND_S = 60.0
"""Far beyond what an answer takes: a request still unanswered then waits for ever."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from start_server(tmp_path)


@asynccontextmanager
async def signed_in_client_of_its_own_workspace(tmp_path: Path, server: Server) -> AsyncIterator[tuple[str, Client]]:
    """``serve --http --per-client-workspaces`` with another home, and a handshake-era client whose own workspace
    defines an approved server ``sec``, signed in and connected: that workspace's sign-in command, and the client."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"), MCPVISOR_HOME=str(tmp_path / "other home"))
    other = layout.home / "client"
    write_json(other / ".mcp.json", {"mcpServers": {"sec": {"type": "http", "url": server.url}}})
    browser = tmp_path / "browser.py"
    browser.write_text(FOLLOW)
    env = {**os.environ, **layout.env, "BROWSER": f"{sys.executable} {browser} %s"}
    env.pop("DISPLAY", None)
    for command in ("approve", "login"):
        done = await anyio.run_process([mcpvisor_command(), "mcp", command, "--workspace", str(other), "sec"], env=env)
        assert done.returncode == 0
    hosts: list[Host] = []
    options = HostOptions(env=layout.env, workspace=layout.root)
    async with WorkspaceGateway(options, on_open=hosts.append) as gateway, anyio.create_task_group() as tg:
        url = await tg.start(gateway.serve_http, "127.0.0.1", 0)
        async with client_for(url, other, mode="legacy") as client:
            assert text_of(await client.call_tool("mcp__sec__echo", {"text": "a"})) == "secure:echo:a"
            [host] = [host for host in hosts if host.root == other.resolve()]
            yield host.config.options.login_command.format(name="sec"), client
        tg.cancel_scope.cancel()


async def test_a_subscription_to_a_resource_of_a_server_whose_sign_in_was_revoked_is_answered_with_the_sign_in(
    tmp_path: Path, server: Server
) -> None:
    """``serve --http --per-client-workspaces``, a handshake-era client of a workspace of its own, and the sign-in
    revoked at the authorization server: its ``resources/subscribe`` never got an answer. The upstream speaks the
    2026-07-28 era, so the subscription is a listen stream; its request failed with the refused sign-in, which ended
    the connection, and the stream, waiting for an acknowledgement that could not come, was not ended with it (nor
    did the connection's end finish). The subscription is refused saying how to sign in again, in the client's own
    workspace, and so is the next one, made once the connection is known to have ended."""
    async with signed_in_client_of_its_own_workspace(tmp_path, server) as (command, client):
        server.revoke_all()
        for _ in range(2):
            with anyio.fail_after(BOUND_S), pytest.raises(MCPError) as refused:
                await subscribe(client, "mcpvisor://sec/x")
            said = refused.value.error.message
            assert said.startswith("cannot subscribe to resource 'mcpvisor://sec/x': "), said
            assert "refused its refresh token (signed out or revoked)" in said, said
            assert said.endswith(f"run: {command}"), said


async def test_a_subscription_through_a_gateway_of_one_workspace_after_a_revoked_sign_in_is_answered(
    tmp_path: Path, server: Server
) -> None:
    """The same through ``serve --http`` of one workspace (no ``--per-client-workspaces``): the subscribe never got
    an answer."""
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        await wait_until(lambda: host.config.manager.clients()["sec"].status == "connected", what="sec connected")
        command = host.config.options.login_command.format(name="sec")
        async with Gateway(host.config) as gateway, anyio.create_task_group() as tg:
            url = await tg.start(gateway.serve_http, "127.0.0.1", 0)
            async with Client(url, mode="legacy") as client:
                server.revoke_all()
                with anyio.fail_after(BOUND_S), pytest.raises(MCPError) as refused:
                    await subscribe(client, "mcpvisor://sec/x")
                said = refused.value.error.message
                assert "refused its refresh token (signed out or revoked)" in said, said
                assert said.endswith(f"run: {command}"), said
            tg.cancel_scope.cancel()
