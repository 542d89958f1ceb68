"""Approvals in the fleet store, against a real redis-server: decisions compare-and-set, a replica's
mirror follows the log, and fails closed when the store goes quiet or back in revision."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import redact_text
from mcpvisor.fleet.approvals import FleetApprovalStore
from mcpvisor.fleet.failures import fleet_unreachable, redact
from mcpvisor.fleet.replica import Replica
from mcpvisor.fleet.store import FleetStore, parse_record
from mcpvisor.host.approvals import root_key
from tests.fleet.conftest import RedisServer
from tests.helpers import wait_until

pytestmark = pytest.mark.fleet

ROOT = Path("/srv/project")


@dataclass(frozen=True)
class Cfg:
    approval_hash: str
    scope: str = "project"


def command_store(server: RedisServer) -> FleetApprovalStore:
    """A management command's view: read whole, no follower."""
    store = FleetApprovalStore(FleetStore(server.url))
    store.load()
    return store


def test_a_decision_reaches_another_reader_bound_to_its_hash(redis_server: RedisServer) -> None:
    command_store(redis_server).approve(ROOT, "p", Cfg("h1"))
    reader = command_store(redis_server)
    assert reader.get_state(ROOT, "p", Cfg("h1")) == "approved"
    assert reader.get_state(ROOT, "p", Cfg("h2")) == "pending"  # another configuration: asked again
    assert reader.get_state(ROOT, "p", Cfg("h1"), "lsp") == "pending"  # a language server of that name is not it
    command_store(redis_server).reject(ROOT, "p", Cfg("h1"))
    assert command_store(redis_server).get_state(ROOT, "p", Cfg("h1")) == "rejected"


def test_a_decision_over_one_the_person_did_not_see_is_refused(redis_server: RedisServer) -> None:
    shown = command_store(redis_server)  # what one person looked at: no decision yet
    command_store(redis_server).reject(ROOT, "p", Cfg("h1"))  # meanwhile someone else rejected it
    with pytest.raises(ConfigError, match="another decision on it was made since it was shown"):
        shown.approve(ROOT, "p", Cfg("h1"))
    assert command_store(redis_server).get_state(ROOT, "p", Cfg("h1")) == "rejected"
    shown.approve(ROOT, "p", Cfg("h1"))  # re-read by the refusal: deciding again is what the person saw
    assert command_store(redis_server).get_state(ROOT, "p", Cfg("h1")) == "approved"


def test_an_unreadable_record_reads_as_pending(redis_server: RedisServer) -> None:
    keys = FleetStore(redis_server.url).keys
    with redis_server.client() as client:
        client.sadd(keys.roots, root_key(ROOT))
        client.hset(keys.approvals(root_key(ROOT)), mapping={"p": "{not json", "q": json.dumps({"hash": "h1"})})
        client.hset(keys.approvals(root_key(ROOT)), "r", json.dumps({"hash": "h1", "status": "maybe", "rev": 1}))
    store = command_store(redis_server)
    for name in "pqr":
        assert store.get_state(ROOT, name, Cfg("h1")) == "pending"
    assert parse_record(None) is None


def test_an_unreachable_store_leaves_every_gated_server_pending_and_says_why(tmp_path: Path) -> None:
    store = FleetApprovalStore(FleetStore(f"unix://{tmp_path}/none.sock"))
    store.load()
    assert store.get_state(ROOT, "p", Cfg("h1")) == "pending"
    assert store.error is not None
    assert "cannot read the fleet's decisions: the fleet store" in store.error
    with pytest.raises(ConfigError, match="could not record approval"):
        store.approve(ROOT, "p", Cfg("h1"))


def test_fleet_urls_are_checked_and_their_passwords_never_shown() -> None:
    with pytest.raises(ConfigError, match="expected a redis://, rediss:// or unix:// URL"):
        FleetStore("http://localhost:6379")
    assert redact("redis://:hunter2@db:6379/0") == "redis://:***@db:6379/0"
    assert redact("redis://db:6379/0?password=hunter2&db=1") == "redis://db:6379/0?password=***&db=1"
    assert (
        redact("rediss://db/0?ssl_password=hunter2&SSL_Password=x") == "rediss://db/0?ssl_password=***&SSL_Password=***"
    )
    assert (
        redact("unix:///run/redis.sock?username=u&password=hunter2")
        == "unix:///run/redis.sock?username=***&password=***"
    )
    assert "hunter2" not in repr(FleetStore("redis://user:hunter2@db:6379/0"))
    # A password that is not percent-encoded (or a mistyped scheme) leaves the URL hard to read: never shown.
    for url in ("redis://:hun#ter2@db:6379/0", "redis://:hun/ter2@db:6379/0", "redis://:hunter2?x@db:6379"):
        with pytest.raises(ConfigError, match="percent-encoded") as unreadable:
            FleetStore(url)
        assert "hun" not in str(unreadable.value).replace("hunt", "")
        assert "ter2" not in str(unreadable.value)
    for url in ("default:hunter2@db:6379", "redis:/:hunter2@db:6379/0", "redis//:hunter2@db"):
        with pytest.raises(ConfigError, match="expected a redis://") as mistyped:
            FleetStore(url)
        assert "hunter2" not in str(mistyped.value)
    assert redact("127.0.0.1:6379") == "127.0.0.1:6379"  # as typed
    for url in ("redis://h/0?password=s3cret&username=me@corp", "redis://h/0?password=s3cret@2024"):  # @ in a query
        assert "s3cret" not in redact(url)
        assert "s3cret" not in repr(FleetStore(url))
    with pytest.raises(ConfigError, match="without a dot"):
        Replica(FleetStore("redis://db"), replica_id="a.b")


def test_fleet_status_fails_when_no_replica_runs_and_a_fleet_name_is_a_name(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from mcpvisor.cli.main import app

    # --fleet sets these for the command's process (this one, in a CliRunner): put back afterwards
    monkeypatch.setenv("MCPVISOR_FLEET", redis_server.url)
    monkeypatch.setenv("MCPVISOR_FLEET_NAME", "defualt")
    result = CliRunner().invoke(app, ["fleet", "status", "--fleet", redis_server.url, "--fleet-name", "defualt"])
    assert result.exit_code == 1
    said = " ".join(result.stdout.split())
    assert "no fleet named 'defualt' is known in the fleet store" in said
    assert "it knows no fleet yet (no replica ran with it)" in said
    for name in ("*", "a b", "x}y", ""):
        with pytest.raises(ConfigError, match="invalid fleet name"):
            FleetStore(redis_server.url, fleet=name)


def test_approve_hints_say_the_decision_is_the_fleets(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from mcpvisor.cli.main import app
    from tests.layout import make_layout, write_json

    monkeypatch.setenv("MCPVISOR_FLEET", redis_server.url)  # --fleet sets it in this process: put back afterwards
    layout = make_layout(tmp_path)
    write_json(layout.root / ".lsp.json", {"py": {"command": "pylsp", "extensionToLanguage": {".py": "python"}}})
    write_json(layout.paths.project, {"mcpServers": {"p": {"command": "srv"}}})
    env = {**layout.env, "MCPVISOR_FLEET": redis_server.url}
    for kind, name in (("lsp", "py"), ("mcp", "p")):
        result = CliRunner().invoke(app, [kind, "list", "--workspace", str(layout.root)], env=env)
        said = " ".join(result.stdout.split())
        assert f"run: mcpvisor {kind} approve --workspace {layout.root} --fleet {redis_server.url} {name}" in said, said
    # A URL with a password in it is not shown (the hint says where the URL goes).
    for secret in ("redis://:hunter2@db:6379/0", "rediss://db:6380/0?ssl_password=hunter2"):
        assert FleetApprovalStore(FleetStore(secret)).decided_with == " --fleet URL"
    named = FleetApprovalStore(FleetStore("redis://db:6379/0", fleet="blue")).decided_with
    assert named == " --fleet redis://db:6379/0 --fleet-name blue"


@pytest.mark.parametrize(
    ("url", "error", "fix"),
    [
        ("rediss://:pw@h:6380/0", redis.TimeoutError("Timeout connecting to server"), "use redis:// if it does not"),
        ("redis://h:6380/0", redis.ConnectionError("Error 104 while reading: Connection reset by peer"), "rediss://"),
        (
            "rediss://h:6380/0",
            redis.ConnectionError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed"),
            "rediss://HOST:6379/0?ssl_ca_certs=/path/to/ca.pem",
        ),
        ("redis://h:6380/0", redis.ConnectionError("Error 111 connecting to h:6380. Connection refused"), "start it"),
    ],
)
def test_a_store_reached_with_the_wrong_tls_says_which_scheme_or_ca_to_use(
    url: str, error: Exception, fix: str
) -> None:
    """What redis-py says of a TLS mismatch (a timeout, a reset, a failed verification) named no fix."""
    said = str(fleet_unreachable(url, error))
    assert fix in said
    assert "pw" not in said


def test_a_database_that_is_no_number_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="its path names the database by number, e.g. redis://HOST:6379/0"):
        FleetStore("redis://:pw@h:6379/abc")  # redis-py would use database 0 without a word
    FleetStore("redis://h:6379/2")


def test_a_store_that_wants_a_password_says_so(redis_server: RedisServer) -> None:
    with redis_server.client() as client:
        client.config_set("requirepass", "hunter2")
    with pytest.raises(ConfigError) as refused:
        FleetStore(redis_server.url).ping()
    said = str(refused.value)
    assert "refused the connection's sign-in" in said
    fix = "give its password in the URL (--fleet / MCPVISOR_FLEET), percent-encoded: redis://:${REDIS_PASSWORD}@HOST"
    assert fix in said
    assert fix in redact_text(said)  # as a log line shows it: a ${VAR} reference is no secret to hide
    assert ".;" not in said
    store = FleetStore(f"{redis_server.url}?password=wrong")
    with pytest.raises(ConfigError, match="refused the connection's sign-in") as wrong:
        store.ping()
    assert "wrong" not in str(wrong.value).replace("password=***", "")
    FleetStore(f"{redis_server.url}?password=hunter2").ping()


async def test_a_replica_follows_decisions_and_holds_gated_servers_while_the_store_is_gone(
    redis_server: RedisServer,
) -> None:
    heard: list[str] = []
    async with Replica(FleetStore(redis_server.url), freshness_s=1.0, register=False) as replica:
        mirror = replica.approvals
        mirror.on_external_change(lambda: heard.append("changed"))
        command_store(redis_server).approve(ROOT, "p", Cfg("h1"))
        await wait_until(
            lambda: mirror.get_state(ROOT, "p", Cfg("h1")) == "approved", what="the approval on the replica"
        )
        assert heard  # the hosts are told (they reconcile)
        redis_server.kill()
        await wait_until(lambda: mirror.get_state(ROOT, "p", Cfg("h1")) == "pending", what="gated servers held")
        assert mirror.error is not None
        assert "has not answered since" in mirror.error
        redis_server.start()  # with its data (append-only file)
        await wait_until(lambda: mirror.get_state(ROOT, "p", Cfg("h1")) == "approved", what="recovery")
        assert mirror.error is None


async def test_a_store_that_starts_refusing_the_password_says_so_while_the_replica_runs(
    redis_server: RedisServer,
) -> None:
    """A store restarted with another password: the replica's error (status, readyz) says its sign-in is refused and
    how to give the password, not only that the store "has not answered"."""
    async with Replica(FleetStore(redis_server.url), freshness_s=1.0, register=False) as replica:
        mirror = replica.approvals
        with redis_server.client() as client:
            client.config_set("requirepass", "hunter2")
            client.client_kill_filter(_type="normal", skipme=True)  # its connections sign in again
        await wait_until(lambda: "refused the connection's sign-in" in (mirror.error or ""), what="the refusal said")
        assert "has not answered since" in (mirror.error or "")
        assert "give its password in the URL, percent-encoded" in (mirror.error or "")
        with redis.Redis(unix_socket_path=str(redis_server.socket), password="hunter2") as client:
            client.config_set("requirepass", "")
        await wait_until(lambda: mirror.error is None, what="recovery once it answers")


async def test_a_store_that_starts_refusing_the_password_the_url_gives_says_to_check_it(
    redis_server: RedisServer,
) -> None:
    """A store restarted with another password than the one in the replica's URL: the replica said to "give its
    password in the URL" (it gives one) and quoted the Redis client's own words; the command line, for the same
    refusal, says to check the password."""
    with redis_server.client() as client:
        client.config_set("requirepass", "before")
    url = f"{redis_server.url}?password=before"
    async with Replica(FleetStore(url), freshness_s=1.0, register=False) as replica:
        mirror = replica.approvals
        with redis.Redis(unix_socket_path=str(redis_server.socket), password="before") as client:
            client.config_set("requirepass", "after")
            client.client_kill_filter(_type="normal", skipme=True)  # its connections sign in again
        await wait_until(lambda: "refused the connection's sign-in" in (mirror.error or ""), what="the refusal said")
        said = mirror.error or ""
        assert "check the password in the URL, percent-encoded: redis://:${REDIS_PASSWORD}@HOST:6379/0" in said, said
        assert "give its password" not in said, said
        assert "username-password" not in said, said  # (the client's own text)
        with redis.Redis(unix_socket_path=str(redis_server.socket), password="after") as client:
            client.config_set("requirepass", "")


async def test_a_store_that_went_back_in_revision_is_distrusted_until_acknowledged(redis_server: RedisServer) -> None:
    async with Replica(FleetStore(redis_server.url), register=False) as replica:
        mirror = replica.approvals
        for digest in ("h0", "h1"):
            command_store(redis_server).approve(ROOT, "p", Cfg(digest))  # revision 2
        await wait_until(lambda: mirror.revision == 2, what="revision 2 on the replica")
        with redis_server.client() as client:
            client.flushall()  # the store lost its writes (a failover, a restore)
        command_store(redis_server).approve(ROOT, "p", Cfg("h1"))  # revision 1 again
        await wait_until(lambda: mirror.error is not None, what="the rewind noticed")
        assert "went back to revision 1" in (mirror.error or "")
        assert mirror.get_state(ROOT, "p", Cfg("h1")) == "pending"  # held, though the record says approved
        with pytest.raises(ConfigError, match="ack-reset"):
            mirror.reject(ROOT, "p", Cfg("h1"))
        assert FleetStore(redis_server.url).ack_reset() == 1
        await wait_until(lambda: mirror.get_state(ROOT, "p", Cfg("h1")) == "approved", what="trust after ack-reset")
        assert mirror.error is None
        # Lost again (the acknowledgement with it): one ack-reset is enough again, not one more each time.
        command_store(redis_server).approve(ROOT, "p", Cfg("h2"))  # revision 2
        await wait_until(lambda: mirror.revision == 2, what="revision 2 on the replica again")
        with redis_server.client() as client:
            client.flushall()
        command_store(redis_server).approve(ROOT, "p", Cfg("h1"))
        await wait_until(lambda: mirror.error is not None, what="the second rewind noticed")
        assert FleetStore(redis_server.url).ack_reset() == 1
        await wait_until(lambda: mirror.get_state(ROOT, "p", Cfg("h1")) == "approved", what="trust after one ack")
        assert mirror.error is None


async def test_a_store_that_lost_its_data_holds_approved_servers_at_once_with_no_write_after_it(
    redis_server: RedisServer,
) -> None:
    """A flush while the replica follows the log (nothing written after it, the connection kept): the hosts are
    told, so an approved server stops instead of serving on until an operator runs ack-reset."""
    told: list[str] = []
    async with Replica(FleetStore(redis_server.url), register=False) as replica:
        mirror = replica.approvals
        mirror.on_external_change(lambda: told.append("changed"))
        command_store(redis_server).approve(ROOT, "p", Cfg("h1"))
        await wait_until(lambda: mirror.get_state(ROOT, "p", Cfg("h1")) == "approved", what="the approval")
        told.clear()
        with redis_server.client() as client:
            client.flushall()
        await wait_until(lambda: bool(told), what="the hosts told of the rewind")
        assert mirror.get_state(ROOT, "p", Cfg("h1")) == "pending"
        assert "went back to revision 0" in (mirror.error or "")


async def test_a_replica_started_after_the_store_went_back_holds_as_the_replicas_that_saw_it(
    redis_server: RedisServer,
) -> None:
    """The live replicas' registry entries say which revision they applied: a replica started (or restarted) while
    the store is behind it holds every gated server as they do, instead of trusting the older decisions; after an
    operator's ack-reset, a replica started at once is not held by entries not yet renewed."""
    store = FleetStore(redis_server.url)
    async with Replica(store, replica_id="seen") as seen:
        for digest in ("h0", "h1"):
            command_store(redis_server).approve(ROOT, "p", Cfg(digest))  # revision 2
        with redis_server.client() as client:
            await wait_until(lambda: client.hget(store.keys.replica("seen"), "rev") == "2", what="revision 2 listed")
            client.set(store.keys.rev, 1)  # the store lost a write (a restore from an older copy)
        await wait_until(lambda: seen.approvals.error is not None, what="the rewind seen by the live replica")
        async with Replica(FleetStore(redis_server.url), register=False) as fresh:
            assert fresh.approvals.get_state(ROOT, "p", Cfg("h1")) == "pending"
            assert "went back to revision 1 after other replicas applied 2" in (fresh.approvals.error or "")
        assert FleetStore(redis_server.url).ack_reset() == 1
        async with Replica(FleetStore(redis_server.url), register=False) as after:
            assert after.approvals.error is None
            assert after.approvals.get_state(ROOT, "p", Cfg("h1")) == "approved"


async def test_a_replica_started_after_a_restore_from_before_an_ack_reset_holds_as_the_others(
    redis_server: RedisServer,
) -> None:
    """A live replica that follows a newer acknowledgement than the store's is a witness too: the store was
    restored from before it (the decisions made since, a rejection among them, are lost)."""
    store = FleetStore(redis_server.url)
    async with Replica(store, replica_id="seen") as seen:
        command_store(redis_server).approve(ROOT, "p", Cfg("h1"))
        raw = redis.Redis(unix_socket_path=str(redis_server.socket))  # a dump is bytes
        with redis_server.client() as client, raw:
            own = store.keys.replica("seen")
            backup = {key: raw.dump(key) for key in client.keys("*") if key != own}
            assert FleetStore(redis_server.url).ack_reset() >= 1
            command_store(redis_server).reject(ROOT, "p", Cfg("h1"))
            newer = client.get(store.keys.epoch)
            await wait_until(lambda: client.hget(store.keys.replica("seen"), "epoch") == newer, what="the ack applied")
            client.flushall()  # restored from the copy taken before the ack-reset
            for key, value in backup.items():
                raw.restore(key, 0, value)  # type: ignore[arg-type]
            await wait_until(lambda: seen.approvals.error is not None, what="the rewind seen by the live replica")
            await wait_until(lambda: client.hget(store.keys.replica("seen"), "epoch") == newer, what="its entry back")
        async with Replica(FleetStore(redis_server.url), register=False) as fresh:
            assert fresh.approvals.get_state(ROOT, "p", Cfg("h1")) == "pending"  # not the approval restored
            assert "went back" in (fresh.approvals.error or "")


async def test_two_live_processes_never_share_a_replica_id(redis_server: RedisServer) -> None:
    async with Replica(FleetStore(redis_server.url), replica_id="r1"):
        with pytest.raises(ConfigError, match="'r1' is in use by another running replica"):
            async with Replica(FleetStore(redis_server.url), replica_id="r1"):
                pass
    async with Replica(FleetStore(redis_server.url), replica_id="r1"):  # it left the registry on its way out
        pass


async def test_a_replica_restarted_at_once_under_its_id_waits_out_the_entry_its_killed_process_left(
    redis_server: RedisServer,
) -> None:
    """A supervisor restarts a killed replica at once: its registry entry (renewed by nobody now) is waited out, not
    refused (the restart failed again and again until the supervisor gave up)."""
    store = FleetStore(redis_server.url)
    with redis_server.client() as client:
        client.hset(store.keys.replica("r1"), mapping={"nonce": "the-killed-process", "addr": "127.0.0.1:1"})
        client.pexpire(store.keys.replica("r1"), 1500)  # as left by a process killed with SIGKILL
    async with Replica(store, replica_id="r1"):
        with redis_server.client() as client:
            assert client.hget(store.keys.replica("r1"), "nonce") != "the-killed-process"


def test_a_decision_names_the_record_it_was_shown(redis_server: RedisServer) -> None:
    from mcpvisor.host.approvals import DecidedSinceShown

    mine = command_store(redis_server)
    shown = mine.stamp(ROOT, "p")
    theirs = command_store(redis_server)
    theirs.reject(ROOT, "p", Cfg("h1"))
    mine.load()  # even with the newer record read since, what was shown decides
    with pytest.raises(DecidedSinceShown):
        mine.approve(ROOT, "p", Cfg("h1"), shown=shown)
    assert command_store(redis_server).get_state(ROOT, "p", Cfg("h1")) == "rejected"
