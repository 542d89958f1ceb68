"""``mcpvisor serve`` over stdio with a client that misbehaves or stops it: every request read gets its answer, a
client gone or no longer reading never costs a traceback or a gateway that cannot be stopped (raw JSON lines, real
processes)."""

from __future__ import annotations

import array
import contextlib
import fcntl
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpvisor.gateway.stdio import MAX_LINE_BYTES
from mcpvisor.gateway.unanswered import MAX_UNANSWERED, Unanswered
from tests.gateway.test_gateway import save, server
from tests.helpers import WAIT_S, marker_pids, mcpvisor_command, pid_alive
from tests.layout import make_layout

_OPENING = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
_HELLO: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": _OPENING},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]


def _call(request_id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": f"mcp__a__{tool}", "arguments": arguments, "_meta": {"progressToken": request_id}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@contextmanager
def _gateway(
    tmp_path: Path, *args: str, stdout: Any = subprocess.PIPE, **fields: Any
) -> Iterator[subprocess.Popen[bytes]]:
    """``mcpvisor serve`` over stdio with one light server ``a`` (``--control`` and ``args``, its entry's other
    ``fields``; its pid in ``tmp_path/pids``), its stderr in ``tmp_path/gateway.stderr``; killed on the way out if
    still running."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    a = {**server("a", "--control", "--marker", str(tmp_path / "pids"), *args), **fields}
    save(layout.paths.user, {"mcpServers": {"a": a}})
    with (
        (tmp_path / "gateway.stderr").open("wb") as err,
        subprocess.Popen(
            [mcpvisor_command(), "serve", "--workspace", str(layout.root)],
            env={**os.environ, **layout.env},
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=err,
        ) as process,
    ):
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()


def _send(process: subprocess.Popen[bytes], *messages: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    process.stdin.flush()


def _until(process: subprocess.Popen[bytes], done: Any) -> list[dict[str, Any]]:
    """Messages from the gateway's stdout until ``done(message)`` holds (or its stdout ends)."""
    assert process.stdout is not None
    heard: list[dict[str, Any]] = []
    while line := process.stdout.readline():
        heard.append(json.loads(line))
        if done(heard[-1]):
            break
    return heard


@contextmanager
def _bounded(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """Reads of the gateway's stdout in the block end by ``WAIT_S`` at most: the gateway is killed then (its stdout
    ends), so a message that never comes fails the test instead of hanging it."""
    watchdog = threading.Timer(WAIT_S, process.kill)
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()


def _started(process: subprocess.Popen[bytes], *ids: int) -> None:
    """Wait until the calls ``ids`` reported progress (the light server's sleep reports it as it starts)."""
    _until(process, lambda m: m == {**m, "method": "notifications/progress"} and m["params"]["progressToken"] in ids)


def _answers(heard: list[dict[str, Any]]) -> dict[Any, Any]:
    return {m["id"]: m.get("result", m.get("error")) for m in heard if "method" not in m}


def _text(answer: Any) -> str:
    return str(answer["content"][0]["text"]) if "content" in answer else str(answer)


def _serves_a_call_then_ends_cleanly(process: subprocess.Popen[bytes]) -> None:
    """Initialize, call server ``a``'s echo and check its answer, then close stdin: the gateway exits with code 0."""
    _send(process, *_HELLO, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "mcp__a__echo"}})
    answers = _answers(_until(process, lambda m: m.get("id") == 1))
    assert _text(answers[1]) == "a:echo:"
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=WAIT_S) == 0


def test_on_sigterm_a_call_still_running_after_the_grace_is_answered_over_stdio_too(tmp_path: Path) -> None:
    """The README: on SIGTERM calls in flight get 5 s, then are answered that the gateway is shutting down, "also
    over stdio with the client's end still open". The drain ended the call, but the gateway left at once, and its
    answer, half way to the client, was cancelled: the client never heard of that call again."""
    with _gateway(tmp_path) as process:
        _send(process, *_HELLO, _call(1, "sleep", seconds=1), _call(2, "sleep", seconds=60))
        _until(process, lambda m: m.get("id") == 0)
        _started(process, 1)
        process.send_signal(signal.SIGTERM)
        heard = _until(process, lambda m: False)  # to the end of its stdout
        assert process.wait(timeout=WAIT_S) == 0
    answers = _answers(heard)
    assert _text(answers[1]) == "slept"
    assert _text(answers[2]) == (
        "call to tool 'mcp__a__sleep' failed: the gateway is shutting down; make the call again once it is back"
    )


@pytest.mark.parametrize("end", ["timed out", "cancelled by its client"])
def test_a_request_the_client_leaves_unanswered_is_withdrawn_when_its_call_ends_over_stdio_too(
    tmp_path: Path, end: str
) -> None:
    """The client holds a server's sampling request unanswered and the call ends (its server's timeout runs out, or
    the client cancels it): the gateway cancels its request at the client, before the call's answer. Before, the
    request was left open for good (the server does not withdraw it itself): the client was never told."""
    timeout = {"timeout": 2000} if end == "timed out" else {}
    with _gateway(tmp_path, **timeout) as process:
        opening = {**_OPENING, "capabilities": {"sampling": {}}}
        initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": opening}
        _send(process, initialize, _HELLO[1], _call(1, "ask_client", kind="sampling", text="hold on"))
        with _bounded(process):
            asked = _until(process, lambda m: m.get("method") == "sampling/createMessage")[-1]
            assert asked.get("method") == "sampling/createMessage", asked
            if end == "timed out":
                heard = _until(process, lambda m: m.get("id") == 1)
                answer = heard.pop()  # (what is left came before it)
                assert "timed out after 2 s" in _text(answer.get("result", answer)), answer
            else:
                _send(process, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
                heard = _until(process, lambda m: m.get("method") == "notifications/cancelled")
        withdrawn = [m["params"]["requestId"] for m in heard if m.get("method") == "notifications/cancelled"]
        assert withdrawn == [asked["id"]], heard


def test_requests_piped_in_are_all_answered_when_stdin_ends_after_them(tmp_path: Path) -> None:
    """``printf '...' | mcpvisor serve``: stdin ends right after the requests. The SDK cancels what is in flight
    when its input ends, and an answer it had begun to write is then never written: here the call was told
    "Connection closed" and the listing got no answer at all."""
    with _gateway(tmp_path) as process:
        assert process.stdin is not None
        lines = [*_HELLO, _call(1, "echo", text="hi"), {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
        _send(process, *lines)
        process.stdin.close()
        heard = _until(process, lambda m: False)
        assert process.wait(timeout=WAIT_S) == 0
    answers = _answers(heard)
    assert _text(answers[1]) == "a:echo:hi"
    assert "mcp__a__echo" in {t["name"] for t in answers[2]["tools"]}


def test_a_line_longer_than_the_bound_is_refused_as_it_comes_and_dropped_up_to_its_end(tmp_path: Path) -> None:
    """A client writing without a newline (a binary stream, a framing of another protocol) made the gateway hold
    every byte of the line, without end (300 MB held 380 MB); past 64 MiB the line is answered with an error at
    once, its bytes dropped as they come, and the next line is read as usual."""
    with _gateway(tmp_path) as process, _bounded(process):
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        assert process.stdin is not None
        process.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {"x": "')
        process.stdin.write(b"x" * (MAX_LINE_BYTES + (1 << 20)))
        process.stdin.flush()
        [refusal] = _until(process, lambda m: True)  # before the line ends
        assert refusal == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {
                "code": -32600,
                "message": "Request too large: the gateway reads lines of at most 64 MiB from its client; "
                "this one was dropped up to its end: send less at once",
            },
        }
        process.stdin.write(b"x" * (8 << 20) + b'"}}}\n')
        _send(process, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
        assert _until(process, lambda m: True) == [{"jsonrpc": "2.0", "id": 2, "result": {}}]


def test_a_request_too_long_is_refused_with_the_id_it_begins_with(tmp_path: Path) -> None:
    """Refused with id null, a request too long left the client waiting for its answer for ever (the SDK's client
    sets no timeout of its own). The SDKs write the id before the params: the refusal names it; a line whose
    first members are not a request's (a client's answer, whose id is the gateway's) is still refused with null."""
    too_long = b"x" * (MAX_LINE_BYTES + 1)
    with _gateway(tmp_path) as process, _bounded(process):
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        assert process.stdin is not None
        process.stdin.write(b'{"jsonrpc":"2.0","id":"big-1","method":"tools/call","params":{"name":"' + too_long)
        process.stdin.write(b'"}}\n{"jsonrpc":"2.0","id":7,"result":{"content":"' + too_long + b'"}}\n')
        process.stdin.flush()
        refused = _until(process, lambda m: m.get("id") is None)
        assert [(m["id"], m["error"]["code"]) for m in refused] == [("big-1", -32600), (None, -32600)]


def test_a_line_that_is_not_utf_8_is_refused_not_read_with_replacements(tmp_path: Path) -> None:
    """A request with a byte that is no UTF-8 was read with U+FFFD in its place: its id came back as another (the
    client waited for its answer for ever), two such ids were one, and a tool's arguments changed without a word."""
    with _gateway(tmp_path) as process, _bounded(process):
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        assert process.stdin is not None
        process.stdin.write(b'{"jsonrpc": "2.0", "id": "caf\xe9", "method": "ping"}\n')
        # An id read surely is the refusal's (its caller waits for it), wherever the id stands (the TypeScript SDK
        # writes it last).
        process.stdin.write(b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"_meta": {"n": "caf\xe9"}}}\n')
        process.stdin.write(b'{"method": "ping", "params": {"_meta": {"n": "caf\xe9"}}, "jsonrpc": "2.0", "id": 8}\n')
        _send(process, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
        not_utf8 = "Parse error: the line is not UTF-8 (byte 0xe9 at offset {}); send JSON-RPC messages as UTF-8"
        assert _until(process, lambda m: m.get("id") == 2) == [
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": not_utf8.format(29)}},
            {"jsonrpc": "2.0", "id": 7, "error": {"code": -32700, "message": not_utf8.format(76)}},
            {"jsonrpc": "2.0", "id": 8, "error": {"code": -32700, "message": not_utf8.format(49)}},
            {"jsonrpc": "2.0", "id": 2, "result": {}},
        ]


def test_a_byte_order_mark_before_the_json_is_ignored(tmp_path: Path) -> None:
    """A client whose writer starts its stream with a UTF-8 byte order mark (a .NET StreamWriter with
    Encoding.UTF8) had its initialize refused as no JSON, with id null: it waited for its answer for ever."""
    with _gateway(tmp_path) as process, _bounded(process):
        assert process.stdin is not None
        process.stdin.write(b"\xef\xbb\xbf")
        _send(process, *_HELLO)
        [answer] = _until(process, lambda m: True)
        assert answer["id"] == 0
        assert answer["result"]["serverInfo"]["name"] == "mcpvisor"


def test_a_line_that_is_not_json_is_refused_saying_where_it_stops_being_json(tmp_path: Path) -> None:
    """Two messages written on one line, or a string with a lone surrogate escape, were refused as "not JSON" with
    nothing to say which part of the line was wrong."""
    with _gateway(tmp_path) as process, _bounded(process):
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        assert process.stdin is not None
        process.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
        process.stdin.write(b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":{"x":"\\ud800"}}}\n')
        _send(process, {"jsonrpc": "2.0", "id": 4, "method": "ping"})
        refused = _until(process, lambda m: m.get("id") == 4)[:-1]
        assert [m["error"]["message"] for m in refused] == [
            "Parse error: the line is not JSON (trailing characters at line 1 column 41)",
            "Parse error: the line is not JSON (unexpected end of hex escape at line 1 column 71)",
        ]


def test_json_nested_too_deeply_is_refused_as_such_not_as_no_json(tmp_path: Path) -> None:
    """100,000 nested arrays are JSON: the refusal said the line was not JSON."""
    with _gateway(tmp_path) as process, _bounded(process):
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        assert process.stdin is not None
        process.stdin.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")
        nested: Any = []
        for _ in range(195):  # (200 levels with the request around it)
            nested = [nested]
        _send(process, {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"_meta": {"deep": nested}}})
        message = "Parse error: the line's JSON is nested too deeply; the gateway reads JSON up to 200 levels deep"
        too_deep = {"code": -32700, "message": message}
        # A request too deep whose id comes first (as the Python SDK writes it) is refused with its id: its caller
        # waited for ever.
        _send(process, {"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"_meta": {"deep": [[[[nested]]]]}}})
        said = _until(process, lambda m: m.get("id") == 2)
        if not any(m.get("id") == 3 for m in said):  # (the ping's answer comes from its server: either may be first)
            said += _until(process, lambda m: m.get("id") == 3)
        assert sorted(said, key=lambda m: str(m.get("id"))) == [
            {"jsonrpc": "2.0", "id": 2, "result": {}},
            {"jsonrpc": "2.0", "id": 3, "error": too_deep},
            {"jsonrpc": "2.0", "id": None, "error": too_deep},
        ]


def test_a_client_that_closed_its_end_of_stderr_is_still_served(tmp_path: Path) -> None:
    """stderr is only the gateway's narration: a client that closes its end of it (it does not read it) ended the
    gateway with exit code 1 at its first line, before initialize was answered."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.user, {"mcpServers": {"a": server("a")}})
    unread, stderr = os.pipe()
    os.close(unread)
    try:
        process = subprocess.Popen(
            [mcpvisor_command(), "serve", "--workspace", str(layout.root)],
            env={**os.environ, **layout.env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    finally:
        os.close(stderr)
    with process, _bounded(process):
        _serves_a_call_then_ends_cleanly(process)


def test_a_gateway_started_with_stderr_closed_serves_and_ends_cleanly(tmp_path: Path) -> None:
    """Started with fd 2 closed (``2>&-``), the gateway's event loop took that number, the stdio transport pointed
    fd 1 at it, and its server and then the gateway itself died of SIGABRT (its call answered "server 'a' is not
    connected", exit code -6). The real command: the test's fork server hands over the streams a way of its own."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.user, {"mcpServers": {"a": server("a")}})
    closed = 'exec "$0" -m mcpvisor serve --workspace "$1" 2>&-'
    with (
        subprocess.Popen(
            ["sh", "-c", closed, sys.executable, str(layout.root)],
            env={**os.environ, **layout.env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        ) as process,
        _bounded(process),
    ):
        _serves_a_call_then_ends_cleanly(process)


def test_a_request_before_initialize_is_refused_saying_to_initialize_first(tmp_path: Path) -> None:
    """A handshake-era client that lists or calls before ``initialize`` is told to initialize first (the SDK's own
    answer, ``-32602 Invalid request parameters``, sent it looking at its parameters); a ping is answered, a method
    the gateway does not serve is ``-32601`` (clients probe with it), and after ``initialize`` all is served."""
    with _gateway(tmp_path) as process, _bounded(process):
        unknown = {"jsonrpc": "2.0", "id": 3, "method": "no/such", "params": {}}
        ping = {"jsonrpc": "2.0", "id": 4, "method": "ping"}
        _send(process, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, _call(2, "echo", text="hi"), unknown, ping)
        answers = _answers(_until(process, lambda m: m.get("id") == 4))
        for request_id, method in ((1, "tools/list"), (2, "tools/call")):
            assert answers[request_id]["code"] == -32600, answers
            assert answers[request_id]["message"].startswith(f"{method} before initialize: send an initialize request")
        assert answers[3]["code"] == -32601
        assert answers[4] == {}
        _send(process, *_HELLO, _call(5, "echo", text="hi"))
        assert _text(_answers(_until(process, lambda m: m.get("id") == 5))[5]) == "a:echo:hi"


def test_a_second_initialize_is_refused_and_the_session_goes_on(tmp_path: Path) -> None:
    """It was answered as a success, and the session took its protocol version and capabilities from then on."""
    with _gateway(tmp_path) as process, _bounded(process):
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        again = {**_HELLO[0], "id": 1, "params": {**_OPENING, "protocolVersion": "2025-06-18"}}
        _send(process, again, _call(2, "echo", text="on"))
        answers = _answers(_until(process, lambda m: m.get("id") == 2))
    assert answers[1]["code"] == -32600, answers
    assert answers[1]["message"] == (
        "initialize refused: this session is already initialized (protocol 2025-11-25); to initialize again, open a "
        "new session"
    )
    assert _text(answers[2]) == "a:echo:on"


def test_params_of_the_wrong_type_are_refused_naming_the_field(tmp_path: Path) -> None:
    """As over HTTP: the answer said ``Invalid request parameters`` and named no field."""
    with _gateway(tmp_path) as process, _bounded(process):
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        wrong = _call(1, "echo")
        wrong["params"]["arguments"] = "x"
        _send(process, wrong, {**_call(2, "echo"), "params": {"name": 5}})
        answers = _answers(_until(process, lambda m: m.get("id") == 2))
    assert answers[1] == {"code": -32602, "message": "Invalid params: arguments: expected an object"}
    assert answers[2] == {"code": -32602, "message": "Invalid params: name: expected a string"}


def _asking(process: subprocess.Popen[bytes], kind: str) -> dict[str, Any]:
    """Open a session offering sampling, elicitation and roots, call ``ask_client`` (``kind``) as id 1; returns the
    gateway's request to the client."""
    offers: dict[str, Any] = {"sampling": {}, "elicitation": {}, "roots": {}}
    _send(process, {**_HELLO[0], "params": {**_OPENING, "capabilities": offers}}, _HELLO[1])
    _until(process, lambda m: m.get("id") == 0)
    _send(process, _call(1, "ask_client", kind=kind, text="q"))
    return _until(process, lambda m: "method" in m and "id" in m)[-1]


def test_a_clients_answer_of_the_wrong_shape_reaches_the_server_said_as_such(tmp_path: Path) -> None:
    """The server heard ``Invalid request parameters (-32602)``, as if its own request had been wrong."""
    with _gateway(tmp_path) as process, _bounded(process):
        asked = _asking(process, "sampling")
        _send(process, {"jsonrpc": "2.0", "id": asked["id"], "result": {"role": 5}})
        answer = _answers(_until(process, lambda m: m.get("id") == 1))[1]
    assert answer["isError"] is True
    said = _text(answer)
    assert "the client answered server 'a''s sampling request with something else" in said, said
    assert "role" in said
    assert "-32602" not in said


@pytest.mark.parametrize("answer", [{"result": "yes"}, {"error": {"code": "x", "message": 5}}], ids=["result", "error"])
def test_a_clients_answer_that_is_no_json_rpc_response_fails_the_servers_request(
    tmp_path: Path, answer: dict[str, Any]
) -> None:
    """It was dropped, and the server's request, and the call behind it, waited for an answer that had come."""
    with _gateway(tmp_path) as process, _bounded(process):
        asked = _asking(process, "sampling")
        _send(process, {"jsonrpc": "2.0", "id": asked["id"], **answer})
        said = _text(_answers(_until(process, lambda m: m.get("id") == 1))[1])
    assert "the client's answer is no JSON-RPC response: " in said, said


def test_a_client_that_dies_with_calls_in_flight_costs_no_traceback_and_the_servers_stop(tmp_path: Path) -> None:
    """Its stdout closes under the gateway (the client was killed): writing the calls' answers failed with a
    BrokenPipeError that ended the gateway with a traceback in the client's log and exit code 1."""
    with _gateway(tmp_path) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        _send(process, *_HELLO, *(_call(i, "sleep", seconds=30) for i in range(1, 4)))
        _started(process, 1, 2, 3)
        process.stdout.close()
        process.stdin.close()
        assert process.wait(timeout=WAIT_S) == 0
    said = (tmp_path / "gateway.stderr").read_text()
    assert "Traceback" not in said, said
    [pid] = marker_pids(tmp_path / "pids")
    deadline = time.monotonic() + WAIT_S
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)


def test_a_client_that_stops_reading_cannot_keep_the_gateway_from_stopping(tmp_path: Path) -> None:
    """A client that no longer reads stdout (hung) while the gateway has much to write: the SDK writes stdout in a
    worker thread, blocked for good in ``write()``, and waits for it as it stops, so neither SIGTERM nor a second
    signal ("stops at once") ended the gateway: only SIGKILL did."""
    with _gateway(tmp_path, "--big") as process:
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        _send(process, {**_call(1, "blob", mib=4)})  # more than a pipe holds, and never read
        time.sleep(1)
        process.send_signal(signal.SIGTERM)
        try:
            returncode = process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            try:
                returncode = process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                returncode = None
        assert returncode == 0, (tmp_path / "gateway.stderr").read_text()
    [pid] = marker_pids(tmp_path / "pids")
    assert not pid_alive(pid)


@contextmanager
def _flooding(process: subprocess.Popen[bytes], line: Callable[[int], bytes], cap: int) -> Iterator[list[int]]:
    """A client writing ``line(1)``, ``line(2)``, … to the gateway without reading, in a thread, until ``cap`` bytes
    or its pipe is gone; yields how many bytes it wrote so far. Its end is closed on the way out."""
    assert process.stdin is not None
    stdin = process.stdin
    written = [0]

    def flood() -> None:
        with contextlib.suppress(OSError):  # (its end closes as the gateway stops)
            for i in itertools.count(1):
                if written[0] >= cap:
                    return
                data = line(i)
                stdin.write(data)
                stdin.flush()
                written[0] += len(data)

    writer = threading.Thread(target=flood, daemon=True)
    writer.start()
    try:
        yield written
    finally:
        if process.poll() is None:
            process.kill()
        writer.join(timeout=WAIT_S)
        with contextlib.suppress(BrokenPipeError):
            stdin.close()  # (what the writer had buffered no longer reaches anyone)


def _line(request: dict[str, Any]) -> bytes:
    return json.dumps(request).encode() + b"\n"


def test_sigterm_with_a_flooding_clients_requests_still_unread_ends_cleanly(tmp_path: Path) -> None:
    """A client writes requests faster than the gateway answers them, and the gateway is stopped: the SDK's stdin
    reader, blocked handing the next line to the session, failed as the session closed, and the gateway ended with
    exit code 1 and a ``BrokenResourceError`` traceback in the client's log."""
    with _gateway(tmp_path) as process:
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        with _flooding(process, lambda i: _line(_call(i, "echo", text="x" * 200)), cap=1 << 30) as written:
            deadline = time.monotonic() + WAIT_S
            while written[0] < 1 << 20 and time.monotonic() < deadline:  # more than the session takes meanwhile
                time.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=WAIT_S) == 0, (tmp_path / "gateway.stderr").read_text()
    said = (tmp_path / "gateway.stderr").read_text()
    assert "Traceback" not in said, said


def test_a_client_writing_faster_than_it_reads_fills_its_pipe_not_the_gateways_memory(tmp_path: Path) -> None:
    """A client that sends requests and never reads the answers: the session took every request as a task waiting
    to write its answer, and stdin was read on into a buffer bounded only at twice the longest line (4 GiB), so
    the client's writes never blocked and the gateway grew without end. Past 1,000 requests in flight one more is
    refused, and past 1 MiB of lines waiting stdin is no longer read: the client's own pipe fills."""
    cap = 32 << 20
    with _gateway(tmp_path) as process:
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        line = _line(_call(1, "echo", text="x" * 1000))
        with _flooding(process, lambda _: line, cap) as written:
            seen = -1
            while seen != written[0] < cap:  # until the writer is held on a full pipe, or wrote it all
                seen = written[0]
                time.sleep(2)
            assert written[0] < 8 << 20


def test_past_the_bound_on_requests_in_flight_one_more_is_refused_and_answers_make_room(tmp_path: Path) -> None:
    """The bound refuses, it does not hold: a client that does read gets an error for the request over the bound
    (not a wait that could hold its answers to the gateway's own requests behind it), and once answers came it
    is served again."""
    with _gateway(tmp_path) as process:
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        _send(process, *(_call(i, "sleep", seconds=60) for i in range(1, MAX_UNANSWERED + 1)))
        _send(process, _call(MAX_UNANSWERED + 1, "echo", text="over"))
        [refused] = [m for m in _until(process, lambda m: "id" in m) if "id" in m]
        assert refused["id"] == MAX_UNANSWERED + 1
        assert "requests of this client in flight" in refused["error"]["message"]
        _send(process, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        _send(process, _call(MAX_UNANSWERED + 2, "echo", text="room"))
        [answer] = [m for m in _until(process, lambda m: "id" in m) if "id" in m]
        assert _text(answer["result"]) == "a:echo:room"


def _unread(fd: int) -> int:
    """Bytes written to a pipe and not read yet (asked of either end)."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


def _until_read(process: subprocess.Popen[bytes]) -> None:
    """Until the gateway read every line sent to it (over a megabyte here, a while on a loaded machine)."""
    assert process.stdin is not None
    deadline = time.monotonic() + WAIT_S
    while _unread(process.stdin.fileno()):
        assert time.monotonic() < deadline, "the gateway stopped reading its input"
        time.sleep(0.05)


def test_cancelled_requests_hold_their_place_in_the_bound_until_the_gateway_let_go_of_them(tmp_path: Path) -> None:
    """A cancel freed its request's place at once, while the gateway still held the call: here each waits to tell
    a server that stopped reading that it was cancelled (the SDK gives that 5 s). Cancelling and sending again, a
    client had thousands of calls held at once past the bound of 1,000."""
    extra = range(MAX_UNANSWERED + 1, MAX_UNANSWERED + 4)
    with _gateway(tmp_path) as process, _bounded(process):
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        [pid] = marker_pids(tmp_path / "pids")
        os.kill(pid, signal.SIGSTOP)  # it reads nothing more: its stdin fills, and every write to it waits
        woken = threading.Timer(3, os.kill, (pid, signal.SIGCONT))
        try:
            _send(process, *(_call(i, "echo", text="x" * 1000) for i in range(1, MAX_UNANSWERED + 1)))
            _until_read(process)
            time.sleep(1)  # every call is being written to the server by now
            cancels = (
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": i}}
                for i in range(1, MAX_UNANSWERED + 1)
            )
            _send(process, *cancels, *(_call(i, "echo", text="over") for i in extra))
            woken.start()  # in 3 s the server reads again: the cancelled calls end, and make room
            answers = _answers(_until(process, lambda m: m.get("id") == extra[0]))
            assert "requests of this client in flight" in str(answers[extra[0]]), answers
            woken.join()
            deadline = time.monotonic() + WAIT_S
            while True:
                _send(process, _call(0, "echo", text="room"))
                answer = _until(process, lambda m: m.get("id") == 0)[-1]
                if "result" in answer or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert _text(answer["result"]) == "a:echo:room"
        finally:
            woken.cancel()
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)


def test_a_request_id_already_in_flight_is_refused_and_a_cancel_of_it_reaches_the_first_call(tmp_path: Path) -> None:
    """As over HTTP. Before, the second request took the first one's place: both ran, and a cancel of that id
    reached the second only; the first ran on and was answered after its client had cancelled it."""
    with _gateway(tmp_path) as process, _bounded(process):
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        _send(process, _call(1, "sleep", seconds=60))
        _started(process, 1)
        _send(process, _call(1, "sleep", seconds=0.1), _call("1", "echo", text="same id"))  # type: ignore[arg-type]
        refused = [m for m in _until(process, lambda m: m.get("id") == "1") if "id" in m]
        assert [(m["id"], m["error"]["code"]) for m in refused] == [(1, -32600), ("1", -32600)]
        assert refused[0]["error"]["message"] == "Invalid Request: a request with id 1 is in flight; use a new id"
        _send(process, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        _send(process, _call(1, "echo", text="after"))  # the id is free again once cancelled
        [answer] = [m for m in _until(process, lambda m: "id" in m) if "id" in m]
        assert _text(answer["result"]) == "a:echo:after"
        log = tmp_path / "logs" / "a.log"
        deadline = time.monotonic() + WAIT_S
        while "cancelled request" not in log.read_text() and time.monotonic() < deadline:  # the first call's
            time.sleep(0.02)
        assert "cancelled request" in log.read_text()


async def test_a_clients_answer_to_a_request_of_the_gateways_is_not_waited_for_as_one_of_its_requests() -> None:
    """The ledger of requests read counts requests only: the client's answer to the gateway's own request (sampling,
    in the gateway's ids, here the same id as one of the client's) was counted, and a stop waited for it in vain."""
    unanswered = Unanswered()
    unanswered.read({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}})
    unanswered.read({"jsonrpc": "2.0", "id": 1, "result": {"role": "assistant"}})
    unanswered.answered(1)
    with anyio.fail_after(WAIT_S):
        await unanswered.settle(timeout_s=WAIT_S * 2)


async def test_a_cancelled_request_frees_its_id_at_once_and_its_place_once_let_go_of() -> None:
    unanswered = Unanswered()
    unanswered.read({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}})
    unanswered.read({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    assert not unanswered.in_flight(1)
    assert unanswered.count == 1
    unanswered.read({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}})  # the id again
    await unanswered.settled(1)()  # the SDK let go of the first
    assert (unanswered.count, unanswered.in_flight(1)) == (1, True)
    unanswered.answered(1)
    assert (unanswered.count, unanswered.in_flight(1)) == (0, False)


def test_courtesy_cancels_that_give_up_are_logged_once_per_burst_per_server(tmp_path: Path) -> None:
    """A server that stopped reading its input cannot be told that calls to it were cancelled: the SDK gives up
    on each after 5 s and logged one WARNING line per call, a thousand lines for a thousand cancels. The first is
    said, naming the server, and the rest of the burst as one count."""
    with _gateway(tmp_path) as process, _bounded(process):
        _send(process, *_HELLO)
        _until(process, lambda m: m.get("id") == 0)
        [pid] = marker_pids(tmp_path / "pids")
        os.kill(pid, signal.SIGSTOP)  # it reads nothing more: its stdin fills, and every write to it waits
        try:
            _send(process, *(_call(i, "echo", text="x" * 1000) for i in range(1, 201)))
            _until_read(process)
            time.sleep(1)  # every call is being written to the server by now
            _send(
                process,
                *(
                    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": i}}
                    for i in range(1, 201)
                ),
            )
            stderr = tmp_path / "gateway.stderr"
            deadline = time.monotonic() + WAIT_S
            while sum(_more_give_ups(stderr)) < 199 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            os.kill(pid, signal.SIGCONT)
    said = [line for line in stderr.read_text().splitlines() if "gave up" in line]
    first = [line for line in said if not re.search(r": \d+ more ", line)]
    assert len(first) == 1, said[:5]
    assert "to server 'a' gave up: transport write blocked" in first[0]
    assert sum(_more_give_ups(stderr)) == 199, said  # (one line, but on a loaded machine the cancels may spread)
    assert len(said) <= 3, said


def _more_give_ups(stderr: Path) -> list[int]:
    """The counts of the lines that say how many more courtesy cancels to server 'a' gave up."""
    pattern = r": (\d+) more courtesy cancels to server 'a' gave up: transport write blocked$"
    return [int(m.group(1)) for line in stderr.read_text().splitlines() if (m := re.search(pattern, line))]
