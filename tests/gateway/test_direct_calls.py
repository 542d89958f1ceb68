"""Plain calls made without the SDK's per-request machinery (:mod:`mcpvisor.gateway.lazy_streams`): over real
HTTP, the same answers and refusals as on the SDK's path, a client's cancellation reaching the server, a
session's end ending them; and a client that could be asked something keeps the SDK's path."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest

from mcpvisor.gateway import lazy_streams
from tests.gateway.test_gateway import Running, running, server
from tests.gateway.test_limits import ACCEPT, VERSION, call, initialize, open_session, sse_messages
from tests.helpers import WAIT_S, wait_until

pytestmark = pytest.mark.anyio

ROOTS: dict[str, Any] = {"roots": {"listChanged": False}}


@dataclass
class Served:
    url: str
    through_sdk: list[str]
    """The tools called through the SDK's handler: the calls that took its path."""
    running: Running

    def calls_in_flight(self) -> int:
        """How many calls the connection to server ``a`` has sent and not had answered."""
        connection = self.running.host.config.manager.get_client("a")
        return 0 if connection is None or connection._in_flight is None else len(connection._in_flight._calls)


@asynccontextmanager
async def served(tmp_path: Path, *args: str, processes: bool = False) -> AsyncIterator[Served]:
    """A gateway over HTTP with server ``a`` (``--control`` plus ``args``) as ``serve`` runs it (client
    requests on)."""
    user = {"mcpServers": {"a": server("a", "--control", *args)}}
    async with (
        running(tmp_path, user=user, client_requests=True, processes=processes) as r,
        anyio.create_task_group() as tg,
    ):
        through_sdk: list[str] = []
        handler = r.gateway._on_call_tool

        async def spied(ctx: Any, params: Any) -> Any:
            through_sdk.append(params.name)
            return await handler(ctx, params)

        r.gateway.server.add_request_handler("tools/call", types.CallToolRequestParams, spied)
        url: str = await tg.start(lambda task_status: r.gateway.serve_http(task_status=task_status))
        yield Served(url, through_sdk, r)
        tg.cancel_scope.cancel()


async def session(http: httpx2.AsyncClient, url: str, capabilities: dict[str, Any]) -> dict[str, str]:
    """Open a handshake-era session declaring ``capabilities``; returns the headers of its requests."""
    session_id = await open_session(http, url, capabilities)
    return {**ACCEPT, "mcp-session-id": session_id, "MCP-Protocol-Version": VERSION}


async def test_a_plain_call_is_answered_as_the_sdks_path_answers_it(tmp_path: Path) -> None:
    requests = [
        call("mcp__a__echo", {"text": "hi"}),
        call("mcp__a__nothing", {}),  # an error result naming the server's tools
        call("mcp__a__ask_client", {"kind": "sampling", "text": "q"}),  # refused: the client offers no sampling
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"arguments": {}}},  # invalid: no name
    ]
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        url = s.url
        plain, asked = await session(http, url, {}), await session(http, url, ROOTS)
        for request in requests:
            direct = await http.post(url, json=request, headers=plain)
            assert direct.headers["content-type"] == "application/json"
            assert direct.headers["mcp-session-id"] == plain["mcp-session-id"]
            sdk = await http.post(url, json=request, headers=asked)
            assert direct.status_code == sdk.status_code
            assert direct.json() == sdk.json(), request
        assert direct.json()["error"]["code"] == -32602  # the SDK's path said what is wrong with the last one
        texts = [
            (await http.post(url, json=request, headers=plain)).json()["result"]["content"][0]["text"]
            for request in requests[:3]
        ]
    assert texts[0] == "a:echo:hi"
    assert "mcp__a__echo" in texts[1]
    assert "does not offer sampling" in texts[2]
    # Only the client that could be asked something went through the SDK's handler (its three valid calls).
    assert s.through_sdk == ["mcp__a__echo", "mcp__a__nothing", "mcp__a__ask_client"]


async def test_a_call_asking_for_progress_takes_the_sdks_path(tmp_path: Path) -> None:
    request = call("mcp__a__sleep", {"seconds": 0.01})
    request["params"]["_meta"] = {"progressToken": "p1"}
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        streamed = await http.post(s.url, json=request, headers=await session(http, s.url, {}))
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert '"progressToken":"p1"' in streamed.text
    assert s.through_sdk == ["mcp__a__sleep"]


@pytest.mark.parametrize("capabilities", [{}, ROOTS], ids=["direct", "sdk"])
@pytest.mark.parametrize("cancelled_id", [7, "7"])
async def test_a_plain_call_the_client_cancels_ends_at_its_server_and_is_answered_cancelled(
    tmp_path: Path, capabilities: dict[str, Any], cancelled_id: object
) -> None:
    """Either path: the server hears of it, the call is answered ``Request cancelled`` (the handshake era ends a
    request's stream only with an answer), whether the cancellation names the id as a number or a string."""
    async with (
        served(tmp_path, "--hang-on-call", "stuck", "--tools", "echo,stuck", processes=True) as s,
        httpx2.AsyncClient(timeout=WAIT_S) as http,
    ):
        headers = await session(http, s.url, capabilities)
        log = tmp_path / "logs" / "a.log"
        answers: list[httpx2.Response] = []
        async with anyio.create_task_group() as tg:

            async def make() -> None:
                answers.append(await http.post(s.url, json=call("mcp__a__stuck", {}, request_id=7), headers=headers))

            tg.start_soon(make)
            await wait_until(lambda: s.calls_in_flight() == 1, what="the call sent to the server (it never answers)")
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": cancelled_id}}
            assert (await http.post(s.url, json=cancel, headers=headers)).status_code == 202
        [answer] = answers
        assert answer.status_code == 200
        assert answer.json() == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32800, "message": "Request cancelled"}}
        await wait_until(lambda: "cancelled request" in log.read_text(), what="the server hearing the cancellation")
        assert s.calls_in_flight() == 0
        # The session goes on.
        echo = await http.post(s.url, json=call("mcp__a__echo", {"text": "on"}), headers=headers)
        assert echo.json()["result"]["content"] == [{"type": "text", "text": "a:echo:on"}]
    assert s.through_sdk == ([] if capabilities == {} else ["mcp__a__stuck", "mcp__a__echo"])


@pytest.mark.parametrize("capabilities", [{}, ROOTS], ids=["direct", "sdk"])
async def test_ending_the_session_ends_its_plain_calls(tmp_path: Path, capabilities: dict[str, Any]) -> None:
    async with (
        served(tmp_path, "--hang-on-call", "stuck", "--tools", "echo,stuck") as s,
        httpx2.AsyncClient(timeout=WAIT_S) as http,
    ):
        headers = await session(http, s.url, capabilities)
        answers: list[httpx2.Response] = []
        async with anyio.create_task_group() as tg:

            async def make() -> None:
                answers.append(await http.post(s.url, json=call("mcp__a__stuck", {}), headers=headers))

            tg.start_soon(make)
            await wait_until(lambda: s.calls_in_flight() == 1, what="the call sent to the server (it never answers)")
            assert (await http.delete(s.url, headers=headers)).status_code == 200
        [answer] = answers
        # Unanswered: the stream the client may resume ends after its priming event (the SDK's answer too).
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert answer.text.startswith("id: ")
        assert sse_messages(answer.text) == []
        await wait_until(lambda: s.calls_in_flight() == 0, what="the call to the server ended")
        assert (await http.post(s.url, json=call("mcp__a__echo", {}), headers=headers)).status_code == 404


@pytest.mark.parametrize("capabilities", [{}, ROOTS], ids=["direct", "sdk"])
async def test_a_call_whose_stream_was_lost_is_answered_on_the_resumed_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capabilities: dict[str, Any]
) -> None:
    """A silent call gets its SSE stream; the client loses it after the priming event and resumes it with
    ``Last-Event-ID``: the answer arrives on the resumed stream."""
    monkeypatch.setattr(lazy_streams, "COMMIT_AFTER_S", 0.2)
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        headers = await session(http, s.url, capabilities)
        async with http.stream("POST", s.url, json=call("mcp__a__sleep", {"seconds": 1.5}), headers=headers) as first:
            assert first.headers["content-type"].startswith("text/event-stream")
            async for line in first.aiter_lines():
                if line.startswith("id: "):
                    last_event_id = line[len("id: ") :]
                    break  # the priming event: the connection drops here
        answer: dict[str, Any] = {}
        async with http.stream("GET", s.url, headers={**headers, "Last-Event-ID": last_event_id}) as resumed:
            async for line in resumed.aiter_lines():
                if line.startswith("data: {"):
                    answer = json.loads(line[len("data: ") :])
                    break
    assert answer["result"]["content"] == [{"type": "text", "text": "slept"}]
    assert s.through_sdk == ([] if capabilities == {} else ["mcp__a__sleep"])


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ([call("mcp__a__echo", {"text": "x"})], "batches are not supported: send one JSON-RPC message per POST"),
        (42, "the body must be one JSON-RPC message (an object)"),
        ({**call("mcp__a__echo", {}), "jsonrpc": "1.0"}, "'jsonrpc' must be \"2.0\""),
        ({**call("mcp__a__echo", {}), "id": None}, "an 'id' must be a string or an integer"),
        ({**call("mcp__a__echo", {}), "id": 1.5}, "an 'id' must be a string or an integer"),
        ({**call("mcp__a__echo", {}), "id": True}, "an 'id' must be a string or an integer"),
        ({**call("mcp__a__echo", {}), "params": []}, "'params' must be an object"),
        ({"jsonrpc": "2.0", "hello": "world"}, "a message needs a 'method' (a request or notification) or an 'id'"),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, "not a JSON-RPC request: method: Input should be a valid string"),
    ],
)
async def test_what_is_not_one_json_rpc_message_is_refused_saying_why(tmp_path: Path, body: Any, said: str) -> None:
    """Before, an id of another type made the request a notification (202, never answered: the client waited)
    and a batch got pydantic's whole validation dump."""
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        headers = await session(http, s.url, {})
        answer = await http.post(s.url, json=body, headers=headers)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == types.INVALID_REQUEST
    assert error["message"].startswith(f"Invalid Request: {said}")
    assert len(error["message"]) < 200


async def test_the_calls_of_a_client_that_asked_for_log_messages_take_the_sdks_path(tmp_path: Path) -> None:
    """There the gateway asks a 2026-07-28 server for the messages, which it logs only to requests that ask."""
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        headers = await session(http, s.url, {})
        assert (await http.post(s.url, json=call("mcp__a__echo", {"text": "1"}), headers=headers)).status_code == 200
        level = {"jsonrpc": "2.0", "id": 90, "method": "logging/setLevel", "params": {"level": "info"}}
        assert (await http.post(s.url, json=level, headers=headers)).status_code == 200
        assert (await http.post(s.url, json=call("mcp__a__echo", {"text": "2"}), headers=headers)).status_code == 200
    assert s.through_sdk == ["mcp__a__echo"]  # the second call only


async def test_an_unsupported_protocol_version_header_is_named_with_the_versions_spoken(tmp_path: Path) -> None:
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        with_session = await session(http, s.url, {})
        for headers in (
            {**ACCEPT, "MCP-Protocol-Version": "1999-01-01"},
            {**with_session, "MCP-Protocol-Version": "1999"},
        ):
            answer = await http.post(s.url, json=call("mcp__a__echo", {"text": "x"}), headers=headers)
            assert answer.status_code == 400
            message = answer.json()["error"]["message"]
            assert message.startswith("unsupported MCP-Protocol-Version '1999")
            assert "this gateway speaks " in message
            assert VERSION in message


async def test_a_session_resumes_only_its_own_streams_and_a_finished_one_ends(tmp_path: Path) -> None:
    """Every client numbers its requests from 0: a stream kept under the bare request id would let one client
    replay another's answers with a guessed ``Last-Event-ID``."""
    request = call("mcp__a__sleep", {"seconds": 0.3})
    request["params"]["_meta"] = {"progressToken": "p1"}  # answered on an SSE stream, whose events are kept
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        alice, bob = await session(http, s.url, {}), await session(http, s.url, {})
        streamed = await http.post(s.url, json=request, headers=alice)
        [first_id, *_] = [line[len("id: ") :] for line in streamed.text.splitlines() if line.startswith("id: ")]
        assert '"text":"slept"' in streamed.text  # alice's answer
        stream, _, _ = first_id.rpartition("/")
        for guess in (first_id, f"{request['id']}/0", f"{stream.partition(':')[2]}/0"):
            with anyio.fail_after(WAIT_S):  # a stream that resumes nothing ends at once
                replayed = await http.get(s.url, headers={**bob, "Last-Event-ID": guess})
            assert replayed.status_code == 200
            assert "slept" not in replayed.text, guess
        with anyio.fail_after(WAIT_S):  # her own: what followed, then the stream ends (the call was answered)
            own = await http.get(s.url, headers={**alice, "Last-Event-ID": first_id})
        assert '"text":"slept"' in own.text


async def test_a_session_whose_initialize_was_refused_gets_no_call_made(tmp_path: Path) -> None:
    """The direct path opens only once the SDK accepted ``initialize``; a session whose ``initialize`` was refused
    (one too large to be checked before it is served: the SDK refuses it) is closed once it is answered, and its
    answer names no session a call could name."""
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        opening = initialize()
        del opening["params"]["clientInfo"]
        opening["params"]["padding"] = "x" * 100_000
        response = await http.post(s.url, json=opening, headers=ACCEPT)
        assert _json_or_event(response)["error"]["message"] == "Invalid params: clientInfo: required"
        assert "mcp-session-id" not in response.headers
        headers = {**ACCEPT, "MCP-Protocol-Version": VERSION}
        refused = await http.post(s.url, json=call("mcp__a__echo", {"text": "x"}), headers=headers)
    assert refused.status_code == 400
    assert s.through_sdk == []


def _json_or_event(response: httpx2.Response) -> dict[str, Any]:
    """The message a POST was answered with, as JSON or as the last event of its stream."""
    if response.headers["content-type"].startswith("text/event-stream"):
        return sse_messages(response.text)[-1]
    return dict(response.json())


@pytest.mark.parametrize("capabilities", [{}, ROOTS], ids=["direct", "sdk"])
async def test_a_calls_meta_reaches_its_server_but_the_protocols_own_keys(
    tmp_path: Path, capabilities: dict[str, Any]
) -> None:
    """A client's ``_meta`` on a call (an extension's keys, a tenant) was dropped on its way to the server. It is
    passed on, but for what the protocol keeps there for one connection (its version, client and capabilities,
    which the gateway's connection to the server states for itself) and the progress token (the gateway's own)."""
    request = call("mcp__a__echo", {"text": "hi"})
    spoofed = {"name": "not the gateway", "version": "0"}
    request["params"]["_meta"] = {"example.com/tenant": "t1", "io.modelcontextprotocol/clientInfo": spoofed}
    async with served(tmp_path, "--echo-meta", "echo") as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        answer = await http.post(s.url, json=request, headers=await session(http, s.url, capabilities))
    echoed = json.loads(answer.json()["result"]["content"][0]["text"])
    assert echoed["example.com/tenant"] == "t1"
    assert echoed.get("io.modelcontextprotocol/clientInfo") != spoofed
    assert s.through_sdk == (["mcp__a__echo"] if capabilities else [])
