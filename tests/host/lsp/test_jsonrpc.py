"""One language server process and its JSON-RPC channel (SPEC §10): a fake server and the real pylsp."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpvisor.core.server_log import ServerLog
from mcpvisor.host.lsp.framing import MAX_HEADER_BYTES, FrameReader
from mcpvisor.host.lsp.jsonrpc import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    LspConnection,
    LspConnectionClosed,
    LspMessageTooLarge,
    LspRequestError,
    Notification,
    RequestHandler,
    open_lsp_connection,
)
from mcpvisor.host.lsp.process import USE_REAPER
from tests.helpers import WAIT_S, pid_alive, wait_until

FAKE = str(Path(__file__).with_name("fake_lsp.py"))
linux_only = pytest.mark.skipif(not USE_REAPER, reason="the reaper (PR_SET_PDEATHSIG) is Linux only")


async def refuse(method: str, params: Any) -> Any:
    raise LspRequestError(METHOD_NOT_FOUND, f"unknown method {method}")


@asynccontextmanager
async def fake(
    tmp_path: Path,
    *flags: str,
    on_notification: Notification = lambda method, params: None,
    on_request: RequestHandler = refuse,
    **options: Any,
) -> AsyncIterator[LspConnection]:
    async with open_lsp_connection(
        sys.executable,
        [FAKE, *flags],
        env=None,
        cwd=None,
        log=ServerLog(tmp_path / "fake.log"),
        name="fake",
        on_notification=on_notification,
        on_request=on_request,
        **options,
    ) as connection:
        yield connection


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


def test_frames_are_read_from_chunks_that_split_headers_and_bodies_anywhere() -> None:
    stream = frame(b'{"a":1}') + b"content-length: 2\r\nContent-Type: x\r\n\r\n[]" + frame(b"{}")
    reader = FrameReader(100)
    bodies = [body for byte in range(len(stream)) for body in reader.feed(stream[byte : byte + 1])]
    assert bodies == [b'{"a":1}', b"[]", b"{}"]
    assert FrameReader(100).feed(stream) == bodies


def test_a_20_mib_body_in_64_kib_chunks_is_read_once_whole() -> None:
    body = b'"' + b"x" * (20 * 1024 * 1024 - 2) + b'"'
    stream = frame(body) + frame(b"1")
    reader = FrameReader(64 * 1024 * 1024)
    chunk = 64 * 1024
    bodies = [found for start in range(0, len(stream), chunk) for found in reader.feed(stream[start : start + chunk])]
    assert bodies == [body, b"1"]


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        (b"Content-Length: 101\r\n\r\n", "announced a message of 101 bytes"),
        (b"Content-Type: x\r\n\r\n{}", "without a valid Content-Length"),
        (b"Content-Length: -1\r\n\r\n", "without a valid Content-Length"),
        (b"X: " + b"x" * MAX_HEADER_BYTES, "header over 8 KiB"),
        (b"X: " + b"x" * MAX_HEADER_BYTES + b"\r\n\r\n", "header over 8 KiB"),
    ],
)
def test_a_frame_over_the_limit_or_a_broken_header_is_refused(stream: bytes, reason: str) -> None:
    with pytest.raises(LspMessageTooLarge, match=reason) as info:
        FrameReader(100, server="ts").feed(stream)
    assert "'ts'" in str(info.value)
    assert "the limit is 100 bytes" in str(info.value)


async def test_a_request_gets_its_result_and_leaving_shuts_the_server_down(tmp_path: Path) -> None:
    async with fake(tmp_path) as connection:
        result = await connection.request("initialize", {"processId": None, "capabilities": {}})
        assert result == {"capabilities": {"hoverProvider": True}}
        assert await connection.request("echo", {"text": "héllo ☃", "n": [1, 2.5, None]}) == {
            "text": "héllo ☃",
            "n": [1, 2.5, None],
        }
        pid = connection.process.pid
        assert pid is not None
        assert pid_alive(pid)
    assert connection.process.returncode == 0  # it exited by itself on "exit"
    assert connection.closed()
    assert not pid_alive(pid)
    with pytest.raises(LspConnectionClosed, match="echo failed: language server 'fake' was stopped"):
        await connection.request("echo")


async def test_an_answer_with_bytes_that_are_not_utf8_or_a_lone_surrogate_is_read_with_u_fffd(tmp_path: Path) -> None:
    async with fake(tmp_path) as connection:
        await connection.request("initialize", {"processId": None, "capabilities": {}})
        with anyio.fail_after(WAIT_S):  # never the request's time limit
            result = await connection.request("odd-bytes")
        assert result == {"name": "caf\ufffd caf\ufffd.txt"}
        json.dumps(result).encode()  # it can be sent on


async def test_concurrent_requests_complete_in_the_order_the_server_answers(tmp_path: Path) -> None:
    parked: list[int] = []
    answered: list[int] = []

    def on_notification(method: str, params: Any) -> None:
        if method == "parked":
            parked.append(params["id"])

    async def park(n: int) -> None:
        answered.append(await connection.request("park", {"n": n}))

    async with fake(tmp_path, on_notification=on_notification) as connection, anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(park, n)
        await wait_until(lambda: len(parked) == 3, what="three parked requests")
        assert await connection.request("flush") is None
    assert answered == [2, 1, 0]


async def test_requests_from_the_server_are_answered_through_on_request(tmp_path: Path) -> None:
    asked: list[tuple[str, Any]] = []

    async def on_request(method: str, params: Any) -> Any:
        asked.append((method, params))
        if method == "workspace/configuration":
            return [{"tabSize": 4}]
        if method == "broken":
            raise RuntimeError("the handler has a bug")
        return await refuse(method, params)

    async with fake(tmp_path, on_request=on_request) as connection:
        configuration = {"items": [{"section": "python"}]}
        answer = await connection.request("ask", {"method": "workspace/configuration", "params": configuration})
        assert answer == {"result": [{"tabSize": 4}]}
        assert asked == [("workspace/configuration", configuration)]
        answer = await connection.request("ask", {"method": "custom/unknown"})
        assert answer["error"] == {"code": METHOD_NOT_FOUND, "message": "unknown method custom/unknown"}
        answer = await connection.request("ask", {"method": "broken"})
        assert answer["error"]["code"] == INTERNAL_ERROR
        assert await connection.request("echo", {"still": "answering"}) == {"still": "answering"}


async def test_notifications_reach_on_notification_and_a_failing_handler_does_not_stop_reading(
    tmp_path: Path,
) -> None:
    heard: list[tuple[str, Any]] = []

    def on_notification(method: str, params: Any) -> None:
        heard.append((method, params))
        if method == "boom":
            raise RuntimeError("the handler has a bug")

    notifications: list[tuple[str, Any]] = [
        ("window/logMessage", {"type": 3, "message": "ready"}),
        ("boom", None),
        ("textDocument/publishDiagnostics", {"uri": "file:///a.py", "diagnostics": []}),
    ]
    async with fake(tmp_path, on_notification=on_notification) as connection:
        await connection.request("notify", {"notifications": notifications})
        assert heard == notifications
        assert await connection.request("echo", {"x": 1}) == {"x": 1}


async def test_an_error_answer_raises_lsp_request_error_with_its_code_and_method(tmp_path: Path) -> None:
    async with fake(tmp_path) as connection:
        with pytest.raises(LspRequestError) as info:
            await connection.request("fail", {"code": -32001, "message": "no such symbol", "data": {"k": 1}})
    error = info.value
    assert (error.code, error.message, error.data, error.method) == (-32001, "no such symbol", {"k": 1}, "fail")
    assert str(error) == "fail failed: server 'fake' answered error -32001: no such symbol"


async def test_a_cancelled_caller_makes_the_server_receive_cancel_request(tmp_path: Path) -> None:
    parked: list[int] = []
    cancelled: list[int] = []

    def on_notification(method: str, params: Any) -> None:
        {"parked": parked, "cancelled": cancelled}.get(method, []).append(params["id"])

    async with fake(tmp_path, on_notification=on_notification) as connection:
        async with anyio.create_task_group() as tg:
            tg.start_soon(connection.request, "park")
            await wait_until(lambda: bool(parked), what="the request to be parked")
            tg.cancel_scope.cancel()
        await wait_until(lambda: cancelled == parked, what="the server to hear $/cancelRequest")
        assert await connection.request("echo", {"after": "cancel"}) == {"after": "cancel"}


async def test_a_request_that_times_out_raises_timeout_error_and_is_cancelled(tmp_path: Path) -> None:
    cancelled: list[int] = []

    def on_notification(method: str, params: Any) -> None:
        if method == "cancelled":
            cancelled.append(params["id"])

    async with fake(tmp_path, on_notification=on_notification) as connection:
        with pytest.raises(TimeoutError, match="park to language server 'fake' timed out after 0.2 s"):
            await connection.request("park", timeout_s=0.2)
        await wait_until(lambda: len(cancelled) == 1, what="the server to hear $/cancelRequest")
        assert await connection.request("echo", {"in": "time"}, timeout_s=WAIT_S) == {"in": "time"}


@pytest.mark.parametrize(
    ("method", "reason"),
    [
        ("oversize", "announced a message of 931.3 GiB"),
        ("malformed", "sent a header without a valid Content-Length"),
        ("long-header", "sent a header over 8 KiB"),
    ],
)
async def test_a_frame_over_the_limit_fails_pending_requests_and_the_server_is_stopped(
    tmp_path: Path, method: str, reason: str
) -> None:
    async with fake(tmp_path, max_message_bytes=1024 * 1024) as connection:
        with anyio.fail_after(10), pytest.raises(LspMessageTooLarge) as info:
            await connection.request(method)
        assert "language server 'fake'" in str(info.value)
        assert "the limit is 1 MiB" in str(info.value)
        assert info.value.reason == reason
        assert connection.process.failure is not None
        assert connection.process.ended.is_set()
        with pytest.raises(LspConnectionClosed) as later:
            await connection.request("echo")
        assert later.value.__cause__ is connection.process.failure
        assert str(later.value) == f"echo failed: language server 'fake' {reason} (the limit is 1 MiB), " + (
            "so its connection is dropped"
        )
        pid = connection.process.pid
        assert pid is not None
    assert not pid_alive(pid)


async def test_a_missing_executable_surfaces_cannot_start_in_connection_closed(tmp_path: Path) -> None:
    with pytest.raises(LspConnectionClosed) as info:
        async with open_lsp_connection(
            str(tmp_path / "no-such-server"),
            ["--stdio"],
            env=None,
            cwd=None,
            log=ServerLog(tmp_path / "missing.log"),
            name="missing",
            on_notification=lambda method, params: None,
            on_request=refuse,
        ) as connection:
            await connection.request("initialize", {})
    if USE_REAPER:
        assert info.value.reason == f"exited with code 127: cannot start {tmp_path / 'no-such-server'}: " + (
            "No such file or directory"
        )
        assert "cannot start" in (tmp_path / "missing.log").read_text()
    else:
        assert "could not be started" in info.value.reason


@linux_only
async def test_a_server_behind_a_shell_that_is_killed_is_said_to_have_the_code_a_shell_gives_a_killed_program(
    tmp_path: Path,
) -> None:
    """The reaper passes on the code of the shell in front of the server: 137 when the server was killed by SIGKILL.
    Before, that was only "exited with code 137"."""
    async with open_lsp_connection(
        "sh",
        ["-c", f"{shlex.quote(sys.executable)} {shlex.quote(FAKE)}; exit $?"],
        env=None,
        cwd=None,
        log=ServerLog(tmp_path / "wrapped.log"),
        name="wrapped",
        on_notification=lambda method, params: None,
        on_request=refuse,
    ) as connection:
        pids = await connection.request("spawn")
        os.kill(pids["server"], signal.SIGKILL)
        with anyio.fail_after(WAIT_S), pytest.raises(LspConnectionClosed) as info:
            await connection.request("park")
    assert info.value.reason == "exited with code 137 (as a shell reports a program killed by SIGKILL, signal 9)"


async def test_stopping_a_stubborn_server_kills_its_whole_process_group(tmp_path: Path) -> None:
    async with fake(tmp_path, "--stubborn", shutdown_timeout_s=0.2) as connection:
        pids = await connection.request("spawn")
        assert pid_alive(pids["server"])
        assert pid_alive(pids["grandchild"])
    assert connection.process.returncode is not None
    await wait_until(lambda: not pid_alive(pids["server"]), what="the server to be gone")
    await wait_until(lambda: not pid_alive(pids["grandchild"]), what="its grandchild to be gone")


async def test_a_request_unanswered_when_the_server_is_stopped_says_so_not_how_the_server_exited(
    tmp_path: Path,
) -> None:
    parked: list[int] = []
    failures: list[BaseException] = []

    async def held(connection: LspConnection) -> None:
        try:
            await connection.request("park")
        except LspConnectionClosed as exc:
            failures.append(exc)

    def on_notification(method: str, params: Any) -> None:
        if method == "parked":
            parked.append(params["id"])

    async with anyio.create_task_group() as tg:
        async with fake(tmp_path, on_notification=on_notification) as connection:
            await connection.request("initialize")
            tg.start_soon(held, connection)
            await wait_until(lambda: bool(parked), what="the request to be parked")
    [failure] = failures
    assert str(failure) == "park failed: language server 'fake' was stopped before it answered"


HOST = """
import sys
from pathlib import Path

import anyio

from mcpvisor.core.server_log import ServerLog
from mcpvisor.host.lsp.jsonrpc import open_lsp_connection


async def refuse(method, params):
    raise NotImplementedError


async def main() -> None:
    log = ServerLog(Path(sys.argv[2]))
    async with open_lsp_connection(
        sys.executable, [sys.argv[1], "--stubborn"], env=None, cwd=None, log=log, name="fake",
        on_notification=lambda method, params: None, on_request=refuse,
    ) as connection:
        pids = await connection.request("spawn")
        print(connection.process.pid, pids["server"], pids["grandchild"], flush=True)
        await anyio.sleep_forever()


anyio.run(main)
"""


@linux_only
async def test_a_host_killed_with_sigkill_leaves_no_language_server_behind(tmp_path: Path) -> None:
    host = await anyio.open_process([sys.executable, "-c", HOST, FAKE, str(tmp_path / "fake.log")], stderr=None)
    try:
        assert host.stdout is not None
        with anyio.fail_after(WAIT_S):
            line = b""
            while not line.endswith(b"\n"):
                line += await host.stdout.receive()
        pids = [int(pid) for pid in line.split()]
        assert all(pid_alive(pid) for pid in pids)
        os.kill(host.pid, signal.SIGKILL)
        await host.wait()
        for pid, what in zip(pids, ["the reaper", "the server", "its grandchild"], strict=True):
            await wait_until(lambda pid=pid: not pid_alive(pid), timeout_s=10, what=f"{what} to be gone")  # type: ignore[misc]
    finally:
        with anyio.CancelScope(shield=True):
            if host.returncode is None:
                host.kill()
                await host.wait()
            await host.aclose()


async def test_pylsp_initializes_and_leaves_no_process_behind(tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "a.py").write_text("x = 1\n")
    async with open_lsp_connection(
        sys.executable,
        ["-m", "pylsp"],
        env=None,
        cwd=str(workspace),
        log=ServerLog(tmp_path / "pylsp.log"),
        name="pylsp",
        on_notification=lambda method, params: None,
        on_request=lambda method, params: refuse(method, params),
    ) as connection:
        with anyio.fail_after(WAIT_S):
            result = await connection.request(
                "initialize", {"processId": os.getpid(), "rootUri": workspace.as_uri(), "capabilities": {}}
            )
            await connection.notify("initialized", {})
        assert result["capabilities"]["hoverProvider"] is True
        pid = connection.process.pid
        assert pid is not None
    assert connection.process.returncode == 0
    assert not pid_alive(pid)
