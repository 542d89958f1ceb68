"""Stdio servers that break the protocol in ways no example server does: what the user is told about each, with
real processes written here (see :func:`tests.helpers.raw_server`)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import anyio
import pytest

from mcpvisor.core.config import Config
from mcpvisor.core.errors import ConnectError
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from tests.core.test_client import scripted
from tests.helpers import light, raw_server

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


TWICE_NAMED_SERVER = raw_server(
    "twice",
    """
    def answer(method, params):
        if method == "tools/list":
            schema = {"type": "object"}
            return {"tools": [{"name": "same", "description": "first", "inputSchema": schema},
                              {"name": "same", "description": "second", "inputSchema": schema},
                              {"name": "other", "inputSchema": schema}]}
        return {"content": [{"type": "text", "text": params.get("name", "")}]}
    """,
)


async def test_a_tool_a_server_lists_twice_is_registered_once_as_first_listed_and_the_repeat_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = tmp_path / "twice.py"
    script.write_text(TWICE_NAMED_SERVER)
    servers = {"twice": McpServerConfig(command=sys.executable, args=[str(script)]), "good": light("good")}
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        await config.initialize()
        tools = config.tool_registry.tools_of("twice")
        assert [(t.name, t.tool.description) for t in tools] == [
            ("mcp__twice__same", "first"),
            ("mcp__twice__other", None),
        ]
        assert config.tool_registry.get_tool("mcp__twice__same").tool.description == "first"  # type: ignore[union-attr]
        assert "mcp__good__echo" in config.tool_registry.names()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("server 'twice' lists tool 'same' more than once" in s for s in said), said
