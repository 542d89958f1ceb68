"""Gateway overhead: what one tool call and one resource read cost through ``Gateway`` against
calling the same stdio server directly.

One light example server (stdlib-only, stdio) runs under a ``Config``. Each round times, one after
another, N sequential calls of ``mcp__bench__echo`` and N reads of ``note://bench/1``:

- **direct**: ``config.call_tool`` / the server's ``McpClient.read_resource`` (mcpvisor's own
  client straight to the stdio server: the floor);
- **gateway, in memory**: the SDK's ``Client`` connected in process to ``Gateway(config).server``,
  so the difference is the gateway's own work (request handling, routing, result copy, and - as
  ``mcpvisor serve`` runs it - the task a 2026-07-28-era call runs in so its server may ask the client);
- **gateway, HTTP**: the SDK's ``Client`` over streamable HTTP on loopback (what a desktop client
  pays), with the bearer token on.

Target: the gateway adds <= 1 ms at p50 (in memory) over the direct call.

Run: ``.venv/bin/python benchmarks/gateway_overhead.py [--calls 500] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable

import anyio
import httpx2
from _common import Table, light, percentile, print_header, run, temp_log_dir, verdict
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions
from mcpvisor.gateway.server import Gateway

TARGET_ADDED_P50_MS = 1.0
TOKEN = "benchmark-token"
ARGS = {"text": "hi"}


async def timed(n: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    for _ in range(min(20, n)):  # warm-up: lazy imports, caches
        await call()
    out: list[float] = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        out.append((time.perf_counter() - started) * 1000)
    return out


async def bench(calls: int, rounds: int) -> None:
    with temp_log_dir() as logs:
        servers = {"bench": light("bench", "--resources", "note://bench/1")}
        # As ``mcpvisor serve`` runs it: servers may ask the calling client (sampling, elicitation, roots).
        async with (
            Config(mcp_servers=servers, options=ConnectionOptions(log_dir=logs, client_requests=True)) as config,
            Gateway(config) as gateway,
        ):
            await config.initialize()
            client = config.manager.get_client("bench")
            assert client is not None
            upstream = client
            results: dict[str, list[float]] = {}

            def add(key: str, values: list[float]) -> None:
                results.setdefault(key, []).extend(values)

            async with anyio.create_task_group() as tg:
                url: str = await tg.start(lambda task_status: gateway.serve_http(token=TOKEN, task_status=task_status))
                headers = {"Authorization": f"Bearer {TOKEN}"}
                async with (
                    Client(gateway.server) as in_memory,
                    httpx2.AsyncClient(headers=headers, timeout=30) as http,
                    Client(streamable_http_client(url, http_client=http)) as over_http,
                ):
                    for _ in range(rounds):
                        add("call direct", await timed(calls, lambda: config.call_tool("mcp__bench__echo", ARGS)))
                        add(
                            "call gateway (memory)",
                            await timed(calls, lambda: in_memory.call_tool("mcp__bench__echo", ARGS)),
                        )
                        add(
                            "call gateway (HTTP)",
                            await timed(calls, lambda: over_http.call_tool("mcp__bench__echo", ARGS)),
                        )
                        add("read direct", await timed(calls, lambda: upstream.read_resource("note://bench/1")))
                        add(
                            "read gateway (memory)",
                            await timed(calls, lambda: in_memory.read_resource("note://bench/1")),
                        )
                        add(
                            "read gateway (HTTP)", await timed(calls, lambda: over_http.read_resource("note://bench/1"))
                        )
                tg.cancel_scope.cancel()

    table = Table(
        f"Per-request latency, ms ({calls} sequential requests x {rounds} rounds each)",
        ["path", "p50", "p99", "added p50", "note"],
    )
    for kind in ("call", "read"):
        base = percentile(results[f"{kind} direct"], 50)
        for path in ("direct", "gateway (memory)", "gateway (HTTP)"):
            values = results[f"{kind} {path}"]
            p50 = percentile(values, 50)
            added = p50 - base
            note = ""
            if path == "gateway (memory)":
                note = f"target <= {TARGET_ADDED_P50_MS:g} ms added: " + verdict(added <= TARGET_ADDED_P50_MS)
            table.add(f"{kind} {path}", f"{p50:.2f}", f"{percentile(values, 99):.2f}", f"{added:+.2f}", note)
    table.print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500, help="sequential requests per path and round (default 500)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args()
    print_header("gateway overhead", f"upstream: one light stdio server; {args.calls} requests x {args.rounds} rounds")

    async def go() -> None:
        await bench(args.calls, args.rounds)

    run(go)


if __name__ == "__main__":
    main()
