"""What one client may cost the HTTP gateway: sessions that expire and make room, connections that
must send their headers in time, a cap on connections, resumable SSE streams. Real uvicorn on
loopback, real sockets, real example servers."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp_types import JSONRPCNotification, JSONRPCResponse

from mcpvisor.gateway import bursts, lazy_streams
from mcpvisor.gateway import connections as gateway_connections
from mcpvisor.gateway.http import HttpLimits
from mcpvisor.gateway.replay import ReplayBuffer, SessionEvents
from mcpvisor.gateway.server import Gateway
from mcpvisor.gateway.sessions import RETRY_AFTER_S, SSE_RETRY_MS
from tests.gateway.test_gateway import running, server
from tests.helpers import WAIT_S, wait_until

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
VERSION = "2025-11-25"


def initialize(version: str = VERSION) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }


def call(tool: str, arguments: dict[str, Any], request_id: int = 2) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


@asynccontextmanager
async def gateway_at(tmp_path: Path, limits: HttpLimits) -> AsyncIterator[tuple[Gateway, str]]:
    user = {"mcpServers": {"a": server("a", "--control")}}
    async with running(tmp_path, user=user) as r, anyio.create_task_group() as tg:
        url: str = await tg.start(lambda task_status: r.gateway.serve_http(limits=limits, task_status=task_status))
        yield r.gateway, url
        tg.cancel_scope.cancel()


async def open_session(http: httpx2.AsyncClient, url: str, capabilities: dict[str, Any] | None = None) -> str:
    """Open a handshake-era session (declaring ``capabilities``, none by default); returns its id."""
    opening = initialize()
    opening["params"]["capabilities"] = capabilities or {}
    response = await http.post(url, json=opening, headers=ACCEPT)
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    headers = {**ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": VERSION}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post(url, json=initialized, headers=headers)).status_code == 202
    return session


async def ping(http: httpx2.AsyncClient, url: str, session: str) -> int:
    headers = {**ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": VERSION}
    response = await http.post(url, json={"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers=headers)
    return response.status_code


# -- sessions ------------------------------------------------------------------------------------


async def test_an_idle_session_expires_and_then_answers_404(tmp_path: Path) -> None:
    async with gateway_at(tmp_path, HttpLimits(session_idle_timeout_s=0.5)) as (gateway, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            kept, abandoned = await open_session(http, url), await open_session(http, url)
            assert gateway.sessions is not None
            assert len(gateway.sessions) == 2

            async def keep_alive() -> None:
                while True:
                    assert await ping(http, url, kept) == 200
                    await anyio.sleep(0.1)

            async with anyio.create_task_group() as tg:
                tg.start_soon(keep_alive)
                await wait_until(lambda: len(gateway.sessions or ()) == 1, what="the abandoned session to expire")
                tg.cancel_scope.cancel()
            assert await ping(http, url, abandoned) == 404
            assert await ping(http, url, kept) == 200


async def test_at_the_cap_the_least_recently_used_idle_session_makes_room(tmp_path: Path) -> None:
    async with gateway_at(tmp_path, HttpLimits(max_sessions=2)) as (gateway, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            oldest = await open_session(http, url)
            newer = await open_session(http, url)
            assert await ping(http, url, oldest) == 200  # now the least recently used is `newer`
            newest = await open_session(http, url)
            assert await ping(http, url, newer) == 404
            assert await ping(http, url, oldest) == 200
            assert await ping(http, url, newest) == 200
            assert gateway.sessions is not None
            assert (len(gateway.sessions), gateway.sessions.evicted) == (2, 1)


async def test_when_every_session_is_busy_a_new_client_gets_503_with_retry_after(tmp_path: Path) -> None:
    async with gateway_at(tmp_path, HttpLimits(max_sessions=1)) as (gateway, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http, anyio.create_task_group() as tg:
            busy = await open_session(http, url)
            headers = {**ACCEPT, "mcp-session-id": busy, "MCP-Protocol-Version": VERSION}
            done = anyio.Event()

            async def slow_call() -> None:
                response = await http.post(url, json=call("mcp__a__sleep", {"seconds": 3}), headers=headers)
                assert response.status_code == 200
                done.set()

            tg.start_soon(slow_call)
            sessions = gateway.sessions
            assert sessions is not None
            await wait_until(lambda: any(s.in_flight for s in sessions._sessions.values()), what="the call in flight")
            refused = await http.post(url, json=initialize(), headers=ACCEPT)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == str(RETRY_AFTER_S)
            assert "all of them busy" in refused.json()["error"]["message"]
            await done.wait()
            await open_session(http, url)  # idle again: it makes room


async def test_a_2025_11_25_session_gets_primed_resumable_streams_whatever_version_a_request_names(
    tmp_path: Path,
) -> None:
    async with gateway_at(tmp_path, HttpLimits()) as (_, url), httpx2.AsyncClient(timeout=WAIT_S) as http:
        session = await open_session(http, url)
        for named in (VERSION, "2025-03-26", None):
            headers = {**ACCEPT, "mcp-session-id": session, **({"MCP-Protocol-Version": named} if named else {})}
            response = await http.post(url, json=streaming_call(), headers=headers)
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = response.text.splitlines()
            assert lines[0].startswith("id: "), (named, response.text[:200])
            assert f"retry: {SSE_RETRY_MS}" in lines[:3], (named, response.text[:200])
        old = await http.post(url, json=initialize("2025-06-18"), headers=ACCEPT)
        headers = {**ACCEPT, "mcp-session-id": old.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"}
        response = await http.post(url, json=streaming_call(), headers=headers)
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "retry:" not in response.text  # an older client never gets an event it may not parse


def streaming_call() -> dict[str, Any]:
    """A call that reports progress before its result: it needs a stream."""
    request = call("mcp__a__sleep", {"seconds": 0.01})
    request["params"]["_meta"] = {"progressToken": "p1"}
    return request


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: {")]


async def test_a_request_that_streams_nothing_is_answered_with_plain_json(tmp_path: Path) -> None:
    async with gateway_at(tmp_path, HttpLimits()) as (_, url), httpx2.AsyncClient(timeout=WAIT_S) as http:
        session = await open_session(http, url)
        headers = {**ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": VERSION}
        plain = await http.post(url, json=call("mcp__a__echo", {"text": "x"}), headers=headers)
        assert plain.status_code == 200
        assert plain.headers["content-type"] == "application/json"
        assert plain.headers["mcp-session-id"] == session
        assert plain.json()["result"]["content"] == [{"type": "text", "text": "a:echo:x"}]

        streamed = await http.post(url, json=streaming_call(), headers=headers)
        assert streamed.headers["content-type"].startswith("text/event-stream")
        ids = [int(line.rsplit("/", 1)[1]) for line in streamed.text.splitlines() if line.startswith("id: ")]
        assert len(ids) >= 3  # the priming event, progress, the result
        assert ids == sorted(ids)  # what came before the stream was committed resumes in order too
        messages = sse_messages(streamed.text)
        assert [m.get("method") for m in messages[:-1]] == ["notifications/progress"] * (len(messages) - 1)
        assert messages[0]["params"]["progressToken"] == "p1"
        assert messages[-1]["id"] == 2
        assert messages[-1]["result"]["content"] == [{"type": "text", "text": "slept"}]


async def test_a_silent_request_gets_its_stream_after_a_while(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lazy_streams, "COMMIT_AFTER_S", 0.2)
    async with gateway_at(tmp_path, HttpLimits()) as (_, url), httpx2.AsyncClient(timeout=WAIT_S) as http:
        session = await open_session(http, url)
        headers = {**ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": VERSION}
        async with http.stream("POST", url, json=call("mcp__a__sleep", {"seconds": 1.0}), headers=headers) as slow:
            assert slow.headers["content-type"].startswith("text/event-stream")  # before the result exists
            text = (await slow.aread()).decode()
        assert text.splitlines()[0].startswith("id: ")  # the priming event
        assert sse_messages(text)[-1]["result"]["content"] == [{"type": "text", "text": "slept"}]


# -- connections ---------------------------------------------------------------------------------


def _connect(url: str) -> socket.socket:
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
    sock.setblocking(False)
    return sock


async def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the gateway closed ``sock`` (reads end of file or a reset), waiting for it to be readable."""
    await anyio.wait_readable(sock)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


async def _read_until_closed(sock: socket.socket) -> bytes:
    """What the gateway sends on ``sock`` until it closes it."""
    received = b""
    while True:
        await anyio.wait_readable(sock)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk


@pytest.fixture(params=["httptools", "h11"])
def http_protocol(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both of uvicorn's HTTP/1.1 protocols get the guards (h11 is the fallback without httptools)."""
    if request.param == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        monkeypatch.setattr(gateway_connections, "_http_protocol", lambda: H11Protocol)
    else:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        assert gateway_connections._http_protocol() is HttpToolsProtocol
    return str(request.param)


@pytest.mark.usefixtures("http_protocol")
async def test_connections_that_dribble_their_headers_are_cut(tmp_path: Path) -> None:
    async with gateway_at(tmp_path, HttpLimits(header_timeout_s=1.0)) as (_, url):
        socks = [_connect(url) for _ in range(50)]
        try:
            request = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000

            async def dribble(sock: socket.socket) -> None:
                for byte in request:
                    try:
                        sock.send(bytes([byte]))
                    except OSError:
                        return  # cut: what this test waits for
                    await anyio.sleep(0.05)

            closed: list[bool] = []

            async def watch(sock: socket.socket) -> None:
                closed.append(await _closed_by_peer(sock))

            with anyio.fail_after(WAIT_S):
                async with anyio.create_task_group() as tg:
                    for sock in socks:
                        tg.start_soon(dribble, sock)
                        tg.start_soon(watch, sock)
            assert closed == [True] * len(socks)
        finally:
            for sock in socks:
                sock.close()
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:  # a client that speaks normally is served
            assert (await http.post(url, json=initialize(), headers=ACCEPT)).status_code == 200


@pytest.mark.usefixtures("http_protocol")
async def test_a_request_slower_than_the_header_timeout_keeps_its_connection(tmp_path: Path) -> None:
    async with gateway_at(tmp_path, HttpLimits(header_timeout_s=0.5)) as (_, url):
        async with httpx2.AsyncClient(timeout=WAIT_S, limits=httpx2.Limits(max_connections=1)) as http:
            session = await open_session(http, url)
            headers = {**ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": VERSION}
            slow = await http.post(url, json=call("mcp__a__sleep", {"seconds": 1.5}), headers=headers)
            assert slow.status_code == 200
            assert "slept" in slow.text
            assert await ping(http, url, session) == 200


@pytest.mark.usefixtures("http_protocol")
async def test_a_connection_beyond_the_cap_is_closed_as_it_arrives(tmp_path: Path) -> None:
    async with gateway_at(tmp_path, HttpLimits(max_connections=5)) as (_, url):
        held = [_connect(url) for _ in range(5)]
        try:
            await anyio.sleep(0.2)  # let the gateway accept them (nothing to wait on from outside)
            extra = _connect(url)
            with anyio.fail_after(WAIT_S):
                assert await _closed_by_peer(extra)
            extra.close()
            for sock in held:
                sock.close()
            async with httpx2.AsyncClient(timeout=WAIT_S) as http:
                response = await http.post(url, json=initialize(), headers=ACCEPT)
                assert response.status_code == 200
        finally:
            for sock in held:
                sock.close()


async def test_connections_refused_in_a_burst_are_logged_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, each connection past the cap logged a WARNING line: a client connecting in a loop wrote one line to
    the gateway's stderr per attempt."""
    monkeypatch.setattr(bursts, "BURST_S", 0.5)
    async with gateway_at(tmp_path, HttpLimits(max_connections=2)) as (_, url):
        held = [_connect(url) for _ in range(2)]
        try:
            await anyio.sleep(0.2)  # let the gateway accept them (nothing to wait on from outside)
            for _ in range(20):
                extra = _connect(url)
                with anyio.fail_after(WAIT_S):
                    assert await _closed_by_peer(extra)
                extra.close()
            await wait_until(lambda: "more connections" in caplog.text, what="the burst's count")
        finally:
            for sock in held:
                sock.close()
    said = [r.getMessage() for r in caplog.records if "connection" in r.getMessage() and r.levelno >= logging.WARNING]
    assert said == ["refusing a connection: 2 are open already", "refused 19 more connections (2 are open)"]


_ACCEPT = {"Accept": "application/json, text/event-stream"}
_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}},
}


async def test_requests_refused_for_their_host_in_a_burst_are_logged_once_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the DNS-rebinding protection logged a WARNING line per request it refused: a web page rebinding its
    name to this machine could fill the gateway's stderr with as many as it sent."""
    monkeypatch.setattr(bursts, "BURST_S", 0.5)
    async with gateway_at(tmp_path, HttpLimits()) as (_, url), httpx2.AsyncClient(timeout=WAIT_S) as http:
        for _ in range(20):
            response = await http.post(url, json=_INITIALIZE, headers={**_ACCEPT, "Host": "rebound.example"})
            assert response.status_code == 421, response.text
        await wait_until(lambda: "more requests refused" in caplog.text, what="the burst's count")
    said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage() and r.levelno >= logging.WARNING]
    assert said == [
        "Invalid Host header: rebound.example (a request refused; the others of this burst are counted)",
        "19 more requests refused: Invalid Host header",
    ]


def _head(url: str, *, session: str | None = None, length: int = 1000) -> bytes:
    """A POST's request line and headers, announcing a body of ``length`` bytes."""
    host = url.split("//")[1].split("/")[0]
    extra = f"Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {VERSION}\r\n" if session else ""
    return (
        f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Type: application/json\r\n{extra}Content-Length: {length}\r\n\r\n"
    ).encode()


@pytest.mark.usefixtures("http_protocol")
async def test_headers_that_never_end_are_refused_and_cut(tmp_path: Path, http_protocol: str) -> None:
    """Before, uvicorn's httptools protocol kept every header line it was sent, before any token was checked: a
    client sending 300 MB of them grew the gateway by as much, and it kept most of it."""
    async with gateway_at(tmp_path, HttpLimits()) as (_, url):
        sock = _connect(url)
        try:
            sock.setblocking(True)
            sock.sendall(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            with anyio.fail_after(WAIT_S):
                sent = 0
                while sent < 64 << 20:  # 64 MiB: far past any bound; the gateway cuts it long before
                    try:
                        sock.sendall((b"X-A: " + b"a" * 1000 + b"\r\n") * 100)
                    except OSError:
                        break
                    sent += 100_500
                    await anyio.lowlevel.checkpoint()
            assert sent < 64 << 20, "the gateway read on"
            sock.setblocking(False)
            answer = b""
            with anyio.fail_after(WAIT_S), contextlib.suppress(ConnectionResetError):
                while chunk := await _received(sock):
                    answer += chunk
            if http_protocol == "httptools":  # h11 answers its own bound (16 KiB) with a 400
                assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
        finally:
            sock.close()
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            assert (await http.post(url, json=initialize(), headers=ACCEPT)).status_code == 200


async def test_headers_over_the_bound_read_in_one_piece_are_refused_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The bound holds for a head that arrives whole (it was counted over several reads only: 100,000 bytes of
    headers sent at once were answered 200). With httptools, a dependency (h11, uvicorn's fallback without it,
    bounds only a head that spans reads, at 16 KiB). It is said once, at INFO: uvicorn's own warning for the
    parser stopped ("Invalid HTTP request received.") was a WARNING line per refusal, for any client to cause."""
    caplog.set_level(logging.INFO)
    async with gateway_at(tmp_path, HttpLimits()) as (_, url):
        head = _head(url, length=len(json.dumps(initialize())))
        big = head.replace(b"\r\n\r\n", b"\r\nX-Big: " + b"b" * 100_000 + b"\r\n\r\n", 1)
        sock = _connect(url)
        try:
            sock.setblocking(True)
            sock.sendall(big + json.dumps(initialize()).encode())
            sock.setblocking(False)
            answer = b""
            with anyio.fail_after(WAIT_S), contextlib.suppress(ConnectionResetError):
                while chunk := await _received(sock):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
            assert answer.count(b"HTTP/1.1") == 1, answer[:400]  # one answer, nothing after it
            head_, _, body = answer.partition(b"\r\n\r\n")  # a JSON-RPC error, as every refusal (it was text)
            assert b"content-type: application/json" in head_.lower()
            assert json.loads(body)["error"] == {
                "code": -32600,
                "message": "Request Header Fields Too Large: the request's target and headers take more than 64 KiB; "
                "send fewer or shorter headers",
            }
        finally:
            sock.close()
    said = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.levelno >= logging.WARNING or "head" in r.getMessage()
    ]
    assert said == [("INFO", "closing a connection whose request headers exceed 65536 bytes")], said


async def _exchange(url: str, *parts: bytes) -> bytes:
    """What the gateway answers ``parts``, sent one after the other on one connection, until it closes it or
    goes quiet (each part waits for the answers to the one before)."""
    sock = _connect(url)
    answer = b""
    try:
        for part in parts:
            sock.setblocking(True)
            sock.sendall(part)
            sock.setblocking(False)
            with anyio.move_on_after(1), contextlib.suppress(ConnectionResetError):
                while chunk := await _received(sock):
                    answer += chunk
    finally:
        sock.close()
    return answer


def _statuses(answer: bytes) -> list[bytes]:
    return [line.split(b" ")[1] for line in answer.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


async def test_a_refused_head_leaves_the_answers_to_the_requests_before_it_whole(tmp_path: Path) -> None:
    """A pipelined request whose head is too large is answered 431 after the requests before it are answered —
    the 431 was written (and the connection closed) at once, inside an earlier answer; and the body of an earlier
    request read with the start of the next head is not counted as head."""
    body = json.dumps(initialize()).encode()
    async with gateway_at(tmp_path, HttpLimits()) as (_, url):
        small = _head(url, length=len(body)) + body
        huge = small.replace(b"\r\n\r\n", b"\r\nX-Big: " + b"b" * 100_000 + b"\r\n\r\n", 1)
        assert _statuses(await _exchange(url, small + huge)) == [b"200", b"431"]
        padded = json.dumps({**initialize(), "pad": "x" * 70_000}).encode()
        first = _head(url, length=len(padded)) + padded
        assert _statuses(await _exchange(url, first + small[:30], small[30:])) == [b"200", b"200"]


async def test_a_modern_era_client_that_leaves_before_its_body_came_is_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 2026-07-28 request whose client closed before its body was complete wrote an "Exception in ASGI
    application" traceback at ERROR (about 2 KB a time, for any client to cause); the handshake era's did not."""
    async with gateway_at(tmp_path, HttpLimits()) as (_, url):
        host = url.split("//")[1].split("/")[0]
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
            'Mcp-Method: tools/list\r\nContent-Length: 200\r\n\r\n{"jsonrpc":'
        ).encode()
        for _ in range(3):
            sock = _connect(url)
            sock.sendall(head)
            await anyio.sleep(0.05)
            sock.close()
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:  # served on, and what the drops logged is in
            assert (await http.post(url, json=initialize(), headers=ACCEPT)).status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]


async def _received(sock: socket.socket) -> bytes:
    await anyio.wait_readable(sock)
    return sock.recv(65536)


async def test_a_body_that_never_comes_is_cut_and_takes_no_session_seat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a POST whose body stalled held its connection for good and counted as a session opening: five of
    them against --max-sessions 5 evicted the live sessions and left every new client a 503."""
    monkeypatch.setattr(gateway_connections, "BODY_TIMEOUT_S", 1.0)
    async with gateway_at(tmp_path, HttpLimits(max_sessions=1)) as (gateway, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            live = await open_session(http, url)
            stalled = _connect(url)
            try:
                stalled.send(_head(url) + b'{"jsonrpc":')
                await anyio.sleep(0.3)
                assert await ping(http, url, live) == 200  # not evicted for it
                with anyio.fail_after(WAIT_S):
                    assert (await _read_until_closed(stalled)).startswith(b"HTTP/1.1 408 ")
            finally:
                stalled.close()
            assert await ping(http, url, live) == 200
            assert gateway.sessions is not None
            assert gateway.sessions.evicted == 0


@pytest.mark.usefixtures("http_protocol")
async def test_a_body_sent_a_byte_at_a_time_is_answered_408_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a body still coming when its time was up had its connection closed without a word: the client
    (a slow link, a stuck upload) could only guess whether the gateway had crashed. It is answered 408 with a
    JSON-RPC error naming the bound, then closed."""
    monkeypatch.setattr(gateway_connections, "BODY_TIMEOUT_S", 1.0)
    async with gateway_at(tmp_path, HttpLimits()) as (_, url):
        dribbling = _connect(url)
        try:
            dribbling.send(_head(url) + b"{")
            received = b""
            with anyio.fail_after(WAIT_S):
                while True:
                    with anyio.move_on_after(0.2):
                        await anyio.wait_readable(dribbling)
                        chunk = dribbling.recv(65536)
                        if not chunk:
                            break
                        received += chunk
                        continue
                    dribbling.send(b" ")  # a byte now and then: the bound is on the whole body, not on each read
        finally:
            dribbling.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["message"] == (
        "Request Timeout: the request's body did not arrive whole within 1 s of its headers; send all of it right "
        "after them"
    )


async def test_a_request_pipelined_behind_an_open_stream_gets_no_408_written_into_that_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before (httptools): a POST sent on the connection of a session's open GET stream waits its turn, its body
    unread, and when its body time ran out its 408 was written into the middle of the stream's chunked answer."""
    monkeypatch.setattr(gateway_connections, "BODY_TIMEOUT_S", 0.5)
    async with gateway_at(tmp_path, HttpLimits()) as (_, url), httpx2.AsyncClient(timeout=WAIT_S) as http:
        session = await open_session(http, url)
        host = url.split("//")[1].split("/")[0]
        stream = _connect(url)
        try:
            get = (
                f"GET /mcp HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\n"
                f"MCP-Protocol-Version: {VERSION}\r\n\r\n"
            ).encode()
            stream.send(get + _head(url, session=session) + b"{")
            received = b""
            with anyio.move_on_after(2.0):  # (four body timeouts)
                while True:
                    await anyio.wait_readable(stream)
                    chunk = stream.recv(65536)
                    if not chunk:
                        break
                    received += chunk
        finally:
            stream.close()
    assert received.startswith(b"HTTP/1.1 200 "), received[:200]
    assert b"408 Request Timeout" not in received, received[-400:]


async def test_a_pipelined_body_that_never_ends_is_answered_408_once_its_turn_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body of a request that waited its turn is timed from that turn: it is not left without a bound."""
    monkeypatch.setattr(gateway_connections, "BODY_TIMEOUT_S", 0.5)
    async with (
        gateway_at(tmp_path, HttpLimits(header_timeout_s=1.0)) as (_, url),
        httpx2.AsyncClient(timeout=WAIT_S) as http,
    ):
        session = await open_session(http, url)
        body = json.dumps(call("mcp__a__sleep", {"seconds": 1.0})).encode()
        sock = _connect(url)
        try:
            sock.send(_head(url, session=session, length=len(body)) + body + _head(url, session=session) + b"{")
            received = b""
            with anyio.fail_after(WAIT_S):
                while True:
                    await anyio.wait_readable(sock)
                    if not (chunk := sock.recv(65536)):
                        break
                    received += chunk
        finally:
            sock.close()
    first, _, second = received.partition(b"HTTP/1.1 408 ")
    assert first.startswith(b"HTTP/1.1 200 "), received[:200]
    assert b"did not arrive whole within 0.5 s" in second, received[-400:]


async def test_json_nested_too_deep_without_a_session_id_is_answered_as_a_bad_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a 500 in plain text, and uvicorn's "Exception in ASGI application" with a traceback in the log (the
    body was read with Python's json, whose RecursionError nothing caught) — for any page that cared to send it."""
    deep = b"[" * 60_000
    async with gateway_at(tmp_path, HttpLimits()) as (_, url), httpx2.AsyncClient(timeout=WAIT_S) as http:
        answer = await http.post(url, content=deep, headers={**ACCEPT, "Content-Type": "application/json"})
        assert answer.status_code == 400, answer.text
        assert "error" in answer.json()
        from_a_page = await http.post(url, content=deep, headers={**ACCEPT, "Origin": "http://evil.example"})
        assert from_a_page.status_code in (400, 403), from_a_page.text
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


async def test_a_request_that_can_open_no_session_evicts_none(tmp_path: Path) -> None:
    """Before, at the cap any POST without a session id (a client that forgot it) closed the least recently used
    session to make room for a session it could never open."""
    async with gateway_at(tmp_path, HttpLimits(max_sessions=2)) as (gateway, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            sessions = [await open_session(http, url) for _ in range(2)]
            forgot = await http.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=ACCEPT)
            assert forgot.status_code == 400
            assert forgot.json()["error"]["message"].startswith("Bad Request: Missing session ID: ")
            assert "mcp-session-id" not in forgot.headers  # (before: the id of a session that never was)
            assert [await ping(http, url, s) for s in sessions] == [200, 200]
            assert gateway.sessions is not None
            assert gateway.sessions.evicted == 0
            await open_session(http, url)  # an initialize still makes room
            assert gateway.sessions.evicted == 1


@pytest.mark.parametrize("version", ["2025-03-26", "2025-11-25"])
async def test_a_failed_initialize_keeps_no_session_and_takes_no_seat(tmp_path: Path, version: str) -> None:
    """Before, an initialize refused for its params still opened a session, kept until it expired: a client
    retrying one against --max-sessions 1 evicted the live session each time, and a few busy ones locked out
    every good client. Its answer carried the id of that session too, which then answered 404: it carries none
    (nor does one too large to be checked before it is served)."""
    async with gateway_at(tmp_path, HttpLimits(max_sessions=1)) as (gateway, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            live = await open_session(http, url)
            for wrong in ({"protocolVersion": None}, {"clientInfo": 5}):
                opening = initialize(version)
                opening["params"] = {k: v for k, v in {**opening["params"], **wrong}.items() if v is not None}
                headers = {**ACCEPT, "MCP-Protocol-Version": version}
                for _ in range(3):
                    failed = await http.post(url, json=opening, headers=headers)
                    assert failed.status_code == 200
                    assert sse_messages(failed.text)[-1]["error"]["code"] == -32602
                    assert "mcp-session-id" not in failed.headers
                    assert await ping(http, url, live) == 200
                async with anyio.create_task_group() as tg:  # at once too: none counts while another is answered
                    for _ in range(10):
                        tg.start_soon(partial(http.post, url, json=opening, headers=headers))
                assert await ping(http, url, live) == 200
                large = {**opening, "params": {**opening["params"], "padding": "x" * 100_000}}
                failed = await http.post(url, json=large, headers=headers)
                assert sse_messages(failed.text)[-1]["error"]["code"] == -32602
                assert "mcp-session-id" not in failed.headers
                assert await ping(http, url, live) == 200
            assert gateway.sessions is not None
            assert (len(gateway.sessions), gateway.sessions.evicted) == (1, 0)


async def test_a_refused_request_without_a_session_id_is_named_no_session(tmp_path: Path) -> None:
    """Before, an initialize refused for its Accept header (406), and a GET or DELETE without a session id (400),
    were answered with an Mcp-Session-Id header naming a session the gateway kept none of: the client's next
    request with that id got 404."""
    async with gateway_at(tmp_path, HttpLimits()) as (gateway, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            refused = {
                "initialize accepting JSON only": await http.post(
                    url, json=initialize(), headers={**ACCEPT, "Accept": "application/json"}
                ),
                "GET": await http.get(url, headers={"Accept": "text/event-stream"}),
                "DELETE": await http.delete(url, headers=ACCEPT),
            }
            assert {what: r.status_code for what, r in refused.items()} == {
                "initialize accepting JSON only": 406,
                "GET": 400,
                "DELETE": 400,
            }
            assert {what: r.headers.get("mcp-session-id") for what, r in refused.items()} == dict.fromkeys(refused)
            assert "Not Acceptable" in refused["initialize accepting JSON only"].json()["error"]["message"]
            assert await ping(http, url, await open_session(http, url)) == 200
            assert gateway.sessions is not None
            assert len(gateway.sessions) == 1


@pytest.mark.parametrize("version", ["2025-03-26", "2025-11-25"])
async def test_an_initialize_sent_in_a_batch_is_told_batches_are_not_supported(tmp_path: Path, version: str) -> None:
    """Before, an initialize sent as a batch of one was told "Missing session ID: a request other than initialize
    needs its session's Mcp-Session-Id header": about a header it needs no more than any initialize does."""
    async with gateway_at(tmp_path, HttpLimits()) as (gateway, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            headers = {**ACCEPT, "MCP-Protocol-Version": version}
            refused = await http.post(url, json=[initialize(version)], headers=headers)
    assert refused.status_code == 400
    assert "mcp-session-id" not in refused.headers
    assert refused.json()["error"] == {
        "code": -32600,
        "message": "Invalid Request: batches are not supported: send one JSON-RPC message per POST",
    }
    assert gateway.sessions is not None
    assert len(gateway.sessions) == 0


async def test_an_initialize_that_is_no_json_rpc_request_evicts_no_session(tmp_path: Path) -> None:
    """Before, at the cap an initialize sent as a notification, with an id of another type or another ``jsonrpc``
    closed the least recently used live session to make room for a session it could never open (the SDK refuses
    it, 400)."""
    async with gateway_at(tmp_path, HttpLimits(max_sessions=1)) as (gateway, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            live = await open_session(http, url)
            notification = {k: v for k, v in initialize().items() if k != "id"}
            for wrong in (
                notification,
                {**initialize(), "id": None},
                {**initialize(), "id": [1]},
                {**initialize(), "jsonrpc": "1"},
            ):
                refused = await http.post(url, json=wrong, headers=ACCEPT)
                assert refused.status_code == 400, wrong
                assert await ping(http, url, live) == 200, wrong
            assert gateway.sessions is not None
            assert (len(gateway.sessions), gateway.sessions.evicted) == (1, 0)


async def test_a_session_or_version_header_given_twice_is_refused(tmp_path: Path) -> None:
    """Before, the books read the last one and the SDK the first: a request served under a valid session escaped
    its in-flight count (its session could be closed to make room while its call ran)."""
    async with gateway_at(tmp_path, HttpLimits()) as (_, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            session = await open_session(http, url)
            ping_ = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
            for name, values in (("mcp-session-id", [session, "bogus"]), ("mcp-protocol-version", [VERSION, VERSION])):
                headers = [*ACCEPT.items(), ("mcp-session-id", session), ("mcp-protocol-version", VERSION)]
                headers = [(k, v) for k, v in headers if k.lower() != name] + [(name, v) for v in values]
                twice = await http.post(url, json=ping_, headers=headers)
                assert twice.status_code == 400
                assert twice.json()["error"]["message"] == f"the {name} header appears more than once"
            assert await ping(http, url, session) == 200


async def test_every_refusal_is_a_json_rpc_error_with_its_status(tmp_path: Path) -> None:
    """Before, the SDK's HTTP layers answered some in plain text (400, 413, 421, 403) or with no body (405)."""
    async with gateway_at(tmp_path, HttpLimits()) as (_, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            session = await open_session(http, url)
            headers = {**ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": VERSION}
            ping_ = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
            refused = {
                "content type": await http.post(url, content=ping_, headers={**headers, "Content-Type": "text/plain"}),
                "body too large": await http.post(url, content=b"x" * (5 * 1024 * 1024), headers=headers),
                "host": await http.post(url, content=ping_, headers={**headers, "Host": "evil.example"}),
                "origin": await http.post(url, content=ping_, headers={**headers, "Origin": "http://evil.example"}),
                "method": await http.request("PUT", url, headers=headers),
            }
    statuses = {why: answer.status_code for why, answer in refused.items()}
    assert statuses == {"content type": 400, "body too large": 413, "host": 421, "origin": 403, "method": 405}
    for why, answer in refused.items():
        assert answer.headers["content-type"] == "application/json", why
        error = answer.json()["error"]
        assert error["code"] == -32600, why
        assert error["message"], why
    assert refused["host"].json()["error"]["message"] == (  # (it said only "Invalid Host header", no way out)
        "Invalid Host header: this gateway listens on a loopback address and answers only requests for localhost, "
        "127.0.0.1, [::1] or its own address (protection against DNS rebinding); connect through one of those"
    )
    assert refused["origin"].json()["error"]["message"] == (
        "Invalid Origin header: this gateway listens on a loopback address and answers browsers only for pages from "
        "localhost, 127.0.0.1, [::1] or its own address (protection against DNS rebinding)"
    )


async def test_a_refused_body_or_media_type_is_told_what_the_gateway_takes(tmp_path: Path) -> None:
    """Before, a body over the bound was told only "Request body too large", a POST of another media type "Invalid
    Content-Type header", and a 2026-07-28 request whose Accept header lacks a type the status's phrase, "Not
    Acceptable": none said what the gateway takes."""
    async with gateway_at(tmp_path, HttpLimits()) as (_, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            session = await open_session(http, url)
            headers = {**ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": VERSION}
            ping_ = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
            modern = {**ACCEPT, "MCP-Protocol-Version": "2026-07-28", "Accept": "text/html"}
            refused = {
                "body too large": await http.post(url, content=b"x" * (5 * 1024 * 1024), headers=headers),
                "content type": await http.post(url, content=ping_, headers={**headers, "Content-Type": "text/plain"}),
                "accept": await http.post(url, content=ping_, headers=modern),
            }
    assert {why: answer.status_code for why, answer in refused.items()} == {
        "body too large": 413,
        "content type": 400,
        "accept": 406,
    }
    said = {why: answer.json()["error"]["message"] for why, answer in refused.items()}
    assert said == {
        "body too large": "Request body too large: the gateway takes at most 4 MiB in one request; send less at once",
        "content type": "Invalid Content-Type header: send the body as application/json",
        "accept": "Not Acceptable: the Accept header must list application/json and text/event-stream",
    }


async def test_a_client_that_leaves_before_its_body_came_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, each one logged 'Exception in ASGI application' with starlette's ClientDisconnect traceback."""
    async with gateway_at(tmp_path, HttpLimits()) as (_, url):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            session = await open_session(http, url)
            for head in (_head(url, session=session), _head(url)):
                sock = _connect(url)
                sock.send(head + b'{"json')
                await anyio.sleep(0.3)
                sock.close()
            await anyio.sleep(0.3)
            assert await ping(http, url, session) == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


# -- the replay buffer ---------------------------------------------------------------------------


def _message(text: str) -> Any:
    return JSONRPCResponse(jsonrpc="2.0", id=1, result={"content": [{"type": "text", "text": text}]})


def _progress(text: str) -> Any:
    params = {"progressToken": "p", "progress": 0, "message": text}
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params=params)


async def test_the_replay_buffer_resumes_after_the_last_event_seen() -> None:
    buffer = ReplayBuffer()
    first = await buffer.store_event("s", None)  # the priming event
    ids = [await buffer.store_event("s", _progress(str(n))) for n in range(3)]
    await buffer.store_event("other", _message("x"))
    sent: list[str] = []

    async def send(event: Any) -> None:
        message = event.message
        sent.append(message.params["message"] if hasattr(message, "params") else message.result["content"][0]["text"])

    assert await buffer.replay_events_after(first, send) == "s"  # unanswered yet: what follows comes live
    assert sent == ["0", "1", "2"]
    sent.clear()
    assert await buffer.replay_events_after(ids[1], send) == "s"
    assert sent == ["2"]
    assert await buffer.replay_events_after("unknown/1", send) is None
    assert await buffer.replay_events_after("s/99", send) is None  # an id it never issued
    assert await buffer.replay_events_after("s/١", send) is None  # digits, but not ASCII ones
    sent.clear()
    await buffer.store_event("s", _message("answer"))
    assert await buffer.replay_events_after(ids[2], send) is None  # answered: the resumed stream ends after it
    assert sent == ["answer"]


async def test_a_sessions_view_of_the_replay_buffer_resumes_only_its_own_streams() -> None:
    buffer = ReplayBuffer()
    alice, bob = SessionEvents(buffer, "alice"), SessionEvents(buffer, "bob")
    first = await alice.store_event("0", None)
    await alice.store_event("0", _progress("hers"))
    await bob.store_event("0", None)
    sent: list[str] = []

    async def send(event: Any) -> None:
        sent.append(event.message.params["message"])

    assert await bob.replay_events_after(first, send) is None
    assert await bob.replay_events_after("0/1", send) is None
    assert sent == []
    assert await alice.replay_events_after(first, send) == "0"  # her stream id, as her transport knows it
    assert sent == ["hers"]


@pytest.mark.parametrize("bound", ["events", "bytes", "streams"])
async def test_the_replay_buffer_stays_bounded_and_never_skips_what_it_dropped(bound: str) -> None:
    buffer = ReplayBuffer(max_events=3, max_bytes=4000, max_streams=2)
    first = await buffer.store_event("s", _message("a"))
    if bound == "events":
        for n in range(5):
            await buffer.store_event("s", _message(str(n)))
    elif bound == "bytes":
        await buffer.store_event("s", _message("x" * 2000))  # over a quarter of the budget: not kept
    else:
        await buffer.store_event("t", _message("t"))
        await buffer.store_event("u", _message("u"))  # a third stream: the least recently written goes
    assert buffer.size <= 4000

    async def send(event: Any) -> None:
        raise AssertionError("nothing may be replayed from before a gap")

    assert await buffer.replay_events_after(first, send) is None


async def test_a_client_that_reads_nothing_holds_up_no_other_clients_notices(tmp_path: Path) -> None:
    """A client whose notice stream is full (it never reads) beside one that reads. Before, every list-changed
    round waited for each client in turn, up to 5 s for the stuck one, so the reading client heard each change
    5 s late; and resource updates reached subscribers one after another, 5 s behind each stuck one."""
    long_uri = "res://" + "x" * 60_000
    UPDATES = 150  # 9 MB of notices
    user = {"mcpServers": {"a": server("a", "--control", "--resources", "res://a")}}
    async with running(tmp_path, user=user) as r, anyio.create_task_group() as tg:
        url: str = await tg.start(lambda task_status: r.gateway.serve_http(task_status=task_status))
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            caller, stuck, reading = [await open_session(http, url) for _ in range(3)]

            async def post(session: str, message: dict[str, Any]) -> httpx2.Response:
                headers = {**ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": VERSION}
                return await http.post(url, json=message, headers=headers)

            assert (await post(caller, call("mcp__a__set_resources", {"names": f"res://a,{long_uri}"}))).is_success
            subscribe = {"jsonrpc": "2.0", "id": 5, "method": "resources/subscribe", "params": {"uri": long_uri}}
            for session in (stuck, reading):
                assert (await post(session, subscribe)).status_code == 200
            with a_get_stream_never_read(url, stuck):
                heard: list[str] = []

                async def listen() -> None:
                    headers = {
                        "Accept": "text/event-stream",
                        "mcp-session-id": reading,
                        "MCP-Protocol-Version": VERSION,
                    }
                    async with http.stream("GET", url, headers=headers) as stream:
                        async for line in stream.aiter_lines():
                            heard.extend(kind for kind in ("tools/list_changed", "resources/updated") if kind in line)

                async with anyio.create_task_group() as listening:
                    listening.start_soon(listen)
                    await anyio.sleep(0.3)
                    for i in range(UPDATES):  # more than the stuck client's socket buffers hold: it never reads
                        await post(caller, call("mcp__a__touch_resource", {"uri": long_uri}, request_id=100 + i))
                    with anyio.fail_after(WAIT_S):
                        await wait_until(lambda: heard.count("resources/updated") == UPDATES, what="every update heard")
                    for i in range(3):
                        before = heard.count("tools/list_changed")
                        await post(caller, call("mcp__a__set_tools", {"names": f"echo,t{i}"}, request_id=200 + i))
                        with anyio.fail_after(2.5):  # 5 s a round behind the stuck client before
                            await wait_until(lambda b=before: heard.count("tools/list_changed") > b)  # type: ignore[misc]
                    listening.cancel_scope.cancel()
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("capabilities", [{}, {"sampling": {}}], ids=["made directly", "the SDK's path"])
async def test_a_request_id_already_in_flight_is_refused_and_the_first_call_is_answered(
    tmp_path: Path, capabilities: dict[str, Any]
) -> None:
    """Before, on the SDK's path the second request's answer ended the first one's stream: the first call's
    client got a stream with no answer."""
    async with gateway_at(tmp_path, HttpLimits()) as (_, url), httpx2.AsyncClient(timeout=WAIT_S) as http:
        session = await open_session(http, url, capabilities)
        headers = {**ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": VERSION}
        first: list[httpx2.Response] = []

        async def slow() -> None:
            first.append(await http.post(url, json=call("mcp__a__sleep", {"seconds": 1.5}, 5), headers=headers))

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await anyio.sleep(0.5)
            again = await http.post(url, json=call("mcp__a__sleep", {"seconds": 0.1}, 5), headers=headers)
            assert again.status_code == 400
            assert "a request with id 5 is in flight in this session; use a new id" in again.text
        [answer] = first
        assert answer.status_code == 200
        assert "slept" in answer.text


@contextlib.contextmanager
def a_get_stream_never_read(url: str, session: str) -> Iterator[socket.socket]:
    """``session``'s GET stream, opened on a socket with a small window that nothing reads."""
    host = url.split("//")[1].split("/")[0]
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # before connecting: a small window
        sock.connect((host.rsplit(":", 1)[0], int(host.rsplit(":", 1)[1])))
        sock.send(
            f"GET /mcp HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\n"
            f"MCP-Protocol-Version: {VERSION}\r\n\r\n".encode()
        )
        yield sock


@asynccontextmanager
async def a_stream_never_read(tmp_path: Path) -> AsyncIterator[tuple[str, Any]]:
    """A gateway with a session whose GET stream's socket is full (its client never reads it, at log level debug,
    while another session's call logs 10 MB); the stuck session's id and a way to post."""
    user = {"mcpServers": {"a": server("a", "--control")}}
    async with running(tmp_path, user=user) as r, anyio.create_task_group() as tg:
        url: str = await tg.start(lambda task_status: r.gateway.serve_http(task_status=task_status))
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            caller, stuck = [await open_session(http, url) for _ in range(2)]

            async def post(session: str, message: dict[str, Any]) -> httpx2.Response:
                headers = {**ACCEPT, "mcp-session-id": session, "MCP-Protocol-Version": VERSION}
                return await http.post(url, json=message, headers=headers)

            debug = {"jsonrpc": "2.0", "id": 7, "method": "logging/setLevel", "params": {"level": "debug"}}
            assert (await post(stuck, debug)).is_success
            with a_get_stream_never_read(url, stuck):
                await anyio.sleep(0.3)
                flood = call("mcp__a__log", {"level": "info", "text": "L" * 20_000, "count": 500}, request_id=8)
                assert (await post(caller, flood)).is_success  # its log messages go to the stuck stream too
                yield stuck, post
        tg.cancel_scope.cancel()


async def test_a_session_whose_stream_is_not_read_is_answered_once_that_stream_is_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the session's answers waited behind a write to its GET stream that its client never took: a ping
    was never answered, and the session never went idle."""
    monkeypatch.setattr(gateway_connections, "WRITE_STALL_S", 1.0)
    async with a_stream_never_read(tmp_path) as (stuck, post):
        with anyio.fail_after(WAIT_S):
            answer = await post(stuck, {"jsonrpc": "2.0", "id": 9, "method": "ping"})
        assert answer.status_code == 200


def test_the_replay_buffer_counts_the_memory_a_message_holds_not_its_json() -> None:
    """A kept tools/list answer is its objects, about four times its JSON's length: counted by its JSON, the
    buffer's bound let the gateway hold several times more than it said (+62 MB over 1,024 legacy streams)."""
    import gc
    import tracemalloc

    from mcp_types import JSONRPCResponse

    from mcpvisor.gateway.replay import _estimate

    schema = {"type": "object", "properties": {"text": {"type": "string", "description": "the text"}}}
    tools = [
        {"name": f"mcp__s{i % 10}__tool_{i}", "description": "Does a thing with the text. " * 3, "inputSchema": schema}
        for i in range(56)
    ]
    text = json.dumps({"tools": tools})
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        message = JSONRPCResponse(jsonrpc="2.0", id=7, result=json.loads(text))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held > 3 * len(text)  # what the old estimate missed
    assert 0.7 * held < _estimate(message) < 1.5 * held
