"""Availability during reload: an unchanged server keeps answering while another one is replaced.

A prober calls ``echo`` on the server ``probe`` every 10 ms (fixed rate; a late call starts the next
one at once, never a burst) through ``Config.call_tool``, for the whole run. Each repeat has four
windows, side by side:

- **quiet**: nothing happens (the baseline p99);
- **incremental, light changed**: ``reinitialize_mcp_servers`` with the light server ``victim-light``'s
  args changed (stop + spawn of a 35 ms server), five times in a row (one reload is too short a
  window to hold enough calls);
- **incremental, SDK changed**: the same with the SDK server ``victim-sdk`` (stop + spawn of a server
  that burns about 0.9 s of CPU importing the SDK: on 2 cores it competes with the prober);
- **full restart**: ``restart_mcp_servers()`` (the baseline: ``probe`` itself goes down).

A reload window runs from the first call to 100 ms after the last returned. A call is *failed* if it raised,
returned ``isError``, or took longer than 5 s. Latencies are of successful calls.

The probe target is an SDK server by default (``--probe sdk``): its answers cost what a real Python
MCP server's do, and it shares the 2 cores with the spawning server. ``--probe light`` uses the
stdlib server instead.

Run: ``.venv/bin/python benchmarks/availability.py [--repeats 10] [--probe sdk|light]``
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
from _common import Stats, Table, light, percentile, print_header, run, sdk, stats_cells, temp_log_dir, verdict

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig

PERIOD_S = 0.010
CALL_TIMEOUT_S = 5.0
QUIET_S = 1.5
TAIL_S = 0.1
SETTLE_S = 0.3
WARMUP_S = 1.0
LIGHT_EDITS = 5
"""Light reloads are short (about 60 ms): a window holds this many in a row, for enough calls."""
PROBE_TOOL = "mcp__probe__echo"

PHASES = ("quiet", "incremental, light changed", "incremental, SDK changed", "full restart")


@dataclass(slots=True)
class Sample:
    started: float
    latency_ms: float
    error: str | None


@dataclass
class Prober:
    config: Config
    samples: list[Sample] = field(default_factory=list)
    stopped: anyio.Event = field(default_factory=anyio.Event)

    async def run(self) -> None:
        next_at = time.perf_counter()
        while not self.stopped.is_set():
            started = time.perf_counter()
            error: str | None = None
            try:
                with anyio.fail_after(CALL_TIMEOUT_S):
                    result = await self.config.call_tool(PROBE_TOOL, {"text": "ping"}, timeout_s=CALL_TIMEOUT_S)
                if result.is_error:
                    error = "isError result"
            except Exception as exc:
                error = type(exc).__name__
            self.samples.append(Sample(started, (time.perf_counter() - started) * 1000, error))
            next_at += PERIOD_S
            delay = next_at - time.perf_counter()
            if delay > 0:
                await anyio.sleep(delay)
            else:
                next_at = time.perf_counter()  # fell behind: resume the rate, no burst

    def window(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.started < end]


@dataclass
class WindowResult:
    calls: int
    failed: int
    latencies: list[float]
    errors: Counter[str]
    reload_ms: float

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


def _result(samples: Sequence[Sample], reload_ms: float) -> WindowResult:
    ok = [s.latency_ms for s in samples if s.error is None]
    errors = Counter(s.error for s in samples if s.error is not None)
    return WindowResult(len(samples), len(samples) - len(ok), ok, errors, reload_ms)


async def bench(repeats: int, probe_kind: str) -> None:
    make_probe: Callable[..., McpServerConfig] = sdk if probe_kind == "sdk" else light
    servers: dict[str, McpServerConfig] = {
        "probe": make_probe("probe"),
        "victim-light": light("victim-light"),
        "victim-sdk": sdk("victim-sdk"),
        "bystander-1": light("bystander-1"),
        "bystander-2": light("bystander-2"),
    }
    results: dict[str, list[WindowResult]] = {phase: [] for phase in PHASES}

    with temp_log_dir() as logs:
        async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=logs)) as config:
            first = await config.initialize()
            if first is None or first.failed:
                raise SystemExit(f"not every server connected: {first.failed if first else 'no reconcile'}")
            prober = Prober(config)
            async with anyio.create_task_group() as tg:
                tg.start_soon(prober.run)
                await anyio.sleep(WARMUP_S)
                for r in range(repeats):
                    # quiet
                    start = time.perf_counter()
                    await anyio.sleep(QUIET_S)
                    results["quiet"].append(_result(prober.window(start, time.perf_counter()), 0.0))

                    for phase, victim, make, edits in (
                        ("incremental, light changed", "victim-light", light, LIGHT_EDITS),
                        ("incremental, SDK changed", "victim-sdk", sdk, 1),
                    ):
                        await anyio.sleep(SETTLE_S)
                        start = time.perf_counter()
                        for e in range(edits):
                            servers = dict(servers)
                            servers[victim] = make(victim, "--tools", f"echo,v{r}x{e}")
                            await config.reinitialize_mcp_servers(servers)
                            last = config.last_reconcile
                            if last is None or last.restarted != (victim,) or last.failed:
                                raise SystemExit(f"unexpected reconcile for {phase}: {last}")
                        reload_ms = (time.perf_counter() - start) * 1000 / edits
                        await anyio.sleep(TAIL_S)
                        results[phase].append(_result(prober.window(start, time.perf_counter()), reload_ms))

                    await anyio.sleep(SETTLE_S)
                    start = time.perf_counter()
                    await config.restart_mcp_servers()
                    reload_ms = (time.perf_counter() - start) * 1000
                    await anyio.sleep(TAIL_S)
                    results["full restart"].append(_result(prober.window(start, time.perf_counter()), reload_ms))
                    await anyio.sleep(SETTLE_S)
                prober.stopped.set()

    quiet_pooled = percentile([x for w in results["quiet"] for x in w.latencies], 99)
    table = Table(
        f"Availability: prober every {PERIOD_S * 1000:.0f} ms on an unchanged {probe_kind.upper()} server, "
        f"{repeats} repeats (per-repeat median / min / max)",
        [
            "window",
            "calls",
            "p50 ms",
            "failed med",
            "min",
            "max",
            "p99 ms med",
            "min",
            "max",
            "p99 / quiet p99",
            "pooled p99 ms",
            "ms per reload",
        ],
    )
    verdicts: list[str] = []
    for phase in PHASES:
        windows = results[phase]
        ratios = [w.p99 / q.p99 for w, q in zip(windows, results["quiet"], strict=True)]
        pooled = percentile([x for w in windows for x in w.latencies], 99)
        table.add(
            phase,
            f"{Stats.of([w.calls for w in windows]).median:.0f}",
            f"{Stats.of([percentile(w.latencies, 50) for w in windows]).median:.2f}",
            *stats_cells([w.failed for w in windows], 0),
            *stats_cells([w.p99 for w in windows], 2),
            f"{Stats.of(ratios).median:.2f}",
            f"{pooled:.2f}",
            f"{Stats.of([w.reload_ms for w in windows]).median:.0f}" if phase != "quiet" else "-",
        )
        if phase.startswith("incremental"):
            failed = sum(w.failed for w in windows)
            ratio = pooled / quiet_pooled
            verdicts.append(
                f"{phase}: 0 failed calls: {verdict(failed == 0, f'{failed} failed')}; "
                f"pooled p99 {pooled:.2f} ms = {ratio:.2f}x quiet {quiet_pooled:.2f} ms "
                f"(target <= 2x): {verdict(ratio <= 2.0)}"
            )
    table.print()
    for line in verdicts:
        print(line)
    for phase in PHASES:
        errors: Counter[str] = Counter()
        for w in results[phase]:
            errors.update(w.errors)
        if errors:
            print(f"{phase}: errors by type: {dict(errors)}")
    print(
        "calls = per-window median; a window's p99 rests on 40-150 calls (close to its maximum), "
        "so the verdict uses the pooled p99 over all repeats' calls."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10, help="repeats (default 10)")
    parser.add_argument("--probe", choices=("sdk", "light"), default="sdk", help="probe target server (default sdk)")
    args = parser.parse_args()
    print_header(
        "availability",
        f"servers: probe ({args.probe}), victim-light (light), victim-sdk (SDK), 2 light bystanders; "
        f"repeats: {args.repeats}",
    )

    async def go() -> None:
        await bench(args.repeats, args.probe)

    run(go)


if __name__ == "__main__":
    main()
