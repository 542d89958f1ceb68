"""Per-client workspaces over real streamable HTTP on loopback, with the SDK's own client: each client
names its workspace in a header, gets that workspace's own host, and shares identical servers
through one pool (SPEC §5.5, §9 "Gateway"). Real example servers, real settings files, the real
watcher; server processes are counted by their ``--marker`` PIDs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import Subscription, ToolsListChanged

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.gateway.http import WORKSPACE_HEADER, workspace_of_header
from mcpvisor.gateway.server import Gateway
from mcpvisor.gateway.workspaces import WorkspaceGateway
from mcpvisor.host import paths
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.host import Host, HostOptions
from mcpvisor.host.settings.loader import settings_paths
from tests.gateway.test_gateway import ERAS, Notices, next_event, save, server, text_of, tool_names
from tests.helpers import WAIT_S, marker_pids, pid_alive, wait_until
from tests.layout import Layout, make_layout

SERVERS = ("common", "pa", "pb", "pd")
"""The user's server (every workspace), A's approved project server, B's pending one, the default's."""


@dataclass
class Setup:
    layout: Layout
    a: Path
    b: Path
    markers: dict[str, Path]

    @property
    def default(self) -> Path:
        return self.layout.root

    def pids(self, name: str) -> list[int]:
        return marker_pids(self.markers[name])

    def all_pids(self) -> list[int]:
        return [pid for name in SERVERS for pid in self.pids(name)]


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
"""What opens a workspace for a handshake-era client (a request without a session id that is none opens none)."""


def marked(setup_markers: dict[str, Path], name: str) -> dict[str, Any]:
    return server(name, "--marker", str(setup_markers[name]))


def approve(layout: Layout, root: Path, name: str, entry: dict[str, Any]) -> None:
    ApprovalStore(paths.approvals_path(layout.env)).approve(root, name, McpServerConfig.model_validate(entry))


def make_setup(tmp_path: Path) -> Setup:
    """A default workspace with an approved project server ``pd``, workspace A with an approved ``pa``,
    workspace B with a pending ``pb``, and a user server ``common`` every workspace sees."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    a, b = layout.home / "a", layout.home / "b"  # clients may name folders under the user's home
    markers = {name: tmp_path / f"{name}.pids" for name in SERVERS}
    save(layout.paths.user, {"mcpServers": {"common": marked(markers, "common")}})
    for root, name in ((layout.root, "pd"), (a, "pa"), (b, "pb")):
        save(root / ".mcp.json", {"mcpServers": {name: marked(markers, name)}})
        if name != "pb":
            approve(layout, root, name, marked(markers, name))
    return Setup(layout, a, b, markers)


@asynccontextmanager
async def serving(setup: Setup, **options: Any) -> AsyncIterator[tuple[WorkspaceGateway, str]]:
    host_options = HostOptions(env=setup.layout.env, workspace=setup.default)
    async with WorkspaceGateway(host_options, **options) as gateway, anyio.create_task_group() as tg:
        url: str = await tg.start(gateway.serve_http, "127.0.0.1", 0)
        yield gateway, url
        tg.cancel_scope.cancel()


@asynccontextmanager
async def client_for(
    url: str,
    workspace: Path | str | None,
    *,
    mode: str = "auto",
    message_handler: Any = None,
    token: str | None = None,
    **client_options: Any,
) -> AsyncIterator[Client]:
    """The SDK client over streamable HTTP, naming ``workspace`` in the header (``None``: no header),
    with ``token`` as its bearer token (``client_options``: the SDK client's own, such as callbacks)."""
    headers = {WORKSPACE_HEADER: str(workspace)} if workspace is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(WAIT_S, read=300)) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            message_handler=message_handler,
            **client_options,
        ) as client,
    ):
        yield client


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside nested exception groups (the SDK client nests its task groups')."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def the_gateway(gateway: WorkspaceGateway, root: Path) -> Gateway:
    found = gateway.gateway_of(root)
    assert found is not None
    return found


# -- routing, sharing, trust -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_each_client_sees_its_workspaces_servers_and_the_users_server_runs_once(
    tmp_path: Path, mode: str
) -> None:
    setup = make_setup(tmp_path)
    async with (
        serving(setup) as (gateway, url),
        client_for(url, setup.a, mode=mode) as in_a,
        client_for(url, setup.b, mode=mode) as in_b,
        client_for(url, None, mode=mode) as in_default,
    ):
        assert (in_a.protocol_version == "2026-07-28") == (mode == "auto")
        assert await tool_names(in_a) == {"mcp__common__echo", "mcp__pa__echo"}
        assert await tool_names(in_b) == {"mcp__common__echo"}
        assert await tool_names(in_default) == {"mcp__common__echo", "mcp__pd__echo"}
        assert text_of(await in_a.call_tool("mcp__pa__echo", {"text": "hi"})) == "pa:echo:hi"
        assert text_of(await in_b.call_tool("mcp__common__echo", {"text": "yo"})) == "common:echo:yo"
        assert set(gateway.workspaces()) == {setup.default, setup.a, setup.b}

        assert len(setup.pids("common")) == 1  # three workspaces, one process
        assert len(setup.pids("pa")) == 1
        assert len(setup.pids("pd")) == 1
        pending = await in_b.call_tool("mcp__pb__echo", {"text": "hi"})
        assert pending.is_error
        assert f"run: mcpvisor mcp approve --workspace {setup.b} pb (in the shell" in text_of(pending)
        a_project = await in_b.call_tool("mcp__pa__echo", {"text": "hi"})  # A's server is not B's
        assert a_project.is_error
        assert not setup.markers["pb"].exists()
        pids = setup.all_pids()
    assert len(pids) == 3
    await wait_until(lambda: not any(pid_alive(pid) for pid in pids))
    assert not setup.markers["pb"].exists()


async def test_clients_naming_the_same_workspace_share_one_host(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    async with (
        serving(setup) as (gateway, url),
        client_for(url, setup.a, mode="legacy") as one,
        client_for(url, f"{setup.a}/../a/", mode="auto") as two,  # another spelling of the same folder
        client_for(url, setup.default) as named_default,
    ):
        assert await tool_names(one) == await tool_names(two) == {"mcp__common__echo", "mcp__pa__echo"}
        assert await tool_names(named_default) == {"mcp__common__echo", "mcp__pd__echo"}
        assert set(gateway.workspaces()) == {setup.default, setup.a}
        assert len(setup.pids("pa")) == 1


async def test_an_untrusted_workspace_starts_nothing_of_its_own(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    save(setup.layout.paths.system, {"security": {"folderTrust": {"enabled": True}}})
    save(setup.layout.paths.trusted_folders, [str(setup.default)])
    async with serving(setup) as (gateway, url), client_for(url, setup.a) as in_a:
        assert await tool_names(in_a) == set()  # pa is approved, but an untrusted folder starts nothing
        assert not gateway.workspaces()[setup.a].settings.trusted
        assert len(setup.pids("common")) == 1  # the default workspace's
    assert not setup.markers["pa"].exists()


# -- a header that names no workspace ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "why"),
    [("{root}/missing", "no such folder"), ("{root}/.mcp.json", "not a folder"), ("relative/path", "not an absolute")],
)
async def test_a_header_naming_no_folder_is_refused_with_400_naming_the_header_and_the_fix(
    tmp_path: Path, value: str, why: str
) -> None:
    setup = make_setup(tmp_path)
    value = value.format(root=setup.a)
    async with serving(setup) as (gateway, url):
        async with httpx2.AsyncClient(headers={WORKSPACE_HEADER: value}) as http:
            response = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Accept": "application/json, text/event-stream"},
            )
        assert response.status_code == 400
        message = response.json()["error"]["message"]
        assert WORKSPACE_HEADER in message
        assert why in message
        assert "send the absolute path of an existing project folder" in message

        errors: list[MCPError] = []
        try:  # the SDK client shows the same message
            async with client_for(url, value, mode="legacy"):
                pass
        except* MCPError as group:
            errors = [error for error in leaves(group) if isinstance(error, MCPError)]
        [error] = errors
        assert WORKSPACE_HEADER in error.message
        assert set(gateway.workspaces()) == {setup.default}


def test_the_header_resolves_to_the_real_path_and_no_header_to_the_default(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    default = tmp_path / "default"
    assert workspace_of_header(None, default) == default
    assert workspace_of_header(f" {tmp_path}/link ", default) == (tmp_path / "real").resolve()
    with pytest.raises(ConfigError, match="it is empty"):
        workspace_of_header("  ", default)


async def test_dns_rebinding_protection_holds_before_a_workspace_opens(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    async with serving(setup) as (gateway, url):
        headers = {WORKSPACE_HEADER: str(setup.a), "Host": "evil.example:80", "Accept": "application/json"}
        async with httpx2.AsyncClient() as http:
            response = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
        assert response.status_code == 421
        assert set(gateway.workspaces()) == {setup.default}
    assert not setup.markers["pa"].exists()


async def test_a_request_that_can_open_no_session_opens_no_workspace(tmp_path: Path) -> None:
    """Before, a GET or a POST without a session id that is no initialize, or a request with a session id no open
    workspace has, opened the workspace it named (its host, watcher and servers), held one of the 64 places, and was
    only then refused."""
    setup = make_setup(tmp_path)
    async with serving(setup) as (gateway, url):
        headers = {WORKSPACE_HEADER: str(setup.a), "Accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            posted = await http.post(url, json=listing, headers={**headers, "Content-Type": "application/json"})
            got = await http.get(url, headers={**headers, "Accept": "text/event-stream"})
            made_up = {**headers, "Content-Type": "application/json", "Mcp-Session-Id": "0123456789abcdef"}
            unknown = await http.post(url, json=listing, headers=made_up)
        assert (posted.status_code, got.status_code) == (400, 400)
        assert posted.json()["error"]["message"] == "Bad Request: Missing session ID"
        assert unknown.status_code == 404  # a session of a workspace that is not open is none
        assert unknown.json()["error"]["message"] == "Session not found"
        assert set(gateway.workspaces()) == {setup.default}
        async with client_for(url, setup.a) as client:  # an initialize still opens it
            assert "mcp__pa__echo" in {t.name for t in (await client.list_tools()).tools}
        assert setup.a in set(gateway.workspaces())
    assert setup.markers["pa"].exists()


async def test_a_workspace_that_cannot_open_is_an_error_for_its_clients_and_is_retried(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    failures = [RuntimeError("disk on fire")]

    def fail_once(host: Host) -> None:  # stands in for anything that breaks while a host opens
        if host.options.workspace == setup.a and failures:
            raise failures.pop()

    async with serving(setup, on_open=fail_once) as (gateway, url):
        async with httpx2.AsyncClient(headers={WORKSPACE_HEADER: str(setup.a)}) as http:
            response = await http.post(url, json=INITIALIZE, headers={"Accept": "application/json, text/event-stream"})
        assert response.status_code == 500
        assert f"cannot open workspace '{setup.a}': disk on fire" in response.json()["error"]["message"]
        assert setup.a not in gateway.workspaces()
        async with client_for(url, setup.a) as in_a:
            assert await tool_names(in_a) == {"mcp__common__echo", "mcp__pa__echo"}


# -- change notices ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_an_edit_in_one_workspaces_settings_notifies_only_that_workspaces_clients(
    tmp_path: Path, mode: str
) -> None:
    setup = make_setup(tmp_path)
    notices = {setup.a: Notices(), setup.b: Notices()}
    async with (
        serving(setup) as (gateway, url),
        client_for(url, setup.a, mode=mode, message_handler=notices[setup.a]) as in_a,
        client_for(url, setup.b, mode=mode, message_handler=notices[setup.b]) as in_b,
        AsyncExitStack() as stack,
    ):
        subscriptions: dict[Path, Subscription] = {}
        if mode == "auto":  # the modern era hears changes only on a listen stream
            for root, client in ((setup.a, in_a), (setup.b, in_b)):
                subscriptions[root] = await stack.enter_async_context(client.listen(tools_list_changed=True))

        async def exclude_common_and_hear(root: Path) -> None:
            save(settings_paths(setup.layout.env, root).workspace, {"mcp": {"excluded": ["common"]}})
            if mode == "legacy":
                await notices[root].wait_for(tools=1)
            else:
                assert isinstance(await next_event(subscriptions[root]), ToolsListChanged)

        assert await tool_names(in_a) == {"mcp__common__echo", "mcp__pa__echo"}
        assert await tool_names(in_b) == {"mcp__common__echo"}
        [common] = setup.pids("common")
        gateway_a, gateway_b = the_gateway(gateway, setup.a), the_gateway(gateway, setup.b)

        await exclude_common_and_hear(setup.a)
        assert await tool_names(in_a) == {"mcp__pa__echo"}
        assert gateway_b.notices_sent == 0
        assert notices[setup.b].tools == 0
        assert await tool_names(in_b) == {"mcp__common__echo"}
        assert setup.pids("common") == [common]  # B and the default workspace still hold it
        assert pid_alive(common)

        await exclude_common_and_hear(setup.b)
        assert await tool_names(in_b) == set()
        assert (gateway_a.notices_sent, gateway_b.notices_sent) == (1, 1)
        if mode == "legacy":
            assert (notices[setup.a].tools, notices[setup.b].tools) == (1, 1)


async def test_an_upstream_change_in_a_shared_server_reaches_every_workspace(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    save(setup.layout.paths.user, {"mcpServers": {"common": server("common", "--control")}})
    a_notices, b_notices = Notices(), Notices()
    async with (
        serving(setup) as (_, url),
        client_for(url, setup.a, mode="legacy", message_handler=a_notices) as in_a,
        client_for(url, setup.b, mode="legacy", message_handler=b_notices) as in_b,
    ):
        assert "mcp__common__set_tools" in await tool_names(in_b)
        await in_a.call_tool("mcp__common__set_tools", {"names": "fresh"})
        await a_notices.wait_for(tools=1)
        await b_notices.wait_for(tools=1)
        assert "mcp__common__fresh" in await tool_names(in_b)


# -- lifecycle ---------------------------------------------------------------------------------


async def test_a_workspace_no_client_uses_closes_and_its_servers_stop_while_shared_ones_stay(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    async with serving(setup, idle_s=0.2) as (gateway, url):
        async with client_for(url, setup.a) as in_a:  # modern era: nothing stays open between requests
            assert await tool_names(in_a) == {"mcp__common__echo", "mcp__pa__echo"}
        await wait_until(lambda: setup.a not in gateway.workspaces())
        first = setup.pids("pa")
        await wait_until(lambda: not any(pid_alive(pid) for pid in first))
        [common] = setup.pids("common")
        assert pid_alive(common)  # the default workspace still holds it

        async with client_for(url, setup.a) as in_a:  # the next request opens it afresh
            assert text_of(await in_a.call_tool("mcp__pa__echo", {"text": "again"})) == "pa:echo:again"
            assert any(pid_alive(pid) for pid in set(setup.pids("pa")) - set(first))
        assert setup.pids("common") == [common]
    await wait_until(lambda: not any(pid_alive(pid) for pid in setup.all_pids()))


async def test_a_handshake_era_session_keeps_its_workspace_open_until_it_ends(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    async with serving(setup, idle_s=0.0) as (gateway, url):
        async with client_for(url, setup.a, mode="legacy") as in_a:
            await tool_names(in_a)
            host = gateway.workspaces()[setup.a]
            for _ in range(3):
                assert text_of(await in_a.call_tool("mcp__pa__echo", {"text": "x"})) == "pa:echo:x"
            assert gateway.workspaces()[setup.a] is host
            assert len(setup.pids("pa")) == 1
        await wait_until(lambda: setup.a not in gateway.workspaces())
        await wait_until(lambda: not any(pid_alive(pid) for pid in setup.pids("pa")))


async def test_a_listening_client_keeps_its_workspace_open_and_hears_its_edits(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    async with (
        serving(setup, idle_s=0.0) as (gateway, url),
        client_for(url, setup.a) as in_a,
        in_a.listen(tools_list_changed=True) as subscription,
    ):
        host = gateway.workspaces()[setup.a]
        save(settings_paths(setup.layout.env, setup.a).workspace, {"mcp": {"excluded": ["pa"]}})
        assert isinstance(await next_event(subscription), ToolsListChanged)
        assert await tool_names(in_a) == {"mcp__common__echo"}
        assert gateway.workspaces()[setup.a] is host


async def test_a_full_gateway_refuses_another_workspace_with_503(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    async with serving(setup, max_workspaces=2) as (gateway, url), client_for(url, setup.a) as in_a:
        await tool_names(in_a)
        async with httpx2.AsyncClient(headers={WORKSPACE_HEADER: str(setup.b)}) as http:
            response = await http.post(url, json=INITIALIZE, headers={"Accept": "application/json, text/event-stream"})
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "5"  # a client backs off, as from a full session book
        assert "already serves 2 workspaces" in response.json()["error"]["message"]
        assert set(gateway.workspaces()) == {setup.default, setup.a}


async def test_a_call_waiting_for_its_clients_answers_keeps_its_workspace_open(tmp_path: Path) -> None:
    """A 2026-07-28-era call whose server asked for input has no request in flight between the rounds: the
    workspace stays open for it (here while another workspace, idle as long, closes)."""
    setup = make_setup(tmp_path)
    save(setup.layout.paths.user, {"mcpServers": {"common": server("common", "--control")}})

    async def roots(_context: object) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[])

    options = HostOptions(env=setup.layout.env, workspace=setup.default, client_requests=True)
    async with WorkspaceGateway(options, idle_s=0.2) as gateway, anyio.create_task_group() as tg:
        url = await tg.start(gateway.serve_http, "127.0.0.1", 0)
        async with client_for(url, setup.a, list_roots_callback=roots) as in_a:
            first = await in_a.session.call_tool(
                "mcp__common__ask_client", {"kind": "roots"}, allow_input_required=True
            )
            assert isinstance(first, types.InputRequiredResult)
            assert first.input_requests is not None
            [key] = first.input_requests
            async with client_for(url, setup.b) as in_b:
                assert "mcp__common__echo" in await tool_names(in_b)
            await wait_until(lambda: setup.b not in gateway.workspaces(), what="the idle workspace B to close")
            assert setup.a in gateway.workspaces()
            answer = types.ListRootsResult(roots=[types.Root(uri="file:///answered/later")])
            done = await in_a.session.call_tool(
                "mcp__common__ask_client",
                {"kind": "roots"},
                input_responses={key: answer},
                request_state=first.request_state,
                allow_input_required=True,
            )
            assert isinstance(done, types.CallToolResult)
            assert text_of(done) == "roots: file:///answered/later"
        tg.cancel_scope.cancel()
