"""A fake language server for the tests: stdlib only, run as ``python fake_lsp.py [--stubborn]``.

It answers what it is sent, one message at a time:

- ``initialize`` -> capabilities; ``shutdown`` -> null; the ``exit`` notification ends it (code 0);
- ``echo`` -> its params; ``fail`` -> an error with the params' ``code``, ``message`` and ``data``;
- ``park`` -> held, and a ``parked`` notification ``{"id": ID}`` says so; ``flush`` answers every held
  request (newest first, each with its params' ``n``), then itself; ``$/cancelRequest`` answers a held
  request with -32800 and sends a ``cancelled`` notification ``{"id": ID}``;
- ``ask`` ``{"method", "params"}`` -> sends that request to the client and answers with the client's
  answer (``{"result": ...}`` or ``{"error": ...}``);
- ``notify`` ``{"notifications": [[method, params], ...]}`` -> sends them, then answers null;
- ``oversize`` / ``malformed`` / ``long-header`` -> writes a header the client must refuse;
- ``spawn`` -> starts a grandchild and answers ``{"server": PID, "grandchild": PID}``.

``--stubborn``: it and its grandchild ignore SIGTERM, and it ignores ``exit`` and the end of its input.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, BinaryIO

STUBBORN = "--stubborn" in sys.argv[1:]
GRANDCHILD = """
import signal, sys, time
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(3600)
"""
grandchildren: list[subprocess.Popen[bytes]] = []


def read_message(stream: BinaryIO) -> dict[str, Any] | None:
    length = 0
    while line := stream.readline():
        if not line.strip():
            message: dict[str, Any] = json.loads(stream.read(length))
            return message
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return None


def write(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def send(message: dict[str, Any]) -> None:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    write(b"Content-Length: %d\r\n\r\n%b" % (len(body), body))


def spawn_grandchild() -> int:
    child = subprocess.Popen(
        [sys.executable, "-c", GRANDCHILD, "stubborn" if STUBBORN else "polite"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert child.stdout is not None
    child.stdout.readline()  # it ignores SIGTERM by now
    grandchildren.append(child)
    return child.pid


def main() -> int:
    if STUBBORN:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parked: list[tuple[Any, Any]] = []
    asking: dict[str, Any] = {}  # the id of a request to the client -> the id of the "ask" waiting for it
    while (message := read_message(sys.stdin.buffer)) is not None:
        method, request_id, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method is None:  # the client's answer to an "ask"
            answer = {key: message[key] for key in ("result", "error") if key in message}
            send({"id": asking.pop(str(request_id)), "result": answer})
        elif method == "exit":
            if not STUBBORN:
                return 0
        elif method == "$/cancelRequest":
            for held in [held for held in parked if held[0] == params["id"]]:
                parked.remove(held)
                send({"id": held[0], "error": {"code": -32800, "message": "cancelled"}})
                send({"method": "cancelled", "params": {"id": held[0]}})
        elif method == "initialize":
            send({"id": request_id, "result": {"capabilities": {"hoverProvider": True}}})
        elif method == "shutdown":
            send({"id": request_id, "result": None})
        elif method == "echo":
            send({"id": request_id, "result": params})
        elif method == "fail":
            send({"id": request_id, "error": params})
        elif method == "park":
            parked.append((request_id, params.get("n")))
            send({"method": "parked", "params": {"id": request_id}})
        elif method == "flush":
            while parked:
                held_id, n = parked.pop()
                send({"id": held_id, "result": n})
            send({"id": request_id, "result": None})
        elif method == "ask":
            asking[f"s{request_id}"] = request_id
            send({"id": f"s{request_id}", "method": params["method"], "params": params.get("params")})
        elif method == "notify":
            for name, notification_params in params["notifications"]:
                send({"method": name, "params": notification_params})
            send({"id": request_id, "result": None})
        elif method == "oversize":
            write(b"Content-Length: 999999999999\r\n\r\n")
        elif method == "odd-bytes":  # a byte that is not UTF-8 and a lone surrogate escape, as some servers write
            body = b'{"jsonrpc": "2.0", "id": %d, "result": {"name": "caf\xe9 caf\\udce9.txt"}}' % int(str(request_id))
            write(b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
        elif method == "malformed":
            write(b"Content-Type: application/vscode-jsonrpc\r\n\r\n{}")
        elif method == "long-header":
            write(b"X-Padding: " + b"x" * 10_000)
        elif method == "spawn":
            send({"id": request_id, "result": {"server": os.getpid(), "grandchild": spawn_grandchild()}})
        elif request_id is not None:
            send({"id": request_id, "error": {"code": -32601, "message": f"unknown method {method}"}})
    while STUBBORN:
        signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
