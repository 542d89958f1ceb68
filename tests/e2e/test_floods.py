"""Servers that flood the host: notifications in a tight loop, or requests while they never read their input.
Real processes; the gateway runs as ``mcpvisor serve`` itself (its event loop is uvloop's where installed)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio

from mcpvisor.core.client import McpClient
from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from tests.helpers import LIGHT, free_port, marker_pids, mcpvisor_command, pid_alive, wait_until
from tests.layout import make_layout, replace_text

FLOODING_SERVER = """
import json, os, sys, threading, time
mode, marker = sys.argv[1], sys.argv[2]
with open(marker, "a") as f:
    f.write(f"{os.getpid()}\\n")
out, lock = sys.stdout.buffer, threading.Lock()

def send(message):
    with lock:
        out.write((json.dumps(message) + "\\n").encode())
        out.flush()

def flood():
    i = 0
    while True:
        i += 1
        if mode == "progress":
            params = {"progressToken": f"t{i}", "progress": i}
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        else:
            text = {"type": "text", "text": "hi"}
            params = {"messages": [{"role": "user", "content": text}], "maxTokens": 5}
            send({"jsonrpc": "2.0", "id": i, "method": "sampling/createMessage", "params": params})

for line in sys.stdin.buffer:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "flood", "version": "1"}}
        send({"jsonrpc": "2.0", "id": mid, "result": result})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}})
        threading.Thread(target=flood, daemon=True).start()
        if mode == "requests":
            time.sleep(3600)  # and never reads its input again
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
"""


def flooding(tmp_path: Path, mode: str) -> tuple[dict[str, object], Path]:
    script, marker = tmp_path / "flood.py", tmp_path / f"{mode}.pids"
    script.write_text(FLOODING_SERVER)
    return {"command": sys.executable, "args": [str(script), mode, str(marker)]}, marker


async def test_a_gateway_beside_a_server_flooding_notifications_stops_on_sigterm_and_stops_it(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    flood, marker = flooding(tmp_path, "progress")
    light = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "light"]}
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"light": light, "flood": flood}}))
    port = free_port()
    command = [mcpvisor_command(), "serve", "--workspace", str(layout.root), "--http", f"127.0.0.1:{port}", "--no-auth"]
    with (tmp_path / "gateway.err").open("w") as err:
        gateway = subprocess.Popen(  # noqa: ASYNC220 - started once, then polled
            command, env={**os.environ, **layout.env}, stdout=subprocess.DEVNULL, stderr=err
        )
        try:
            await wait_until(lambda: "serving" in (tmp_path / "gateway.err").read_text(), timeout_s=60)
            await anyio.sleep(2)  # flooding all along
            gateway.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            await wait_until(lambda: gateway.poll() is not None, timeout_s=40, what="the gateway stopped")
        finally:
            if gateway.poll() is None:
                gateway.kill()
    assert time.monotonic() - stopped < 40
    [pid] = marker_pids(marker)
    await wait_until(lambda: not pid_alive(pid), what="the flooding server stopped with it")


async def test_a_server_that_stops_reading_while_it_floods_requests_is_dropped_naming_why(tmp_path: Path) -> None:
    flood, _ = flooding(tmp_path, "requests")
    server = McpServerConfig(**flood)
    said: list[str] = []

    def dropped(client: McpClient) -> bool:
        if "stopped reading its input" in (client.last_error or ""):
            said.append(client.last_error or "")
        return bool(said)

    async with Config(mcp_servers={"flood": server}, options=ConnectionOptions(log_dir=tmp_path)) as config:
        await config.initialize()
        client = config.manager.clients()["flood"]
        await wait_until(lambda: dropped(client), timeout_s=60, what="it was dropped")
    assert re.search(r"server 'flood' stopped reading its input while [\d,]+ messages waited to reach it", said[0])
