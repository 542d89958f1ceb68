"""Hostile input, the long parts: what misbehaving servers and junk saves cost the host over time.

1. **Crash loop** — a server that exits 0.3 s after it starts, beside a good one, for ``--window``
   seconds: how many times it is restarted (bounded exponential backoff, then it is left down), the
   host's CPU share over the window, and whether the good server kept its process.
2. **Stderr flood** — a server that writes to its stderr as fast as the pipe takes it: the host's CPU
   share, the log's size (capped at 5 MB, rotated once to
   ``NAME.log.1``), and a call to the flooding server itself still answering.
3. **Junk saves** — ``--rounds`` saves of the settings file with junk (truncated, binary, 50 MB,
   100k-deep, a directory, deleted) and a good save after each, while three servers run: restarts
   (target 0), and the time each junk save takes to be reported.
4. **Concurrent approvals** — 8 processes each approving or rejecting 50 servers at once: lost
   records (target 0) and decisions per second.

Run: ``.venv/bin/python benchmarks/hostile.py [--window 60] [--rounds 20]``
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio
import psutil
from _common import Table, light, print_header, run, temp_log_dir, verdict

from mcpvisor.core.config import Config
from mcpvisor.core.reconnects import MAX_RECONNECT_ATTEMPTS
from mcpvisor.core.server_config import ConnectionOptions
from mcpvisor.core.server_log import LOG_BACKUPS, LOG_MAX_BYTES, LOG_RATE_BYTES_PER_S
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.host import Host, HostOptions
from mcpvisor.host.settings.files import SettingsError

MB = 1024 * 1024
CPU_TARGET = 0.10
"""The host's CPU share a misbehaving server may cost at most (of one core)."""


def cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


def marker_count(path: Path) -> int:
    return len(path.read_text().split("\n")) - 1 if path.exists() else 0


async def crash_loop(window_s: float, table: Table) -> None:
    with temp_log_dir() as logs, tempfile.TemporaryDirectory() as scratch:
        marker, good_marker = Path(scratch) / "crashy", Path(scratch) / "good"
        servers = {
            "crashy": light("crashy", "--exit-after", "0.3", "--marker", str(marker)),
            "good": light("good", "--marker", str(good_marker)),
        }
        async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=logs)) as config:
            await config.initialize()
            cpu, started = cpu_seconds(), time.perf_counter()
            await anyio.sleep(window_s)
            share = (cpu_seconds() - cpu) / (time.perf_counter() - started)
            starts = marker_count(marker)
            good_kept = marker_count(good_marker) == 1
        table.add(
            "crash loop (exits 0.3 s after start)",
            verdict(share <= CPU_TARGET and good_kept and starts <= MAX_RECONNECT_ATTEMPTS + 1),
            f"{starts} starts in {window_s:g} s (cap {MAX_RECONNECT_ATTEMPTS + 1}); host CPU {share:.1%}; "
            f"other server kept its process: {'yes' if good_kept else 'NO'}",
        )


async def stderr_flood(window_s: float, table: Table) -> None:
    with temp_log_dir() as logs:
        servers = {"loud": light("loud", "--flood-stderr")}
        async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=logs)) as config:
            await config.initialize()
            cpu, started = cpu_seconds(), time.perf_counter()
            await anyio.sleep(window_s)
            elapsed = time.perf_counter() - started
            share = (cpu_seconds() - cpu) / elapsed
            with anyio.fail_after(10):
                answer = await config.call_tool("mcp__loud__echo", {"text": "still here"})
            log = logs / "loud.log"
            sizes = [p.stat().st_size for p in (log, log.with_name("loud.log.1")) if p.exists()]
            ok_answer = "still here" in str(answer.content[0])
        table.add(
            "stderr flood",
            verdict(share <= CPU_TARGET and max(sizes) <= LOG_MAX_BYTES and ok_answer),
            f"host CPU {share:.1%} (copying at most {LOG_RATE_BYTES_PER_S / MB:g} MB/s); "
            f"log files {', '.join(f'{s / MB:.1f} MB' for s in sizes)} (cap {LOG_MAX_BYTES / MB:g} MB + "
            f"{LOG_BACKUPS} rotated); a call still answered: {'yes' if ok_answer else 'NO'}",
        )


def junk(path: Path, kind: str) -> None:
    if kind == "truncated":
        text = path.read_bytes()
        path.write_bytes(text[: len(text) // 2])
    elif kind == "binary":
        path.write_bytes(os.urandom(4096))
    elif kind == "50 MB":
        path.write_bytes(b'{"x": "' + b"x" * (50 * MB) + b'"}')
    elif kind == "100k-deep":
        path.write_text("[" * 100_000)
    elif kind == "directory":
        path.unlink()
        path.mkdir()


JUNK = ("truncated", "binary", "50 MB", "100k-deep", "directory")


async def junk_saves(rounds: int, table: Table) -> None:
    with tempfile.TemporaryDirectory() as scratch, temp_log_dir() as logs:
        base = Path(scratch)
        home, root = base / "home", base / "ws"
        root.mkdir()
        env = {"HOME": str(home), "MCPVISOR_HOME": str(home / ".mcpvisor"), "MCPVISOR_LOG_DIR": str(logs)}
        env |= {"MCPVISOR_SYSTEM_DEFAULTS_PATH": str(base / "none.json"), "PATH": os.environ.get("PATH", "")}
        user = home / ".mcpvisor" / "settings.json"
        user.parent.mkdir(parents=True)
        servers = {n: {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server"]} for n in "abc"}
        good = json.dumps({"mcpServers": servers})
        user.write_text(good)
        errors: list[float] = []
        seen = anyio.Event()

        def on_event(event: object) -> None:
            if isinstance(event, SettingsError):
                seen.set()

        host = Host(HostOptions(env=env, workspace=root))
        host.subscribe(on_event)
        async with host:
            pids = {n: c.pid for n, c in host.config.manager.clients().items()}
            for i in range(rounds):
                kind = JUNK[i % len(JUNK)]
                seen = anyio.Event()
                started = time.perf_counter()
                junk(user, kind)
                with anyio.fail_after(30):
                    await seen.wait()
                errors.append(time.perf_counter() - started)
                if user.is_dir():
                    shutil.rmtree(user)
                tmp = user.with_name(".settings.json.tmp")
                tmp.write_text(good)
                os.replace(tmp, user)
                await anyio.sleep(0.5)  # past the watcher's debounce: the good save is read on its own
            restarted = sum(1 for n, c in host.config.manager.clients().items() if c.pid != pids[n])
        errors.sort()
        table.add(
            f"{rounds} junk saves ({', '.join(JUNK)}) with 3 servers running",
            verdict(restarted == 0),
            f"{restarted} restarts; each reported in {errors[len(errors) // 2] * 1000:.0f} ms median "
            f"(max {errors[-1] * 1000:.0f} ms, the 300 ms debounce included)",
        )


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


async def approvals(table: Table, workers: int = 8, rounds: int = 50) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        base = await anyio.Path(scratch).resolve()
        store_path, root = Path(scratch) / "home" / "approvals.json", Path(base) / "ws"
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for worker in range(workers):
                command = [sys.executable, "-c", DECIDER, str(store_path), str(root), str(worker), str(rounds)]
                tg.start_soon(functools.partial(anyio.run_process, command, check=True))
        elapsed = time.perf_counter() - started
        records = ApprovalStore(store_path).snapshot().get(str(root), {})
        lost = workers * rounds - len(records)
        wrong = sum(
            1
            for w in range(workers)
            for i in range(rounds)
            if (r := records.get(f"w{w}-{i}")) is not None and r.status != ("approved" if (w + i) % 2 else "rejected")
        )
        table.add(
            f"{workers} processes × {rounds} approve/reject at once",
            verdict(lost == 0 and wrong == 0),
            f"{lost} lost, {wrong} wrong of {workers * rounds}; {workers * rounds / elapsed:.0f} decisions/s "
            "(process start-up included)",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=60.0, help="seconds to watch each misbehaving server")
    parser.add_argument("--rounds", type=int, default=20, help="junk saves")
    args = parser.parse_args()
    print_header("hostile input: misbehaving servers and junk saves")
    table = Table("hostile input", ["case", "target", "result"])

    async def go() -> None:
        await crash_loop(args.window, table)
        await stderr_flood(min(args.window, 20.0), table)
        await junk_saves(args.rounds, table)
        await approvals(table)
        table.print()

    run(go)


if __name__ == "__main__":
    main()
