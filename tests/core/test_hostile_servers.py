"""Stdio servers that break the protocol in ways no example server does: what the user is told about each, with
real processes written here (see :func:`tests.helpers.raw_server`)."""

from __future__ import annotations

import itertools
import logging
import sys
from pathlib import Path

import anyio
import pytest

from mcpvisor.core import registry
from mcpvisor.core.config import Config
from mcpvisor.core.errors import ConnectError, ServerUnavailableError
from mcpvisor.core.listing import REFRESH_GAP_S
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from tests.core.test_client import scripted
from tests.helpers import WAIT_S, light, raw_server, wait_until

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


RESTLESS_SERVER = raw_server(
    "restless",
    """
    listed = []
    def answer(method, params):
        if method == "tools/list":
            listed.append(time.monotonic())
            with open(sys.argv[1], "a") as f:
                f.write(f"{listed[-1]}\\n")
            send({"method": "notifications/tools/list_changed"})  # (before its answer: says the list is stale already)
            return {"tools": [{"name": f"t{len(listed)}", "inputSchema": {"type": "object"}}]}
        return {"content": [{"type": "text", "text": "ok"}]}
    """,
    capabilities={"tools": {"listChanged": True}},
)


async def test_a_server_announcing_a_new_tool_list_at_every_listing_is_listed_again_at_a_bounded_rate(
    tmp_path: Path,
) -> None:
    script, listed = tmp_path / "restless.py", tmp_path / "listed"
    script.write_text(RESTLESS_SERVER)
    servers = {
        "restless": McpServerConfig(command=sys.executable, args=[str(script), str(listed)]),
        "good": light("good"),
    }
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        await config.initialize()

        def times() -> list[float]:
            return [float(t) for t in listed.read_text().split()]

        await wait_until(lambda: len(times()) >= 5, what="five listings")
        gaps = [later - earlier for earlier, later in itertools.pairwise(times()[1:])]
        assert all(gap >= REFRESH_GAP_S for gap in gaps), gaps
        result = await config.call_tool("mcp__good__echo", {"text": "hi"})
        assert "good:echo:hi" in str(result)


async def test_a_server_inventing_tool_names_at_every_listing_leaves_the_registry_a_bounded_memory_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every name a server ever listed stayed claimed for the whole session: this one grew it at every listing.
    monkeypatch.setattr(registry, "FORMER_NAMES_KEPT", 2, raising=False)
    script, listed = tmp_path / "restless.py", tmp_path / "listed"
    script.write_text(RESTLESS_SERVER)
    servers = {"restless": McpServerConfig(command=sys.executable, args=[str(script), str(listed)])}
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        await config.initialize()
        reg = config.tool_registry
        await wait_until(lambda: [t.tool.name for t in reg.tools_of("restless")] == ["t5"], what="a fifth listing")
        assert len(reg._claims) == 1 + 2  # t5, and t4 and t3 it listed last before


SPOILING_SERVER = raw_server(
    "spoiling",
    """
    import os
    with open(sys.argv[1], "a") as f:
        f.write(f"{os.getpid()}\\n")
    listings = []
    def answer(method, params):
        if method == "tools/list":
            listings.append(method)
            tools = [{"name": "ok", "inputSchema": {"type": "object"}}]
            if len(listings) > 1:  # its second listing is not valid MCP
                tools.append({"name": "bad", "inputSchema": {"type": "string"}})
            return {"tools": tools}
        send({"method": "notifications/tools/list_changed"})
        return {"content": [{"type": "text", "text": "ok"}]}
    """,
    capabilities={"tools": {"listChanged": True}},
)


async def test_a_listing_that_turns_invalid_after_a_change_is_said_and_the_server_keeps_running_with_its_tools(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script, pids = tmp_path / "spoiling.py", tmp_path / "pids"
    script.write_text(SPOILING_SERVER)
    servers = {"spoiling": McpServerConfig(command=sys.executable, args=[str(script), str(pids)])}
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        await config.initialize()
        await config.call_tool("mcp__spoiling__ok", {})

        def said() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

        await wait_until(lambda: any("not valid MCP" in s for s in said()), what=f"the invalid listing said: {said()}")
        assert (
            "server 'spoiling': refreshing its listings failed: its answer (ListToolsResult) is not valid MCP "
            "(tools.1.inputSchema.type: Input should be 'object'); the listing before it stays in use"
        ) in said()
        assert len(pids.read_text().split()) == 1  # not restarted
        assert config.tool_registry.names() == {"mcp__spoiling__ok"}
        client = config.manager.get_client("spoiling")
        assert client is not None
        assert client.status == "connected"


MUTE_SERVER = raw_server(
    "mute",
    """
    import os
    with open(sys.argv[1], "a") as f:
        f.write(f"{os.getpid()}\\n")
    def answer(method, params):
        if method == "tools/list":
            return {"tools": [{"name": "ok", "inputSchema": {"type": "object"}}]}
        if method != "tools/call":
            return {}
        os.close(1)  # closes its output and goes on running
        while True:
            time.sleep(1)
    """,
)


async def test_a_call_to_a_server_that_closes_its_output_but_runs_on_says_so_not_that_it_exited(
    tmp_path: Path,
) -> None:
    client = scripted(tmp_path, "mute", MUTE_SERVER, str(tmp_path / "pids"))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        with anyio.fail_after(WAIT_S), pytest.raises(ServerUnavailableError) as raised:
            await client.call_tool("ok")
        said = str(raised.value)
        assert said.startswith(
            "call to tool 'ok' failed: the connection to server 'mute' closed: its process closed its output"
        ), said
        assert "exited or crashed" not in said
        assert str(client.log_path) in said
        await client.aclose()
