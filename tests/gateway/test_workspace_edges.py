"""Per-client workspaces at their edges: a workspace named while the gateway stops, and a handshake-era
session whose later request names another workspace (or none). Real HTTP, the SDK's client, the light
example server (helpers from :mod:`tests.gateway.test_workspaces`)."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest

from mcpvisor.gateway.http import WORKSPACE_HEADER
from tests.gateway.test_gateway import save, server, text_of, tool_names
from tests.gateway.test_workspaces import INITIALIZE, client_for, make_setup, serving
from tests.helpers import WAIT_S, wait_until

JSON_RPC = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_a_workspace_named_while_the_gateway_drains_is_not_opened(tmp_path: Path) -> None:
    """Before, a client naming a workspace not yet open while the gateway drained (SIGTERM: calls in flight get
    5 s) opened it - its host, watcher and servers started - and its calls were served, where every other new
    call is told the gateway is shutting down."""
    setup = make_setup(tmp_path)
    save(setup.layout.paths.user, {"mcpServers": {"common": server("common", "--control")}})
    async with serving(setup) as (gateway, url), client_for(url, None) as in_default:
        async with anyio.create_task_group() as tg:
            tg.start_soon(in_default.call_tool, "mcp__common__sleep", {"seconds": 1.5})  # keeps the drain going
            default = gateway.gateway_of(setup.default)
            assert default is not None
            await wait_until(lambda: bool(default._in_flight._scopes), what="the call in flight")
            tg.start_soon(gateway.drain, 3.0)
            await wait_until(lambda: default._in_flight._draining, what="the gateway draining")
            async with httpx2.AsyncClient(timeout=WAIT_S) as http:
                for version in ("2025-11-25", "2026-07-28"):
                    headers = {**JSON_RPC, WORKSPACE_HEADER: str(setup.a), "MCP-Protocol-Version": version}
                    response = await http.post(url, json=INITIALIZE, headers=headers)
                    assert response.status_code == 503
                    assert "the gateway is shutting down" in response.json()["error"]["message"]
            assert set(gateway.workspaces()) == {setup.default}
    assert not setup.markers["pa"].exists()  # no server started for it


@pytest.mark.parametrize("named", ["b", "none"])
async def test_a_sessions_request_naming_another_workspace_is_refused_saying_whose_session_it_is(
    tmp_path: Path, named: str
) -> None:
    """Before, it was answered 404 "Session not found" (the session lived on in its workspace), which tells a
    client to initialize again: one that sent the header only on its initialize moved to the gateway's own
    workspace without a word."""
    setup = make_setup(tmp_path)
    async with serving(setup) as (_, url), client_for(url, setup.b) as in_b:
        await tool_names(in_b)  # B is open too
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            opened = await http.post(url, json=INITIALIZE, headers={**JSON_RPC, WORKSPACE_HEADER: str(setup.a)})
            session = {**JSON_RPC, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            other = {WORKSPACE_HEADER: str(setup.b)} if named == "b" else {}
            refused = await http.post(url, json=listing, headers={**session, **other})
            assert refused.status_code == 400
            message = refused.json()["error"]["message"]
            assert f"belongs to workspace {setup.a}" in message
            assert f"send the same {WORKSPACE_HEADER} header on every request of a session" in message
            served = await http.post(url, json=listing, headers={**session, WORKSPACE_HEADER: str(setup.a)})
            assert served.status_code == 200  # the session is still A's
            assert "mcp__pa__echo" in served.text
        assert text_of(await in_b.call_tool("mcp__common__echo", {"text": "b"})) == "common:echo:b"


@pytest.mark.parametrize(
    ("method", "version", "body", "status"),
    [
        ("POST", "1999-01-01", INITIALIZE, 400),  # a version the gateway does not speak
        ("POST", "2026-07-28", b"not json", 400),  # no JSON-RPC message
        ("POST", "2025-11-25", [INITIALIZE], 400),  # a batch
        ("GET", "2026-07-28", None, 405),  # the 2026-07-28 era has no GET stream
        ("DELETE", "2026-07-28", None, 405),  # nor sessions to end
    ],
)
async def test_a_request_that_would_be_refused_anyway_opens_no_workspace(
    tmp_path: Path, method: str, version: str, body: object, status: int
) -> None:
    """Before, each of these opened the workspace it named (its host, watcher and servers: A's project server
    started) and held one of the 64 places for the idle timeout, and was only then refused."""
    setup = make_setup(tmp_path)
    async with serving(setup) as (gateway, url), httpx2.AsyncClient(timeout=WAIT_S) as http:
        headers = {**JSON_RPC, WORKSPACE_HEADER: str(setup.a), "MCP-Protocol-Version": version}
        content = body if isinstance(body, bytes) else None
        json = body if isinstance(body, dict | list) else None
        response = await http.request(method, url, headers=headers, content=content, json=json)
        assert response.status_code == status
        if version == "1999-01-01":
            assert "unsupported MCP-Protocol-Version '1999-01-01'" in response.json()["error"]["message"]
        if isinstance(body, list):  # (it was told its session id was missing)
            assert response.json()["error"]["message"].startswith("Invalid Request: batches are not supported")
        assert set(gateway.workspaces()) == {setup.default}
        async with client_for(url, setup.a) as in_a:  # a request that may be served still opens it
            assert "mcp__pa__echo" in await tool_names(in_a)
    assert setup.markers["pa"].exists()
