"""An approve/reject/edit storm from four processes while two replicas run: whatever the order in
which decisions and edits reach the store and the replicas, no replica ever runs a configuration of the
gated server that nobody approved (each replica checks the fleet's record against the hash of its own
configuration)."""

from __future__ import annotations

import json
import random
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.fleet.conftest import RedisServer
from tests.fleet.test_replicas import Fleet, fleet_of, ready, text
from tests.gateway.test_gateway import server
from tests.layout import replace_text

pytestmark = pytest.mark.fleet

WORKERS = 4
OPS = 5


def variant(n: int) -> dict[str, object]:
    return {"mcpServers": {"p": server(f"p{n}")}}


def storm(fleet: Fleet, worker: int, approved: set[str], home: Path) -> None:
    rng = random.Random(worker)
    for op in range(OPS):
        choice = rng.choice(["approve", "approve", "reject", "edit"])
        if choice == "edit":
            replace_text(fleet.root / ".mcp.json", json.dumps(variant(worker * 100 + op)))
            continue
        result = fleet.command("mcp", choice, "p", "--workspace", str(fleet.root), home=home)
        named = re.search(r'"--name", "(p\d+)"', result.stdout)
        if choice == "approve" and result.returncode == 0 and named:
            approved.add(named.group(1))  # the configuration shown, and approved (its hash)


async def test_no_replica_runs_a_configuration_nobody_approved(tmp_path: Path, redis_server: RedisServer) -> None:
    with fleet_of(tmp_path, redis_server) as fleet:
        replace_text(fleet.root / ".mcp.json", json.dumps(variant(0)))
        a = fleet.start("ra", tmp_path / "a")
        await ready(a)
        b = fleet.start("rb", tmp_path / "b")
        await ready(b)
        approved: set[str] = set()
        seen: set[str] = set()
        stop = anyio.Event()

        async def watch(url: str) -> None:
            async with Client(url + "/mcp") as c:
                while not stop.is_set():
                    names = {t.name for t in (await c.list_tools(cache_mode="bypass")).tools}
                    if "mcp__p__echo" in names:
                        result = await c.call_tool("mcp__p__echo", {"text": "x"})
                        if not result.is_error:
                            seen.add(text(result).split(":", 1)[0])
                    await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            for replica in (a, b):
                tg.start_soon(watch, replica.url)
            with ThreadPoolExecutor(WORKERS) as pool:
                jobs = [
                    pool.submit(storm, fleet, worker, approved, tmp_path / f"cli{worker}") for worker in range(WORKERS)
                ]
                await anyio.to_thread.run_sync(lambda: [job.result() for job in jobs])
            # Last, the configuration as it ended is approved once more, and what it offers (each variant's tools
            # say its name: held against what an earlier one pinned) is accepted: both replicas run it.
            final = json.loads((fleet.root / ".mcp.json").read_text())["mcpServers"]["p"]["args"][-1]
            where = ("--workspace", str(fleet.root))
            storm_end = await anyio.to_thread.run_sync(
                lambda: fleet.command("mcp", "approve", "p", *where, "--yes", home=tmp_path / "end")
            )
            assert storm_end.returncode == 0, storm_end.stderr
            approved.add(final)
            with anyio.fail_after(60):
                while final not in seen:
                    # Its definitions are held once a replica ran it (its tools say the name the pins do not):
                    # accepted as soon as they are (as a person told "changed since approval" would).
                    await anyio.sleep(1)
                    if final not in seen:
                        await anyio.to_thread.run_sync(
                            lambda: fleet.command("mcp", "approve", "p", *where, "--yes", home=tmp_path / "end")
                        )
            stop.set()
        assert seen <= approved, f"ran {sorted(seen - approved)}, never approved"
