"""The light example server served in memory: what the process answers, without the process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from mcpvisor.examples.in_memory import NEEDS_A_PROCESS, light_servers_in_memory
from tests.helpers import WAIT_S, in_memory_unless_a_process_is_needed, light

pytestmark = pytest.mark.anyio


def text_of(result: types.CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def test_a_client_gets_the_same_answers_as_from_the_process() -> None:
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    served = light_servers_in_memory("a", light("a", "--tools", "echo,x", "--prompts", "p", "--control"))
    assert served is not None
    async with Client(served, mode="legacy", message_handler=on_message) as client:  # the streams are a transport
        assert {tool.name for tool in (await client.list_tools()).tools} >= {"echo", "x", "set_tools", "sleep"}
        assert text_of(await client.call_tool("x", {"text": "hi"})) == "a:x:hi"
        [message] = (await client.get_prompt("p", {"topic": "cats"})).messages
        assert isinstance(message.content, types.TextContent)
        assert message.content.text == "a:p:cats"
        # A delayed answer comes from the server's own thread; a notice comes before the answer that caused it.
        assert text_of(await client.call_tool("sleep", {"seconds": 0.05})) == "slept"
        assert text_of(await client.call_tool("set_tools", {"names": "y"})) == "y"
        with anyio.fail_after(WAIT_S):
            await changed.wait()
        assert "y" in {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
        with pytest.raises(MCPError, match="^tool 'pid': this server is served in memory, without a process$"):
            await client.call_tool("pid", {})


async def test_only_light_server_entries_are_served_and_what_needs_a_process_is_refused_by_name() -> None:
    assert light_servers_in_memory("s", McpServerConfig(command=sys.executable, args=["-m", "other"])) is None
    assert light_servers_in_memory("s", McpServerConfig(url="http://127.0.0.1:9/mcp")) is None
    for flag in NEEDS_A_PROCESS.values():
        argument = [] if flag in ("--stubborn", "--flood-stderr", "--big") else ["1" if flag == "--exit-after" else "v"]
        with pytest.raises(ValueError, match=f"server 's' cannot be served in memory: {flag} needs a process"):
            light_servers_in_memory("s", light("s", flag, *argument))


async def test_an_option_the_light_server_does_not_know_fails_that_server_alone(tmp_path: Path) -> None:
    """The light server's own parser exits on a usage error (code 2): in memory that ended the whole host."""
    with pytest.raises(ValueError, match="server 'b' cannot be served in memory: .*unrecognized arguments: --port 80"):
        light_servers_in_memory("b", light("b", "--port", "80"))
    with pytest.raises(ValueError, match="server 'h' cannot be served in memory"):
        light_servers_in_memory("h", light("h", "--help"))
    async with Config(options=ConnectionOptions(log_dir=tmp_path, in_memory=light_servers_in_memory)) as config:
        config.set_mcp_servers({"a": light("a"), "b": light("b", "--port", "80")})
        finished = await config.initialize()
        assert finished is not None
        assert "unrecognized arguments: --port 80" in finished.failed["b"]
        assert "see its log" not in finished.failed["b"]  # no process, no log: none is named
        assert not (tmp_path / "b.log").exists()
        assert text_of(await config.call_tool("mcp__a__echo", {"text": "hi"})) == "a:echo:hi"


async def test_a_config_serves_its_light_servers_in_memory_and_spawns_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    servers = {"a": light("a"), "b": light("b", "--tools", "t"), "real": light("real", "--marker", str(marker))}
    async with Config(
        options=ConnectionOptions(log_dir=tmp_path, in_memory=in_memory_unless_a_process_is_needed)
    ) as config:
        config.set_mcp_servers(servers)
        await config.initialize()
        assert text_of(await config.call_tool("mcp__a__echo", {"text": "hi"})) == "a:echo:hi"
        assert text_of(await config.call_tool("mcp__b__t", {"text": "yo"})) == "b:t:yo"
        assert text_of(await config.call_tool("mcp__real__echo", {"text": "1"})) == "real:echo:1"
        clients = config.manager.clients()
        assert clients["a"].pid is None
        assert clients["b"].pid is None
        [line] = marker.read_text().splitlines()
        assert line == f"{clients['real'].pid} real"
        assert clients["real"].pid != os.getpid()
