"""Huge messages through the gateway: what they cost, and what they cost everyone else.

One ``Gateway`` serves streamable HTTP on loopback (bearer token on, client requests on: as
``mcpvisor serve --http`` runs it) over two light stdio servers: ``big`` (``--big``: ``blob`` answers
with N MiB of text, ``spew`` writes N MiB with no newline) and ``good`` (``echo``). Meanwhile a second
client, on its own session, calls ``mcp__good__echo`` back to back: its latencies during each big
message are "the others". Both protocol eras: a handshake-era client (2025-11-25; results on an SSE
stream, the client's own 1 MiB per-event bound lifted) and a 2026-07-28 one (JSON bodies).

- **1 / 10 / 50 MiB results**: the time one ``blob`` call takes end to end through the gateway (the
  server writes it, the gateway reads, parses, re-serialises and streams it, the SDK client parses it).
- **200 MiB without a newline** (``spew``): how long until the call fails with the size error (the
  limit is 64 MiB), and that the server is restarted.

Targets (issue "gateway hardening"): a 20 MiB result in a few seconds; the spewing server ends in a
clear error within seconds while the others keep a median under 100 ms with no failed call.

Run: ``.venv/bin/python benchmarks/huge_messages.py [--rounds 3]``
"""

from __future__ import annotations

import argparse
import time

import anyio
import httpx2
from _common import Table, light, percentile, print_header, rss_mb, run, temp_log_dir, verdict
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions
from mcpvisor.gateway.server import Gateway

TOKEN = "benchmark-token"
SIZES_MIB = (1, 10, 50)
SPEW_MIB = 200
TARGET_OTHERS_P50_MS = 100.0


async def bench(rounds: int, mode: str) -> tuple[list[list[str]], list[float], int]:
    with temp_log_dir() as logs:
        servers = {"big": light("big", "--big"), "good": light("good")}
        async with (
            Config(mcp_servers=servers, options=ConnectionOptions(log_dir=logs, client_requests=True)) as config,
            Gateway(config) as gateway,
            anyio.create_task_group() as tg,
        ):
            await config.initialize()
            url: str = await tg.start(lambda task_status: gateway.serve_http(token=TOKEN, task_status=task_status))
            headers = {"Authorization": f"Bearer {TOKEN}"}
            rss_before = rss_mb()
            rows: list[list[str]] = []
            async with (
                httpx2.AsyncClient(headers=headers, timeout=300) as http_big,
                httpx2.AsyncClient(headers=headers, timeout=300) as http_good,
                Client(streamable_http_client(url, http_client=http_big, max_sse_event_size=None), mode=mode) as big,
                Client(streamable_http_client(url, http_client=http_good), mode=mode) as good,
            ):
                quiet: list[float] = []
                failures = 0
                for _ in range(300):
                    started = time.perf_counter()
                    await good.call_tool("mcp__good__echo", {"text": "hi"})
                    quiet.append((time.perf_counter() - started) * 1000)

                async def reconnected(before: object) -> None:
                    """Until a new connection to ``big`` is up (the dropped one is replaced)."""
                    with anyio.fail_after(60):
                        while (c := config.manager.get_client("big")) is before or c is None or c.status != "connected":  # noqa: ASYNC110 - no event for it
                            await anyio.sleep(0.05)

                async def measure(
                    what: str, make_call: object, *, expected_chars: int = 0, drops: bool = False
                ) -> None:
                    nonlocal failures
                    durations: list[float] = []
                    others: list[float] = []
                    errors: list[str] = []
                    for _ in range(rounds):
                        done = anyio.Event()
                        before = config.manager.get_client("big")

                        async def keep_calling(done: anyio.Event) -> None:
                            nonlocal failures
                            while not done.is_set():
                                started = time.perf_counter()
                                result = await good.call_tool("mcp__good__echo", {"text": "hi"})
                                others.append((time.perf_counter() - started) * 1000)
                                if result.is_error:
                                    failures += 1

                        async with anyio.create_task_group() as calls:
                            calls.start_soon(keep_calling, done)
                            started = time.perf_counter()
                            result = await make_call()  # type: ignore[operator]
                            durations.append(time.perf_counter() - started)
                            done.set()
                        if result.is_error:
                            errors.append(result.content[0].text)
                        elif len(result.content[0].text) != expected_chars:
                            errors.append(f"{len(result.content[0].text)} characters, not {expected_chars}")
                        if drops:
                            await reconnected(before)
                    rows.append(
                        [
                            what,
                            f"{percentile(durations, 50):.2f} s ({min(durations):.2f}–{max(durations):.2f})",
                            f"{percentile(others, 50):.1f} / {percentile(others, 99):.1f} ms ({len(others)} calls)",
                            "error: " + errors[0][:90] if errors else "passed whole",
                        ]
                    )

                for size in SIZES_MIB:
                    await measure(
                        f"{size} MiB result",
                        lambda size=size: big.call_tool("mcp__big__blob", {"mib": size}),
                        expected_chars=size * 1024 * 1024,
                    )
                await measure(
                    f"{SPEW_MIB} MiB, no newline",
                    lambda: big.call_tool("mcp__big__spew", {"mib": SPEW_MIB}),
                    drops=True,
                )
            print(f"{ERAS[mode]}: gateway RSS {rss_before:.0f} MB before, {rss_mb():.0f} MB after")
            tg.cancel_scope.cancel()
    return rows, quiet, failures


ERAS = {"legacy": "handshake era (SSE)", "auto": "2026-07-28 (JSON)"}


async def bench_all(rounds: int) -> None:
    table = Table(
        f"Huge messages through the gateway over HTTP (median of {rounds} rounds each; min-max)",
        ["client", "message", "time", "the others meanwhile: p50 / p99", "outcome"],
    )
    worst_p50, failures = 0.0, 0
    for mode, era in ERAS.items():
        rows, quiet, failed = await bench(rounds, mode)
        failures += failed
        table.add(
            era, "(none: a quiet gateway)", "—", f"{percentile(quiet, 50):.1f} / {percentile(quiet, 99):.1f} ms", ""
        )
        for row in rows:
            table.add(era, *row)
            worst_p50 = max(worst_p50, float(row[2].split(" /")[0]))
    table.print()
    print(
        f"others' worst median {worst_p50:.1f} ms, target <= {TARGET_OTHERS_P50_MS:g} ms: "
        f"{verdict(worst_p50 <= TARGET_OTHERS_P50_MS)}; failed calls of the others: {failures} "
        f"(target 0: {verdict(failures == 0)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per message size (default 3)")
    args = parser.parse_args()
    print_header(
        "huge messages",
        f"upstreams: two light stdio servers; results of {', '.join(map(str, SIZES_MIB))} MiB and {SPEW_MIB} MiB "
        "without a newline",
    )
    run(lambda: bench_all(args.rounds))


if __name__ == "__main__":
    main()
