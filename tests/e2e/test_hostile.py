"""Hostile input and misbehaving servers against ``mcpvisor run --json`` and the management commands.

The fast subset of the hostile-input suite (``benchmarks/hostile.py`` runs the long parts and prints
their figures): junk saves of the settings file while three servers run, servers that crash in a
loop, flood their stderr, write garbage to stdout or never answer, a secret marker that must never
be printed or logged, and eight processes deciding approvals at once."""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpvisor.core.server_config import ConnectionOptions
from mcpvisor.core.server_log import LOG_MAX_BYTES
from mcpvisor.host.approvals import ApprovalStore
from tests.e2e.test_run import run, server
from tests.helpers import LIGHT, WAIT_S, marker_pids, mcpvisor_command, wait_until
from tests.layout import make_layout, replace_text

# -- junk saves -----------------------------------------------------------------------------------


def junk_saves(path: Path) -> list[tuple[str, Any]]:
    """(what, how to do it) for each kind of bad save of ``path``."""

    def truncated() -> None:
        text = path.read_bytes()
        path.write_bytes(text[: len(text) // 2])

    def binary() -> None:
        path.write_bytes(bytes(range(256)) * 64)

    def huge() -> None:
        with path.open("wb") as fh:
            fh.write(b'{"mcpServers": {}, "padding": "')
            fh.write(b"x" * (50 * 1024 * 1024))
            fh.write(b'"}')

    def deep() -> None:
        path.write_text('{"mcpServers": ' + "[" * 100_000 + "]" * 100_000 + "}")

    def directory() -> None:
        path.unlink()
        path.mkdir()

    def mode_000() -> None:
        path.chmod(0)

    return [
        ("truncated", truncated),
        ("binary junk", binary),
        ("50 MB", huge),
        ("100k-deep nesting", deep),
        ("a directory in its place", directory),
        ("mode 000", mode_000),
    ]


def restore(path: Path, data: dict[str, Any]) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    if path.exists():
        path.chmod(0o600)
    replace_text(path, json.dumps(data, indent=2))


async def test_junk_saves_of_the_settings_file_keep_every_server_running(tmp_path: Path) -> None:
    markers = {n: tmp_path / f"{n}.pids" for n in "abc"}
    servers = {n: server(n, markers[n]) for n in "abc"}
    good = {"mcpServers": servers}
    async with run(tmp_path, user=good) as r:
        await r.wait_for(lambda: all(r.status(n) == "connected" for n in "abc"))
        pids = {n: marker_pids(m) for n, m in markers.items()}
        path = r.layout.paths.user
        toggle = False
        for what, damage in junk_saves(path):
            errors = len(r.of("settings_error"))
            damage()
            as_root_and_readable = what == "mode 000" and os.geteuid() == 0
            if not as_root_and_readable:  # root reads a mode-000 file: nothing is wrong with it then
                await r.wait_for(lambda errors=errors: len(r.of("settings_error")) > errors)  # type: ignore[misc]
                error = r.of("settings_error")[-1]
                assert error["path"] == str(path), what
                assert "Traceback" not in error["message"]
            # Put the good file back with a fourth server toggled: its reconcile says the save was read.
            toggle = not toggle
            saved = {"mcpServers": {**servers, **({"d": server("d", tmp_path / "d.pids")} if toggle else {})}}
            await r.next_reconcile(lambda saved=saved: restore(path, saved))  # type: ignore[misc]
            assert {n: marker_pids(m) for n, m in markers.items()} == pids, what
        # An editor that deletes the file and writes it again at once: nothing restarts either.
        before = len(r.of("reconcile"))
        path.unlink()
        path.write_text(json.dumps({"mcpServers": {**servers, "d": server("d", tmp_path / "d.pids")}}))
        await r.wait_for(lambda: len(r.of("reconcile")) > before)
        assert {n: marker_pids(m) for n, m in markers.items()} == pids
        assert r.process.returncode is None


# -- misbehaving servers --------------------------------------------------------------------------


def light(name: str, marker: Path, *args: str, **fields: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", LIGHT, "--name", name, "--marker", str(marker), *args], **fields}


async def test_servers_that_crash_flood_write_garbage_or_hang_never_disturb_the_others(tmp_path: Path) -> None:
    m = {n: tmp_path / f"{n}.pids" for n in ("good", "crashy", "loud", "garbled", "stuck")}
    servers = {
        "good": light("good", m["good"]),
        # Up long enough to finish starting on a loaded machine, then it crashes: a process that exits during its
        # start is a failed start, said and left down (not a crash loop).
        "crashy": light("crashy", m["crashy"], "--exit-after", "1.5"),
        "loud": light("loud", m["loud"], "--flood-stderr"),
        "garbled": light("garbled", m["garbled"], "--garbage-stdout"),
        "stuck": light("stuck", m["stuck"], "--hang-on-initialize", discoveryTimeoutMs=1500),
    }
    async with run(tmp_path, user={"mcpServers": servers}) as r:
        await r.wait_for(lambda: r.status("good") == "connected" and r.status("garbled") == "connected")
        assert r.last_server("garbled")["tools"] == ["mcp__garbled__echo"]  # type: ignore[index]
        await r.wait_for(lambda: (r.last_server("stuck") or {}).get("error") is not None)
        assert "no answer within 1.5 s" in r.last_server("stuck")["error"]  # type: ignore[index]
        assert "set mcpServers.stuck.discoveryTimeoutMs" in r.last_server("stuck")["error"]  # type: ignore[index]
        # The crashing server is restarted, with a growing pause between tries.
        await wait_until(lambda: len(marker_pids(m["crashy"])) >= 3, timeout_s=WAIT_S * 2)
        # The flooding one stays connected; its log is capped, private, and rotates.
        await r.wait_for(lambda: r.status("loud") == "connected")
        log = tmp_path / "logs" / "loud.log"
        await wait_until(lambda: log.exists() and log.stat().st_size > 512 * 1024)
        assert log.stat().st_size <= LOG_MAX_BYTES
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        # Nothing restarted the well-behaved servers meanwhile.
        assert len(marker_pids(m["good"])) == 1
        assert len(marker_pids(m["garbled"])) == 1
        assert r.status("good") == "connected"
        assert r.status("garbled") == "connected"
        assert r.process.returncode is None


# -- a secret never shows -------------------------------------------------------------------------

SECRET = "s3cr3t-MARKER-7b1e"


async def test_a_secret_in_env_headers_url_credentials_or_query_never_appears_in_any_output_or_log(
    tmp_path: Path,
) -> None:
    servers = {
        "local": light("local", tmp_path / "local.pids", env={"API_KEY": SECRET}),
        "remote": {
            "type": "http",
            "url": f"http://user:{SECRET}@127.0.0.1:9/mcp?token={SECRET}&plain=1",
            "headers": {"Authorization": f"Bearer {SECRET}", "X-Api-Key": SECRET},
        },
        "sse": {"type": "sse", "url": f"http://127.0.0.1:9/sse?api_key={SECRET}"},
        "keyed": {"type": "http", "url": "http://127.0.0.1:9/mcp/${PATH_KEY}"},  # set for status -vv below
    }
    project = {"mcpServers": {"proj": light("proj", tmp_path / "proj.pids", env={"TOKEN": SECRET})}}
    outputs: list[str] = []
    async with run(tmp_path, user={"mcpServers": servers}, project=project) as r:
        await r.wait_for(lambda: r.status("local") == "connected")
        await r.wait_for(lambda: (r.last_server("remote") or {}).get("error") is not None)
        await r.wait_for(lambda: (r.last_server("sse") or {}).get("error") is not None)
        for args in (
            ("status",),
            ("status", "--json"),
            ("mcp", "list"),
            ("mcp", "list", "--json"),
            ("mcp", "approve", "proj"),
            ("mcp", "login", "remote", "--timeout", "1", "--no-browser"),
            ("mcp", "logout", "remote"),
            ("mcp", "remove", "nope"),
        ):
            result = await r.cli(*args)
            outputs += [result.stdout, result.stderr]
        await r.wait_for(lambda: r.status("proj") == "connected")
        outputs.append(json.dumps(r.events))
    layout = r.layout
    verbose = await anyio.run_process(
        [mcpvisor_command(), "status", "-vv", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env, "PATH_KEY": SECRET},  # the SDK logs the URL it connects to at -vv
        check=False,
    )
    outputs += [verbose.stdout.decode(), verbose.stderr.decode()]
    assert "remote" in verbose.stdout.decode()  # the commands did run and name the servers
    logged = [p.read_text(errors="replace") for p in (tmp_path / "logs").rglob("*") if p.is_file()]
    leaks = [text for text in (*outputs, *logged) if SECRET in text]
    assert not leaks, leaks[0][:2000]


# -- approvals from many processes at once --------------------------------------------------------

DECIDER = """
import sys
from pathlib import Path
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import ApprovalStore

store, root, worker, rounds = ApprovalStore(Path(sys.argv[1])), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for i in range(rounds):
    cfg = McpServerConfig.model_validate({"command": "server", "args": [str(worker), str(i)], "scope": "project"})
    (store.approve if (worker + i) % 2 else store.reject)(root, f"w{worker}-{i}", cfg)
"""


async def test_eight_processes_deciding_at_once_lose_no_record(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    store_path = Path(layout.env["MCPVISOR_HOME"]) / "approvals.json"
    workers, rounds = 8, 50
    async with anyio.create_task_group() as tg:
        for worker in range(workers):
            command = [sys.executable, "-c", DECIDER, str(store_path), str(layout.root), str(worker), str(rounds)]
            tg.start_soon(functools.partial(anyio.run_process, command, check=True))
    store = ApprovalStore(store_path)
    records = store.snapshot()[str(layout.root.resolve())]
    assert len(records) == workers * rounds
    for worker in range(workers):
        for i in range(rounds):
            expected = "approved" if (worker + i) % 2 else "rejected"
            assert records[f"w{worker}-{i}"].status == expected
    assert stat.S_IMODE(store_path.stat().st_mode) == 0o600


async def test_a_server_that_keeps_crashing_is_restarted_a_bounded_number_of_times_then_left_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpvisor.core import reconnects
    from mcpvisor.core.config import Config
    from mcpvisor.core.server_config import McpServerConfig

    monkeypatch.setattr(reconnects, "BACKOFF_INITIAL_S", 0.05)
    monkeypatch.setattr(reconnects, "MAX_RECONNECT_ATTEMPTS", 3)
    marker, good = tmp_path / "crashy.pids", tmp_path / "good.pids"
    servers = {
        # Long enough to finish starting on a loaded machine (under coverage), then it crashes.
        "crashy": McpServerConfig.model_validate(light("crashy", marker, "--exit-after", "1.5")),
        "good": McpServerConfig.model_validate(light("good", good)),
    }
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        await config.initialize()
        client = config.manager.get_client
        await wait_until(
            lambda: "left down after 4 stops within 30 s of starting" in (client("crashy").last_error or ""),  # type: ignore[union-attr]
            timeout_s=WAIT_S * 2,
        )
        assert len(marker_pids(marker)) == 4  # the first start and three restarts, no more
        assert config.manager.get_client("crashy").status == "disconnected"  # type: ignore[union-attr]
        assert len(marker_pids(good)) == 1
        assert "mcp__good__echo" in config.tool_registry.names()
        # A reload restarts it (a deliberate start counts afresh).
        await config.restart_mcp_servers()
        await wait_until(lambda: len(marker_pids(marker)) >= 5)


GARBLED_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Garbled(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b"<html>session=SECRET-IN-THE-ANSWER</html>"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send_response(405)
        self.end_headers()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Garbled)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def test_a_remote_servers_answer_that_is_not_json_rpc_is_named_not_quoted(tmp_path: Path) -> None:
    """The SDK's parse error quotes the answer (its transport logs it with a traceback): a session cookie or a
    token in an error page must not reach the terminal."""
    garbled = subprocess.Popen([sys.executable, "-c", GARBLED_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert garbled.stdout is not None
        url = f"http://127.0.0.1:{garbled.stdout.readline().strip()}/mcp"
        layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
        replace_text(layout.paths.user, json.dumps({"mcpServers": {"web": {"type": "http", "url": url}}}))
        result = subprocess.run(
            [mcpvisor_command(), "status", "--workspace", str(layout.root)],
            env={**os.environ, **layout.env, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        garbled.kill()
        garbled.communicate()
    assert result.returncode == 1
    said = result.stdout + result.stderr
    assert "answer to its start-up requests is not valid JSON-RPC (not shown)" in said
    assert "SECRET-IN-THE-ANSWER" not in said
    assert "Traceback" not in said
