"""A store that stops answering for longer than the publisher lease, then answers again (with its data):
the fleet keeps following the settings of the replica that published them, whichever replica reaches the
store first once it is back."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import httpx2
import pytest

from mcpvisor.core.errors import ConfigError
from mcpvisor.fleet.replica import Replica as Joined
from mcpvisor.fleet.sealing import FleetKey, check_fleet_key
from mcpvisor.fleet.store import FleetStore
from tests.fleet.conftest import RedisServer
from tests.fleet.test_replicas import Replica, fleet_of, publisher_and_follower, ready, tools
from tests.helpers import WAIT_S, mcpvisor_command, wait_until

pytestmark = pytest.mark.fleet


def listening_pid(replica: Replica) -> int:
    """The process that listens on the replica's port (the command started is a stand-in that forwards
    signals, which a SIGSTOP cannot be)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == replica.port and fields[3] == "0A":  # LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                    return int(proc.name)
            except OSError:
                continue
    raise AssertionError(f"nothing listens on port {replica.port}")


async def store_silent(replica: Replica) -> None:
    """Until ``/readyz`` says the store has not answered (after the freshness time, beyond the lease's)."""
    async with httpx2.AsyncClient() as http:
        with anyio.fail_after(WAIT_S + 15):
            while "has not answered since" not in (await http.get(replica.url + "/readyz")).json()["approvals"]:  # noqa: ASYNC110
                await anyio.sleep(0.2)  # another process's view of the store: nothing to wait on


async def test_after_an_outage_the_fleet_keeps_its_publishers_settings(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with fleet_of(tmp_path, redis_server) as fleet:
        a, b = await publisher_and_follower(fleet, tmp_path)
        keys = FleetStore(fleet.url).keys
        redis_server.kill()  # with its data (appendfsync always); the lease expires meanwhile
        for replica in (a, b):
            await store_silent(replica)
        a_pid = listening_pid(a)
        os.kill(a_pid, signal.SIGSTOP)  # the publisher is the last to reach the store again
        try:
            redis_server.start()
            with redis_server.client() as store:
                await wait_until(
                    lambda: store.get(keys.lease) is not None or "publishes first" in b.log.read_text(),
                    what="the follower back in touch with the store",
                )
        finally:
            os.kill(a_pid, signal.SIGCONT)
        with redis_server.client() as store:
            await wait_until(lambda: store.get(keys.lease) is not None, what="a publisher again")
            assert store.get(keys.lease) == "ra"
            assert store.hget(keys.settings, "by") == "ra"
        assert "takes over publishing" not in b.log.read_text()
        assert await tools(b) >= {"mcp__u__echo"}


KEY = "a fleet key of at least thirty-two characters"


async def test_a_replica_started_with_another_fleet_key_says_so_and_stops(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """It would serve rounds and sign-ins no other replica can read (and a sign-in made there again would replace
    the fleet's with one no other replica opens): it refuses to start, naming the fix. A key being rotated (the
    fleet's secret second) is the fleet's."""
    with fleet_of(tmp_path, redis_server) as fleet:
        await ready(fleet.start("ra", tmp_path / "a", MCPVISOR_FLEET_KEY=KEY))
        wrong = fleet.start(
            "rb", tmp_path / "b", MCPVISOR_FLEET_KEY="another key that is also thirty-two characters long"
        )
        await wait_until(lambda: wrong.proc.poll() is not None or ready_now(wrong), what="rb started or refused")
        assert wrong.proc.poll() == 1
        said = " ".join(wrong.log.read_text().split())
        assert "MCPVISOR_FLEET_KEY differs from the fleet key the other replicas of fleet 'default' use" in said
        assert "(running: ra): give every replica the same key" in said
        command = [mcpvisor_command(), "mcp", "list", "--workspace", str(fleet.root), "--fleet", fleet.url]
        env = {**fleet.env(tmp_path / "d"), "MCPVISOR_FLEET_KEY": "another key that is also thirty-two characters long"}
        listed = await anyio.run_process(command, env=env, check=False)
        assert listed.returncode == 1  # a sign-in made with that key (mcp login) would open on no replica
        assert "(running: ra): give every replica the same key" in " ".join(listed.stderr.decode().split())
        rotating = fleet.start(
            "rc", tmp_path / "c", MCPVISOR_FLEET_KEY=f"a new key that is thirty-two characters long too,{KEY}"
        )
        await ready(rotating)


async def test_a_fleet_stopped_and_started_again_with_a_new_key_starts(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A key replaced on every replica (one that leaked, say) while the fleet was down: the store's tag of the old
    one refused every replica for good, with no way out but deleting it by hand. With no replica running, the
    new key is the fleet's; a replica started with the old one is then the one refused."""
    with fleet_of(tmp_path, redis_server) as fleet:
        first = fleet.start("ra", tmp_path / "a", MCPVISOR_FLEET_KEY=KEY)
        await ready(first)
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(timeout=WAIT_S) == 0
        new_key = "a replacement key of at least thirty-two characters"
        keys = FleetStore(fleet.url).keys
        with redis_server.client() as store:
            tag = store.get(keys.key_check)
        command = [mcpvisor_command(), "mcp", "list", "--workspace", str(fleet.root), "--fleet", fleet.url]
        env = {**fleet.env(tmp_path / "d"), "MCPVISOR_FLEET_KEY": new_key}
        assert (await anyio.run_process(command, env=env, check=False)).returncode == 0
        with redis_server.client() as store:
            assert store.get(keys.key_check) == tag  # a command checks the key; only a replica records it
        await ready(fleet.start("rb", tmp_path / "b", MCPVISOR_FLEET_KEY=new_key))
        old = fleet.start("rc", tmp_path / "c", MCPVISOR_FLEET_KEY=KEY)
        await wait_until(lambda: old.proc.poll() is not None or ready_now(old), what="rc started or refused")
        assert old.proc.poll() == 1
        assert "(running: rb)" in " ".join(old.log.read_text().split())


def test_of_two_replicas_starting_at_once_with_different_keys_one_is_refused(redis_server: RedisServer) -> None:
    """The fleet was stopped (its old key's tag is left, no replica is listed) and two replicas start at the same
    instant with different keys: each read the old tag and no replica, so each took its own key for the fleet's
    new one, and the two served sign-ins and rounds the other cannot read. The second now sees the first's."""
    text, key_check = "mcpvisor fleet key check default", FleetStore(redis_server.url).keys.key_check
    with redis_server.client() as store:
        store.set(key_check, FleetKey([KEY]).mac(text))
    keys = [FleetKey([f"one new key, {KEY}"]), FleetKey([f"another new key, {KEY}"])]
    together = threading.Barrier(2)

    def start(n: int) -> str:
        store = FleetStore(redis_server.url)
        try:
            store.ping()  # connected: the two checks start together
            together.wait()
            check_fleet_key(store, keys[n])
            return "started"
        except ConfigError as exc:
            return str(exc)
        finally:
            store.close()

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(start, range(2)))
    assert outcomes.count("started") == 1, outcomes
    [refused] = [said for said in outcomes if said != "started"]
    assert "differs from the fleet key the other replicas of fleet 'default' use (running: one starting now)" in refused
    winner = keys[outcomes.index("started")]
    with redis_server.client() as store:
        assert winner.verify(text, str(store.get(key_check)))


def ready_now(replica: Replica) -> bool:
    try:
        return httpx2.get(replica.url + "/readyz").status_code == 200
    except httpx2.TransportError:
        return False


async def test_a_process_that_joins_without_being_listed_leaves_a_starting_replicas_key_mark(
    redis_server: RedisServer,
) -> None:
    """A replica recorded its key and is still starting (not listed yet) when ``mcpvisor run --fleet`` (or a shell,
    or a stdio gateway) joins with the same key: that process is never listed, so it neither records the key nor
    takes the mark; a replica started meanwhile with another key is still refused."""
    store = FleetStore(redis_server.url)
    try:
        check_fleet_key(store, FleetKey([KEY]), holder="starting replica")
        async with Joined(store, register=False, key=FleetKey([KEY])):
            pass
        with pytest.raises(ConfigError, match=r"\(running: one starting now\)"):
            check_fleet_key(store, FleetKey([f"another key, {KEY}"]), holder="another replica")
    finally:
        store.close()
