"""A 2026-07-28-era client's input rounds through the gateway over real streamable HTTP: a round's
``request_state`` resumes the request it answered and nothing else, a call whose client came back holds
nothing once it ended, and a retry finds its call even when what the request named went away meanwhile."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.session import ClientRequestContext

from tests.gateway.test_gateway import ERAS, running, save, server, text_of
from tests.helpers import WAIT_S, raw_server, wait_until


async def unused(context: ClientRequestContext) -> types.ListRootsResult:
    raise AssertionError("the test answers by hand")  # (declares roots: the client is asked in rounds)


async def test_a_rounds_state_resumes_only_the_request_it_answered(tmp_path: Path) -> None:
    """Before, any request carrying a round's ``request_state`` took over its call: a call of another tool, or a
    read of a resource, was answered with the asking call's result, which its own retry then never got."""
    user = {"mcpServers": {"a": server("a", "--control", "--resources", "note://a/1")}}
    async with (
        running(tmp_path, user=user, client_requests=True, processes=True) as r,
        anyio.create_task_group() as tg,
    ):
        url: str = await tg.start(r.gateway.serve_http)
        async with Client(url, mode="auto", list_roots_callback=unused) as client:
            session = client.session
            first = await session.call_tool("mcp__a__ask_client", {"kind": "roots"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            [key] = first.input_requests or {}
            answers: types.InputResponses = {key: types.ListRootsResult(roots=[types.Root(uri="file:///by/hand")])}
            state = first.request_state
            with pytest.raises(MCPError, match="belongs to another request"):
                await session.call_tool(
                    "mcp__a__pid", {}, input_responses=answers, request_state=state, allow_input_required=True
                )
            with pytest.raises(MCPError, match="belongs to another request"):
                await session.call_tool(
                    "mcp__a__ask_client",
                    {"kind": "sampling"},
                    input_responses=answers,
                    request_state=state,
                    allow_input_required=True,
                )
            with pytest.raises(MCPError, match="belongs to another request"):
                await session.read_resource(
                    "note://a/1", input_responses=answers, request_state=state, allow_input_required=True
                )
            done = await session.call_tool(
                "mcp__a__ask_client",
                {"kind": "roots"},
                input_responses=answers,
                request_state=state,
                allow_input_required=True,
            )
            assert isinstance(done, types.CallToolResult)
            assert text_of(done) == "roots: file:///by/hand"
        tg.cancel_scope.cancel()


def expiry_timers() -> int:
    return sum((task.name or "").endswith("Rounds._expire") for task in anyio.get_running_tasks())


async def test_a_round_the_client_came_back_to_leaves_no_timer_holding_its_call(tmp_path: Path) -> None:
    """Before, each round left a task asleep for the round timeout (10 minutes) holding its call - the client's
    request, the result and all - after the client came back and got its answer: calls that did come back piled up
    in memory with their tasks, unbounded (the bound on open rounds counts only those that did not)."""
    user = {"mcpServers": {"a": server("a", "--control")}}
    async with (
        running(tmp_path, user=user, client_requests=True, processes=True) as r,
        anyio.create_task_group() as tg,
    ):
        url: str = await tg.start(r.gateway.serve_http)
        async with Client(url, mode="auto", list_roots_callback=unused) as client:
            session = client.session
            first = await session.call_tool("mcp__a__ask_client", {"kind": "roots"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            assert first.request_state is not None
            assert expiry_timers() == len(r.gateway._rounds or ()) == 1
            [key] = first.input_requests or {}
            done = await session.call_tool(
                "mcp__a__ask_client",
                {"kind": "roots"},
                input_responses={key: types.ListRootsResult(roots=[])},
                request_state=first.request_state,
                allow_input_required=True,
            )
            assert isinstance(done, types.CallToolResult)
            assert text_of(done) == "roots: "
            assert expiry_timers() == 0
            assert r.gateway.rounds_waiting() == 0
        tg.cancel_scope.cancel()


URI = "note://s/1"
READ_ASKING_SERVER = raw_server(
    "asking",
    """
    # Its prompt 'p' and resource 'note://s/1' ask their client for roots, and answer once it did.
    asking = None

    def answer(method, params):
        global asking
        if method is None and msg["id"] == "roots" and asking is not None:
            call, what = asking
            text = {"type": "text", "text": "rooted"}
            if what == "prompts/get":
                send({"id": call, "result": {"messages": [{"role": "user", "content": text}]}})
            else:
                send({"id": call, "result": {"contents": [{"uri": "note://s/1", "text": "rooted"}]}})
        elif method == "prompts/list":
            return {"prompts": [{"name": "p"}]}
        elif method == "resources/list":
            return {"resources": [{"uri": "note://s/1", "name": "one"}]}
        elif method in ("prompts/get", "resources/read"):
            asking = (msg["id"], method)
            send({"id": "roots", "method": "roots/list"})
        elif method == "resources/templates/list":
            return {"resourceTemplates": []}
        return None if method in (None, "prompts/get", "resources/read") else {}  # (ping: an empty result)
    """,
    capabilities={"prompts": {}, "resources": {}},
)


@pytest.mark.parametrize("what", ["prompt", "resource"])
@pytest.mark.parametrize("mode", ERAS)
async def test_a_retry_gets_its_calls_outcome_when_its_server_was_removed_meanwhile(
    tmp_path: Path, mode: str, what: str
) -> None:
    """The server of a prompt or resource being got is removed from the settings while the client answers it. A
    handshake-era client is told what became of the call; a 2026-07-28-era client's retry is told the same (before,
    the retry looked the prompt or resource up again, was told it is gone, and the call stayed held for 10 minutes)."""
    script = tmp_path / "read_asking_server.py"
    script.write_text(READ_ASKING_SERVER)
    user = {"mcpServers": {"s": {"command": sys.executable, "args": [str(script)]}}}
    async with (
        running(tmp_path, user=user, client_requests=True, processes=True) as r,
        anyio.create_task_group() as tg,
    ):
        url: str = await tg.start(r.gateway.serve_http)

        async def roots(context: ClientRequestContext) -> types.ListRootsResult:
            save(r.layout.paths.user, {"mcpServers": {}})
            await wait_until(lambda: r.host.config.manager.get_client("s") is None, what="the server removed")
            return types.ListRootsResult(roots=[types.Root(uri="file:///work/project")])

        async with Client(url, mode=mode, list_roots_callback=roots) as client:
            get = partial(client.get_prompt, "mcp__s__p") if what == "prompt" else partial(client.read_resource, URI)
            with anyio.fail_after(WAIT_S), pytest.raises(MCPError) as failed:
                await get()
        assert "server 's' was stopped while the call was in flight" in failed.value.message
        assert r.gateway.rounds_waiting() == 0
        tg.cancel_scope.cancel()
