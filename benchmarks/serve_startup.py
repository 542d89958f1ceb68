"""A gateway's launch: ``mcpvisor serve --http`` until a client lists every server's tools.

The host starts its servers before the SDK is loaded: its first starts (as many as may start at once) spawn their
server, then import the SDK in a worker thread, so the servers start while the import runs
(:func:`mcpvisor.core.processes.loading_sdk`). Measured per launch, from the moment the process is created: when
its first server process appears, when its port accepts, when a client (already connected to nothing, its own
imports done) has listed every server's tools. Two kinds of servers: the stdlib example server, ready in about
30 ms of CPU, and the same behind ``sleep 0.5`` (a server that waits before it is ready, as ``npx`` does while it
checks its package). Servers: 10 light, 4 slow; the start bound is the default (the number of cores).

``--baseline PATH`` runs another checkout's ``src`` folder the same way, interleaved (e.g. a ``git worktree`` of
an earlier commit), with the ratio baseline / this checkout per pair of launches.

Run: ``.venv/bin/python benchmarks/serve_startup.py [--launches 7] [--baseline /tmp/base/src]``
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from _common import Stats, Table, print_header
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

import mcpvisor

LIGHT = "mcpvisor.examples.light_server"
DEADLINE_S = 60.0


@dataclass(frozen=True, slots=True)
class Launch:
    first_spawn_ms: float
    port_ms: float
    listed_ms: float


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _settings(count: int, slow_s: float) -> dict[str, object]:
    servers: dict[str, object] = {}
    for i in range(count):
        argv = [sys.executable, "-m", LIGHT, "--name", f"s{i}"]
        if slow_s:
            argv = ["/bin/sh", "-c", f'sleep {slow_s}; exec "$0" "$@"', *argv]
        servers[f"s{i}"] = {"command": argv[0], "args": argv[1:]}
    return {"mcpServers": servers}


async def _until_listed(url: str, count: int, deadline: float) -> None:
    while True:
        try:
            async with streamable_http_client(url) as (read, write, *_), ClientSession(read, write) as client:
                await client.initialize()
                while True:
                    tools = (await client.list_tools()).tools
                    if len({t.name.split("__")[1] for t in tools if t.name.startswith("mcp__")}) >= count:
                        return
                    await asyncio.sleep(0.02)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)


def launch_once(src: Path | None, count: int, slow_s: float) -> Launch:
    folder = Path(tempfile.mkdtemp(prefix="mcpvisor-bench-serve-"))
    home = folder / "home" / ".mcpvisor"
    home.mkdir(parents=True)
    (folder / "ws").mkdir()
    (home / "settings.json").write_text(json.dumps(_settings(count, slow_s)))
    port = _free_port()
    env = {
        **os.environ,
        "HOME": str(folder / "home"),
        "MCPVISOR_HOME": str(home),
        "MCPVISOR_LOG_DIR": str(folder / "logs"),
        "MCPVISOR_SYSTEM_DEFAULTS_PATH": str(folder / "etc" / "system-defaults.json"),
        "MCPVISOR_SYSTEM_SETTINGS_PATH": str(folder / "etc" / "settings.json"),
    }
    env.pop("MCPVISOR_GATEWAY_TOKEN", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    argv = [sys.executable, "-m", "mcpvisor", "serve", "--http", f"127.0.0.1:{port}", "--no-auth"]
    started = time.perf_counter()
    process = subprocess.Popen(
        [*argv, "--workspace", str(folder / "ws")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    first_spawn: list[float] = []

    def watch_children() -> None:
        gateway = psutil.Process(process.pid)
        while not first_spawn and process.poll() is None:
            try:
                if gateway.children():
                    first_spawn.append(time.perf_counter() - started)
            except psutil.Error:
                return
            time.sleep(0.002)

    watcher = threading.Thread(target=watch_children, daemon=True)
    watcher.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway did not listen (exit code {process.poll()})") from None
                time.sleep(0.003)
        port_s = time.perf_counter() - started
        asyncio.run(_until_listed(f"http://127.0.0.1:{port}/mcp", count, deadline))
        listed_s = time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(timeout=DEADLINE_S)
        watcher.join(timeout=1)
        shutil.rmtree(folder, ignore_errors=True)
    return Launch((first_spawn or [float("nan")])[0] * 1000, port_s * 1000, listed_s * 1000)


def _cell(values: list[float]) -> str:
    stats = Stats.of(values)
    return f"{stats.median:,.0f} ({stats.min:,.0f}-{stats.max:,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=7, help="launches per kind of server and checkout (default 7)")
    parser.add_argument("--baseline", type=Path, help="another checkout's src folder, run the same way, interleaved")
    args = parser.parse_args()
    here = Path(mcpvisor.__file__).parent
    compileall.compile_dir(here, quiet=1)  # as an installed wheel has it (this machine may not write bytecode)
    if args.baseline is not None:
        compileall.compile_dir(args.baseline, quiet=1)
    print_header(
        "mcpvisor serve: launch -> every server's tools listed",
        f"checkout: {here.parent}",
        f"baseline: {args.baseline or '-'}",
        f"launches: {args.launches} per kind and checkout, interleaved",
        f"start bound: the default (the number of cores, {os.cpu_count()})",
    )
    kinds = [("10 light servers (~30 ms)", 10, 0.0), ("4 servers ready after 0.5 s", 4, 0.5)]
    for label, count, slow_s in kinds:
        runs: dict[str, list[Launch]] = {"this checkout": [], "baseline": []}
        for _ in range(args.launches):
            runs["this checkout"].append(launch_once(None, count, slow_s))
            if args.baseline is not None:
                runs["baseline"].append(launch_once(args.baseline, count, slow_s))
        table = Table(
            f"{label}: ms from launch, median (min-max)",
            ["checkout", "first server spawned", "port accepts", "tools listed", "note"],
        )
        for name, launches in runs.items():
            if launches:
                cells = [_cell([getattr(x, f) for x in launches]) for f in ("first_spawn_ms", "port_ms", "listed_ms")]
                table.add(name, *cells, "")
        if runs["baseline"]:
            pairs = zip(runs["baseline"], runs["this checkout"], strict=True)
            ratio = statistics.median(b.listed_ms / h.listed_ms for b, h in pairs)
            table.rows[-1][-1] = f"baseline / this checkout, tools listed: {ratio:.2f} (median of pairs)"
        table.print()


if __name__ == "__main__":
    main()
