"""Bounded reading of what servers send (a message over the limit drops that connection, nothing else):
real servers over stdio, streamable HTTP and SSE; the line splitter and the HTTP limiter in isolation."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest

from mcpvisor.core.client import McpClient
from mcpvisor.core.config import Config
from mcpvisor.core.errors import MessageTooLargeError
from mcpvisor.core.http_limits import LimitedTransport, ResponseTooLarge, SSEEventTooLarge
from mcpvisor.core.lines import LineSplitter
from mcpvisor.core.server_config import DEFAULT_MAX_MESSAGE_BYTES, ConnectionOptions, McpServerConfig
from tests.helpers import http_server, light, pid_alive, wait_until

MIB = 1024 * 1024


def text_of(result: object) -> str:
    return str(getattr(result, "content")[0].text)  # noqa: B009


# -- the line splitter -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b"a\nb\n"], [b"a", b"b"]),
        ([b"ab", b"c\n", b"d"], [b"abc"]),
        ([b"a\n\nb\n"], [b"a", b"", b"b"]),
        ([b"x" * 10, b"\n"], [b"x" * 10]),
        ([b"\n"], [b""]),
    ],
)
def test_the_line_splitter_returns_each_complete_line_once(chunks: list[bytes], lines: list[bytes]) -> None:
    splitter = LineSplitter(limit=64)
    got: list[bytes] = []
    for chunk in chunks:
        out = splitter.feed(chunk)
        assert out is not None
        got += out
    assert got == lines


def test_the_line_splitter_refuses_a_line_over_the_limit_whether_or_not_it_ended() -> None:
    assert LineSplitter(limit=8).feed(b"123456789") is None  # unfinished
    assert LineSplitter(limit=8).feed(b"ok\n123456789\n") is None  # finished within one chunk
    splitter = LineSplitter(limit=8)
    assert splitter.feed(b"12345678") == []
    assert splitter.feed(b"\n") == [b"12345678"]  # exactly the limit is fine


def test_the_line_splitter_scans_each_byte_once() -> None:
    """20 MiB in 64 KiB chunks without a newline: linear, so it finishes at memcpy speed (a rebuild of the
    whole buffer per chunk took minutes). Counted in scans, not seconds: the scan start only moves forward."""
    splitter = LineSplitter(limit=64 * MIB)
    chunk = b"x" * 65536
    for _ in range(320):
        assert splitter.feed(chunk) == []
        assert splitter._scanned == len(splitter._buffer)  # nothing left to scan again next time
    assert splitter.feed(b"\n") == [b"x" * (320 * 65536)]


# -- stdio -------------------------------------------------------------------------------------


async def test_a_20_mib_result_passes_over_stdio(tmp_path: Path) -> None:
    client = McpClient("big", light("big", "--big"), options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        result = await client.call_tool("blob", {"mib": 20})
        assert len(text_of(result)) == 20 * MIB
        assert client.status == "connected"
        await client.aclose()


async def test_a_server_writing_200_mib_without_a_newline_is_dropped_while_another_keeps_answering(
    tmp_path: Path,
) -> None:
    servers = {"spew": light("spew", "--big"), "good": light("good", "--tools", "echo")}
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path)) as config:
        await config.initialize()
        first_pid = config.manager.clients()["spew"].pid
        assert first_pid is not None
        answers = 0
        failure: BaseException | None = None

        async def keep_calling() -> None:
            nonlocal answers
            while True:
                result = await config.call_tool("mcp__good__echo", {"text": "hi"})
                assert text_of(result) == "good:echo:hi"
                answers += 1
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_calling)
            try:
                await config.call_tool("mcp__spew__spew", {"mib": 200})
            except MessageTooLargeError as exc:
                failure = exc
            tg.cancel_scope.cancel()
        assert isinstance(failure, MessageTooLargeError)
        assert "call to tool 'spew' failed: server 'spew' sent a message larger than 64 MiB" in str(failure)
        assert "mcpServers.spew.maxMessageBytes" in str(failure)
        assert answers > 0
        # Treated as a broken connection: the old process is stopped and a new one started.
        await wait_until(lambda: not pid_alive(first_pid), what="the spewing server's process to be stopped")
        await wait_until(
            lambda: (
                config.manager.clients()["spew"].status == "connected"
                and config.manager.clients()["spew"].pid != first_pid
            ),
            what="the spewing server to be restarted",
        )


async def test_max_message_bytes_of_a_server_lowers_its_limit(tmp_path: Path) -> None:
    client = McpClient("b", light("b", "--big", maxMessageBytes=MIB), options=ConnectionOptions(log_dir=tmp_path))
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        assert (await client.call_tool("blob", {"mib": 0.5})).content
        with pytest.raises(MessageTooLargeError, match=r"larger than 1 MiB.*mcpServers\.b\.maxMessageBytes"):
            await client.call_tool("blob", {"mib": 2})
        await client.aclose()


async def test_the_default_limit_comes_from_the_session_when_a_server_sets_none(tmp_path: Path) -> None:
    client = McpClient("d", light("d", "--big"), options=ConnectionOptions(log_dir=tmp_path, max_message_bytes=MIB))
    own = McpClient(
        "o",
        light("o", "--big", maxMessageBytes=4 * MIB),
        options=ConnectionOptions(log_dir=tmp_path, max_message_bytes=MIB),
    )
    assert (client.max_message_bytes, own.max_message_bytes) == (MIB, 4 * MIB)
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        with pytest.raises(MessageTooLargeError):
            await client.call_tool("blob", {"mib": 2})
        await client.aclose()


def test_a_repositorys_server_may_only_lower_the_users_limit() -> None:
    options = ConnectionOptions(max_message_bytes=MIB)
    huge = {"maxMessageBytes": 100 * 1024 * MIB}
    for scope, expected in (
        ("project", MIB),
        ("workspace", MIB),
        (None, 100 * 1024 * MIB),
        ("system", 100 * 1024 * MIB),
    ):
        assert McpClient("p", light("p", scope=scope, **huge), options=options).max_message_bytes == expected, scope
    lower = McpClient("p", light("p", scope="project", maxMessageBytes=MIB // 2), options=options)
    assert lower.max_message_bytes == MIB // 2
    default = McpClient("p", light("p", scope="project", **huge))  # no user limit: the default is the ceiling
    assert default.max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES


def test_max_message_bytes_is_part_of_the_connection_and_has_a_floor() -> None:
    plain = light("a")
    limited = light("a", maxMessageBytes=2 * MIB)
    assert McpClient("a", plain).connection_id != McpClient("a", limited).connection_id
    with pytest.raises(ValueError, match="maxMessageBytes"):
        light("a", maxMessageBytes=10)


# -- HTTP --------------------------------------------------------------------------------------


async def test_a_2_mib_result_passes_over_streamable_http_and_a_smaller_limit_drops_it(tmp_path: Path) -> None:
    """The SDK alone reads at most 1 MiB per event; the connection's limit rules instead."""
    async with http_server("h", "--big") as url:
        client = McpClient("h", McpServerConfig(http_url=url), options=ConnectionOptions(log_dir=tmp_path))
        small = McpClient(
            "s", McpServerConfig(http_url=url, max_message_bytes=MIB), options=ConnectionOptions(log_dir=tmp_path)
        )
        async with anyio.create_task_group() as tg:
            await client.start(tg)
            await small.start(tg)
            assert len(text_of(await client.call_tool("blob", {"mib": 2}))) == 2 * MIB
            with pytest.raises(MessageTooLargeError, match=r"call to tool 'blob' failed: server 's'.*1 MiB"):
                await small.call_tool("blob", {"mib": 2})
            await client.aclose()
            await small.aclose()


async def test_the_legacy_sse_transport_says_what_it_cannot_read(tmp_path: Path) -> None:
    async with http_server("e", "--big", transport="sse") as url:
        client = McpClient("e", McpServerConfig(url=url), options=ConnectionOptions(log_dir=tmp_path))
        async with anyio.create_task_group() as tg:
            await client.start(tg)
            with pytest.raises(MessageTooLargeError, match="legacy SSE transport reads no more.*httpUrl"):
                with anyio.fail_after(30):
                    await client.call_tool("blob", {"mib": 2})
            await client.aclose()


async def _read(transport: LimitedTransport) -> bytes:
    async with httpx2.AsyncClient(transport=transport) as http:
        async with http.stream("GET", "http://server/") as response:
            return b"".join([chunk async for chunk in response.aiter_raw()])


def _serving(content_type: str, body: list[bytes]) -> httpx2.MockTransport:
    async def handler(request: httpx2.Request) -> httpx2.Response:
        async def stream() -> object:
            for chunk in body:
                yield chunk

        return httpx2.Response(200, headers={"content-type": content_type}, content=stream())  # type: ignore[arg-type]

    return httpx2.MockTransport(handler)


async def test_the_http_limiter_bounds_a_json_body_and_each_event_of_a_stream() -> None:
    told: list[str] = []
    body = [b"x" * 600, b"x" * 600]
    limited = LimitedTransport(_serving("application/json", body), limit=1000, on_too_large=lambda: told.append("json"))
    with pytest.raises(ResponseTooLarge):
        await _read(limited)
    events = [b"data: " + b"x" * 500 + b"\n\n"] * 10  # many events, each under the limit: fine
    ok = LimitedTransport(_serving("text/event-stream", events), limit=1000, on_too_large=lambda: told.append("ok"))
    assert len(await _read(ok)) == sum(map(len, events))
    crlf = [b"data: " + b"y" * 500 + b"\r\n\r\n"] * 10
    ok = LimitedTransport(_serving("text/event-stream", crlf), limit=1000, on_too_large=lambda: told.append("ok"))
    assert len(await _read(ok)) == sum(map(len, crlf))
    one = [b"data: " + b"x" * 600, b"x" * 600 + b"\n\n"]
    big = LimitedTransport(_serving("text/event-stream", one), limit=1000, on_too_large=lambda: told.append("sse"))
    with pytest.raises(SSEEventTooLarge):
        await _read(big)
    assert told == ["json", "sse"]


def test_message_too_large_names_the_request_the_server_and_the_setting() -> None:
    error = MessageTooLargeError(server="s", limit=64 * MIB)
    assert str(error) == (
        "reading a message failed: server 's' sent a message larger than 64 MiB, so its connection is dropped and "
        "restarted; raise mcpServers.s.maxMessageBytes (or mcp.maxMessageBytes for every server) if such "
        "messages are expected"
    )
    assert str(error.during("call to tool 't'")).startswith("call to tool 't' failed: server 's' sent")
