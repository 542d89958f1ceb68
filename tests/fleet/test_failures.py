"""A fleet store that fails mid-session: each store's error is one sentence naming the store (its URL without
its password), what it did, and what happens now; never the Redis client's own text."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from mcpvisor.core.errors import ConfigError
from mcpvisor.fleet.approvals import FleetApprovalStore
from mcpvisor.fleet.pins import FleetPinStore
from mcpvisor.fleet.replica import Replica
from mcpvisor.fleet.sealing import FleetKey
from mcpvisor.fleet.store import FleetStore
from mcpvisor.fleet.tokens import FleetTokenStore
from tests.fleet.conftest import RedisServer
from tests.fleet.test_approvals import ROOT, Cfg
from tests.fleet.test_status import store_answering_the_ping_only
from tests.helpers import wait_until

pytestmark = pytest.mark.fleet

KEY = FleetKey(["a fleet key of at least thirty-two characters"])


def said(call: Callable[[], object]) -> str:
    with pytest.raises(ConfigError) as raised:
        call()
    return str(raised.value)


def test_each_stores_error_says_the_store_closed_the_connection_and_what_holds() -> None:
    with store_answering_the_ping_only() as port:
        url = f"redis://:s3cret@127.0.0.1:{port}/0"
        store = FleetStore(url)
        approvals, pins, tokens = FleetApprovalStore(store), FleetPinStore(store), FleetTokenStore(store, KEY)
        approvals.load()
        closed = f"the fleet store redis://:***@127.0.0.1:{port}/0 closed the connection"
        messages = {
            "approvals": approvals.error or "",
            "approve": said(lambda: approvals.approve(ROOT, "p", Cfg("h1"))),
            "pins": said(pins.read),
            "pin": said(lambda: pins.create("scope", "p", {"config": "h1"})),
            "tokens": said(tokens.read),
            "sign-in": said(lambda: tokens.update("https://a.example/mcp", tokens={"access_token": "t"})),
            "turn": said(lambda: anyio.run(tokens.refresh_turn, "https://a.example/mcp")),
        }
        store.close()
    assert messages == {
        "approvals": f"cannot read the fleet's decisions: {closed}; every project and workspace server stays pending "
        "until it answers",
        "approve": f"could not record approval of server 'p': {closed}; nothing was recorded (try again when it "
        "answers)",
        "pins": f"cannot read the fleet's tool pins: {closed}; every tool and prompt of a pinned server is held until "
        "it answers",
        "pin": f"could not save the fleet's tool pins: {closed}; nothing was changed",
        "tokens": f"cannot read the fleet's OAuth sign-ins: {closed}; the servers signed in through it connect "
        "without their sign-in until it answers",
        "sign-in": f"could not save the fleet's OAuth sign-ins: {closed}; nothing was changed",
        "turn": f"cannot take the turn to refresh a sign-in: {closed}; the sign-in is refreshed when it answers again",
    }


async def test_a_replica_whose_store_stops_logs_one_clear_line(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcpvisor.fleet")
    async with Replica(FleetStore(redis_server.url), register=False):
        redis_server.kill()
        await wait_until(lambda: "cannot follow" in caplog.text, what="the replica to say it lost the store")
    [line] = [r.getMessage() for r in caplog.records if "cannot follow" in r.getMessage()]
    assert line.startswith(f"cannot follow the fleet's decisions: the fleet store {redis_server.url} ")
    assert line.endswith("; reconnecting (project and workspace servers are held if it stays silent for 15 s)")
    assert "Error " not in line
    assert "Connection" not in line


def test_a_store_with_no_socket_says_so(tmp_path: Path) -> None:
    pins = FleetPinStore(FleetStore(f"unix://{tmp_path}/none.sock"))
    assert said(pins.read).startswith(
        f"cannot read the fleet's tool pins: the fleet store unix://{tmp_path}/none.sock has no socket there (is it "
        "running?); "
    )


def test_a_store_that_is_not_running_is_said_so_with_its_fix(tmp_path: Path) -> None:
    """``fleet_unreachable`` (the store's ping, ``fleet status``, ``fleet ack-reset``) quoted the Redis client
    (``Error 2 connecting to …. No such file or directory``) rather than what the store did."""
    store = FleetStore(f"unix://{tmp_path}/none.sock", fleet="blue")
    message = said(store.ping)
    assert message == (
        f"cannot use the fleet store unix://{tmp_path}/none.sock (fleet blue): it has no socket there (is it "
        "running?); start it, or check the URL (--fleet / MCPVISOR_FLEET), and try again"
    )


def test_a_store_that_does_not_answer_in_time_is_not_told_to_start(redis_server: RedisServer) -> None:
    """A store that timed out was told to "start it" (it runs), quoting ``Timeout reading from …``."""
    store = FleetStore(f"{redis_server.url}?password=s3cret&db=0")
    with redis_server.client() as client:
        # It runs, and answers nothing (CLIENT PAUSE ALL). Nothing unpauses it: CLIENT UNPAUSE is paused too and would
        # wait out the pause (or time out); the fixture kills the server at the test's end.
        client.client_pause(120_000, all=True)
    message = said(store.ping)
    assert message == (
        f"cannot use the fleet store {redis_server.url}?password=***&db=0: it did not answer in time; check that it "
        "runs and that this host reaches it at the URL's address (--fleet / MCPVISOR_FLEET), and try again"
    )
    assert "s3cret" not in message


def test_a_store_that_refuses_the_password_says_check_the_password(redis_server: RedisServer) -> None:
    """A wrong password was told to "give its password", quoting ``invalid username-password pair …``."""
    with redis_server.client() as client:
        client.config_set("requirepass", "hunter2")
    message = said(FleetStore(f"{redis_server.url}?password=wrong").ping)
    assert message == (
        f"cannot use the fleet store {redis_server.url}?password=***: it refused the connection's sign-in; check the "
        "password in the URL (--fleet / MCPVISOR_FLEET), percent-encoded: redis://:${REDIS_PASSWORD}@HOST:6379/0 "
        "with REDIS_PASSWORD set, and try again"
    )
    missing = said(FleetStore(redis_server.url).ping)
    assert missing.startswith(
        f"cannot use the fleet store {redis_server.url}: it refused the connection's sign-in; give its password in "
        "the URL (--fleet / MCPVISOR_FLEET), percent-encoded: redis://:${REDIS_PASSWORD}@HOST:6379/0 with "
        "REDIS_PASSWORD set"
    )
    assert "HELLO" not in missing
