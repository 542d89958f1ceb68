"""Endurance: hundreds of reload cycles leave no process, file descriptor, task or memory behind.

Five light servers ``base-0..4`` run under one ``Config``. Each cycle is one
``reinitialize_mcp_servers`` call that adds a server ``dyn-<i>``, removes ``dyn-<i-1>``, changes
the args of ``base-<i mod 5>`` and reverts the previous cycle's change; every fifth cycle also
toggles ``base-4`` in ``mcp.excluded`` (torn down, then reconnected five cycles later).

After 20 warm-up cycles the host's state is recorded (after ``gc.collect()``): descendant
processes (psutil), open file descriptors (``/proc/self/fd``), asyncio tasks, RSS. The same is
recorded after the measured cycles (same configuration shape: the same servers live) and once more
after the ``Config`` is closed, against the state before it was opened.

Targets: no leaked process (live descendants = live servers; none after close), no fd or task
growth, RSS growth < 5 MB.

Run: ``.venv/bin/python benchmarks/endurance.py [--cycles 200]``
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass

import anyio
from _common import (
    Table,
    child_processes,
    fd_count,
    light,
    print_header,
    rss_mb,
    run,
    stats_cells,
    temp_log_dir,
    verdict,
)
from _common import (
    settle_memory as _settle,
)

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig

WARMUP_CYCLES = 20
RSS_TARGET_MB = 5.0
BASE = [f"base-{i}" for i in range(5)]


@dataclass(frozen=True, slots=True)
class Snapshot:
    processes: int
    zombies: int
    fds: int
    tasks: int
    rss_mb: float
    live_servers: int


def snapshot(config: Config | None) -> Snapshot:
    _settle()
    children = child_processes()
    zombies = 0
    for child in children:
        try:
            zombies += child.status() == "zombie"
        except Exception:
            continue
    live = 0 if config is None else sum(1 for c in config.manager.clients().values() if c.status == "connected")
    return Snapshot(len(children), zombies, fd_count(), len(asyncio.all_tasks()), rss_mb(), live)


def servers_for(cycle: int) -> dict[str, McpServerConfig]:
    servers = {name: light(name) for name in BASE}
    changed = BASE[cycle % len(BASE)]
    servers[changed] = light(changed, "--tools", f"echo,c{cycle}")
    servers[f"dyn-{cycle}"] = light(f"dyn-{cycle}")
    return servers


def excluded_for(cycle: int) -> list[str] | None:
    """``base-4`` is excluded from cycles 10k+5 .. 10k+9 (toggled every fifth cycle)."""
    return ["base-4"] if cycle % 10 >= 5 else None


async def settle_tasks() -> None:
    """Let finished tasks be collected before counting."""
    for _ in range(5):
        await anyio.sleep(0.05)


async def bench(cycles: int) -> None:
    cycle_ms: list[float] = []
    checkpoints: list[tuple[int, float]] = []
    problems: list[str] = []

    await settle_tasks()
    before_config = snapshot(None)
    with temp_log_dir() as logs:
        async with Config(
            mcp_servers={name: light(name) for name in BASE}, options=ConnectionOptions(log_dir=logs)
        ) as config:
            await config.initialize()

            async def one(cycle: int) -> float:
                config.set_excluded_mcp_servers(excluded_for(cycle))
                t0 = time.perf_counter()
                await config.reinitialize_mcp_servers(servers_for(cycle))
                elapsed = (time.perf_counter() - t0) * 1000
                last = config.last_reconcile
                if last is None or last.failed:
                    problems.append(f"cycle {cycle}: failed servers {last.failed if last else '?'}")
                if f"dyn-{cycle - 1}" in config.manager.clients():
                    problems.append(f"cycle {cycle}: dyn-{cycle - 1} was not removed")
                return elapsed

            for cycle in range(WARMUP_CYCLES):
                await one(cycle)
            await settle_tasks()
            start = snapshot(config)
            connects = config.manager.connect_count
            t_start = time.perf_counter()
            for cycle in range(WARMUP_CYCLES, WARMUP_CYCLES + cycles):
                cycle_ms.append(await one(cycle))
                done = cycle - WARMUP_CYCLES + 1
                if done % 50 == 0:
                    _settle()
                    checkpoints.append((done, rss_mb() - start.rss_mb))
            total_s = time.perf_counter() - t_start
            await settle_tasks()
            end = snapshot(config)
            connects = config.manager.connect_count - connects
        await settle_tasks()
    after_config = snapshot(None)

    print(
        f"{cycles} cycles in {total_s:.1f} s; {connects} connections opened "
        f"({connects / cycles:.1f} per cycle: the added server, the changed and the reverted one, "
        "base-4 on re-admission, minus cycles where base-4 is excluded)"
    )
    print("RSS growth since the warm-up, every 50 cycles: " + ", ".join(f"{n}: {d:+.2f} MB" for n, d in checkpoints))
    print()

    per_cycle = Table(
        f"Endurance: {cycles} reload cycles (add + change + remove, exclusion toggle every 5th)",
        ["measurement", "median", "min", "max"],
        note_last=False,
    )
    per_cycle.add("one cycle's reinitialize_mcp_servers (ms)", *stats_cells(cycle_ms, 1))
    per_cycle.print()

    table = Table(
        "Host state (after gc.collect())",
        ["resource", "after warm-up", f"after {cycles} cycles", "delta", "config closed", "before config", "verdict"],
    )
    proc_ok = end.processes == end.live_servers and end.zombies == 0 and after_config.processes == 0
    table.add(
        "child processes (live servers)",
        f"{start.processes} ({start.live_servers})",
        f"{end.processes} ({end.live_servers})",
        f"{end.processes - start.processes:+d}",
        after_config.processes,
        before_config.processes,
        verdict(proc_ok, "leaked process"),
    )
    table.add(
        "zombie processes",
        start.zombies,
        end.zombies,
        f"{end.zombies - start.zombies:+d}",
        after_config.zombies,
        before_config.zombies,
        verdict(end.zombies == 0 and after_config.zombies == 0),
    )
    table.add(
        "open file descriptors",
        start.fds,
        end.fds,
        f"{end.fds - start.fds:+d}",
        after_config.fds,
        before_config.fds,
        verdict(end.fds <= start.fds and after_config.fds <= before_config.fds, "fd growth"),
    )
    table.add(
        "asyncio tasks",
        start.tasks,
        end.tasks,
        f"{end.tasks - start.tasks:+d}",
        after_config.tasks,
        before_config.tasks,
        verdict(end.tasks <= start.tasks and after_config.tasks <= before_config.tasks, "task growth"),
    )
    growth = end.rss_mb - start.rss_mb
    table.add(
        "RSS (MB)",
        f"{start.rss_mb:.1f}",
        f"{end.rss_mb:.1f}",
        f"{growth:+.2f}",
        f"{after_config.rss_mb:.1f}",
        f"{before_config.rss_mb:.1f}",
        f"< {RSS_TARGET_MB:g} MB growth: {verdict(growth < RSS_TARGET_MB)}",
    )
    table.print()
    for problem in problems[:20]:
        print(f"PROBLEM: {problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=200, help="measured reload cycles (default 200)")
    args = parser.parse_args()
    print_header(
        "endurance",
        f"servers: 5 light base servers + one added/removed per cycle; {WARMUP_CYCLES} warm-up cycles, "
        f"{args.cycles} measured",
    )

    async def go() -> None:
        await bench(args.cycles)

    run(go)


if __name__ == "__main__":
    main()
