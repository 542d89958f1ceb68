"""Start-up: how many servers to start at once (``max_concurrent_starts``).

N SDK example servers (each burns about 0.9 s of CPU importing the SDK) are started by
``Config.initialize()`` with different bounds on simultaneous starts, side by side in one run:
unbounded (N), the number of cores, twice that, and sequential (1). Measured per trial: wall time
until every server's tools are listed (``initialize()`` returned), time until the first one's are
(the first ``ServerStateChanged`` with status ``connected``), how many failed to connect (a bound
where any failed gets no "all listed" time), the host's peak RSS and the peak of
the servers' summed RSS (psutil, sampled every 50 ms). Each trial uses a fresh ``Config`` and waits
until the previous trial's servers are gone.

Repeats: N = 1: 5, N = 10: 3, N = 50: 1 (one N = 50 round takes about two minutes here; raise it
with ``--repeats-50``). ``--quick`` runs N = 1 and 10 only (2 repeats of N = 10).

Run: ``.venv/bin/python benchmarks/startup.py [--quick] [--repeats-50 1]``
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import time
from dataclasses import dataclass

import anyio
from _common import (
    RssSampler,
    Stats,
    Table,
    child_processes,
    print_header,
    rss_mb,
    run,
    sdk,
    stats_cells,
    temp_log_dir,
)

from mcpvisor.core.config import Config
from mcpvisor.core.events import McpEvent, ServerStateChanged
from mcpvisor.core.server_config import ConnectionOptions
from mcpvisor.core.start_slots import default_max_starts

GONE_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Trial:
    all_s: float
    """Until every server's tools were listed; NaN if some failed."""
    returned_s: float
    """Until ``initialize()`` returned."""
    reasons: tuple[str, ...]
    first_s: float
    host_peak_mb: float
    servers_peak_mb: float
    failed: int


def limits_for(n: int, cores: int) -> list[tuple[str, int]]:
    """The bounds to compare for ``n`` servers, without duplicates (first label wins)."""
    if n == 1:
        return [("any (1)", 1)]
    candidates = [
        (f"unbounded ({n})", n),
        (f"cores ({cores})", cores),
        (f"2x cores ({2 * cores})", 2 * cores),
        ("sequential (1)", 1),
    ]
    seen: set[int] = set()
    out: list[tuple[str, int]] = []
    for label, limit in candidates:
        effective = min(limit, n)
        if effective in seen:
            continue
        seen.add(effective)
        out.append((label, limit))
    return out


async def wait_children_gone() -> None:
    with anyio.move_on_after(GONE_TIMEOUT_S):
        while child_processes():  # noqa: ASYNC110 - process exit has no event to wait on here
            await anyio.sleep(0.05)


async def trial(n: int, limit: int) -> Trial:
    servers = {f"sdk-{i:02d}": sdk(f"sdk-{i:02d}") for i in range(n)}
    first: list[float] = []
    sampler = RssSampler(0.05)
    with temp_log_dir() as logs:
        async with Config(
            mcp_servers=servers, options=ConnectionOptions(log_dir=logs, max_concurrent_starts=limit)
        ) as config:

            def on_event(event: McpEvent) -> None:
                if isinstance(event, ServerStateChanged) and event.status == "connected" and not first:
                    first.append(time.perf_counter())

            config.events.subscribe(on_event)
            async with anyio.create_task_group() as tg:
                tg.start_soon(sampler.run)
                t0 = time.perf_counter()
                result = await config.initialize()
                t_all = time.perf_counter()
                sampler.stop()
            clients = config.manager.clients()
            failed = sum(1 for name in servers if name not in clients or clients[name].status != "connected")
            reasons = sorted(set((result.failed if result is not None else {}).values()))
        await wait_children_gone()
    return Trial(
        all_s=t_all - t0 if failed == 0 else float("nan"),
        returned_s=t_all - t0,
        reasons=tuple(reasons),
        first_s=(first[0] - t0) if first else float("nan"),
        host_peak_mb=sampler.peak_host_mb,
        servers_peak_mb=sampler.peak_children_mb,
        failed=failed,
    )


async def bench(plan: list[tuple[int, int]]) -> None:
    cores = os.cpu_count() or 1
    default = default_max_starts()
    # Warm the host: import the SDK client and run one server, so no trial pays a one-off cost.
    await trial(1, 1)
    host_base = rss_mb()
    print(f"host RSS before the trials (SDK imported): {host_base:.0f} MB")
    print(f"current default max_concurrent_starts = max(2, os.cpu_count()) = {default}")
    print()

    table = Table(
        "Start-up of N SDK servers (wall seconds; memory in MB, medians)",
        [
            "N",
            "max starts",
            "runs",
            "all listed med",
            "min",
            "max",
            "first listed med",
            "min",
            "max",
            "host peak RSS",
            "servers RSS sum",
            "failed",
        ],
        note_last=False,
    )
    summary: list[str] = []
    for n, repeats in plan:
        limits = limits_for(n, cores)
        trials: dict[str, list[Trial]] = {label: [] for label, _ in limits}
        for r in range(repeats):
            for label, limit in limits:
                t = await trial(n, limit)
                trials[label].append(t)
                print(
                    f"  N={n:<3} {label:<18} run {r + 1}/{repeats}: all {t.all_s:6.2f} s, first {t.first_s:5.2f} s, "
                    f"servers {t.servers_peak_mb:6.0f} MB"
                    + (f"; {t.failed} FAILED, initialize() returned after {t.returned_s:.2f} s" if t.failed else "")
                )
                for reason in t.reasons[:2]:
                    print(f"      e.g. {reason}")
        for label, _ in limits:
            ts = trials[label]
            table.add(
                n,
                label,
                len(ts),
                *stats_cells([t.all_s for t in ts], 2),
                *stats_cells([t.first_s for t in ts], 2),
                f"{Stats.of([t.host_peak_mb for t in ts]).median:.0f}",
                f"{Stats.of([t.servers_peak_mb for t in ts]).median:.0f}",
                sum(t.failed for t in ts),
            )
        if len(limits) > 1:
            # A bound where some server failed is out of the running (its medians are NaN).
            all_meds = {label: Stats.of([t.all_s for t in trials[label]]).median for label, _ in limits}
            first_meds = {label: Stats.of([t.first_s for t in trials[label]]).median for label, _ in limits}
            med_all = {label: m for label, m in all_meds.items() if not math.isnan(m)}
            med_first = {label: m for label, m in first_meds.items() if label in med_all and not math.isnan(m)}
            if not med_all or not med_first:
                summary.append(f"N={n}: every bound had failures")
                continue
            best_all = min(med_all, key=lambda k: med_all[k])
            best_first = min(med_first, key=lambda k: med_first[k])
            default_label = next(label for label, limit in limits if min(limit, n) == min(default, n))
            if default_label not in med_all:
                summary.append(f"N={n}: the default ({default_label}) had failures")
                continue
            ratio = med_all[default_label] / med_all[best_all]
            failing = [label for label, _ in limits if label not in med_all]
            summary.append(
                f"N={n}: fastest to all listed: {best_all} ({med_all[best_all]:.2f} s); first listed soonest: "
                f"{best_first} ({med_first[best_first]:.2f} s); the default ({default_label}) takes "
                f"{ratio:.2f}x the fastest to list all, first listed after {med_first[default_label]:.2f} s"
                + (f"; servers failed to start with: {', '.join(failing)}" if failing else "")
            )
    print()
    table.print()
    for line in summary:
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N = 1 and 10 only")
    parser.add_argument("--repeats-50", type=int, default=1, help="repeats for N = 50 (default 1)")
    args = parser.parse_args()
    plan = [(1, 5), (10, 2)] if args.quick else [(1, 5), (10, 3), (50, args.repeats_50)]
    print_header(
        "start-up",
        "servers: SDK example servers over stdio; plan (N, repeats): " + ", ".join(f"({n}, {r})" for n, r in plan),
    )

    # Failed starts are counted and one reason per trial is printed; no warning line per server.
    logging.getLogger("mcpvisor").setLevel(logging.ERROR)

    async def go() -> None:
        await bench(plan)

    run(go)


if __name__ == "__main__":
    main()
