"""Helpers shared by the benchmarks: server configs, machine description, statistics, tables,
resource probes and a runner that never leaves a server process behind.

Every benchmark prints the machine it ran on and plain-text tables with the median, minimum and
maximum over repeated runs. The machine is small and shared, so numbers are always compared side by
side within one run (ratios), never against a number measured some other day.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil

from mcpvisor.core.server_config import McpServerConfig

__all__ = [
    "LIGHT_MODULE",
    "SDK_MODULE",
    "RssSampler",
    "Stats",
    "Table",
    "child_processes",
    "fd_count",
    "light",
    "machine_lines",
    "percentile",
    "print_header",
    "rss_mb",
    "run",
    "sdk",
    "stats_cells",
    "temp_log_dir",
    "verdict",
]

LIGHT_MODULE = "mcpvisor.examples.light_server"
SDK_MODULE = "mcpvisor.examples.sdk_server"
MB = 1024 * 1024


# --------------------------------------------------------------------------- server configs


def light(name: str, *args: str, **fields: object) -> McpServerConfig:
    """A stdlib-only example server (about 35 ms from spawn to tools listed)."""
    return McpServerConfig.model_validate(
        {"command": sys.executable, "args": ["-m", LIGHT_MODULE, "--name", name, *args], **fields}
    )


def sdk(name: str, *args: str, **fields: object) -> McpServerConfig:
    """An example server built on the official SDK (about 0.8 s from spawn to tools listed)."""
    return McpServerConfig.model_validate(
        {"command": sys.executable, "args": ["-m", SDK_MODULE, "--name", name, *args], **fields}
    )


@contextlib.contextmanager
def temp_log_dir() -> Iterator[Path]:
    """A scratch folder for the servers' stderr logs, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="mcpvisor-bench-") as path:
        yield Path(path)


# --------------------------------------------------------------------------- the machine


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_lines() -> list[str]:
    """CPU count and model, memory, Python, OS, date and current load: what the numbers depend on."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    total_gb = psutil.virtual_memory().total / 1024**3
    return [
        f"machine: {os.cpu_count()} CPUs ({_cpu_model()}), {total_gb:.1f} GB RAM, load average {load}",
        f"python:  {platform.python_implementation()} {platform.python_version()} ({sys.executable})",
        f"os:      {platform.system()} {platform.release()}",
        f"date:    {_dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
    ]


def print_header(title: str, *lines: str) -> None:
    print(f"== {title} ==")
    for line in machine_lines():
        print(line)
    for line in lines:
        print(line)
    print()


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True, slots=True)
class Stats:
    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        if not values:
            return cls(math.nan, math.nan, math.nan, 0)
        return cls(statistics.median(values), min(values), max(values), len(values))


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in 0..100): always one of the observed values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _fmt(value: float, digits: int) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def stats_cells(values: Sequence[float], digits: int = 1) -> list[str]:
    """Three table cells: median, min, max."""
    s = Stats.of(values)
    return [_fmt(s.median, digits), _fmt(s.min, digits), _fmt(s.max, digits)]


def verdict(ok: bool, why_not: str = "") -> str:
    return "met" if ok else f"MISSED{': ' + why_not if why_not else ''}"


# --------------------------------------------------------------------------- tables


@dataclass
class Table:
    """A plain-text table: first column left-aligned, the others right-aligned, except the last
    column when it is a note (``note_last=True``)."""

    title: str
    columns: Sequence[str]
    rows: list[list[str]] = field(default_factory=list)
    note_last: bool = True

    def add(self, *cells: object) -> None:
        row = [str(c) for c in cells]
        if len(row) != len(self.columns):
            raise ValueError(f"row has {len(row)} cells, table {self.title!r} has {len(self.columns)} columns")
        self.rows.append(row)

    def render(self) -> str:
        widths = [max(len(str(col)), *(len(r[i]) for r in self.rows)) for i, col in enumerate(self.columns)]

        def line(cells: Sequence[str]) -> str:
            out = []
            last = len(cells) - 1
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True)):
                left = i == 0 or (i == last and self.note_last)
                out.append(cell.ljust(width) if left else cell.rjust(width))
            return "  ".join(out).rstrip()

        rule = "  ".join("-" * w for w in widths)
        return "\n".join([self.title, line(list(self.columns)), rule, *(line(r) for r in self.rows)])

    def print(self) -> None:
        print(self.render())
        print()


# --------------------------------------------------------------------------- resources


def rss_mb(process: psutil.Process | None = None) -> float:
    rss: int = (process or psutil.Process()).memory_info().rss
    return rss / MB


def fd_count() -> int:
    """Open file descriptors of this process (``/proc/self/fd``)."""
    return len(os.listdir("/proc/self/fd"))


def child_processes() -> list[psutil.Process]:
    """Every live descendant of this process (zombies included: they are leaks too)."""
    try:
        children: list[psutil.Process] = psutil.Process().children(recursive=True)
        return children
    except psutil.Error:
        return []


def children_rss_mb() -> float:
    total = 0
    for child in child_processes():
        with contextlib.suppress(psutil.Error):
            total += child.memory_info().rss
    return total / MB


class RssSampler:
    """Samples the host's RSS and the summed RSS of its children every ``interval_s`` while running.

    Use inside a task group: ``tg.start_soon(sampler.run)``, then ``sampler.stop()``.
    """

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.peak_host_mb = 0.0
        self.peak_children_mb = 0.0
        self._stopped = anyio.Event()

    def sample(self) -> None:
        self.peak_host_mb = max(self.peak_host_mb, rss_mb())
        self.peak_children_mb = max(self.peak_children_mb, children_rss_mb())

    async def run(self) -> None:
        while not self._stopped.is_set():
            self.sample()
            with anyio.move_on_after(self.interval_s):
                await self._stopped.wait()

    def stop(self) -> None:
        self.sample()
        self._stopped.set()


def settle_memory() -> None:
    """Collect garbage so RSS readings compare like with like."""
    gc.collect()
    gc.collect()


# --------------------------------------------------------------------------- running


def _kill_leftovers() -> int:
    """Last line of defence: SIGKILL any descendant still alive. Returns how many there were."""
    leftovers = [p for p in child_processes() if p.is_running()]
    for proc in leftovers:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(leftovers, timeout=3)
    return len(leftovers)


def run(main: Callable[[], Awaitable[None]]) -> None:
    """Run ``main`` under anyio (asyncio). Ctrl-C cancels it, so every ``Config`` stops its servers;
    anything still alive afterwards is killed and reported. Exits 130 on Ctrl-C."""
    interrupted = False
    started = time.perf_counter()
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted; stopping servers", file=sys.stderr)
    finally:
        killed = _kill_leftovers()
        if killed:
            print(f"warning: killed {killed} server process(es) still alive at exit", file=sys.stderr)
    print(f"(benchmark wall time {time.perf_counter() - started:.1f} s)")
    if interrupted:
        raise SystemExit(130)
