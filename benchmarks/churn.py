"""Churn: editing one of N configured servers replaces exactly one process.

N light example servers run under one ``Config``. Each repeat, side by side:

- **incremental**: one server's ``args`` change -> ``reinitialize_mcp_servers`` (the hot-reload
  path). Counted by PID: processes replaced (target: exactly 1) and untouched (target: N-1), plus
  the wall time of the call and the connections opened.
- **exposure only**: one server's ``includeTools`` changes -> re-filtered in place (target: 0
  replaced).
- **full restart**: ``restart_mcp_servers()``, the baseline (replaces all N).

Run: ``.venv/bin/python benchmarks/churn.py [--servers 50] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping

from _common import Stats, Table, light, print_header, run, stats_cells, temp_log_dir, verdict

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig


def _pids(config: Config) -> dict[str, int | None]:
    return {name: client.pid for name, client in config.manager.clients().items()}


def _all_connected(config: Config, names: Mapping[str, object]) -> bool:
    clients = config.manager.clients()
    return all(name in clients and clients[name].status == "connected" for name in names)


async def bench(n: int, repeats: int) -> None:
    names = [f"churn-{i:03d}" for i in range(n)]
    servers: dict[str, McpServerConfig] = {name: light(name) for name in names}
    inc_replaced: list[float] = []
    inc_untouched: list[float] = []
    inc_ms: list[float] = []
    inc_connects: list[float] = []
    exp_replaced: list[float] = []
    exp_ms: list[float] = []
    full_replaced: list[float] = []
    full_ms: list[float] = []
    full_connects: list[float] = []
    ratio: list[float] = []
    problems: list[str] = []

    with temp_log_dir() as logs:
        async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=logs)) as config:
            started = time.perf_counter()
            first = await config.initialize()
            print(f"started {n} light servers in {(time.perf_counter() - started) * 1000:.0f} ms")
            if first is None or first.failed or not _all_connected(config, servers):
                raise SystemExit(f"not every server connected: {first.failed if first else 'no reconcile'}")

            for r in range(repeats):
                # -- incremental: change one server's args
                target = names[(r * 7) % n]
                before = _pids(config)
                connects = config.manager.connect_count
                servers = dict(servers)
                servers[target] = light(target, "--tools", f"echo,extra{r}")
                t0 = time.perf_counter()
                await config.reinitialize_mcp_servers(servers)
                elapsed = (time.perf_counter() - t0) * 1000
                after = _pids(config)
                replaced = [name for name in names if after.get(name) != before.get(name)]
                inc_replaced.append(len(replaced))
                inc_untouched.append(sum(1 for name in names if after.get(name) == before.get(name)))
                inc_ms.append(elapsed)
                inc_connects.append(config.manager.connect_count - connects)
                if replaced != [target]:
                    problems.append(f"repeat {r}: incremental edit of {target} replaced {replaced}")
                if config.tool_registry.get_tool(f"mcp__{target}__extra{r}") is None:
                    problems.append(f"repeat {r}: the edited server's new tool is not registered")

                # -- exposure only: narrow the tools of another server (re-filter, no reconnect)
                other = names[(r * 7 + 3) % n]
                before = _pids(config)
                servers = dict(servers)
                servers[other] = light(other, include_tools=["echo"])
                t0 = time.perf_counter()
                await config.reinitialize_mcp_servers(servers)
                exp_ms.append((time.perf_counter() - t0) * 1000)
                after = _pids(config)
                exp_replaced.append(sum(1 for name in names if after.get(name) != before.get(name)))
                last = config.last_reconcile
                if last is None or last.refiltered != (other,):
                    problems.append(f"repeat {r}: exposure edit of {other} was not a re-filter: {last}")

                # -- full restart: the baseline
                before = _pids(config)
                connects = config.manager.connect_count
                t0 = time.perf_counter()
                await config.restart_mcp_servers()
                full = (time.perf_counter() - t0) * 1000
                after = _pids(config)
                full_replaced.append(sum(1 for name in names if after.get(name) != before.get(name)))
                full_ms.append(full)
                full_connects.append(config.manager.connect_count - connects)
                ratio.append(full / elapsed)
                if not _all_connected(config, servers):
                    problems.append(f"repeat {r}: not every server reconnected after the full restart")

    table = Table(
        f"Churn: N = {n} light servers, {repeats} repeats (incremental and full restart alternate)",
        ["measurement", "median", "min", "max", "target / verdict"],
    )
    table.add(
        "incremental: processes replaced",
        *stats_cells(inc_replaced, 0),
        f"exactly 1: {verdict(set(inc_replaced) == {1})}",
    )
    table.add(
        "incremental: untouched (same PID)",
        *stats_cells(inc_untouched, 0),
        f"{n - 1}: {verdict(set(inc_untouched) == {n - 1})}",
    )
    table.add("incremental: connections opened", *stats_cells(inc_connects, 0), "")
    table.add("incremental: wall time (ms)", *stats_cells(inc_ms, 1), "")
    table.add(
        "exposure-only edit: processes replaced",
        *stats_cells(exp_replaced, 0),
        f"0: {verdict(set(exp_replaced) == {0})}",
    )
    table.add("exposure-only edit: wall time (ms)", *stats_cells(exp_ms, 2), "")
    table.add("full restart: processes replaced", *stats_cells(full_replaced, 0), f"{n} (baseline)")
    table.add("full restart: connections opened", *stats_cells(full_connects, 0), "")
    table.add("full restart: wall time (ms)", *stats_cells(full_ms, 1), "")
    table.add("full restart / incremental time (x)", *stats_cells(ratio, 1), "per-repeat ratio")
    table.print()
    s = Stats.of(full_ms)
    print(f"full restart costs about {s.median / n:.1f} ms per server (all stops, then all starts)")
    for problem in problems:
        print(f"PROBLEM: {problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=50, help="configured light servers (default 50)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats (default 5)")
    args = parser.parse_args()
    print_header(
        "churn",
        f"servers: {args.servers} light example servers (stdlib, stdio); repeats: {args.repeats}",
    )

    async def go() -> None:
        await bench(args.servers, args.repeats)

    run(go)


if __name__ == "__main__":
    main()
