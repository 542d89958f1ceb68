"""Stdio servers that break the protocol in ways no example server does: what the user is told about each, with
real processes written here (see :func:`tests.helpers.raw_server`)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcpvisor.core.errors import ConnectError
from tests.core.test_client import scripted

UNKNOWN_VERSION_SERVER = """
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        result = {"protocolVersion": "1999-01-01", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "old", "version": "1"}}
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
    elif "id" in msg:
        error = {"code": -32601, "message": "Method not found"}
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": error}), flush=True)
"""


async def test_a_server_claiming_a_protocol_version_nobody_asked_for_is_down_saying_which_not_how_it_exited(
    tmp_path: Path,
) -> None:
    client = scripted(tmp_path, "old", UNKNOWN_VERSION_SERVER)
    async with anyio.create_task_group() as tg:
        with pytest.raises(ConnectError) as raised:
            await client.start(tg)
    said = str(raised.value)
    assert said.startswith(
        "could not connect to server 'old': it answered the handshake with protocol version '1999-01-01', "
        "which mcpvisor does not speak (it speaks 2024-11-05"
    ), said
    assert "exited" not in said
    assert client.status == "disconnected"
