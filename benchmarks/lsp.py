"""Language servers through mcpvisor's own tools, with real servers: pylsp (+ pyflakes) and basedpyright.

Every call goes through the ``mcp__lsp__*`` tools of an in-process ``Host`` (``Config.call_tool``) in a scratch
workspace of small Python files and one stub (``api.pyi``); servers are ``lspServers`` in the user's settings.

- **Spawn → first answer**: per server, a fresh Host each round; from the first ``go_to_definition`` on the cold
  (lazily started) server to its answer, and to its state ``ready`` (spawn, ``initialize``, ``initialized``).
- **Warm latency**: p50 / p99 of N sequential calls per operation after one unmeasured call: go_to_definition,
  find_references, hover, document_symbols, workspace_symbols (where offered), diagnostics of an unchanged file.
- **Restart beside a busy server**: one Host watching its settings, ``py`` (pylsp, ``.py``) and ``stubs``
  (basedpyright, ``.pyi``); a prober hovers on ``py`` every 20 ms while a save changes ``stubs``'s ``args``
  (process-defining: it restarts). A window runs from the save until ``stubs`` answered again and its old
  process is gone, plus 100 ms. ``py`` has pylsp's ``signature.formatter`` off: by default each hover on a
  function runs ``python -m black`` when black is installed (about 150 ms here), too slow for a 20 ms prober.
- **RSS**: each server's process tree after the warm phase, summed (mcpvisor reports the reaper's PID; the
  server is its child, and basedpyright's Python launcher runs node).

Targets: a cold server answers within its ``startupTimeout`` (30 s); no probe call fails during a restart; the
unchanged server keeps its PID; no language server process is left at the end.

Run: ``.venv/bin/python benchmarks/lsp.py [--rounds 3] [--calls 50]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import psutil
from _common import Table, child_processes, percentile, print_header, rss_mb, run, stats_cells, temp_log_dir, verdict
from mcp_types import CallToolResult, TextContent

from mcpvisor.host.host import Host, HostEvent, HostOptions
from mcpvisor.host.lsp.events import LspServerChanged
from mcpvisor.host.lsp.server import LanguageServer
from mcpvisor.host.settings.loader import settings_paths

COMMANDS = {
    "pylsp": [sys.executable, "-m", "pylsp"],
    "basedpyright": [str(Path(sys.executable).with_name("basedpyright-langserver")), "--stdio"],
}
FILES = {
    "models.py": "class User:\n    def __init__(self, name: str) -> None:\n        self.name = name\n\n"
    '    def greet(self) -> str:\n        return "hi " + self.name\n\n\ndef make_user(name: str) -> User:\n'
    "    return User(name)\n",
    "service.py": 'from models import User, make_user\n\nu = make_user("a")\ny = make_user("z")\n'
    "print(u.greet(), User, y)\n",
    "report.py": "from models import make_user\nfrom service import u\n\n\ndef report() -> str:\n"
    '    return u.greet() + make_user("r").greet()\n',
    "api.pyi": "from models import User\n\ndef find(name: str) -> User | None: ...\ndef count() -> int: ...\n",
}
AT_MAKE_USER = {"file": "service.py", "line": 3, "character": 6}  # `make_user` in `u = make_user("a")`
OPERATIONS: dict[str, dict[str, Any]] = {
    "go_to_definition": AT_MAKE_USER,
    "find_references": {"file": "models.py", "line": 1, "character": 7},  # `User` in `class User:`
    "hover": AT_MAKE_USER,
    "document_symbols": {"file": "models.py"},
    "workspace_symbols": {"query": "make_user"},
    "diagnostics": {"files": ["service.py"]},
}
AT_FIND = {"file": "api.pyi", "line": 3, "character": 5}  # `find` in api.pyi
PROBE_PERIOD_S = 0.020
CALL_TIMEOUT_S = 5.0
COLD_TIMEOUT_S = 60.0
QUIET_S = 2.0
TAIL_S = 0.1
SETTLE_S = 0.5
SEEN_PIDS: set[int] = set()
"""Every language server process seen (reapers and their trees): none may be alive at the end."""


def entry(kind: str, ext: str, *extra: str) -> dict[str, Any]:
    command, *args = COMMANDS[kind]
    return {"command": command, "args": [*args, *extra], "extensionToLanguage": {ext: "python"}}


def tree(pid: int | None) -> list[psutil.Process]:
    """The process ``pid`` (a reaper) and all its descendants, remembered in :data:`SEEN_PIDS`."""
    try:
        root = psutil.Process(pid) if pid is not None else None
        procs: list[psutil.Process] = [root, *root.children(recursive=True)] if root else []
    except psutil.Error:
        return []
    SEEN_PIDS.update(p.pid for p in procs)
    return procs


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


@dataclass
class Workspace:
    root: Path
    env: dict[str, str]
    events: list[tuple[float, str, str]] = field(default_factory=list)
    """(time, server, state) of every LspServerChanged, from any host of this workspace."""

    def configure(self, servers: dict[str, Any]) -> None:
        """Save the user's settings as an editor does (a temporary file renamed over)."""
        path = settings_paths(self.env, self.root).user
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_name(".settings.tmp").write_text(json.dumps({"lspServers": servers}))
        os.replace(path.with_name(".settings.tmp"), path)

    def host(self, *, watch: bool = False) -> Host:
        host = Host(HostOptions(env=self.env, workspace=self.root, watch=watch))
        host.subscribe(self.heard)
        return host

    def heard(self, event: HostEvent) -> None:
        if isinstance(event, LspServerChanged):
            self.events.append((time.perf_counter(), event.server, event.state))

    def ready_after(self, name: str, since: float) -> float:
        return next((t - since for t, n, s in self.events if n == name and s == "ready" and t >= since), float("nan"))


def make_workspace(base: Path) -> Workspace:
    home, root = base / "home", base / "ws"
    root.mkdir(parents=True)
    for name, text in FILES.items():
        (root / name).write_text(text)
    env = {"HOME": str(home), "MCPVISOR_HOME": str(home / ".mcpvisor"), "MCPVISOR_LOG_DIR": str(base / "logs")}
    env |= {f"MCPVISOR_SYSTEM_{k}_PATH": str(base / "etc" / f"{k}.json") for k in ("DEFAULTS", "SETTINGS")}
    return Workspace(root, env | {"PATH": os.environ.get("PATH", "")})


async def call(host: Host, tool: str, args: dict[str, Any], timeout_s: float = CALL_TIMEOUT_S) -> tuple[float, str]:
    """Seconds the call took, and ``""`` when it answered, else why not."""
    started = time.perf_counter()
    try:
        with anyio.fail_after(timeout_s):
            result: CallToolResult = await host.config.call_tool(f"mcp__lsp__{tool}", args)
    except Exception as exc:  # a failed call is counted, never raised
        return time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
    first = result.content[0] if result.content else None
    why = (first.text if isinstance(first, TextContent) else "error") if result.is_error else ""
    return time.perf_counter() - started, why


@dataclass
class ServerRun:
    to_ready: list[float] = field(default_factory=list)
    to_answer: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    timeout_s: float = 30.0
    warm: dict[str, list[float] | str] = field(default_factory=dict)
    rss: list[tuple[str, float]] = field(default_factory=list)
    """(name, MB) of each process in the server's tree, the reaper first."""


async def per_server(ws: Workspace, kind: str, rounds: int, calls: int) -> ServerRun:
    """Cold starts in fresh hosts; in the last one, the warm phase and the memory."""
    ws.configure({kind: entry(kind, ".py")})
    out = ServerRun()
    for r in range(rounds):
        async with ws.host() as host:
            server = host.lsp.manager.servers()[kind]
            assert server.state == "stopped", f"{kind} runs before its first call"
            started = time.perf_counter()
            elapsed, error = await call(host, "go_to_definition", AT_MAKE_USER, COLD_TIMEOUT_S)
            out.to_answer.append(elapsed)
            out.to_ready.append(ws.ready_after(kind, started))
            out.errors += [error] if error else []
            out.timeout_s = server.config.startup_timeout_s
            tree(server.pid)
            if r == rounds - 1:
                out.warm = await warm(host, server, calls)
                out.rss = [(p.name(), rss_mb(p)) for p in tree(server.pid)]
    return out


async def warm(host: Host, server: LanguageServer, calls: int) -> dict[str, list[float] | str]:
    out: dict[str, list[float] | str] = {}
    for op, arguments in OPERATIONS.items():
        if op == "workspace_symbols" and not server.supports("workspaceSymbolProvider"):
            out[op] = "not supported"
            continue
        answers = [await call(host, op, arguments) for _ in range(calls + 1)]  # the first one unmeasured
        errors = [error for _, error in answers if error]
        out[op] = f"failed: {errors[0][:80]}" if errors else [elapsed * 1000 for elapsed, _ in answers[1:]]
    return out


@dataclass
class Prober:
    host: Host
    samples: list[tuple[float, float, str]] = field(default_factory=list)
    """(started, latency ms, error) of every probe call."""
    stopped: anyio.Event = field(default_factory=anyio.Event)

    async def run(self) -> None:
        next_at = time.perf_counter()
        while not self.stopped.is_set():
            started = time.perf_counter()
            elapsed, error = await call(self.host, "hover", AT_MAKE_USER)
            self.samples.append((started, elapsed * 1000, error))
            next_at = max(next_at + PROBE_PERIOD_S, time.perf_counter())
            await anyio.sleep(max(0.0, next_at - time.perf_counter()))

    def window(self, start: float, end: float) -> list[tuple[float, float, str]]:
        return [s for s in self.samples if start <= s[0] <= end]


async def restart(ws: Workspace, rounds: int, table: Table) -> tuple[int, bool]:
    """``rounds`` restarts of ``stubs`` while ``py`` is probed; returns (failed probe calls, ``py`` kept its PID)."""
    no_black = {"pylsp": {"signature": {"formatter": ""}}}  # see the module's docstring
    servers = {"py": entry("pylsp", ".py") | {"settings": no_black}, "stubs": entry("basedpyright", ".pyi")}
    ws.configure(servers)
    failed, kept = 0, True
    async with ws.host(watch=True) as host, anyio.create_task_group() as tg:
        manager = host.lsp.manager
        for tool, at in (("hover", AT_MAKE_USER), ("hover", AT_FIND)):
            _, error = await call(host, tool, at, COLD_TIMEOUT_S)
            assert not error, error
        py_pid = manager.servers()["py"].pid
        prober = Prober(host)
        tg.start_soon(prober.run)
        start = time.perf_counter()
        await anyio.sleep(QUIET_S)

        def row(what: str, samples: list[tuple[float, float, str]], *more: str) -> None:
            ok = [s[1] for s in samples if not s[2]]
            cells = (f"{percentile(ok, q):.1f}" for q in (50, 99, 100))
            table.add(what, len(samples), *cells, len(samples) - len(ok), *more)

        row("quiet", prober.window(start, time.perf_counter()), "-", "-", f"{py_pid}")
        pooled: list[tuple[float, float, str]] = []
        for r in range(rounds):
            old = manager.servers()["stubs"]
            old_pids = [p.pid for p in tree(old.pid)]
            start = time.perf_counter()
            ws.configure({**servers, "stubs": entry("basedpyright", ".pyi", f"--benchmark-round={r}")})
            with anyio.fail_after(COLD_TIMEOUT_S):
                while manager.servers()["stubs"] is old:  # noqa: ASYNC110 - the watcher's reload has no event here
                    await anyio.sleep(0.005)
            elapsed, error = await call(host, "hover", AT_FIND, COLD_TIMEOUT_S)
            answered = time.perf_counter() - start
            tree(manager.servers()["stubs"].pid)
            with anyio.fail_after(COLD_TIMEOUT_S):
                while any(alive(pid) for pid in old_pids):  # noqa: ASYNC110 - no event for another process's exit
                    await anyio.sleep(0.01)
            await anyio.sleep(TAIL_S)
            samples = prober.window(start, time.perf_counter())
            pooled += samples
            pid = manager.servers()["py"].pid
            kept = kept and pid == py_pid
            answer = f"{answered:.2f}" if not error else f"failed: {error[:60]}"
            row(f"restart {r + 1}", samples, f"{ws.ready_after('stubs', start):.2f}", answer, f"{pid}")
            await anyio.sleep(SETTLE_S)
        prober.stopped.set()
        row(f"all {rounds} restarts", pooled, "", "", "same" if kept else "CHANGED")
        failed = sum(1 for s in pooled if s[2])
    return failed, kept


async def bench(rounds: int, calls: int) -> None:
    with temp_log_dir() as base:
        ws = make_workspace(base)
        results = {kind: await per_server(ws, kind, rounds, calls) for kind in COMMANDS}
        title = "Restart of 'stubs' (basedpyright, .pyi), a prober hovering on 'py' (pylsp, .py) every 20 ms (ms)"
        columns = ["window", "probe calls", "p50", "p99", "max", "failed", "stubs ready s", "answers s", "py pid"]
        restarts = Table(title + "; seconds from the save (the watcher's settle included)", columns, note_last=False)
        failed, kept = await restart(ws, rounds, restarts)
    title = f"Spawn → first answer: a cold go_to_definition, a fresh Host each of {rounds} rounds (seconds)"
    columns = ["server", "to ready med", "min", "max", "to answer med", "min", "max", "errors"]
    cold = Table(title, columns, note_last=False)
    columns = ["server", "operation", "p50", "p99", "max"]
    latency = Table(f"Warm latency, {calls} calls per operation (ms)", columns, note_last=False)
    memory = Table("RSS of each server's process tree, warm (MB)", ["server", "tree", "reaper", "processes"])
    for kind, res in results.items():
        cold.add(kind, *stats_cells(res.to_ready, 2), *stats_cells(res.to_answer, 2), len(res.errors))
        for op, values in res.warm.items():
            if isinstance(values, str):
                latency.add(kind, op, values, "", "")
            else:
                latency.add(kind, op, *(f"{percentile(values, q):.1f}" for q in (50, 99, 100)))
        names = " > ".join(f"{name} {mb:.0f}" for name, mb in res.rss)
        memory.add(kind, f"{sum(mb for _, mb in res.rss):.0f}", f"{res.rss[0][1]:.0f}" if res.rss else "-", names)
    for table in (cold, latency, restarts, memory):
        table.print()
    for kind, res in results.items():
        worst = max(res.to_answer)
        ok = worst <= res.timeout_s and not res.errors
        print(f"{kind}: first answer within startupTimeout ({res.timeout_s:g} s): worst {worst:.2f} s: {verdict(ok)}")
    print(f"failed probe calls during the restarts: {failed} (target 0): {verdict(failed == 0)}")
    print(f"unchanged server 'py' keeps its PID: {verdict(kept)}")
    left = [pid for pid in SEEN_PIDS if alive(pid)] + [p.pid for p in child_processes() if p.pid not in SEEN_PIDS]
    print(f"server processes left: {len(left)} of {len(SEEN_PIDS)} seen: {verdict(not left, str(left))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="cold starts per server, and restarts (default 3)")
    parser.add_argument("--calls", type=int, default=50, help="warm calls per operation (default 50)")
    args = parser.parse_args()
    print_header(
        "language servers through the mcp__lsp__ tools",
        f"servers: pylsp {version('python-lsp-server')} (jedi {version('jedi')}), basedpyright "
        f"{version('basedpyright')}; {args.rounds} rounds, {args.calls} warm calls per operation",
    )
    run(lambda: bench(args.rounds, args.calls))


if __name__ == "__main__":
    main()
