"""A running host's sign-ins as time passes: tokens that expire while the authorization server fails, the
token store changing under the host. Against the OAuth example server (see ``tests.e2e.test_oauth``)."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.subscriptions import Subscription, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, PromptReference

from mcpvisor.core.errors import ConnectError, ServerUnavailableError, ToolNotFoundError
from mcpvisor.core.events import ServerStateChanged
from mcpvisor.gateway.workspaces import WorkspaceGateway
from mcpvisor.host.host import Host, HostOptions, SettingsWarning
from mcpvisor.host.oauth_store import TokenStore
from mcpvisor.host.paths import named_home
from mcpvisor.host.status import home_words
from tests.e2e.test_oauth import FOLLOW, Server, cli, follow_redirect, setup, start_server, store_path, text_of
from tests.gateway.test_gateway import Notices, next_event, tool_names
from tests.gateway.test_workspaces import client_for
from tests.helpers import LIGHT, WAIT_S, free_port, mcpvisor_command, paste_elsewhere, wait_until
from tests.layout import Layout, make_layout, write_json
from tests.shell.test_shell import save, shell


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from start_server(tmp_path)


@pytest.fixture
def short_lived(tmp_path: Path) -> Iterator[Server]:
    """The example server issuing access tokens that expire after a second."""
    yield from start_server(tmp_path, "--token-lifetime", "1")


@pytest.fixture
def scoped(tmp_path: Path) -> Iterator[Server]:
    """The example server with a tool ``admin`` that a token without the scope ``mcp:write`` may not call."""
    yield from start_server(tmp_path, "--tools", "echo,admin", "--needs-scope", "admin=mcp:write")


@pytest.fixture
def hanging(tmp_path: Path) -> Iterator[Server]:
    """The example server with a tool ``stuck`` that never answers (once it reported progress)."""
    yield from start_server(tmp_path, "--tools", "echo,stuck", "--hang-on-call", "stuck")


def token_endpoint_up(server: Server) -> None:
    url = f"http://127.0.0.1:{server.port}/admin/token-endpoint-up"
    urllib.request.urlopen(urllib.request.Request(url, method="POST")).close()


def expires_at(path: Path) -> float:
    [record] = json.loads(path.read_text()).values()
    return float(record["expires_at"])


async def test_an_expired_sign_in_whose_authorization_server_fails_is_tried_again_not_a_login(
    tmp_path: Path, short_lived: Server
) -> None:
    """The token expired while nothing ran, and the token endpoint answers 503 when the host starts: the sign-in
    is not refused (a login would fail the same way), so the server is not "needs authentication — run: mcp login"
    and left there; it says its authorization server failed, and connects by itself once that answers again."""
    server = short_lived
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    await wait_until(lambda: expires_at(store_path(layout)) < time.time(), what="the access token to expire")
    server.token_endpoint_down()
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        manager = host.config.manager
        await wait_until(lambda: "token-endpoint-down" in server.events(), what="a refresh the server failed")
        await wait_until(lambda: manager.clients()["sec"].status == "disconnected", what="sec down")
        client = manager.clients()["sec"]
        assert not client.needs_auth
        assert client.last_error is not None
        assert "authorization server failed to refresh the sign-in (HTTP 503)" in client.last_error
        assert "mcp login" not in client.last_error
        with pytest.raises(ToolNotFoundError, match="authorization server failed"):
            await host.config.call_tool("mcp__sec__echo", {"text": "a"})
        token_endpoint_up(server)
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected by itself")
        result = await host.config.call_tool("mcp__sec__echo", {"text": "b"})
        assert result.content[0].text == "secure:echo:b"  # type: ignore[union-attr]
    [record] = json.loads(store_path(layout).read_text()).values()
    assert record["tokens"]


async def test_a_token_store_that_becomes_unreadable_is_said_by_a_running_host(tmp_path: Path, server: Server) -> None:
    """The store is corrupted while a host runs: nothing is signed in any more (the connection ends, asking for a
    sign-in), and the host says why — before, it said only "needs authentication — run: mcpvisor mcp login", and
    that login then refused to write over the store."""
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    said: list[str] = []
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        host.subscribe(lambda event: said.append(event.message) if isinstance(event, SettingsWarning) else None)
        manager = host.config.manager
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected")
        store_path(layout).write_text("{ not json")
        await wait_until(
            lambda: (client := manager.clients().get("sec")) is not None and client.needs_auth,
            what="sec to need a sign-in",
        )
        await wait_until(lambda: any("OAuth token store" in m for m in said), what="the host to name the store")
        [message] = [m for m in said if "OAuth token store" in m]
        assert message.startswith(f"cannot read the OAuth token store {store_path(layout)}: not valid JSON")


async def test_a_sign_in_made_elsewhere_is_said_to_connect_the_server_once_and_never_to_fail(
    tmp_path: Path, server: Server
) -> None:
    """``mcpvisor mcp login`` while a shell (or a gateway) runs: "+ connected sec (1 tool)" was said twice, once
    when the server came up (a remote server that failed to start is said when it comes up) and once more by the
    pass that retried it; and the sign-in saves its client registration before its tokens, and the host retried the
    server at that first save, so it said "✗ sec failed to start: the server needs authentication" first (a save
    that brings no token retries nothing)."""
    user = {"mcpServers": {"sec": {"type": "http", "url": server.url}}}
    async with shell(tmp_path, user=user) as s:
        await s.run("/mcp", "sec · 🔒 needs authentication — run: /login sec")
        since = s.mark()
        login = await anyio.to_thread.run_sync(partial(cli, s.layout, "mcp", "login", "sec"))
        assert login.returncode == 0, login.stderr
        await s.wait_for("+ connected sec (1 tool)", since)
        # Another change: once it is said, whatever the passes before it had to say was said.
        light = {"command": sys.executable, "args": ["-m", LIGHT]}
        save(s.layout.paths.user, {"mcpServers": {**user["mcpServers"], "b": light}})
        await s.wait_for("+ added b", since)
        assert s.text(since).count("connected sec") == 1, s.text(since)
        assert "failed" not in s.text(since), s.text(since)


async def test_the_status_table_of_a_gateway_names_the_workspace_in_its_sign_in_command(
    tmp_path: Path, server: Server
) -> None:
    """A gateway serves a workspace a client named (``serve --workspace DIR``), from whatever folder it was started
    in: its status table's approve command named the workspace, its login command did not — pasted elsewhere, it
    found no such server (a project's) or signed in for another workspace."""
    from rich.console import Console

    from mcpvisor.shell.narration import HumanOutput

    layout = setup(tmp_path, server)
    console = Console(record=True, width=400, file=io.StringIO())
    host = Host(HostOptions(env=layout.env, workspace=layout.root))
    host.subscribe(HumanOutput(host, console))
    async with host:
        await wait_until(lambda: "needs authentication" in console.export_text(clear=False), what="the table")
    fix = f"{home_words(named_home(layout.env))}mcpvisor mcp login --workspace {layout.root} sec"
    assert f"sec · 🔒 needs authentication — run: {fix}" in console.export_text()


async def test_an_authorization_server_that_cannot_be_reached_to_refresh_is_named_not_the_mcp_server(
    tmp_path: Path, short_lived: Server
) -> None:
    """The authorization server that issued the sign-in is down when the expired token is to be refreshed: the
    error named the MCP server's URL ("All connection attempts failed (reaching http://…/mcp)"), which answers
    fine; it names the authorization server, and the server is tried again."""
    server = short_lived
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    down = free_port()
    [(key, record)] = json.loads(store_path(layout).read_text()).items()
    record["authorization_server"]["token_endpoint"] = f"http://127.0.0.1:{down}/token"
    TokenStore(store_path(layout)).update(key, authorization_server=record["authorization_server"])
    await wait_until(lambda: expires_at(store_path(layout)) < time.time(), what="the access token to expire")
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        manager = host.config.manager
        await wait_until(lambda: manager.clients()["sec"].status == "disconnected", what="sec down")
        client = manager.clients()["sec"]
        assert client.last_error is not None
        assert f"its authorization server http://127.0.0.1:{down} cannot be reached" in client.last_error
        assert server.url not in client.last_error
        assert not client.needs_auth
        assert "sec" in manager._reconnects  # tried again, as a server that cannot be reached


async def test_an_authorization_server_slow_to_refresh_is_named_not_the_mcp_server(
    tmp_path: Path, short_lived: Server
) -> None:
    """The token endpoint keeps the refresh of an expired sign-in waiting past the start's time: the start said
    "no answer within 1 s from http://…/mcp", the MCP server, which had answered at once. It names the
    authorization server the refresh waits for."""
    server = short_lived
    layout = setup(tmp_path, server, discoveryTimeoutMs=1000)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    await wait_until(lambda: expires_at(store_path(layout)) < time.time(), what="the access token to expire")
    admin(server, "hold-refresh")
    try:
        async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
            manager = host.config.manager
            await wait_until(lambda: manager.clients()["sec"].last_error is not None, what="sec's start to end")
            client = manager.clients()["sec"]
            assert "refresh-held" in server.events()
            assert client.last_error is not None
            said = client.last_error
            assert f"from its authorization server http://127.0.0.1:{server.port} to refresh the sign-in" in said
            assert server.url not in said
    finally:
        admin(server, "release-refresh")


async def see_a_sign_in(layout: Layout, host: Host) -> None:
    """``mcpvisor mcp login sec``, then wait until ``host`` has heard of the token store's change."""
    seen = host.tokens.generation
    login = await anyio.to_thread.run_sync(partial(cli, layout, "mcp", "login", "sec"))
    assert login.returncode == 0, login.stderr
    await wait_until(lambda: host.tokens.generation != seen, what="the host to see the token store change")


async def test_a_wider_sign_in_serves_the_refused_call_through_a_gateway_of_per_client_workspaces(
    tmp_path: Path,
) -> None:
    """``serve --http --per-client-workspaces``: a call refused for want of scope, then ``mcp login``; the same call
    is refused again — its connection (the gateway's, shared between workspaces) went on with the narrower token,
    never told of the new sign-in, which each workspace's host heard of in a token store of its own."""
    for server in start_server(tmp_path, "--tools", "echo,admin", "--needs-scope", "admin=mcp:write"):
        layout = setup(tmp_path, server)
        assert cli(layout, "mcp", "login", "sec").returncode == 0
        hosts: list[Host] = []
        options = HostOptions(env=layout.env, workspace=layout.root)
        async with WorkspaceGateway(options, on_open=hosts.append) as gateway, anyio.create_task_group() as tg:
            url = await tg.start(gateway.serve_http, "127.0.0.1", 0)
            async with client_for(url, None) as client:
                refused = await client.call_tool("mcp__sec__admin", {})
                assert refused.is_error
                assert "needs a wider sign-in (mcp:write)" in text_of(refused)
                assert text_of(await client.call_tool("mcp__sec__echo", {"text": "a"})) == "secure:echo:a"
                [host] = hosts
                await see_a_sign_in(layout, host)
                result = await client.call_tool("mcp__sec__admin", {})
                assert not result.is_error, text_of(result)
                assert text_of(result) == "secure:admin:"
            tg.cancel_scope.cancel()


async def test_a_sign_out_ends_a_connection_shared_between_workspaces_at_once(tmp_path: Path, server: Server) -> None:
    """``mcpvisor mcp logout`` while ``serve --http --per-client-workspaces`` serves two workspaces that share the
    server's connection: each workspace's host restarted the server, and each restart found the connection still
    held by the other workspace — it went on, signed in in memory, its tools served and no list_changed sent,
    until a call was refused. Each workspace's client is told its own workspace's sign-in command (the host that saw
    the sign-out first worded the connection's end with its own, and the other workspace said that one)."""
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    other = layout.home / "other"
    other.mkdir()
    hosts: list[Host] = []
    notices = Notices()
    options = HostOptions(env=layout.env, workspace=layout.root)
    async with WorkspaceGateway(options, on_open=hosts.append) as gateway, anyio.create_task_group() as tg:
        url = await tg.start(gateway.serve_http, "127.0.0.1", 0)
        async with (
            client_for(url, None, mode="legacy", message_handler=notices) as here,
            client_for(url, other) as there,
            there.listen(tools_list_changed=True) as subscription,
        ):
            for client in (here, there):
                assert text_of(await client.call_tool("mcp__sec__echo", {"text": "a"})) == "secure:echo:a"
            assert len(hosts) == 2
            logout = await anyio.to_thread.run_sync(partial(cli, layout, "mcp", "logout", "sec"))
            assert logout.returncode == 0, logout.stderr
            await notices.wait_for(tools=1)
            assert isinstance(await next_event(subscription), ToolsListChanged)
            own = {host.root: host.config.options.login_command.format(name="sec") for host in hosts}
            for client, root in ((here, layout.root.resolve()), (there, other.resolve())):
                with anyio.fail_after(WAIT_S):  # (a list_changed for the start that fails may come later still)
                    while "mcp__sec__echo" in await tool_names(client):  # noqa: ASYNC110 - what is served is the state
                        await anyio.sleep(0.05)
                missing = await client.call_tool("mcp__sec__echo", {"text": "b"})
                assert missing.is_error
                assert own[root] in text_of(missing), (own[root], text_of(missing))
        tg.cancel_scope.cancel()


async def test_the_sign_in_command_a_gateway_client_is_told_works_pasted_in_another_folder(
    tmp_path: Path, server: Server
) -> None:
    """``MCPVISOR_HOME=HOME mcpvisor serve --workspace WS``, started in another folder, and an approved project
    server that needs a sign-in: a client calling its tool was told ``sign in with: mcpvisor mcp login sec`` —
    pasted in another terminal, it looked for ``sec`` in that terminal's folder and the default home, and signed in
    to nothing the gateway reads. The command names both."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    home, elsewhere = tmp_path / "other home", tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_json(layout.paths.project, {"mcpServers": {"sec": {"type": "http", "url": server.url}}})
    env = {**layout.env, "MCPVISOR_HOME": str(home)}
    approve = [mcpvisor_command(), "mcp", "approve", "--workspace", str(layout.root), "sec"]
    assert (await anyio.run_process(approve, env={**os.environ, **env}, check=False)).returncode == 0
    params = StdioServerParameters(
        command=mcpvisor_command(), args=["serve", "--workspace", str(layout.root)], env=env, cwd=str(elsewhere)
    )
    browser = tmp_path / "browser.py"
    browser.write_text(FOLLOW)
    another = {**os.environ, **layout.env, "BROWSER": f"{sys.executable} {browser} %s"}
    another["PATH"] = f"{Path(mcpvisor_command()).parent}{os.pathsep}{os.environ['PATH']}"
    del another["MCPVISOR_HOME"]  # another terminal: only what the command says
    another.pop("DISPLAY", None)
    with (tmp_path / "gateway.stderr").open("w") as err:
        async with (
            Client(stdio_client(params, errlog=err)) as client,
            client.listen(tools_list_changed=True) as subscription,
        ):
            said = text_of(await client.call_tool("mcp__sec__echo", {"text": "a"}))
            command = said.split("sign in with: ", 1)[1].split(" (or put", 1)[0]
            pasted = await anyio.run_process(["sh", "-c", command], cwd=elsewhere, env=another, check=False)
            assert pasted.returncode == 0, (command, pasted.stdout, pasted.stderr)
            assert isinstance(await next_event(subscription), ToolsListChanged)
            assert text_of(await client.call_tool("mcp__sec__echo", {"text": "b"})) == "secure:echo:b"
    assert not store_path(layout).exists()  # the default home's store: untouched


def admin(server: Server, action: str) -> None:
    url = f"http://127.0.0.1:{server.port}/admin/{action}"
    urllib.request.urlopen(urllib.request.Request(url, method="POST")).close()


def stored_tokens(layout: Layout) -> dict[str, str]:
    [record] = json.loads(store_path(layout).read_text()).values()
    tokens: dict[str, str] = record["tokens"]
    return tokens


async def test_a_sign_in_stored_while_a_host_refreshes_the_one_before_is_kept(tmp_path: Path, server: Server) -> None:
    """``mcpvisor mcp login`` completes while a running host's refresh of the sign-in before is on its way: the
    host's answer, refreshed from the older sign-in, came last and was written over the one just made (a wider
    sign-in, another account: lost, and the store said nothing of it). The newer sign-in stays, and serves."""
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        manager = host.config.manager
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected")
        admin(server, "hold-refresh")
        [key] = json.loads(store_path(layout).read_text())
        seen = host.tokens.generation
        TokenStore(store_path(layout)).update(key, expires_at=time.time() + 5)  # due for a refresh
        await wait_until(lambda: host.tokens.generation != seen, what="the host to see the token store change")
        async with anyio.create_task_group() as tg:
            calls: list[str] = []

            async def call() -> None:
                calls.append(text_of(await host.config.call_tool("mcp__sec__echo", {"text": "a"})))

            tg.start_soon(call)
            await wait_until(lambda: "refresh-held" in server.events(), what="the host's refresh under way")
            login = await anyio.to_thread.run_sync(partial(cli, layout, "mcp", "login", "sec"))
            assert login.returncode == 0, login.stderr
            newer = stored_tokens(layout)
            admin(server, "release-refresh")
        assert calls == ["secure:echo:a"]
        assert server.events()[-1] == "refresh"
        assert stored_tokens(layout) == newer
        assert server.accepts(newer["access_token"])
        result = await host.config.call_tool("mcp__sec__echo", {"text": "b"})
        assert text_of(result) == "secure:echo:b"
        assert stored_tokens(layout) == newer


async def signed_in_pasted(command: str, layout: Layout, tmp_path: Path) -> None:
    """Run the sign-in ``command`` as pasted in another folder (no ``MCPVISOR_HOME`` but what it says), the browser a
    script that follows the authorization server's redirect; it must succeed."""
    script = tmp_path / "browser.py"
    script.write_text(FOLLOW)
    browser = {**layout.env, "BROWSER": f"{sys.executable} {script} %s"}
    pasted = await paste_elsewhere(command, browser, tmp_path / "elsewhere")
    assert pasted.returncode == 0, (command, pasted.stdout, pasted.stderr)


async def test_the_sign_in_command_a_sign_out_elsewhere_ends_a_connection_with_works_pasted_in_another_folder(
    tmp_path: Path, server: Server
) -> None:
    """A host with another home and ``mcp logout`` in another terminal: the connection ended saying ``was signed out
    — run: mcpvisor mcp login sec``; pasted in another folder, it found no such server (or signed in to the default
    home's store, which the host never reads). It names the workspace and the home."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"), MCPVISOR_HOME=str(tmp_path / "other home"))
    write_json(layout.paths.user, {"mcpServers": {"sec": {"type": "http", "url": server.url}}})
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    errors: list[str] = []
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        host.subscribe(
            lambda event: errors.append(event.error or "") if isinstance(event, ServerStateChanged) else None
        )
        manager = host.config.manager
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected")
        assert (await anyio.to_thread.run_sync(partial(cli, layout, "mcp", "logout", "sec"))).returncode == 0
        await wait_until(lambda: any("was signed out" in e for e in errors), what="the sign-out to end sec")
        [said] = [e for e in errors if "was signed out" in e]
        command = said.split("run: ", 1)[1]
        await signed_in_pasted(command, layout, tmp_path)
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected again")


async def test_the_sign_in_command_a_running_hosts_status_row_gives_works_pasted_in_another_folder(
    tmp_path: Path, server: Server
) -> None:
    """A host with another home, and a sign-in that expired with no way to refresh it: its status row (``/mcp``,
    ``mcpvisor status``) said ``sign-in expired — run: mcpvisor mcp login sec``; pasted in another folder, it found
    no such server, or signed in to the default home's store. It names the workspace and the home."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"), MCPVISOR_HOME=str(tmp_path / "other home"))
    write_json(layout.paths.user, {"mcpServers": {"sec": {"type": "http", "url": server.url}}})
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    store = TokenStore(store_path(layout))
    [key] = store.read()
    tokens = {k: v for k, v in store.get(key)["tokens"].items() if k != "refresh_token"}
    store.update(key, tokens=tokens, expires_at=1.0)  # a sign-in issued without a refresh token, expired
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        [row] = host.server_views()
        assert row.sign_in is not None
        assert row.sign_in.startswith("sign-in expired — run: "), row.sign_in
        command = row.sign_in.split("run: ", 1)[1]
        await signed_in_pasted(command, layout, tmp_path)
        manager = host.config.manager
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected")


async def test_the_command_a_timed_out_sign_in_gives_works_pasted_in_another_folder(
    tmp_path: Path, server: Server
) -> None:
    """A host with another home (the shell's ``/login``) whose sign-in did not come: it said ``run mcpvisor mcp login
    sec again``; pasted in another folder, that found no such server (or signed in to the default home's store, which
    the host never reads). It names the workspace and the home."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"), MCPVISOR_HOME=str(tmp_path / "other home"))
    write_json(layout.paths.workspace, {"mcpServers": {"sec": {"type": "http", "url": server.url}}})
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        await host.decide("sec", "approve")
        with pytest.RaisesGroup(ConnectError, flatten_subgroups=True) as refused:
            await host.sign_in("sec", open_url=lambda _url: False, announce=lambda _text: None, timeout_s=0.1)
        [said] = [str(error) for error in refused.value.exceptions]
        assert "no sign-in to 'sec' within 0.1 s" in said
        command = said.split("; run ", 1)[1].removesuffix(" again")
        await signed_in_pasted(command, layout, tmp_path)
        manager = host.config.manager
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected")


@asynccontextmanager
async def a_client_of_a_workspace_of_its_own(tmp_path: Path, server: Server) -> AsyncIterator[tuple[Layout, Client]]:
    """``serve --http --per-client-workspaces`` with another home, and a client whose own workspace (its header)
    defines an approved server ``sec`` that needs a sign-in (its connection is the gateway's, shared between
    workspaces): the layout and the client."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"), MCPVISOR_HOME=str(tmp_path / "other home"))
    other = layout.home / "client"
    write_json(other / ".mcp.json", {"mcpServers": {"sec": {"type": "http", "url": server.url}}})
    approve = [mcpvisor_command(), "mcp", "approve", "--workspace", str(other), "sec"]
    assert (await anyio.run_process(approve, env={**os.environ, **layout.env}, check=False)).returncode == 0
    options = HostOptions(env=layout.env, workspace=layout.root)
    async with WorkspaceGateway(options) as gateway, anyio.create_task_group() as tg:
        url = await tg.start(gateway.serve_http, "127.0.0.1", 0)
        async with client_for(url, other) as client:
            yield layout, client
        tg.cancel_scope.cancel()


def sign_in_command_of(said: str) -> str:
    """The command a message needing a sign-in says to sign in with."""
    return said.split("sign in with: ", 1)[1].split(" (or put", 1)[0]


async def signed_in_as_told(
    client: Client, subscription: Subscription, layout: Layout, tmp_path: Path
) -> CallToolResult:
    """Call ``sec``'s tool before any sign-in, paste in another folder the sign-in command it is told, and wait for
    the tools to change as the sign-in takes effect; what the call was told."""
    said = await client.call_tool("mcp__sec__echo", {"text": "a"})
    await signed_in_pasted(sign_in_command_of(text_of(said)), layout, tmp_path)
    assert isinstance(await next_event(subscription), ToolsListChanged)
    return said


async def test_the_sign_in_command_a_client_of_a_workspace_of_its_own_is_told_works_pasted_in_another_folder(
    tmp_path: Path, server: Server
) -> None:
    """``serve --http --per-client-workspaces`` and a client whose own workspace (its header) defines a server that
    needs a sign-in: its connection is the gateway's, shared between workspaces, and a call of its tool was told
    ``sign in with: mcpvisor mcp login sec`` — pasted in another folder, that found no such server. The command
    names the client's workspace."""
    async with (
        a_client_of_a_workspace_of_its_own(tmp_path, server) as (layout, client),
        client.listen(tools_list_changed=True) as subscription,
    ):
        said = await signed_in_as_told(client, subscription, layout, tmp_path)
        assert said.is_error
        assert text_of(await client.call_tool("mcp__sec__echo", {"text": "b"})) == "secure:echo:b"


async def test_the_sign_in_command_a_prompt_or_resource_of_a_workspace_of_its_own_is_refused_with_works_elsewhere(
    tmp_path: Path, server: Server
) -> None:
    """As for a tool call: a client of a workspace of its own getting a prompt, reading a resource or completing a
    prompt's argument of a server that needs a sign-in was told the gateway's ``sign in with: mcpvisor mcp login
    sec``, which names no workspace — pasted in another folder, that found no such server. It names the client's."""
    async with (
        a_client_of_a_workspace_of_its_own(tmp_path, server) as (layout, client),
        client.listen(tools_list_changed=True) as subscription,
    ):
        commands = set()
        for request in (
            partial(client.get_prompt, "mcp__sec__greet"),
            partial(client.read_resource, "mcpvisor://sec/notes"),
            partial(client.complete, PromptReference(name="mcp__sec__greet"), {"name": "who", "value": "a"}),
        ):
            with pytest.raises(MCPError) as refused:
                await request()
            commands.add(sign_in_command_of(refused.value.error.message))
        [command] = commands
        await signed_in_pasted(command, layout, tmp_path)
        assert isinstance(await next_event(subscription), ToolsListChanged)


async def test_the_wider_sign_in_a_workspace_of_its_own_needs_is_logged_with_a_command_that_works_elsewhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``serve --http --per-client-workspaces`` and a client whose own workspace defines a server that refuses a call
    for want of scope: the gateway logged ``server 'sec' needs a wider sign-in (mcp:write) — run: mcpvisor mcp login
    sec``, the shared connection's command, which names no workspace — pasted in another folder, it found no such
    server. The log names a workspace that defines the server."""
    caplog.set_level(logging.WARNING, logger="mcpvisor.host.oauth")
    for server in start_server(tmp_path, "--tools", "echo,admin", "--needs-scope", "admin=mcp:write"):
        async with (
            a_client_of_a_workspace_of_its_own(tmp_path, server) as (layout, client),
            client.listen(tools_list_changed=True) as subscription,
        ):
            await signed_in_as_told(client, subscription, layout, tmp_path)
            refused = await client.call_tool("mcp__sec__admin", {})
            assert "needs a wider sign-in (mcp:write)" in text_of(refused), text_of(refused)
            [logged] = [r.getMessage() for r in caplog.records if "needs a wider sign-in" in r.getMessage()]
            await signed_in_pasted(logged.split(" — run: ", 1)[1], layout, tmp_path)
            assert text_of(await client.call_tool("mcp__sec__admin", {})) == "secure:admin:"


async def test_the_sign_out_that_ends_a_workspace_of_its_owns_server_is_logged_with_a_command_that_works_elsewhere(
    tmp_path: Path, server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """``serve --http --per-client-workspaces``, a client whose own workspace defines a server it signed in to, and
    ``mcp logout``: the gateway logged ``server 'sec' lost: server 'sec' was signed out — run: mcpvisor mcp login
    sec``, the shared connection's command, which names no workspace — pasted in another folder, it found no such
    server. The log names a workspace that defines the server."""
    caplog.set_level(logging.WARNING, logger="mcpvisor.core.connection")
    async with (
        a_client_of_a_workspace_of_its_own(tmp_path, server) as (layout, client),
        client.listen(tools_list_changed=True) as subscription,
    ):
        await signed_in_as_told(client, subscription, layout, tmp_path)
        assert text_of(await client.call_tool("mcp__sec__echo", {"text": "b"})) == "secure:echo:b"
        logout = [mcpvisor_command(), "mcp", "logout", "sec", "--workspace", str(layout.home / "client")]
        assert (await anyio.run_process(logout, env={**os.environ, **layout.env}, check=False)).returncode == 0

        def lost() -> list[str]:
            return [r.getMessage() for r in caplog.records if "was signed out" in r.getMessage()]

        await wait_until(lambda: bool(lost()), what="the sign-out to end sec")
        [logged] = lost()
        assert logged.startswith("server 'sec' lost: "), logged
        await signed_in_pasted(logged.split(" — run: ", 1)[1], layout, tmp_path)


async def test_the_shells_login_completion_says_the_sign_ins_state_and_the_shell_command_that_mends_it(
    tmp_path: Path, server: Server
) -> None:
    """The shell's ``/login`` completion described a sign-in that expired with no way to refresh it as ``sign-in
    expired — run: mcpvisor mcp login sec``: the bare command (no workspace, no home) where the shell's own command
    is at hand. It says the state and ``/login sec``."""
    from rich.console import Console

    from mcpvisor.shell.session import ShellSession

    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"), MCPVISOR_HOME=str(tmp_path / "other home"))
    write_json(
        layout.paths.user, {"mcpServers": {name: {"type": "http", "url": server.url} for name in ("sec", "s x")}}
    )
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    store = TokenStore(store_path(layout))
    [key] = store.read()
    tokens = {k: v for k, v in store.get(key)["tokens"].items() if k != "refresh_token"}
    store.update(key, tokens=tokens, expires_at=1.0)  # a sign-in issued without a refresh token, expired
    host = Host(HostOptions(env=layout.env, workspace=layout.root))
    session = ShellSession(host, Console(file=io.StringIO()))
    async with host:
        offered = session.completion_candidates("login")
    assert offered == {"sec": "sign-in expired — run: /login sec", "s x": "sign-in expired — run: /login 's x'"}


async def test_the_shells_status_view_says_to_widen_a_sign_in_with_the_shells_own_command(
    tmp_path: Path, server: Server
) -> None:
    """A call refused for want of scope, then ``/mcp`` in the shell: the row of a server needing authentication said
    ``/login sec``, but the row of one needing a wider sign-in said ``mcpvisor mcp login --workspace WS sec``, a
    command the shell does not take. Both say ``/login``."""
    from rich.console import Console

    from mcpvisor.shell.session import ShellSession

    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    write_json(layout.paths.user, {"mcpServers": {"sec": {"type": "http", "url": server.url}}})
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    store = TokenStore(store_path(layout))
    [key] = store.read()
    store.update(key, scope_needed="mcp:write")  # what a call refused with 403 insufficient_scope keeps
    host = Host(HostOptions(env=layout.env, workspace=layout.root))
    console = Console(file=io.StringIO(), width=400)
    session = ShellSession(host, console)
    async with host:
        await session._cmd_mcp("")
    said = " ".join(console.file.getvalue().split())  # type: ignore[attr-defined]
    assert "sec · ● connected (1 tool, 0 prompts) · signed in; needs a wider sign-in (mcp:write) — run: /login sec" in (
        said
    )
    assert "mcp login" not in said


async def test_the_shell_says_to_sign_in_with_its_own_login_command(tmp_path: Path, scoped: Server) -> None:
    """What the shell prints of a server needing a sign-in (its status table at start, a server added that fails to
    start, a call's error, a call refused for want of scope, a connection ended by a revoked sign-in) said ``run:
    mcpvisor mcp login --workspace WS sec``, while its ``/mcp`` view and completion say ``/login sec``, which signs
    in without leaving the session. All of it says ``/login``."""
    user = {"mcpServers": {"sec": {"type": "http", "url": scoped.url}}}
    async with shell(tmp_path, user=user, open_url=follow_redirect) as s:
        await s.wait_for("sec · 🔒 needs authentication — run: /login sec")
        await s.run('/call mcp__sec__echo {"text": "a"}', "sign in with: /login sec (or put the credentials")
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {**user["mcpServers"], "sec2": user["mcpServers"]["sec"]}})
        await s.wait_for("✗ sec2 failed to start:", since)
        await s.wait_for("sign in with: /login sec2 (or put the credentials", since)
        since = s.mark()
        save(s.layout.paths.user, user)  # sec2 goes: of one URL, it would share sec's sign-in and its revocation below
        await s.wait_for("- removed sec2", since)
        await s.run("/login sec", "✓ signed in to sec (2 tools)")
        await s.run("/call mcp__sec__admin", "✗ server 'sec' needs a wider sign-in (mcp:write) — run: /login sec")
        admin(scoped, "revoke-all")
        since = s.mark()
        await s.type('/call mcp__sec__echo {"text": "b"}')
        refused = "server 'sec' refused its refresh token (signed out or revoked) — run: /login sec"
        await s.wait_for(f"✗ sec disconnected: {refused}", since)
        await wait_until(
            lambda: " ".join(s.text(since).split()).count(refused) == 2, what="the call's error to say it too"
        )
    assert "mcp login" not in s.text(), s.text()


async def test_the_sign_in_command_a_workspace_of_its_own_narrates_works_pasted_in_another_folder(
    tmp_path: Path, server: Server
) -> None:
    """``serve --http --per-client-workspaces``, a client's workspace defining a server that needs a sign-in, approved
    while the workspace is open: the gateway's output for that workspace said ``✗ sec failed to start: … sign in
    with: mcpvisor mcp login sec``, and its status row the same — the shared connection's command, which names no
    workspace: pasted in another folder, it found no such server. Both name the client's workspace."""
    from rich.console import Console

    from mcpvisor.shell.narration import HumanOutput

    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"), MCPVISOR_HOME=str(tmp_path / "other home"))
    other = layout.home / "client"
    write_json(other / ".mcp.json", {"mcpServers": {"sec": {"type": "http", "url": server.url}}})
    console = Console(record=True, width=1000, file=io.StringIO())
    hosts: list[Host] = []

    def opened(host: Host) -> None:
        hosts.append(host)
        host.subscribe(HumanOutput(host, console, where=str(host.options.workspace)))

    options = HostOptions(env=layout.env, workspace=layout.root)
    async with WorkspaceGateway(options, on_open=opened) as gateway, anyio.create_task_group() as tg:
        url = await tg.start(gateway.serve_http, "127.0.0.1", 0)
        async with client_for(url, other) as client:
            await client.list_tools()
            approve = [mcpvisor_command(), "mcp", "approve", "--workspace", str(other), "sec"]
            assert (await anyio.run_process(approve, env={**os.environ, **layout.env}, check=False)).returncode == 0
            await wait_until(lambda: "sec failed to start" in console.export_text(clear=False), what="sec to fail")
            [said] = [line for line in console.export_text().splitlines() if "sec failed to start" in line]
            [row] = next(host for host in hosts if host.root == other.resolve()).server_views()
            assert row.error is not None
            assert sign_in_command_of(row.error) == sign_in_command_of(said)
            await signed_in_pasted(sign_in_command_of(said), layout, tmp_path)
        tg.cancel_scope.cancel()


async def test_a_call_in_flight_when_a_sign_out_elsewhere_ends_the_connection_is_told_it_was_signed_out(
    tmp_path: Path, hanging: Server
) -> None:
    """``mcp logout`` in another terminal while a tool call is in flight: the call was told ``the connection to
    server 'sec' closed (the server exited or crashed; see …)``, though the host ended the connection itself; a
    call made a moment later was told the sign-out and the command to sign in again. Both are told the sign-out."""
    layout = setup(tmp_path, hanging)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    outcome: list[BaseException] = []
    reached = anyio.Event()

    async def heard(progress: float, total: float | None, message: str | None) -> None:
        reached.set()

    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        manager = host.config.manager
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected")

        async def call() -> None:
            try:
                await host.config.call_tool("mcp__sec__stuck", {}, progress=heard)
            except ServerUnavailableError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(WAIT_S):
                await reached.wait()
            assert (await anyio.to_thread.run_sync(partial(cli, layout, "mcp", "logout", "sec"))).returncode == 0
        command = host.config.options.login_command.format(name="sec")
    [error] = outcome
    assert f"server 'sec' was signed out — run: {command}" in str(error), str(error)


async def test_a_call_in_flight_on_a_connection_shared_between_workspaces_is_told_its_own_sign_in_command(
    tmp_path: Path, hanging: Server
) -> None:
    """``serve --http --per-client-workspaces``, a call in flight from a client of another workspace on the shared
    connection, and ``mcp logout``: the call is told the sign-out, with its own workspace's sign-in command."""
    layout = setup(tmp_path, hanging)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    other = layout.home / "other"
    other.mkdir()
    hosts: list[Host] = []
    reached = anyio.Event()
    answers: list[str] = []

    async def heard(progress: float, total: float | None, message: str | None) -> None:
        reached.set()

    options = HostOptions(env=layout.env, workspace=layout.root)
    async with WorkspaceGateway(options, on_open=hosts.append) as gateway, anyio.create_task_group() as tg:
        url = await tg.start(gateway.serve_http, "127.0.0.1", 0)
        async with client_for(url, None) as here, client_for(url, other) as there:
            assert text_of(await here.call_tool("mcp__sec__echo", {"text": "a"})) == "secure:echo:a"

            async def call() -> None:
                answer = await there.call_tool("mcp__sec__stuck", {}, progress_callback=heard)
                assert answer.is_error
                answers.append(text_of(answer))

            async with anyio.create_task_group() as calls:
                calls.start_soon(call)
                with anyio.fail_after(WAIT_S):
                    await reached.wait()
                logout = await anyio.to_thread.run_sync(partial(cli, layout, "mcp", "logout", "sec"))
                assert logout.returncode == 0, logout.stderr
            [host] = [host for host in hosts if host.root == other.resolve()]
            command = host.config.options.login_command.format(name="sec")
        tg.cancel_scope.cancel()
    [answer] = answers
    assert f"server 'sec' was signed out — run: {command}" in answer, answer


async def test_the_failed_start_of_a_workspace_of_its_owns_server_is_logged_with_a_command_that_works_elsewhere(
    tmp_path: Path, server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """``serve --http --per-client-workspaces`` and a client whose own workspace defines a server that needs a
    sign-in: the gateway logged ``could not connect to server 'sec': … sign in with: mcpvisor mcp login sec`` at its
    first start, and again at its start after ``mcp logout`` — the shared connection's command, which names no
    workspace: pasted in another folder, it found no such server. The log names a workspace that defines it."""
    caplog.set_level(logging.WARNING, logger="mcpvisor.core")

    def logged() -> list[str]:  # a start's failure, or its reconnect's
        return [
            r.getMessage()
            for r in caplog.records
            if r.name in ("mcpvisor.core.manager", "mcpvisor.core.reconnects") and "sign in with: " in r.getMessage()
        ]

    async with (
        a_client_of_a_workspace_of_its_own(tmp_path, server) as (layout, client),
        client.listen(tools_list_changed=True) as subscription,
    ):
        await wait_until(lambda: bool(logged()), what="sec's first start to fail")
        [first] = logged()
        assert "could not connect to server 'sec'" in first, first
        await signed_in_pasted(sign_in_command_of(first), layout, tmp_path)
        assert isinstance(await next_event(subscription), ToolsListChanged)
        assert text_of(await client.call_tool("mcp__sec__echo", {"text": "b"})) == "secure:echo:b"
        caplog.clear()
        logout = [mcpvisor_command(), "mcp", "logout", "sec", "--workspace", str(layout.home / "client")]
        assert (await anyio.run_process(logout, env={**os.environ, **layout.env}, check=False)).returncode == 0
        await wait_until(lambda: bool(logged()), what="sec's start after the sign-out to fail")
        await signed_in_pasted(sign_in_command_of(logged()[0]), layout, tmp_path)
        with anyio.fail_after(WAIT_S):
            while "mcp__sec__echo" not in await tool_names(client):
                await next_event(subscription)
        assert text_of(await client.call_tool("mcp__sec__echo", {"text": "c"})) == "secure:echo:c"
