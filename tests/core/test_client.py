"""One connection (SPEC §5.1): real example servers as subprocesses."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from mcpvisor.core import stdio
from mcpvisor.core.client import McpClient
from mcpvisor.core.config import Config
from mcpvisor.core.errors import (
    ConnectError,
    RequestError,
    RequestTimeoutError,
    ServerUnavailableError,
    ToolCallError,
    ToolNotFoundError,
)
from mcpvisor.core.processes import how_it_exited
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from mcpvisor.core.server_log import ServerLog
from mcpvisor.core.transports import closed_in_sdk, explain_start_failure
from tests.helpers import (
    LIGHT,
    WAIT_S,
    free_port,
    http_server,
    light,
    marker_pids,
    pid_alive,
    raw_server,
    sdk,
    wait_until,
)


async def crash_and_lose(client: McpClient, lost: anyio.Event) -> None:
    """Call the tool that makes server 'fragile' crash (the call fails), then wait until the loss is reported."""
    with anyio.fail_after(WAIT_S), pytest.raises(ServerUnavailableError, match="'fragile'"):
        await client.call_tool("echo")
    with anyio.fail_after(WAIT_S):
        await lost.wait()


def text(result: object) -> str:
    content = getattr(result, "content")  # noqa: B009 - keeps the helper independent of the result type
    return str(content[0].text)


async def test_stdio_server_connects_lists_and_calls(tmp_path: Path) -> None:
    client = McpClient("a", light("a", "--tools", "x,y", "--prompts", "p"), options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        assert client.status == "connected"
        assert [t.name for t in client.tools] == ["x", "y"]
        assert [p.name for p in client.prompts] == ["p"]
        assert text(await client.call_tool("x", {"text": "hi"})) == "a:x:hi"
        prompt = await client.get_prompt("p", {"topic": "t"})
        assert prompt.messages[0].content.text == "a:p:t"  # type: ignore[union-attr]
        pid = client.pid
        assert pid is not None
        assert pid_alive(pid)
        await client.aclose()
    assert client.status == "disconnected"
    assert pid is not None
    assert not pid_alive(pid)


@pytest.mark.parametrize("pipe", ["asyncio StreamWriter", "anyio stream"])
async def test_concurrent_calls_larger_than_the_pipe_never_interleave_on_the_servers_stdin(
    tmp_path: Path, pipe: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task that sends a message writes it to the server's stdin: 24 calls at once, each argument larger
    than a pipe's buffer (so writers wait for the server to read), each answered with its own text. Written
    to the pipe's StreamWriter (asyncio), or through anyio's stream (any other backend)."""
    if pipe == "anyio stream":
        monkeypatch.setattr(stdio, "asyncio_writer", lambda stream: None)
    client = McpClient("a", light("a"), options=ConnectionOptions(log_dir=tmp_path))
    texts = [f"{i:02d}" * 50_000 for i in range(24)]  # 100 kB each
    answers: dict[int, str] = {}
    async with anyio.create_task_group() as tg:
        await client.start(tg)

        async def call(i: int) -> None:
            answers[i] = text(await client.call_tool("echo", {"text": texts[i]}))

        async with anyio.create_task_group() as calls:
            for i in range(len(texts)):
                calls.start_soon(call, i)
        await client.aclose()
    assert answers == {i: f"a:echo:{t}" for i, t in enumerate(texts)}


async def test_on_asyncio_messages_go_to_the_stdin_pipes_stream_writer() -> None:
    """anyio's stream around a process's stdin yields to the loop after every send; the transport writes to
    the ``StreamWriter`` inside it. If an anyio release moves that writer, this fails (rather than every call
    quietly taking the slower path)."""
    async with await anyio.open_process([sys.executable, "-c", "import sys; sys.stdin.read()"]) as process:
        assert process.stdin is not None
        assert stdio.asyncio_writer(process.stdin) is not None
        await process.stdin.aclose()


async def test_streamable_http_server_connects_lists_and_calls(tmp_path: Path) -> None:
    async with http_server("h", "--tools", "t") as url:
        client = McpClient("h", McpServerConfig(http_url=url), options=ConnectionOptions(log_dir=tmp_path))
        async with anyio.create_task_group() as tg:
            await client.start(tg)
            assert [t.name for t in client.tools] == ["t"]
            assert text(await client.call_tool("t", {"text": "x"})) == "h:t:x"
            await client.aclose()


async def test_sse_server_connects_and_calls(tmp_path: Path) -> None:
    async with http_server("s", "--tools", "t", transport="sse") as url:
        client = McpClient("s", McpServerConfig(url=url), options=ConnectionOptions(log_dir=tmp_path))
        async with anyio.create_task_group() as tg:
            await client.start(tg)
            assert text(await client.call_tool("t", {"text": "x"})) == "s:t:x"
            await client.aclose()


async def test_a_header_that_cannot_be_sent_names_the_setting_and_the_likely_cause(tmp_path: Path) -> None:
    async with http_server("h", "--tools", "t") as url:
        cfg = McpServerConfig(http_url=url, headers={"Authorization": "Bearer "})  # Bearer ${UNSET}
        client = McpClient("h", cfg, options=ConnectionOptions(log_dir=tmp_path))
        async with anyio.create_task_group() as tg:
            with pytest.raises(ConnectError) as info:
                await client.start(tg)
    assert str(info.value) == (
        "could not connect to server 'h': a header in mcpServers.h.headers cannot be sent: a value is empty or "
        "holds a line break (a ${VAR} that is not set expands to nothing)"
    )


async def test_a_server_of_the_other_http_transport_gets_a_one_line_reason_and_the_fix(tmp_path: Path) -> None:
    async with http_server("h", "--tools", "t") as url:
        client = McpClient("h", McpServerConfig(url=url), options=ConnectionOptions(log_dir=tmp_path))
        async with anyio.create_task_group() as tg:
            with pytest.raises(ConnectError) as info:
                await client.start(tg)
    assert str(info.value) == (
        f"could not connect to server 'h': HTTPStatusError: Client error '400 Bad Request' for url '{url}' "
        f'(reaching {url}); if it speaks streamable HTTP, set mcpServers.h.type to "http"'
    )  # one line: httpx's second one, pointing at MDN, is left out

    async with http_server("s", "--tools", "t", transport="sse") as url:
        client = McpClient("s", McpServerConfig(http_url=url), options=ConnectionOptions(log_dir=tmp_path))
        async with anyio.create_task_group() as tg:
            with pytest.raises(ConnectError) as info:
                await client.start(tg)
    assert str(info.value) == (
        "could not connect to server 's': the server answered its start-up request with an HTTP error status "
        f'(reaching {url}); check the URL, and if it speaks the older SSE transport, set mcpServers.s.type to "sse"'
    )
    async with http_server("h", "--tools", "t") as url:
        missing = url.removesuffix("/mcp") + "/nothing-here"
        client = McpClient("h", McpServerConfig(http_url=missing), options=ConnectionOptions(log_dir=tmp_path))
        async with anyio.create_task_group() as tg:
            with pytest.raises(ConnectError, match=r"answered its start-up request with HTTP 404 \(Not Found\)"):
                await client.start(tg)


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_list_changed_refreshes_the_tools_in_both_protocol_eras(tmp_path: Path, era: str) -> None:
    changes: list[list[str]] = []
    client = McpClient(
        "c",
        (light if era == "handshake" else sdk)("c", "--control"),
        on_change=lambda c: changes.append([t.name for t in c.tools]),
        options=ConnectionOptions(log_dir=tmp_path),
    )
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        assert client.protocol_version is not None
        assert client.protocol_version.startswith("2025" if era == "handshake" else "2026")
        assert "echo" in [t.name for t in client.tools]
        await client.call_tool("set_tools", {"names": "alpha,beta"})
        await wait_until(lambda: "alpha" in [t.name for t in client.tools])
        assert "echo" not in [t.name for t in client.tools]
        await client.aclose()


async def test_stderr_goes_to_a_per_server_log(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    client = McpClient(
        "loud", light("loud", "--stderr", "hello from the server"), options=ConnectionOptions(log_dir=logs)
    )
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        await client.aclose()
    assert "hello from the server" in client.log_path.read_text()
    assert client.log_path.stat().st_mode & 0o777 == 0o600
    assert logs.stat().st_mode & 0o777 == 0o700  # a folder made for them is the user's alone too


async def test_a_log_others_could_read_or_redirect_is_never_written(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    readable = logs / "loud.log"
    readable.write_text("")
    readable.chmod(0o666)  # made by someone else's umask, or on purpose
    client = McpClient("loud", light("loud", "--stderr", "TOKEN=hunter2"), options=ConnectionOptions(log_dir=logs))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        await client.aclose()
    assert "TOKEN=hunter2" in readable.read_text()
    assert readable.stat().st_mode & 0o777 == 0o600

    elsewhere = tmp_path / "victim.txt"
    elsewhere.write_text("")
    (logs / "link.log").symlink_to(elsewhere)  # a planted link would aim the server's writes at another file
    linked = McpClient("link", light("link", "--stderr", "TOKEN=hunter2"), options=ConnectionOptions(log_dir=logs))
    async with anyio.create_task_group() as tg:
        with pytest.raises(ConnectError, match=r"server 'link': log file .*link\.log is a symbolic link; remove it"):
            await linked.start(tg)
    assert elsewhere.read_text() == ""

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    client = McpClient("x", light("x"), options=ConnectionOptions(log_dir=not_a_folder))
    async with anyio.create_task_group() as tg:
        with pytest.raises(ConnectError) as info:
            await client.start(tg)
    assert f"cannot write its log {not_a_folder / 'x.log'} ({not_a_folder} is a file, not a folder)" in str(info.value)
    assert "set MCPVISOR_LOG_DIR (a program of your own: ConnectionOptions(log_dir=...)) to a folder" in str(info.value)


def test_a_log_folder_or_file_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "mine.log").write_text("")
    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 1)  # as if another user had made them
    with pytest.raises(OSError, match=r"log folder .*logs belongs to another user; set MCPVISOR_LOG_DIR"):
        ServerLog(tmp_path / "logs" / "mine.log")
    monkeypatch.setattr(os, "getuid", lambda: real)
    ServerLog(tmp_path / "logs" / "mine.log").close()


async def test_without_a_log_folder_servers_log_where_the_host_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPVISOR_LOG_DIR", str(tmp_path / "mine"))
    client = McpClient("loud", light("loud", "--stderr", "hello"))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        await client.aclose()
    assert client.log_path == tmp_path / "mine" / "loud.log"
    assert "hello" in client.log_path.read_text()


async def test_a_lost_connection_reads_disconnected_at_once_not_after_its_teardown(tmp_path: Path) -> None:
    """The status view said 'connected' for the second the teardown took, while calls already failed."""
    client = McpClient("a", light("a", "--stubborn"), options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        client.mark_lost("the server went away")
        assert (client.status, client.last_error) == ("disconnected", "the server went away")
        await client.aclose()


async def test_a_missing_command_names_the_server_and_the_field(tmp_path: Path) -> None:
    client = McpClient(
        "gh", McpServerConfig(command="/nonexistent/npx-not-here"), options=ConnectionOptions(log_dir=tmp_path)
    )
    async with anyio.create_task_group() as tg:
        with pytest.raises(ConnectError) as info:
            await client.start(tg)
    message = str(info.value)
    assert "'gh'" in message
    assert "'/nonexistent/npx-not-here' not found" in message
    assert "mcpServers.gh.command" in message


async def test_a_refused_url_names_the_server_and_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    client = McpClient(
        "remote",
        McpServerConfig(http_url=url, discovery_timeout_ms=10_000),
        options=ConnectionOptions(log_dir=tmp_path),
    )
    async with anyio.create_task_group() as tg:
        with pytest.raises(ConnectError) as info:
            await client.start(tg)
    assert "'remote'" in str(info.value)
    assert url in str(info.value)


async def test_a_server_that_never_answers_initialize_times_out_and_leaves_no_process(tmp_path: Path) -> None:
    marker = tmp_path / "m"
    cfg = light("mute", "--hang-on-initialize", "--marker", str(marker), discovery_timeout_ms=3000)
    client = McpClient("mute", cfg, options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        with pytest.raises(ConnectError, match=r"'mute'.*no answer within 3 s"):
            await client.start(tg)
    [pid] = marker_pids(marker)
    await wait_until(lambda: not pid_alive(pid))


async def test_a_crash_mid_call_fails_the_call_clearly_and_reports_the_loss(tmp_path: Path) -> None:
    lost = anyio.Event()
    client = McpClient(
        "fragile",
        light("fragile", "--crash-on-call", "echo"),
        on_lost=lambda _: lost.set(),
        options=ConnectionOptions(log_dir=tmp_path),
    )
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        await crash_and_lose(client, lost)
        assert client.status == "disconnected"
        assert client.last_error is not None
        with pytest.raises(ServerUnavailableError, match="not connected"):
            await client.call_tool("echo")


async def test_a_server_that_exits_is_lost_even_when_a_child_it_left_holds_its_stdout(tmp_path: Path) -> None:
    """``sleep & exec server``: the server crashes and the background ``sleep`` keeps its stdout open, so its
    output never ends (as under uvloop, whose spawn leaks the server's stdio to itself and its children):
    the exit is what tells."""
    script = f"sleep 600 & exec {shlex.quote(sys.executable)} -m {LIGHT} --name fragile --crash-on-call echo"
    cfg = McpServerConfig.model_validate({"command": "sh", "args": ["-c", script]})
    lost = anyio.Event()
    client = McpClient("fragile", cfg, on_lost=lambda _: lost.set(), options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        await crash_and_lose(client, lost)
        assert "exited with code 3" in (client.last_error or "")
        await client.aclose()


async def test_what_a_server_wrote_before_it_exited_reaches_a_reader_that_comes_late(tmp_path: Path) -> None:
    """Its stdout stays open (a background child holds it), and the reader is busy elsewhere for longer than
    the drain time when the server exits: what the server wrote is still read, then its output ends."""
    note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "last words"}}
    script = f"sleep 600 & printf '%s\\n' {shlex.quote(json.dumps(note))}"
    log = ServerLog(tmp_path / "s.log")
    async with stdio.open_stdio_transport("sh", ["-c", script], env=None, cwd=None, log=log) as ((read, _), process):
        with anyio.fail_after(WAIT_S):
            while process.returncode is None:  # noqa: ASYNC110 - the exit code has no event to wait on
                await anyio.sleep(0.02)
        await anyio.sleep(2 * stdio.EXIT_DRAIN_S)  # the reader is busy elsewhere meanwhile
        with anyio.fail_after(WAIT_S):
            assert "last words" in repr(await read.receive())
            with pytest.raises(anyio.EndOfStream):
                await read.receive()


async def test_a_server_that_exits_is_told_even_when_a_send_broke_its_input_first(tmp_path: Path) -> None:
    """Its stdout stays open (a background child holds it) and a message sent after the exit breaks its stdin,
    which closes the reader: the exit is still told."""
    log = ServerLog(tmp_path / "s.log")
    ping = SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id=1, method="ping"))
    async with stdio.open_stdio_transport("sh", ["-c", "sleep 600 & sleep 0.3"], env=None, cwd=None, log=log) as (
        (read, write),
        process,
    ):
        with anyio.fail_after(WAIT_S):
            while process.returncode is None:  # noqa: ASYNC110 - the exit code has no event to wait on
                await anyio.sleep(0.02)
            with contextlib.suppress(anyio.BrokenResourceError):
                while True:
                    await write.send(ping)
                    await anyio.sleep(0.02)
            with pytest.raises(anyio.EndOfStream):
                await read.receive()
            await process.ended.wait()


@pytest.mark.parametrize("code", [-32000, -32001, -32603])
async def test_an_error_the_server_answers_with_fails_the_call_only_whatever_its_code(
    tmp_path: Path, code: int
) -> None:
    # -32000 is also the SDK's own code for a closed connection, -32001 its timeout: a server's error with
    # either code is still the server's answer, not a lost connection nor a timeout.
    lost: list[object] = []
    cfg = light("s", "--tools", "echo,boom", "--error-on-call", f"boom={code}")
    client = McpClient("s", cfg, on_lost=lost.append, options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        pid = client.process.pid if client.process is not None else None
        for _ in range(3):
            with anyio.fail_after(WAIT_S), pytest.raises(ToolCallError) as raised:
                await client.call_tool("boom")
            assert not isinstance(raised.value, RequestTimeoutError)
            assert str(raised.value) == "call to tool 'boom' on server 's' failed: boom failed on purpose"
        assert client.status == "connected"
        assert lost == []
        assert text(await client.call_tool("echo", {"text": "still"})) == "s:echo:still"
        assert client.process is not None
        assert client.process.pid == pid
        await client.aclose()


def scripted(tmp_path: Path, name: str, source: str, *args: str, **fields: Any) -> McpClient:
    """A client of server ``name``, a Python script written here: it sends what no example server would."""
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    cfg = McpServerConfig(command=sys.executable, args=[str(script), *args], **fields)
    return McpClient(name, cfg, options=ConnectionOptions(log_dir=tmp_path))


MALFORMED_SERVER = """
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" in msg:
        result = {
            "initialize": {"protocolVersion": msg.get("params", {}).get("protocolVersion"),
                           "capabilities": {"tools": {}}, "serverInfo": {"name": "bad", "version": "1"}},
            "tools/list": {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]},
            "tools/call": {"content": "the-key-is-" + sys.argv[1]},
        }.get(msg.get("method"), {})
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


async def test_an_answer_that_is_not_valid_mcp_fails_the_call_saying_where_without_its_values(tmp_path: Path) -> None:
    client = scripted(tmp_path, "bad", MALFORMED_SERVER, "${KEY}", env={"KEY": "s3cr3t"})
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        with anyio.fail_after(WAIT_S), pytest.raises(ToolCallError) as raised:
            await client.call_tool("t")
        assert str(raised.value) == (
            "call to tool 't' on server 'bad' failed: "
            "its answer is not valid MCP (content: Input should be a valid list)"
        )
        assert raised.value.__cause__ is None  # nor in a chained error's text
        assert client.status == "connected"
        await client.aclose()


async def test_arguments_that_make_no_valid_request_are_refused_before_sending_not_blamed_on_the_server(
    tmp_path: Path,
) -> None:
    client = McpClient("a", light("a", "--tools", "x", "--prompts", "p"), options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        with pytest.raises(RequestError) as prompt:
            await client.get_prompt("p", {"topic": 3})  # type: ignore[dict-item]
        assert str(prompt.value) == (
            "getting prompt 'p' on server 'a' was not sent: "
            "its arguments are not valid (arguments.topic: Input should be a valid string)"
        )
        with pytest.raises(ToolCallError, match="was not sent: its arguments are not valid"):
            await client.call_tool("x", ["not", "a", "dict"])  # type: ignore[arg-type]
        with pytest.raises(ToolCallError) as unwritable:  # (before: pydantic's own error, no McpvisorError)
            await client.call_tool("x", {"text": object()})
        assert str(unwritable.value) == (
            "call to tool 'x' on server 'a' was not sent: its arguments cannot be written as JSON "
            "(Unable to serialize unknown type: <class 'object'>)"
        )
        with pytest.raises(ToolCallError) as not_text:  # (before: a bare UnicodeDecodeError)
            await client.call_tool("x", {"text": b"\xff\x00"})
        assert str(not_text.value).endswith("cannot be written as JSON (a value of type bytes that is not UTF-8)")
        assert client.status == "connected"
        await client.aclose()


ODD_ANSWERS_SERVER = r"""
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, answer = msg.get("method"), {}
    if method == "initialize":
        answer = {"result": {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                             "serverInfo": {"name": "odd", "version": "1"}}}
    elif method == "tools/list":
        answer = {"result": {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in ("name", "list")]}}
    elif method == "tools/call" and msg["params"]["name"] == "name":  # a file name that is not UTF-8, as json writes it
        answer = {"result": {"content": [{"type": "text", "text": "caf\udce9.txt"}]}}
    elif method == "tools/call":
        answer = {"result": ["not", "an", "object"]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], **answer}) + "\n")
    sys.stdout.flush()
"""


async def test_an_answer_the_strict_parser_refuses_is_read_leniently_or_fails_its_call_at_once(tmp_path: Path) -> None:
    client = scripted(tmp_path, "odd", ODD_ANSWERS_SERVER, timeout=60_000)
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        with anyio.fail_after(WAIT_S):  # never the call's 60 s timeout
            assert text(await client.call_tool("name")) == "caf\ufffd.txt"
            with pytest.raises(ToolCallError, match="its answer is not valid JSON-RPC"):
                await client.call_tool("list")
        assert client.status == "connected"
        await client.aclose()


ODD_HTTP_SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", kind="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.reply(405)

    def do_DELETE(self):
        self.reply(200)

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in msg:
            return self.reply(202)
        method, result = msg.get("method"), {}
        if method == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "odd", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "list", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            result = ["not", "an", "object", "api_key=" + sys.argv[2]]
        self.reply(200, json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode())

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


async def test_a_remote_answer_that_is_not_valid_json_rpc_fails_the_call_without_quoting_it(tmp_path: Path) -> None:
    script = tmp_path / "odd_http.py"
    script.write_text(ODD_HTTP_SERVER)
    port = free_port()
    process = await anyio.open_process([sys.executable, str(script), str(port), "sk-LIVE-SECRET-123"])
    try:
        await wait_until(lambda: _answers(port), what="the HTTP server to listen")
        cfg = McpServerConfig(http_url=f"http://127.0.0.1:{port}/mcp")
        client = McpClient("odd", cfg, options=ConnectionOptions(log_dir=tmp_path))
        async with anyio.create_task_group() as tg:
            await client.start(tg)
            with anyio.fail_after(WAIT_S), pytest.raises(ToolCallError) as raised:
                await client.call_tool("list")
            assert str(raised.value) == (
                "call to tool 'list' on server 'odd' failed: its answer is not valid JSON-RPC (not shown)"
            )
            await client.aclose()
    finally:
        process.kill()
        await process.aclose()


def _answers(port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


REFUSING_SERVER = """
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg.get("method") == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "refusing", "version": "1"}}
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
    else:
        error = {"code": -32603, "message": "no tools for you"}
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": error}), flush=True)
"""


async def test_a_server_that_answers_its_listing_with_an_error_is_down_with_that_error_not_an_exit_code(
    tmp_path: Path,
) -> None:
    client = scripted(tmp_path, "refusing", REFUSING_SERVER)
    async with anyio.create_task_group() as tg:
        with pytest.raises(ConnectError) as raised:
            await client.start(tg)
    assert str(raised.value) == (
        "could not connect to server 'refusing': "
        "the server answered its start-up requests with an error: no tools for you (code -32603)"
    )
    assert client.status == "disconnected"


BAD_LISTING_SERVER = raw_server(
    "badlist",
    """
    def answer(method, params):
        return {"tools": "x"}
    """,
    after="time.sleep(30)  # ignores its closed input: stopping it takes a signal, which is not why it failed",
)


async def test_a_listing_that_is_not_valid_mcp_fails_the_start_saying_so_not_how_the_process_ended(
    tmp_path: Path,
) -> None:
    client = scripted(tmp_path, "badlist", BAD_LISTING_SERVER)
    async with anyio.create_task_group() as tg:
        with pytest.raises(ConnectError) as raised:
            await client.start(tg)
    assert str(raised.value) == (
        "could not connect to server 'badlist': its answer to a start-up request (ListToolsResult) is not valid MCP "
        "(tools: Input should be a valid list)"
    )


ENDLESS_SERVER = raw_server(
    "endless",
    """
    def answer(method, params):
        page = int(params.get("cursor") or 0)
        count = 6000 if sys.argv[1] == "many" else 1
        tools = [{"name": f"t{page}_{i}", "inputSchema": {"type": "object"}} for i in range(count)]
        return {"tools": tools, "nextCursor": str(page + 1)}
    """,
)


MANY_RESOURCES_SERVER = raw_server(
    "files",
    """
    def answer(method, params):
        if method == "tools/list":
            return {"tools": [{"name": "read", "inputSchema": {"type": "object"}}]}
        if method == "resources/list":
            page = int(params.get("cursor") or 0)
            items = [{"uri": f"file:///f{page}_{i}", "name": f"f{page}_{i}"} for i in range(6000)]
            return {"resources": items, "nextCursor": str(page + 1)}
        return {"resourceTemplates": []}
    """,
    capabilities={"tools": {}, "resources": {}},
)


async def test_a_server_with_more_resources_than_the_bound_keeps_the_first_and_its_tools(tmp_path: Path) -> None:
    client = scripted(tmp_path, "files", MANY_RESOURCES_SERVER)
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        assert [t.name for t in client.tools] == ["read"]
        assert len(client.resources) == 10_000
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("pages", "listing the server's tools took more than 1,000 pages (it keeps naming a next one)"),
        ("many", "the server listed more than 10,000 tools; none were taken"),
    ],
)
async def test_a_listing_that_never_ends_fails_the_start_instead_of_filling_memory(
    tmp_path: Path, kind: str, said: str
) -> None:
    client = scripted(tmp_path, "endless", ENDLESS_SERVER, kind)
    async with anyio.create_task_group() as tg:
        with pytest.raises(ConnectError) as raised:
            await client.start(tg)
    assert str(raised.value) == f"could not connect to server 'endless': {said}"


OUTPUT_SCHEMA_SERVER = raw_server(
    "typed",
    """
    def answer(method, params):
        if method == "tools/list":
            schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
            plain = {"type": "object"}
            tools = [{"name": t, "inputSchema": plain, "outputSchema": schema} for t in ("wrong", "missing")]
            return {"tools": tools}
        if method == "tools/call":
            result = {"content": [{"type": "text", "text": "3"}]}
            if params["name"] == "wrong":
                result["structuredContent"] = {"n": "s3cret-three"}
            return result
        return {}
    """,
)


async def test_a_result_that_does_not_match_its_output_schema_is_a_tool_call_error_without_its_values(
    tmp_path: Path,
) -> None:
    client = scripted(tmp_path, "typed", OUTPUT_SCHEMA_SERVER)
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        with pytest.raises(ToolCallError) as wrong:
            await client.call_tool("wrong", {})
        with pytest.raises(ToolCallError) as missing:
            await client.call_tool("missing", {})
        assert client.status == "connected"
        tg.cancel_scope.cancel()
    assert str(wrong.value) == (
        "call to tool 'wrong' on server 'typed' failed: its structured result does not match the tool's output "
        "schema at $.n (its type rule)"
    )
    assert str(missing.value) == (
        "call to tool 'missing' on server 'typed' failed: its result has no structured content, which the tool's "
        "output schema asks for"
    )


async def test_a_call_past_its_timeout_is_a_timeout_error_naming_the_setting_and_the_connection_stays(
    tmp_path: Path,
) -> None:
    cfg = light("slow", "--tools", "echo,stuck", "--hang-on-call", "stuck", timeout=300)
    client = McpClient("slow", cfg, options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        with anyio.fail_after(WAIT_S), pytest.raises(RequestTimeoutError) as raised:
            await client.call_tool("stuck")
        assert str(raised.value) == (
            "call to tool 'stuck' on server 'slow' timed out after 0.3 s; "
            "raise mcpServers.slow.timeout if it needs longer"
        )
        error = raised.value
        assert (error.kind, error.target, error.server, error.timeout_s) == ("tool", "stuck", "slow", 0.3)
        assert isinstance(error, ToolCallError)  # a tool call's timeout is also a failed tool call
        assert error.tool == "stuck"
        with anyio.fail_after(WAIT_S), pytest.raises(RequestTimeoutError) as own:
            await client.call_tool("stuck", timeout_s=0.2)  # a call's own timeout is the one it names
        assert own.value.timeout_s == 0.2
        assert str(own.value) == (  # (before: "raise mcpServers.slow.timeout", which did not fire)
            "call to tool 'stuck' on server 'slow' timed out after 0.2 s; raise the call's timeout_s if it needs longer"
        )
        assert text(await client.call_tool("echo", {"text": "still"})) == "slow:echo:still"
        await client.aclose()


async def test_a_failed_resource_read_is_a_request_error_of_its_kind_not_a_tool_call_error(tmp_path: Path) -> None:
    cfg = light("docs", "--resources", "note://a/1,note://a/2", "--hang-on-read", "note://a/2", timeout=300)
    client = McpClient("docs", cfg, options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        with anyio.fail_after(WAIT_S), pytest.raises(RequestTimeoutError) as raised:
            await client.read_resource("note://a/2")
        assert (raised.value.kind, raised.value.target, raised.value.server) == ("resource", "note://a/2", "docs")
        assert not isinstance(raised.value, ToolCallError)
        assert str(raised.value).startswith("reading resource 'note://a/2' on server 'docs' timed out after 0.3 s")
        await client.aclose()
        plain = McpClient(
            "plain", light("plain"), options=ConnectionOptions(log_dir=tmp_path)
        )  # offers no resources at all
        await plain.start(tg)
        with anyio.fail_after(WAIT_S), pytest.raises(RequestError) as failed:
            await plain.subscribe_resource("note://a/1")
        assert (failed.value.kind, failed.value.target, failed.value.server) == ("subscription", "note://a/1", "plain")
        assert "does not offer resource subscriptions" in str(failed.value)
        await plain.aclose()


async def test_a_cancelled_connect_leaves_no_process(tmp_path: Path) -> None:
    marker = tmp_path / "m"
    client = McpClient(
        "slow",
        light("slow", "--hang-on-initialize", "--marker", str(marker)),
        options=ConnectionOptions(log_dir=tmp_path),
    )
    outcome: list[str] = []

    async def connect(tg: anyio.abc.TaskGroup) -> None:
        with pytest.raises(ConnectError, match="abandoned") as info:
            await client.start(tg)
        outcome.append(str(info.value))

    async with anyio.create_task_group() as tg:
        tg.start_soon(connect, tg)
        await wait_until(lambda: bool(marker_pids(marker)))
        await client.aclose()
    assert outcome
    [pid] = marker_pids(marker)
    assert client.status == "disconnected"
    await wait_until(lambda: not pid_alive(pid))


async def test_cancelling_the_owner_task_group_leaves_no_process(tmp_path: Path) -> None:
    client = McpClient("c", light("c"), options=ConnectionOptions(log_dir=tmp_path))
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            await client.start(tg)
            pid = client.pid
            scope.cancel()
    assert pid is not None
    await wait_until(lambda: not pid_alive(pid))


@pytest.mark.parametrize(
    ("signum", "said"),
    [(signal.SIGKILL, "was killed by SIGKILL (signal 9)"), (signal.SIGTERM, "was ended by SIGTERM (signal 15)")],
)
async def test_a_killed_server_is_reported_lost_naming_the_signal_not_an_exit_code(
    tmp_path: Path, signum: signal.Signals, said: str
) -> None:
    lost = anyio.Event()
    client = McpClient("k", light("k"), on_lost=lambda _: lost.set(), options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        assert client.pid is not None
        os.kill(client.pid, signum)
        with anyio.fail_after(WAIT_S):
            await lost.wait()
        assert client.last_error is not None
        assert f"process {said}" in client.last_error
        assert "exited with code" not in client.last_error
        tg.cancel_scope.cancel()


async def test_a_server_behind_a_shell_that_is_killed_is_said_to_have_the_code_a_shell_gives_a_killed_program(
    tmp_path: Path,
) -> None:
    """A shell that runs the server without ``exec`` exits 128 + N when the server dies by signal N: before, that was
    only "exited with code 137"; now the code is read for the user, without claiming it was so."""
    marker = tmp_path / "pids"
    command = f"{shlex.quote(sys.executable)} -m {LIGHT} --name w --marker {shlex.quote(str(marker))}; exit $?"
    lost = anyio.Event()
    cfg = McpServerConfig.model_validate({"command": "sh", "args": ["-c", command]})
    client = McpClient("w", cfg, on_lost=lambda _: lost.set(), options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        [server_pid] = marker_pids(marker)
        assert server_pid != client.pid  # the shell waits for it
        os.kill(server_pid, signal.SIGKILL)
        with anyio.fail_after(WAIT_S):
            await lost.wait()
        assert client.last_error is not None
        assert "process exited with code 137 (as a shell reports a program killed by SIGKILL, signal 9)" in (
            client.last_error
        )
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (128, "exited with code 128"),
        (129, "exited with code 129 (as a shell reports a program ended by SIGHUP, signal 1)"),
        (143, "exited with code 143 (as a shell reports a program ended by SIGTERM, signal 15)"),
        (128 + signal.NSIG - 1, f"exited with code {128 + signal.NSIG - 1} (as a shell reports a program ended by "),
        (128 + signal.NSIG, f"exited with code {128 + signal.NSIG}"),
        (255, "exited with code 255"),
    ],
)
def test_only_a_code_of_128_plus_a_signal_is_read_as_a_shell_reports_a_death_by_it(code: int, said: str) -> None:
    told = how_it_exited(code)
    assert told.startswith(said)
    assert ("(" in told) == ("(" in said)


async def test_a_stdio_server_gets_a_small_environment_plus_its_own_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPVISOR_TEST_SHELL_SECRET", "do-not-leak")
    client = McpClient("e", light("e", env={"GIVEN": "yes"}), options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        assert client.pid is not None
        environ = (await anyio.Path(f"/proc/{client.pid}/environ").read_bytes()).split(b"\0")
        await client.aclose()
    assert b"GIVEN=yes" in environ
    assert not any(item.startswith(b"MCPVISOR_TEST_SHELL_SECRET") for item in environ)
    assert any(item.startswith(b"PATH=") for item in environ)


async def _answer_401(stream: anyio.abc.SocketStream) -> None:
    async with stream:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            await stream.receive()
            await stream.send(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")


@pytest.mark.parametrize("field", ["url", "http_url"])
async def test_connection_errors_never_show_url_credentials_query_values_or_headers(
    tmp_path: Path, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcpvisor")
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    url = f"http://alice:PW_SECRET@127.0.0.1:{port}/mcp?api_key=QUERY_SECRET"
    cfg = McpServerConfig.model_validate({field: url, "headers": {"Authorization": "Bearer HEADER_SECRET"}})
    client = McpClient("remote", cfg, options=ConnectionOptions(log_dir=tmp_path))
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, _answer_401)
        with pytest.raises(ConnectError) as info:
            await client.start(tg)
        tg.cancel_scope.cancel()
    logged = " ".join(r.getMessage() for r in caplog.records if r.name.startswith("mcpvisor"))
    shown = f"{info.value} {client.last_error} {logged}"
    for secret in ("PW_SECRET", "QUERY_SECRET", "HEADER_SECRET"):
        assert secret not in shown
    assert "127.0.0.1" in str(info.value)
    assert client.needs_auth
    assert "mcpServers.remote.headers" in str(info.value)


async def test_a_server_that_ignores_stdin_close_and_sigterm_and_forks_is_killed_with_its_child(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    client = McpClient(
        "stubborn",
        light("stubborn", "--stubborn", "--marker", str(marker)),
        options=ConnectionOptions(log_dir=tmp_path),
    )
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        await wait_until(lambda: len(marker_pids(marker)) == 2)
        with anyio.fail_after(WAIT_S):
            await client.aclose()
    server_pid, child_pid = marker_pids(marker)
    await wait_until(lambda: not pid_alive(server_pid) and not pid_alive(child_pid))


async def test_calls_racing_a_killed_server_fail_with_mcpvisor_errors_only(tmp_path: Path) -> None:
    """kill -9 while callers keep calling: every failure says the server is not connected or its connection
    closed (never the SDK's "Client must be used within an async context manager"), and calls work again
    once it is back."""
    from mcpvisor.core.config import Config
    from mcpvisor.core.errors import McpvisorError

    async with Config(mcp_servers={"k": light("k")}, options=ConnectionOptions(log_dir=tmp_path)) as config:
        await config.initialize()
        pid = config.manager.clients()["k"].pid
        assert pid is not None
        failures: list[BaseException] = []
        done = anyio.Event()

        async def caller() -> None:
            while not done.is_set():
                try:
                    await config.call_tool("mcp__k__echo", {"text": "x"})
                except McpvisorError as exc:
                    failures.append(exc)
                except Exception as exc:  # what this test is about: nothing else may escape
                    failures.append(exc)
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(caller)
            await anyio.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
            await wait_until(
                lambda: (
                    (c := config.manager.clients().get("k")) is not None and c.status == "connected" and c.pid != pid
                ),
                what="the killed server to be back",
            )
            done.set()
        assert failures, "no call saw the server down"
        odd = [f for f in failures if not isinstance(f, McpvisorError)]
        assert not odd, odd[:3]
        assert not any("context manager" in str(f) for f in failures)
        result = await config.call_tool("mcp__k__echo", {"text": "back"})
        assert text(result) == "k:echo:back"


@pytest.mark.parametrize(
    ("message", "closed"),
    [
        ("Connection closed", True),
        ("SSE stream failed: peer closed connection", True),
        ("SSE stream ended without a response", True),
        ("SSE stream ended and reconnection attempts were exhausted", True),
        ("Connection closed by the tool's own upstream, retry later", False),
        ("internal failure", False),
    ],
)
def test_the_sdks_own_words_for_a_lost_connection_are_told_from_a_servers_error_with_the_same_code(
    message: str, closed: bool
) -> None:
    assert closed_in_sdk(MCPError(code=-32000, message=message)) is closed
    assert not closed_in_sdk(MCPError(code=-32000, message=message, data={"from": "the server"}))


def test_a_remote_servers_start_up_error_says_which_url() -> None:
    cfg = McpServerConfig(http_url="http://127.0.0.1:9/mcp?key=s3cret")
    error = MCPError(code=-32603, message="Internal error")
    said = explain_start_failure("r", cfg, error, needs_auth=False, process=None, log_path=Path("/x.log"))
    assert said == (
        "the server answered its start-up requests with an error: Internal error (code -32603) "
        "(reaching http://127.0.0.1:9/mcp?key=***)"
    )


TWICE_SERVER = raw_server(
    "twice",
    """
    def answer(method, params):
        return {"tools": [{"name": "ok", "inputSchema": {"type": "object"}}] * 2} if method == "tools/list" else {}
    """,
)


async def test_a_tool_a_server_lists_twice_is_named_once_when_another_is_not_found(tmp_path: Path) -> None:
    script = tmp_path / "twice.py"
    script.write_text(TWICE_SERVER)
    server = McpServerConfig(command=sys.executable, args=[str(script)])
    async with Config(mcp_servers={"twice": server}, options=ConnectionOptions(log_dir=tmp_path)) as config:
        await config.initialize()
        with pytest.raises(ToolNotFoundError) as missing:
            await config.call_tool("mcp__twice__nope", {})
    assert str(missing.value).endswith("does not provide it (renamed or filtered out?); its tools: mcp__twice__ok")


@pytest.mark.parametrize("edit", ["removed", "changed"])
async def test_a_call_cut_short_by_an_edit_says_whether_a_retry_can_reach_the_server(tmp_path: Path, edit: str) -> None:
    # What an agent's model reads: the tool of a removed server is gone, so "retry the call" would send it in circles.
    after = {"s": light("s", "--control", "--tools", "other")} if edit == "changed" else {}
    outcome: list[BaseException] = []
    options = ConnectionOptions(log_dir=tmp_path)
    async with Config(mcp_servers={"s": light("s", "--control")}, options=options) as config:
        await config.initialize()
        sleeping = anyio.Event()

        async def heard(progress: float, total: float | None, message: str | None) -> None:
            sleeping.set()  # the server reports progress once the call reached it

        async def call() -> None:
            try:
                await config.call_tool("mcp__s__sleep", {"seconds": 60}, progress=heard, timeout_s=WAIT_S)
            except ServerUnavailableError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(WAIT_S):
                await sleeping.wait()
            await config.reinitialize_mcp_servers(after)
    why = (
        "(it was removed from the configuration)"
        if edit == "removed"
        else "(its configuration changed or it was removed); retry the call"
    )
    [said] = outcome
    assert str(said) == f"call to tool 'sleep' failed: server 's' was stopped while the call was in flight {why}"
