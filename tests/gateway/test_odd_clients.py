"""The gateway over HTTP against clients that use the protocol oddly (raw requests with httpx): a second
``initialize`` in a session, parameters of the wrong type."""

from __future__ import annotations

from pathlib import Path

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
