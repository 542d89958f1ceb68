"""The example servers, driven as real subprocesses by the SDK's own client."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, MCPError, StdioServerParameters, types
from mcp.client.session import IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.subscriptions import PromptsListChanged, ToolsListChanged
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from mcpvisor.examples._options import CONTROL_TOOLS
from tests.helpers import forked_python, python_for

# Marked at collection time: if async tests are only marked in pytest_collection_modifyitems (as the
# first tests/conftest.py did), anyio's plugin rebuilds each item with a fresh callspec and drops the
# parametrization. Redundant, and harmless, once conftest marks them in pytest_pycollect_makeitem.
pytestmark = pytest.mark.anyio

LIGHT = "mcpvisor.examples.light_server"
SDK = "mcpvisor.examples.sdk_server"

both_servers = pytest.mark.parametrize("server_module", [LIGHT, SDK])

POLL_S = 0.02

CONNECT_S = 30.0
"""Bound on anything a test waits for: an SDK server takes about a second to start."""

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
}


def server(module: str, *args: str) -> StdioServerParameters:
    return StdioServerParameters(command=python_for(module), args=["-m", module, *args])


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def spawned(module: str, *args: str) -> AsyncIterator[Process]:
    """A server process with piped stdin/stdout, killed on exit whatever happens."""
    process = await anyio.open_process([sys.executable, "-m", module, *args], stderr=subprocess.DEVNULL)
    async with process:
        try:
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.kill()


async def send(process: Process, message: dict[str, Any]) -> None:
    assert process.stdin is not None
    await process.stdin.send(json.dumps(message).encode() + b"\n")


async def read_lines_when_ready(path: Path, count: int) -> list[str]:
    """Poll `path` until it holds `count` complete lines, and return them."""
    file = anyio.Path(path)
    while True:
        if await file.exists():
            text = await file.read_text()
            if text.count("\n") >= count:
                return text.splitlines()
        await anyio.sleep(POLL_S)


async def test_light_server_never_imports_mcp_or_pydantic() -> None:
    code = (
        "import sys, mcpvisor.examples.light_server as m; "
        "assert 'mcp' not in sys.modules and 'pydantic' not in sys.modules"
    )
    await anyio.run_process([sys.executable, "-c", code], check=True)


@both_servers
async def test_server_lists_and_calls_its_tools_and_prompts_with_the_default_client_mode(server_module: str) -> None:
    with anyio.fail_after(CONNECT_S):
        async with Client(
            server(server_module, "--name", "alpha", "--tools", "echo,shout", "--prompts", "greet")
        ) as client:
            assert client.server_info is not None
            assert client.server_info.name == "alpha"
            tools = (await client.list_tools()).tools
            assert [tool.name for tool in tools] == ["echo", "shout"]
            assert tools[0].input_schema["type"] == "object"
            assert tools[0].input_schema["properties"]["text"]["type"] == "string"
            assert "required" not in tools[0].input_schema
            assert text_of(await client.call_tool("shout", {"text": "hi"})) == "alpha:shout:hi"
            assert text_of(await client.call_tool("echo")) == "alpha:echo:"

            prompts = (await client.list_prompts()).prompts
            assert [prompt.name for prompt in prompts] == ["greet"]
            assert [(arg.name, arg.required) for arg in prompts[0].arguments or []] == [("topic", False)]
            result = await client.get_prompt("greet", {"topic": "cats"})
            [message] = result.messages
            assert message.role == "user"
            assert isinstance(message.content, types.TextContent)
            assert message.content.text == "alpha:greet:cats"
            assert (await client.list_resources()).resources == []


@both_servers
async def test_resource_templates_are_listed_and_a_matching_uri_is_read(server_module: str) -> None:
    with anyio.fail_after(CONNECT_S):
        async with Client(
            server(server_module, "--name", "alpha", "--templates", "notes://{id},t://{a}/{b}")
        ) as client:
            listed = (await client.list_resource_templates()).resource_templates
            assert sorted(t.uri_template for t in listed) == ["notes://{id}", "t://{a}/{b}"]
            for uri in ("notes://42", "t://x/y"):
                [content] = (await client.read_resource(uri)).contents
                assert isinstance(content, types.TextResourceContents)
                assert content.text == f"alpha:{uri}"


async def test_light_server_answers_the_discover_probe_so_auto_mode_falls_back_to_the_handshake() -> None:
    with anyio.fail_after(CONNECT_S):
        async with Client(server(LIGHT)) as client:
            assert client.protocol_version == "2025-11-25"
            caps = client.server_capabilities
            assert caps.tools is not None
            assert caps.tools.list_changed
            assert caps.prompts is None  # no prompts configured and no --control
            assert caps.resources is not None


async def test_light_server_negotiates_the_clients_handshake_version_or_its_latest() -> None:
    with anyio.fail_after(CONNECT_S):
        async with spawned(LIGHT) as process:
            assert process.stdout is not None
            lines = BufferedByteReceiveStream(process.stdout)
            for requested, expected in [("2024-11-05", "2024-11-05"), ("1999-01-01", "2025-11-25")]:
                params = {"protocolVersion": requested, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
                await send(process, {**INITIALIZE, "params": params})
                reply = json.loads(await lines.receive_until(b"\n", 65536))
                assert reply["result"]["protocolVersion"] == expected


async def test_light_server_rejects_requests_before_initialize_and_unknown_methods() -> None:
    with anyio.fail_after(CONNECT_S):
        async with spawned(LIGHT) as process:
            assert process.stdout is not None
            lines = BufferedByteReceiveStream(process.stdout)
            await send(process, {"jsonrpc": "2.0", "id": 1, "method": "server/discover"})
            await send(process, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            await send(process, {"jsonrpc": "2.0", "method": "notifications/whatever"})
            await send(process, {**INITIALIZE, "id": 3})
            await send(process, {"jsonrpc": "2.0", "id": 4, "method": "tasks/list", "params": {}})
            replies = [json.loads(await lines.receive_until(b"\n", 65536)) for _ in range(4)]
            assert [reply["id"] for reply in replies] == [1, 2, 3, 4]
            assert replies[0]["error"]["code"] == -32601
            assert "error" in replies[1]
            assert "result" in replies[2]
            assert replies[3]["error"]["code"] == -32601


@both_servers
async def test_set_tools_changes_the_listing_and_notifies_in_the_handshake_era(server_module: str) -> None:
    tools_changed = anyio.Event()
    prompts_changed = anyio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            tools_changed.set()
        elif isinstance(message, types.PromptListChangedNotification):
            prompts_changed.set()

    with anyio.fail_after(CONNECT_S):
        async with Client(server(server_module, "--control"), mode="legacy", message_handler=on_message) as client:
            assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
            caps = client.server_capabilities
            assert caps.tools is not None
            assert caps.tools.list_changed
            assert caps.prompts is not None
            assert caps.prompts.list_changed
            control = {*CONTROL_TOOLS, "log"}
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == {"echo", *control}

            await client.call_tool("set_tools", {"names": "red,blue"})
            await tools_changed.wait()
            names = {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
            assert names == {"red", "blue", *control}
            assert text_of(await client.call_tool("blue", {"text": "x"})) == "example:blue:x"

            await client.call_tool("set_prompts", {"names": "intro"})
            await prompts_changed.wait()
            prompts = (await client.list_prompts(cache_mode="bypass")).prompts
            assert [prompt.name for prompt in prompts] == ["intro"]


async def test_sdk_server_announces_changes_on_a_listen_stream_in_the_modern_era() -> None:
    with anyio.fail_after(CONNECT_S):
        async with Client(server(SDK, "--control")) as client:
            assert client.protocol_version in MODERN_PROTOCOL_VERSIONS
            caps = client.server_capabilities
            assert caps.tools is not None
            assert caps.tools.list_changed
            assert caps.prompts is not None
            assert caps.prompts.list_changed
            async with client.listen(tools_list_changed=True, prompts_list_changed=True) as subscription:
                await client.call_tool("set_tools", {"names": "green"})
                async for event in subscription:
                    if isinstance(event, ToolsListChanged):
                        break
                names = {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
                assert names == {"green", *CONTROL_TOOLS, "log"}

                await client.call_tool("set_prompts", {"names": "p1,p2"})
                async for event in subscription:
                    if isinstance(event, PromptsListChanged):
                        break
                prompts = (await client.list_prompts(cache_mode="bypass")).prompts
                assert [prompt.name for prompt in prompts] == ["p1", "p2"]


@both_servers
async def test_calling_the_crash_tool_fails_the_call_instead_of_hanging(server_module: str) -> None:
    with anyio.fail_after(CONNECT_S):
        async with Client(server(server_module, "--tools", "echo,boom", "--crash-on-call", "boom")) as client:
            assert text_of(await client.call_tool("echo", {"text": "before"})) == "example:echo:before"
            with pytest.raises(MCPError):
                await client.call_tool("boom")


@both_servers
async def test_the_crash_tool_exits_the_process_with_code_3(server_module: str) -> None:
    with anyio.fail_after(CONNECT_S):
        async with spawned(server_module, "--crash-on-call", "echo") as process:
            assert process.stdout is not None
            lines = BufferedByteReceiveStream(process.stdout)
            await send(process, INITIALIZE)
            await lines.receive_until(b"\n", 65536)
            await send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            await send(process, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo"}})
            assert await process.wait() == 3


@both_servers
async def test_exit_after_ends_the_process_by_itself_with_code_4(server_module: str) -> None:
    with anyio.fail_after(CONNECT_S):
        async with spawned(server_module, "--exit-after", "0.1") as process:
            assert await process.wait() == 4


@both_servers
async def test_a_hung_call_does_not_block_a_concurrent_call(server_module: str) -> None:
    with anyio.fail_after(CONNECT_S):
        async with Client(
            server(server_module, "--control", "--tools", "echo,stuck", "--hang-on-call", "stuck")
        ) as client:
            hung_call_started = anyio.Event()

            async def call_stuck() -> None:
                hung_call_started.set()
                await client.call_tool("stuck")
                pytest.fail("the hung call returned")

            async with anyio.create_task_group() as tg:
                tg.start_soon(call_stuck)
                await hung_call_started.wait()
                assert text_of(await client.call_tool("echo", {"text": "still here"})) == "example:echo:still here"
                assert text_of(await client.call_tool("sleep", {"seconds": 0.01})) == "slept"
                tg.cancel_scope.cancel()


@both_servers
async def test_marker_and_stderr_are_written_at_start(server_module: str, tmp_path: Path) -> None:
    marker = tmp_path / "not" / "yet" / "marker.log"
    log_path = tmp_path / "server.log"
    args = ("--name", "beta", "--control", "--marker", str(marker), "--stderr", "hello from beta")
    with anyio.fail_after(CONNECT_S), log_path.open("w") as log:
        async with Client(stdio_client(server(server_module, *args), errlog=log)) as client:
            pid = text_of(await client.call_tool("pid"))
    assert marker.read_text() == f"{pid} beta\n"
    assert "hello from beta\n" in log_path.read_text()


@both_servers
async def test_marker_lines_are_appended_by_each_process(server_module: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker.log"
    marker.write_text("1 earlier\n")
    with anyio.fail_after(CONNECT_S):
        async with spawned(server_module, "--marker", str(marker), "--name", "gamma") as process:
            assert await read_lines_when_ready(marker, 2) == ["1 earlier", f"{process.pid} gamma"]


@both_servers
async def test_hang_on_initialize_never_answers_the_handshake(server_module: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker.log"
    with anyio.fail_after(CONNECT_S):
        async with spawned(server_module, "--hang-on-initialize", "--marker", str(marker)) as process:
            assert process.stdout is not None
            await read_lines_when_ready(marker, 1)  # the process is up and past its start actions
            await send(process, {"jsonrpc": "2.0", "id": 0, "method": "server/discover"})
            await send(process, INITIALIZE)
            await send(process, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
            with anyio.move_on_after(0.5) as silence:
                await process.stdout.receive()
            assert silence.cancelled_caught


@contextlib.asynccontextmanager
async def http_server(*args: str) -> AsyncIterator[int]:
    port = free_port()
    command = [forked_python(), "-m", SDK, "--port", str(port), *args]
    process = await anyio.open_process(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    async with process:
        try:
            yield port
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.kill()


async def wait_until_listening(port: int) -> None:
    while True:
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            await anyio.sleep(POLL_S)
        else:
            await stream.aclose()
            return


async def check_server(url: str, **kwargs: Any) -> str:
    """Connect, list and call; return the negotiated protocol version."""
    transport: Any = sse_client(url) if url.endswith("/sse") else url
    async with Client(transport, **kwargs) as client:
        tools = (await client.list_tools()).tools
        assert [tool.name for tool in tools] == ["echo", *CONTROL_TOOLS, "log"]
        assert text_of(await client.call_tool("echo", {"text": "over http"})) == "web:echo:over http"
        return client.protocol_version


async def test_sdk_server_serves_streamable_http_on_a_loopback_port() -> None:
    with anyio.fail_after(CONNECT_S):
        async with http_server("--transport", "streamable-http", "--name", "web", "--control") as port:
            await wait_until_listening(port)
            url = f"http://127.0.0.1:{port}/mcp"
            assert await check_server(url) in MODERN_PROTOCOL_VERSIONS
            assert await check_server(url, mode="legacy") in HANDSHAKE_PROTOCOL_VERSIONS


async def test_sdk_server_serves_sse_on_a_loopback_port() -> None:
    with anyio.fail_after(CONNECT_S):
        async with http_server("--transport", "sse", "--name", "web", "--control") as port:
            await wait_until_listening(port)
            await check_server(f"http://127.0.0.1:{port}/sse")
