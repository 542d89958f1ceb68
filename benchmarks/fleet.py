"""Replicas sharing a fleet store (``mcpvisor serve --fleet``): how fast a change reaches every replica,
what the fleet costs per call, and how a replica's death shows to clients.

Everything runs on this machine: one ``redis-server`` (Debian's package) on a unix socket, replicas as
``python -m mcpvisor serve --http`` subprocesses with homes of their own, the bundled light example
server as every upstream, the official SDK client.

1. **Convergence** (3 replicas): a decision written to the store (approve, then reject, a gated light
   server) and an edit of the publisher's settings file (add a server, then remove it) → the moment
   the *last* replica sent ``tools/list_changed`` for it (the notice leaves in the step the tool
   becomes callable or is withdrawn; each is checked with ``tools/list``). Approve and add include
   starting the server (~35 ms).
2. **Per-call cost** (1 replica, file backend vs fleet backend, alternating): 16 handshake sessions
   calling back to back (calls/s), then one client's sequential calls (p50 / p99).
3. **Owner death** (3 replicas): a handshake session held by a replica that is then killed with
   SIGKILL, used on another replica → time to the 404 that tells the client to start a new session;
   meanwhile a 2026-07-28 client calls a tool on a surviving replica every 10 ms (failed calls).
4. **Redis stopped** (2 replicas, the default 15 s freshness, a durable Redis): Redis killed → when each
   replica withdraws an approved project server, while a user server's calls go on (failed calls);
   Redis started again with its data → when each replica serves the project server again.

    .venv/bin/python benchmarks/fleet.py [--rounds N] [--seconds S] [--cost-rounds N] [--only PART]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LIGHT_MODULE, Table, percentile, print_header, run, stats_cells

from mcpvisor.fleet.store import FleetStore

REPLICAS = 3
SESSIONS = 16
TIMEOUT_S = 30.0
QUIET_S = 0.5
"""Pause before each settings edit: longer than the watcher's coalescing window, as edits by people are."""
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def light(name: str) -> dict[str, object]:
    return {"command": sys.executable, "args": ["-m", LIGHT_MODULE, "--name", name]}


def write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis(folder: Path, *, durable: bool = False) -> subprocess.Popen[bytes]:
    """A redis-server on a unix socket in ``folder`` (``durable``: append-only file, fsync on every write)."""
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed: apt install redis-server")
    sock = folder / "r.sock"
    persistence = ["--appendonly", "yes", "--appendfsync", "always"] if durable else ["--appendonly", "no"]
    proc = subprocess.Popen(
        [binary, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700", "--dir", str(folder),
         "--save", "", *persistence],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            redis.Redis(unix_socket_path=str(sock)).ping()
            return proc
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@contextlib.contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    proc = start_redis(folder)
    try:
        yield f"unix://{folder / 'r.sock'}"
    finally:
        proc.terminate()
        proc.wait()


@dataclass
class Replica:
    id: str
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Bench:
    folder: Path
    root: Path
    fleet_url: str | None
    replicas: list[Replica] = field(default_factory=list)

    def env(self, home: Path) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(home),
            "MCPVISOR_HOME": str(home / ".mcpvisor"),
            "MCPVISOR_SYSTEM_DEFAULTS_PATH": str(self.folder / "etc" / "defaults.json"),
            "MCPVISOR_SYSTEM_SETTINGS_PATH": str(self.folder / "etc" / "settings.json"),
        }

    def home(self, rid: str) -> Path:
        return self.folder / f"home-{rid}"

    async def start(self, rid: str) -> Replica:
        port = free_port()
        argv = [sys.executable, "-m", "mcpvisor", "serve", "--http", f"127.0.0.1:{port}", "--no-auth"]
        argv += ["--workspace", str(self.root)]
        if self.fleet_url is not None:
            argv += ["--fleet", self.fleet_url, "--replica-id", rid]
        log = (self.folder / f"{rid}.log").open("wb")
        proc = subprocess.Popen(argv, env=self.env(self.home(rid)), stdout=subprocess.DEVNULL, stderr=log)  # noqa: ASYNC220 - a replica outlives this call
        replica = Replica(rid, port, proc)
        self.replicas.append(replica)
        path = "/readyz" if self.fleet_url is not None else "/mcp"
        async with httpx2.AsyncClient() as http:
            with anyio.fail_after(TIMEOUT_S):
                while True:
                    with contextlib.suppress(httpx2.TransportError):
                        answer = await http.get(replica.url + path)
                        if self.fleet_url is None or answer.status_code == 200:
                            return replica
                    if proc.poll() is not None:
                        sys.exit(f"replica {rid} exited: {(self.folder / f'{rid}.log').read_text()[-2000:]}")
                    await anyio.sleep(0.05)

    def stop_all(self) -> None:
        for replica in self.replicas:
            if replica.proc.poll() is None:
                replica.proc.send_signal(signal.SIGTERM)
        for replica in self.replicas:
            try:
                replica.proc.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                replica.proc.kill()
        self.replicas.clear()


@contextlib.asynccontextmanager
async def legacy_client(url: str, notices: list[float] | None = None) -> AsyncIterator[Client]:
    async def handler(message: object) -> None:
        if notices is not None and isinstance(message, types.ToolListChangedNotification):
            notices.append(time.perf_counter())

    async with (
        httpx2.AsyncClient(timeout=TIMEOUT_S) as http,
        Client(streamable_http_client(url + "/mcp", http_client=http), mode="legacy", message_handler=handler) as c,
    ):
        yield c


async def names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}


# --------------------------------------------------------------------------- 1. convergence


async def convergence(folder: Path, fleet_url: str, rounds: int) -> dict[str, list[float]]:
    root = folder / "ws"
    write(root / ".mcp.json", {"mcpServers": {"p": light("p")}})
    bench = Bench(folder, root, fleet_url)
    user_file = bench.home("r1") / ".mcpvisor" / "settings.json"
    write(user_file, {"mcpServers": {"u": light("u")}})
    store = FleetStore(fleet_url)
    results: dict[str, list[float]] = {"approve": [], "reject": [], "edit: add": [], "edit: remove": []}
    try:
        for index in range(REPLICAS):
            await bench.start(f"r{index + 1}")  # r1 first: it holds the publisher lease
        async with contextlib.AsyncExitStack() as stack:
            heard: list[list[float]] = [[] for _ in bench.replicas]
            clients = [
                await stack.enter_async_context(legacy_client(r.url, heard[i])) for i, r in enumerate(bench.replicas)
            ]
            from mcpvisor.core.server_config import McpServerConfig
            from mcpvisor.host.approvals import root_key

            digest = McpServerConfig.model_validate({**light("p"), "scope": "project"}).approval_hash

            async def reached(tool: str, present: bool, since: float) -> float:
                """When the last replica sent its notice for the change (each checked with tools/list)."""
                last = since
                with anyio.fail_after(TIMEOUT_S):
                    for index, client in enumerate(clients):
                        while (tool in await names(client)) != present:  # noqa: ASYNC110 - another process's list
                            await anyio.sleep(0.005)
                        after = [t for t in heard[index] if t >= since]
                        last = max(last, after[0] if after else time.perf_counter())
                return (last - since) * 1000

            for turn in range(rounds):
                for status, tool_present in (("approved", True), ("rejected", False)):
                    rev = store.sync_client().hget(store.keys.approvals(root_key(root)), "p")
                    seen = json.loads(rev)["rev"] if rev else 0
                    began = time.perf_counter()
                    store.decide(root_key(root), "p", digest, status, expected_rev=seen, by="bench")
                    results["approve" if tool_present else "reject"].append(
                        await reached("mcp__p__echo", tool_present, began)
                    )
                name = f"v{turn}"
                await anyio.sleep(QUIET_S)  # edits seconds apart, as people make them (not coalesced)
                began = time.perf_counter()
                write(user_file, {"mcpServers": {"u": light("u"), name: light(name)}})
                results["edit: add"].append(await reached(f"mcp__{name}__echo", True, began))
                await anyio.sleep(QUIET_S)
                began = time.perf_counter()
                write(user_file, {"mcpServers": {"u": light("u")}})
                results["edit: remove"].append(await reached(f"mcp__{name}__echo", False, began))
                print(f"  convergence round {turn + 1}/{rounds} done", file=sys.stderr)
    finally:
        bench.stop_all()
        store.close()
    return results


# --------------------------------------------------------------------------- 2. per-call cost


@dataclass
class CallCost:
    calls_per_s: float
    failed: int
    p50_ms: float
    p99_ms: float


async def call_cost(folder: Path, fleet_url: str | None, seconds: float) -> CallCost:
    root = folder / "ws"
    write(root / ".mcp.json", {"mcpServers": {}})
    bench = Bench(folder, root, fleet_url)
    write(bench.home("r1") / ".mcpvisor" / "settings.json", {"mcpServers": {"u": light("u")}})
    try:
        replica = await bench.start("r1")
        done = failed = 0
        end = 0.0
        go = anyio.Event()

        async def session(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            nonlocal done, failed
            async with legacy_client(replica.url) as client:
                await client.call_tool("mcp__u__echo", {"text": "x"})
                task_status.started()
                await go.wait()
                while time.perf_counter() < end:
                    result = await client.call_tool("mcp__u__echo", {"text": "x"})
                    if result.is_error:
                        failed += 1
                    elif time.perf_counter() <= end:
                        done += 1

        async with anyio.create_task_group() as tg:
            for _ in range(SESSIONS):
                await tg.start(session)
            end = time.perf_counter() + seconds
            go.set()
        latencies: list[float] = []
        async with legacy_client(replica.url) as client:
            for _ in range(400):
                began = time.perf_counter()
                await client.call_tool("mcp__u__echo", {"text": "x"})
                latencies.append((time.perf_counter() - began) * 1000)
        return CallCost(done / seconds, failed, statistics.median(latencies), percentile(latencies, 99))
    finally:
        bench.stop_all()


# --------------------------------------------------------------------------- 3. owner death


async def owner_death(folder: Path, fleet_url: str, rounds: int) -> tuple[list[float], int, int]:
    root = folder / "ws"
    write(root / ".mcp.json", {"mcpServers": {}})
    bench = Bench(folder, root, fleet_url)
    write(bench.home("r1") / ".mcpvisor" / "settings.json", {"mcpServers": {"u": light("u")}})
    refusals: list[float] = []
    calls = failed = 0
    try:
        survivor = await bench.start("r1")
        await bench.start("r2")
        async with Client(survivor.url + "/mcp") as modern:
            stop = anyio.Event()

            async def prober() -> None:
                nonlocal calls, failed
                while not stop.is_set():
                    try:
                        result = await modern.call_tool("mcp__u__echo", {"text": "x"})
                        failed += result.is_error
                    except Exception:
                        failed += 1
                    calls += 1
                    await anyio.sleep(0.01)

            async with anyio.create_task_group() as tg, httpx2.AsyncClient(headers=ACCEPT) as http:
                tg.start_soon(prober)
                for turn in range(rounds):
                    doomed = await bench.start(f"x{turn}")
                    init = {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": "2025-11-25",
                            "capabilities": {},
                            "clientInfo": {"name": "bench", "version": "1"},
                        },
                    }
                    session = (await http.post(doomed.url + "/mcp", json=init)).headers["mcp-session-id"]
                    doomed.proc.kill()
                    doomed.proc.wait()
                    headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
                    began = time.perf_counter()
                    answer = await http.post(
                        survivor.url + "/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=headers
                    )
                    refusals.append((time.perf_counter() - began) * 1000)
                    assert answer.status_code == 404, answer.text
                stop.set()
    finally:
        bench.stop_all()
    return refusals, calls, failed


# --------------------------------------------------------------------------- 4. Redis stopped


@dataclass
class Outage:
    held_s: list[float]
    back_s: list[float]
    calls: int
    failed: int


async def outage(folder: Path) -> Outage:
    """Two replicas (default freshness, 15 s) serve an approved project server and a user server; Redis is
    killed: when each replica withdraws the project server, whether the user server keeps answering; Redis
    comes back with its data: when each replica serves the project server again."""
    store_dir = folder / "redis"
    store_dir.mkdir(parents=True)
    proc = start_redis(store_dir, durable=True)
    url = f"unix://{store_dir / 'r.sock'}"
    root = folder / "ws"
    write(root / ".mcp.json", {"mcpServers": {"p": light("p")}})
    bench = Bench(folder, root, url)
    write(bench.home("r1") / ".mcpvisor" / "settings.json", {"mcpServers": {"u": light("u")}})
    calls = failed = 0
    try:
        replicas = [await bench.start("r1"), await bench.start("r2")]
        from mcpvisor.core.server_config import McpServerConfig
        from mcpvisor.host.approvals import root_key

        digest = McpServerConfig.model_validate({**light("p"), "scope": "project"}).approval_hash
        FleetStore(url).decide(root_key(root), "p", digest, "approved", expected_rev=None, by="bench")
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(Client(r.url + "/mcp")) for r in replicas]

            async def when(present: bool, since: float) -> list[float]:
                out = []
                with anyio.fail_after(TIMEOUT_S * 2):
                    for c in clients:
                        while ("mcp__p__echo" in await names(c)) != present:  # noqa: ASYNC110 - other processes
                            await anyio.sleep(0.05)
                        out.append(time.perf_counter() - since)
                return out

            await when(True, time.perf_counter())
            stop = anyio.Event()

            async def prober() -> None:
                nonlocal calls, failed
                while not stop.is_set():
                    for c in clients:
                        try:
                            failed += (await c.call_tool("mcp__u__echo", {"text": "x"})).is_error
                        except Exception:
                            failed += 1
                        calls += 1
                    await anyio.sleep(0.1)

            async with anyio.create_task_group() as tg:
                tg.start_soon(prober)
                proc.kill()
                proc.wait()
                held = await when(False, time.perf_counter())
                proc = start_redis(store_dir, durable=True)
                back = await when(True, time.perf_counter())
                stop.set()
        return Outage(held, back, calls, failed)
    finally:
        bench.stop_all()
        proc.terminate()
        proc.wait()


# --------------------------------------------------------------------------- report


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="changes of each kind, and file/fleet alternations")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each throughput window")
    parser.add_argument("--cost-rounds", type=int, default=5, help="file/fleet alternations for the per-call cost")
    parser.add_argument(
        "--only",
        choices=["convergence", "cost", "death", "outage"],
        action="append",
        help="run only these parts (repeatable)",
    )
    args = parser.parse_args()
    parts = set(args.only or ["convergence", "cost", "death", "outage"])
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()  # noqa: ASYNC221
    print_header(
        "Fleet: replicas sharing decisions and settings through Redis",
        f"{REPLICAS} replicas for convergence, 1 for the per-call cost; {args.rounds} rounds; redis {version[2]}",
    )
    with tempfile.TemporaryDirectory(prefix="mcpv-fleet-") as tmp:
        base = Path(tmp)
        with redis_server(base) as url:
            if "convergence" in parts:
                await report_convergence(base, url, args.rounds)
            if "cost" in parts:
                await report_cost(base, url, args.cost_rounds, args.seconds)
            if "death" in parts:
                await report_death(base, url, max(3, args.rounds // 2))
        if "outage" in parts:
            await report_outage(base / "outage")


async def report_convergence(base: Path, url: str, rounds: int) -> None:
    spread = await convergence(base / "convergence", url, rounds)
    table = Table(
        f"Convergence: {REPLICAS} replicas, the last one's notice (ms)",
        ["change", "median", "min", "max", "p99"],
        note_last=False,
    )
    for what, values in spread.items():
        table.add(what, *stats_cells(values), f"{percentile(values, 99):.1f}")
    table.print()


async def report_cost(base: Path, url: str, rounds: int, seconds: float) -> None:
    costs: dict[str, list[CallCost]] = {"file": [], "fleet": []}
    for turn in range(rounds):
        for backend in ("file", "fleet") if turn % 2 == 0 else ("fleet", "file"):
            folder = base / f"cost-{backend}-{turn}"
            costs[backend].append(await call_cost(folder, url if backend == "fleet" else None, seconds))
        print(f"  per-call round {turn + 1}/{rounds} done", file=sys.stderr)
    table = Table(
        f"Per-call cost: 1 replica, a light upstream (medians over {rounds} alternating rounds)",
        ["backend", f"calls/s ({SESSIONS} sessions)", "p50 ms", "p99 ms", "failed"],
        note_last=False,
    )
    for backend, samples in costs.items():
        table.add(
            backend,
            f"{statistics.median(s.calls_per_s for s in samples):.0f}",
            f"{statistics.median(s.p50_ms for s in samples):.2f}",
            f"{statistics.median(s.p99_ms for s in samples):.2f}",
            str(sum(s.failed for s in samples)),
        )
    table.print()
    ratios = [f.calls_per_s / b.calls_per_s for f, b in zip(costs["fleet"], costs["file"], strict=True)]
    print(f"fleet ÷ file throughput, per round: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(f"median {statistics.median(ratios):.3f} (goal: ≥ 0.95)")


async def report_death(base: Path, url: str, rounds: int) -> None:
    refusals, calls, failed = await owner_death(base / "death", url, rounds)
    table = Table("Owner killed (SIGKILL)", ["what", "median", "min", "max"], note_last=False)
    table.add("its handshake session on another replica -> 404 (ms)", *stats_cells(refusals))
    table.print()
    print(f"2026-07-28 client on a surviving replica meanwhile: {calls} calls, {failed} failed")


async def report_outage(folder: Path) -> None:
    seen = await outage(folder)
    table = Table("Redis killed, then started again with its data (2 replicas, freshness 15 s)", ["what", "r1", "r2"])
    table.add("project server withdrawn after (s)", *(f"{v:.1f}" for v in seen.held_s))
    table.add("served again after Redis is back (s)", *(f"{v:.2f}" for v in seen.back_s))
    table.print()
    print(f"the user server meanwhile: {seen.calls} calls, {seen.failed} failed")


if __name__ == "__main__":
    run(main)
