"""``mcpvisor fleet status`` against real replicas: a replica that lags says what to do next, and a store that lost
the published settings (restarted without its data) is said so rather than read as "up to date", and a store that
stops answering partway through a command is said unreachable."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpvisor.fleet.store import FleetStore
from tests.fleet.conftest import RedisServer
from tests.fleet.test_outage import listening_pid
from tests.fleet.test_replicas import Fleet, fleet_of, publisher_and_follower
from tests.gateway.test_gateway import server
from tests.helpers import wait_until
from tests.layout import replace_text

pytestmark = pytest.mark.fleet


async def test_a_replica_that_lags_is_told_what_to_do_next(tmp_path: Path, redis_server: RedisServer) -> None:
    with fleet_of(tmp_path, redis_server) as fleet:
        a, b = await publisher_and_follower(fleet, tmp_path)
        keys = FleetStore(fleet.url).keys
        b_pid = listening_pid(b)
        os.kill(b_pid, signal.SIGSTOP)  # a replica that stopped following (stuck, or its host paused)
        try:
            with redis_server.client() as store:
                store.persist(keys.replica("rb"))  # still listed while the test looks (its entry expires in 10 s)
                before = int(store.hget(keys.settings, "gen") or 0)
                settings = tmp_path / "a" / ".mcpvisor" / "settings.json"
                replace_text(settings, json.dumps({"mcpServers": {"u": server("u"), "v": server("v")}}))
                await wait_until(lambda: int(store.hget(keys.settings, "gen") or 0) > before, what="a new generation")
            status = fleet.command("fleet", "status", home=tmp_path / "c")
            as_json = fleet.command("fleet", "status", "--json", home=tmp_path / "c")
        finally:
            os.kill(b_pid, signal.SIGCONT)
        said = " ".join(status.stdout.split())
        assert status.returncode == 1
        assert "rb  " in status.stdout
        assert "settings 1 (1 generation(s) behind)" in said, said
        assert "look at its log (the standard error of its mcpvisor serve)" in said, said
        assert f"GET {b.url}/readyz" in said, said
        assert "restart it" in said, said
        assert as_json.returncode == 1
        rows = {row["id"]: row for row in json.loads(as_json.stdout)["replicas"]}
        assert rows["rb"]["lag"] == 1
        assert rows["rb"]["settings"] == "behind"
        assert "restart it" in rows["rb"]["next_step"]
        assert rows["ra"]["settings"] == "up to date"
        assert rows["ra"]["next_step"] is None


async def test_a_store_that_lost_the_published_settings_is_said_so(tmp_path: Path, redis_server: RedisServer) -> None:
    """Redis restarted without its data: its settings generation starts again below what the replicas applied."""
    with fleet_of(tmp_path, redis_server) as fleet:
        a, b = await publisher_and_follower(fleet, tmp_path)
        keys = FleetStore(fleet.url).keys
        settings = tmp_path / "a" / ".mcpvisor" / "settings.json"
        replace_text(settings, json.dumps({"mcpServers": {"u": server("u"), "v": server("v")}}))
        with redis_server.client() as store:
            await wait_until(lambda: store.hget(keys.replica("rb"), "gen") == "2", what="rb on generation 2")
        pids = [listening_pid(a), listening_pid(b)]
        os.kill(pids[0], signal.SIGSTOP)  # the publisher cannot publish them again while the test looks
        try:
            redis_server.kill()
            shutil.rmtree(redis_server.folder / "appendonlydir")
            redis_server.start()
            with redis_server.client() as store:
                await wait_until(lambda: store.hget(keys.replica("rb"), "gen") == "2", what="rb listed again")
                os.kill(pids[1], signal.SIGSTOP)  # nor the follower its own files once it stops waiting for ra
                store.persist(keys.replica("rb"))
            status = fleet.command("fleet", "status", home=tmp_path / "c")
            as_json = fleet.command("fleet", "status", "--json", home=tmp_path / "c")
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        said = " ".join(status.stdout.split())
        assert status.returncode == 1, said
        assert "settings 2 (the store's generation 0 is below it)" in said, said
        assert (
            "the store lost the published settings (restarted without its data, or restored from an older copy)" in said
        )
        assert "their publisher publishes them again" in said, said
        assert "up to date" not in said, said
        [row] = json.loads(as_json.stdout)["replicas"]
        assert row["lag"] == -2
        assert row["settings"] == "ahead of the store"
        assert "their publisher publishes them again" in row["next_step"]
        with redis_server.client() as store:  # published again (the same texts): every replica is on that generation

            def on_the_stores() -> bool:
                gen = store.hget(keys.settings, "gen")
                return gen is not None and all(store.hget(keys.replica(r), "gen") == gen for r in ("ra", "rb"))

            await wait_until(on_the_stores, what="every replica on the generation the settings were published again at")
        again = fleet.command("fleet", "status", home=tmp_path / "c")
        assert again.returncode == 0, again.stdout


def test_a_fleet_name_the_store_does_not_know_is_said_so_with_the_names_it_knows(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A mistyped --fleet-name read as a fleet at generation 0 with no replica running: the store knows no such
    fleet, and says which ones it does know."""
    with fleet_of(tmp_path, redis_server) as fleet:
        for name in ("prod", "staging"):
            FleetStore(fleet.url, fleet=name).ack_reset()
        typo = fleet.command("fleet", "status", "--fleet-name", "prd", home=tmp_path / "c")
        as_json = fleet.command("fleet", "status", "--fleet-name", "prd", "--json", home=tmp_path / "c")
        known = fleet.command("fleet", "status", "--fleet-name", "prod", "--json", home=tmp_path / "c")
    said = " ".join(typo.stdout.split())
    assert typo.returncode == 1
    assert f"no fleet named 'prd' is known in the fleet store {fleet.url}: the fleets it knows: prod, staging" in said
    assert "settings generation 0" not in said
    assert as_json.returncode == 1
    out = json.loads(as_json.stdout)
    assert (out["known"], out["fleets_in_store"]) == (False, ["prod", "staging"])
    assert "no fleet named 'prd' is known" in out["error"]
    assert known.returncode == 1  # known, but no replica of it is running
    assert json.loads(known.stdout)["known"] is True


class _AnswersThePingOnly(socketserver.StreamRequestHandler):
    """A store that answers a connection's sign-in and ``PING``, then closes the connection on any other command."""

    def handle(self) -> None:
        while line := self.rfile.readline():
            words = [self.rfile.read(int(self.rfile.readline()[1:]) + 2)[:-2] for _ in range(int(line[1:]))]
            if words[0].upper() not in (b"PING", b"AUTH", b"CLIENT", b"HELLO", b"SELECT"):
                return
            said = {b"PING": b"+PONG\r\n", b"HELLO": b"%1\r\n+proto\r\n:3\r\n"}  # HELLO: RESP3 spoken
            self.wfile.write(said.get(words[0].upper(), b"+OK\r\n"))


@contextlib.contextmanager
def store_answering_the_ping_only() -> Iterator[int]:
    """The port of a store (on 127.0.0.1) that answers the first question a command asks it, and no other."""
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _AnswersThePingOnly) as store:
        store.daemon_threads = True
        thread = threading.Thread(target=store.serve_forever, daemon=True)
        thread.start()
        try:
            yield store.server_address[1]
        finally:
            store.shutdown()
            thread.join()


def test_a_store_that_stops_answering_after_the_ping_is_said_unreachable(tmp_path: Path) -> None:
    """The store answered the command's ping, then closed its connections: each command says it cannot reach the
    store (its URL without the password) and what to do, not a Redis client's traceback."""
    with store_answering_the_ping_only() as port:
        url = f"redis://:s3cret@127.0.0.1:{port}/0"
        fleet = Fleet(tmp_path, url, tmp_path, [])
        for command in (("fleet", "status"), ("fleet", "status", "--json"), ("fleet", "ack-reset")):
            done = fleet.command(*command, home=tmp_path / "c")
            said = " ".join((done.stdout + done.stderr).split())
            assert done.returncode == 1, said
            assert f"cannot use the fleet store redis://:***@127.0.0.1:{port}/0: it closed the connection;" in said, (
                said
            )
            assert "and try again" in said, said
            assert "Traceback" not in said, said
            assert "s3cret" not in said, said


def test_a_store_gone_between_the_ping_and_the_reads_is_said_unreachable(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with a real Redis stopped right after the command's ping, in this process."""
    from typer.testing import CliRunner

    from mcpvisor.cli.main import app

    ping = FleetStore.ping

    def ping_then_stop(store: FleetStore) -> None:
        ping(store)
        redis_server.kill()

    monkeypatch.setattr(FleetStore, "ping", ping_then_stop)
    monkeypatch.setenv("MCPVISOR_FLEET", redis_server.url)  # --fleet sets it in this process: put back afterwards
    for command in (("fleet", "status"), ("fleet", "ack-reset")):
        if redis_server.proc is None:
            redis_server.start()
        result = CliRunner().invoke(app, [*command, "--fleet", redis_server.url])
        said = " ".join(result.output.split())
        assert result.exit_code == 1, said
        assert isinstance(result.exception, SystemExit), repr(result.exception)
        assert f"cannot use the fleet store {redis_server.url}: it refused the connection (is it running?)" in said, (
            said
        )
