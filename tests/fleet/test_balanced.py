"""Three replicas behind a strict per-request round-robin balancer that opens a new connection for every
request: clients of both protocol eras make every call, including the rounds where a server asks its
client for something, without one failure; a replica killed mid-load costs a modern client at most one
retry per call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fleet.balancer import balancer
from tests.fleet.conftest import RedisServer
from tests.fleet.test_replicas import text, three_replicas
from tests.gateway.test_client_requests import Answers
from tests.gateway.test_gateway import server
from tests.helpers import WAIT_S

pytestmark = pytest.mark.fleet

CALLS = 40


CONTROL = {"k": server("k", "--control")}


@asynccontextmanager
async def client(url: str, mode: str) -> AsyncIterator[Client]:
    answers = Answers()
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(WAIT_S)) as http,
        Client(
            streamable_http_client(url + "/mcp", http_client=http),
            mode=mode,
            sampling_callback=answers.sampling,
            elicitation_callback=answers.elicitation,
            list_roots_callback=answers.roots,
        ) as c,
    ):
        yield c


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_every_call_through_a_round_robin_balancer_succeeds(
    tmp_path: Path, redis_server: RedisServer, mode: str
) -> None:
    async with three_replicas(tmp_path, redis_server, CONTROL) as fleet:
        async with balancer([r.url for r in fleet.replicas]) as (url, lb):
            async with client(url, mode) as c:
                tools = {t.name for t in (await c.list_tools(cache_mode="bypass")).tools}
                assert "mcp__k__echo" in tools
                for index in range(CALLS):
                    result = await c.call_tool("mcp__k__echo", {"text": str(index)})
                    assert not result.is_error, text(result)
                    assert text(result) == f"k:echo:{index}"
                # The server asks its client (roots) in the middle of a call: the answer, a request of its own,
                # lands on another replica and must reach the call where it waits.
                for _ in range(3):
                    asked = await c.call_tool("mcp__k__ask_client", {"kind": "roots"})
                    assert not asked.is_error, text(asked)
                    assert text(asked) == "roots: file:///work/project"
            assert all(count > 0 for count in lb.sent.values()), lb.sent


async def test_a_replica_killed_mid_load_costs_a_modern_client_at_most_one_retry_per_call(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    async with three_replicas(tmp_path, redis_server, CONTROL) as fleet:
        victim = fleet.replicas[2]
        async with balancer([r.url for r in fleet.replicas]) as (url, _), client(url, "auto") as c:
            retried = failed = 0
            for index in range(CALLS * 2):
                if index == CALLS:
                    victim.proc.kill()  # kill -9, calls in flight or not
                for attempt in range(2):
                    try:
                        with anyio.fail_after(WAIT_S):
                            result = await c.call_tool("mcp__k__echo", {"text": str(index)})
                        if not result.is_error:
                            break
                    except Exception:
                        pass
                    if attempt == 0:
                        retried += 1
                else:
                    failed += 1
            assert failed == 0
            assert retried <= 2  # only calls that were on their way to the killed replica
