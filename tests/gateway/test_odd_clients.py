"""The gateway over HTTP against clients that use the protocol oddly (raw requests with httpx): a second
``initialize`` in a session, parameters of the wrong type, an answer to the gateway's request that is no answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest

from tests.gateway.test_direct_calls import ROOTS, _json_or_event, served, session
from tests.gateway.test_limits import ACCEPT, VERSION, call, initialize
from tests.helpers import WAIT_S

pytestmark = pytest.mark.anyio


async def test_a_second_initialize_in_a_session_is_refused_and_the_session_goes_on(tmp_path: Path) -> None:
    """It was answered as a success, and the session took the new version and capabilities from then on (a client
    offering roots turned into one offering nothing). A session is initialized once; another is opened for that."""
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        headers = await session(http, s.url, ROOTS)
        again = initialize("2025-06-18")
        refused = await http.post(s.url, json=again, headers=headers)
        assert refused.status_code == 200
        error = _json_or_event(refused)["error"]
        assert error["code"] == types.INVALID_REQUEST
        assert error["message"].startswith("initialize refused: this session is already initialized")
        assert "open a new session" in error["message"]
        answer = await http.post(s.url, json=call("mcp__a__echo", {"text": "on"}), headers=headers)
        assert _json_or_event(answer)["result"]["content"][0]["text"] == "a:echo:on"
        assert s.through_sdk == ["mcp__a__echo"]  # still a client that offers roots: the SDK's path
        fresh = await http.post(s.url, json=again, headers=ACCEPT)  # a new session initializes as ever
    assert _json_or_event(fresh)["result"]["protocolVersion"] == "2025-06-18"
    assert VERSION != "2025-06-18"


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"name": 5, "arguments": {}}, "Invalid params: name: expected a string"),
        ({"name": "mcp__a__echo", "arguments": "x"}, "Invalid params: arguments: expected an object"),
        ({"arguments": {}}, "Invalid params: name: required"),
        ({"name": "mcp__a__echo", "_meta": {"progressToken": 1.5}}, "Invalid params: _meta.progressToken: expected a "),
    ],
)
async def test_params_of_the_wrong_type_are_refused_naming_the_field_on_both_call_paths(
    tmp_path: Path, params: dict[str, object], said: str
) -> None:
    """The answer was ``-32602 Invalid request parameters`` with no field named, whichever path the call took (a
    client offering nothing: the direct one; one offering roots: the SDK's)."""
    request = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        for capabilities in ({}, ROOTS):
            answer = await http.post(s.url, json=request, headers=await session(http, s.url, capabilities))
            error = _json_or_event(answer)["error"]
            assert error["code"] == types.INVALID_PARAMS
            assert error["message"].startswith(said), error
        listed = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": 5}}
        answer = await http.post(s.url, json=listed, headers=await session(http, s.url, {}))
    assert _json_or_event(answer)["error"]["message"] == "Invalid params: cursor: expected a string"
    assert s.through_sdk == []


@pytest.mark.parametrize(
    ("ref", "said"),
    [
        ({"type": "ref/prompt", "name": 5}, "Invalid params: ref.name: expected a string"),
        ({"type": "ref/prompt"}, "Invalid params: ref.name: required"),
        ({"type": "ref/resource", "uri": 3}, "Invalid params: ref.uri: expected a string"),
        (
            {"type": "ref/other"},  # no kind named: what either needs
            "Invalid params: ref.name: required; ref.type: expected 'ref/prompt' or 'ref/resource'; ref.uri: required",
        ),
    ],
)
async def test_a_wrong_completion_ref_is_told_what_its_own_kind_needs(
    tmp_path: Path, ref: dict[str, object], said: str
) -> None:
    """A prompt reference with a name that is no string was told ``ref.name: expected a string; ref.type: expected
    'ref/resource'; ref.uri: required``: what both kinds of reference need, mixed. The ``type`` it names picks one."""
    params = {"ref": ref, "argument": {"name": "a", "value": "b"}}
    request = {"jsonrpc": "2.0", "id": 2, "method": "completion/complete", "params": params}
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        answer = await http.post(s.url, json=request, headers=await session(http, s.url, {}))
    error = _json_or_event(answer)["error"]
    assert (error["code"], error["message"]) == (types.INVALID_PARAMS, said)


@pytest.mark.parametrize("answer", [{"result": "yes"}, {"error": {"code": "x", "message": 5}}], ids=["result", "error"])
async def test_a_clients_answer_that_is_no_json_rpc_response_fails_the_servers_request(
    tmp_path: Path, answer: dict[str, Any]
) -> None:
    """The client was told (400), but the server's request, and the call behind it, waited on for an answer."""
    offers: dict[str, Any] = {"sampling": {}}
    async with served(tmp_path) as s, httpx2.AsyncClient(timeout=WAIT_S) as http:
        headers = await session(http, s.url, offers)
        asking = call("mcp__a__ask_client", {"kind": "sampling", "text": "q"})
        with anyio.fail_after(WAIT_S):
            async with http.stream("POST", s.url, json=asking, headers=headers) as stream:
                heard: list[dict[str, Any]] = []
                async for line in stream.aiter_lines():
                    if not line.startswith("data: ") or line == "data: ":
                        continue
                    heard.append(json.loads(line[len("data: ") :]))
                    if heard[-1].get("method") == "sampling/createMessage":
                        reply = {"jsonrpc": "2.0", "id": heard[-1]["id"], **answer}
                        told = await http.post(s.url, json=reply, headers=headers)
                        assert told.status_code == 400
                    elif heard[-1].get("id") == asking["id"]:
                        break
    said = heard[-1]["result"]["content"][0]["text"]
    assert "the client's answer is no JSON-RPC response: " in said, said
