"""OAuth sign-ins in the fleet store, against a real redis-server and the OAuth example server: sealed
with the fleet key (Redis never holds a token in clear), made once for every replica, and refreshed by
exactly one process when several need it at once (refresh tokens rotate: a second use would be refused)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.events import ReconcileFinished
from mcpvisor.fleet.sealing import FleetKey
from mcpvisor.fleet.settings import Snapshot
from mcpvisor.fleet.store import FleetStore
from mcpvisor.fleet.tokens import FleetTokenStore
from mcpvisor.host.host import Host, HostOptions
from tests.e2e.test_oauth import FOLLOW, start_server
from tests.fleet.conftest import RedisServer
from tests.helpers import WAIT_S, free_port, mcpvisor_command, wait_until
from tests.layout import make_layout, write_json

pytestmark = pytest.mark.fleet

SECRET = "correct horse battery staple and more"
OTHER = "another secret of at least thirty-two chars"


def test_a_sealed_record_opens_only_with_its_key_and_its_place() -> None:
    key = FleetKey([SECRET])
    sealed = key.seal(b"token", "https://a.example/mcp")
    assert b"token" not in sealed.encode()
    assert key.open(sealed, "https://a.example/mcp") == b"token"
    with pytest.raises(ValueError, match="does not open"):
        key.open(sealed, "https://b.example/mcp")  # moved to another record
    with pytest.raises(ValueError, match="not in MCPVISOR_FLEET_KEY"):
        FleetKey([OTHER]).open(sealed, "https://a.example/mcp")
    rotated = FleetKey([OTHER, SECRET])  # the new key first: it seals, the old one still opens
    assert rotated.open(sealed, "https://a.example/mcp") == b"token"
    with pytest.raises(ValueError, match="not in MCPVISOR_FLEET_KEY"):
        FleetKey([SECRET]).open(rotated.seal(b"t2", "k"), "k")  # sealed with the new key: the old ring cannot
    with pytest.raises(ConfigError, match="at least 32"):
        FleetKey(["short"])


def test_the_fleet_key_comes_from_the_environment_or_a_private_file(tmp_path: Path) -> None:
    assert FleetKey.from_env({}) is None
    assert FleetKey.from_env({"MCPVISOR_FLEET_KEY": f"{OTHER},{SECRET}"}) is not None
    path = tmp_path / "fleet.key"
    path.write_text(SECRET + "\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        FleetKey.from_env({"MCPVISOR_FLEET_KEY_FILE": str(path)})
    path.chmod(0o600)
    assert FleetKey.from_env({"MCPVISOR_FLEET_KEY_FILE": str(path)}) is not None


def test_tokens_are_sealed_in_redis_and_unreadable_without_the_key(redis_server: RedisServer) -> None:
    store = FleetTokenStore(FleetStore(redis_server.url), FleetKey([SECRET]))
    store.update("https://a.example/mcp", tokens={"access_token": "AT-secret", "refresh_token": "RT-secret"})
    with redis_server.client() as client:
        raw = json.dumps(client.hgetall(store.store.keys.tokens))
    assert "AT-secret" not in raw
    assert "RT-secret" not in raw
    assert store.get("https://a.example/mcp")["tokens"]["access_token"] == "AT-secret"
    wrong = FleetTokenStore(FleetStore(redis_server.url), FleetKey([OTHER]))
    assert wrong.read() == {}  # a record it cannot open is left out (that server is not signed in), not the rest
    assert wrong.get("https://a.example/mcp") == {}


async def test_exactly_one_of_several_processes_takes_the_refresh_turn(redis_server: RedisServer) -> None:
    turns: list[bool] = []

    async def one() -> None:
        store = FleetTokenStore(FleetStore(redis_server.url), FleetKey([SECRET]))
        turn = await store.refresh_turn("https://a.example/mcp")
        turns.append(turn is not None)
        if turn is not None:
            await anyio.sleep(0.3)  # the refresh; the others wait for it to end
            await turn.release(True)

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(one)
    assert sorted(turns) == [False, False, False, True]
    late = await FleetTokenStore(FleetStore(redis_server.url), FleetKey([SECRET])).refresh_turn("https://a.example/mcp")
    assert late is None  # just refreshed: a process that wants to refresh now uses what was stored


async def test_no_turn_is_given_while_the_store_does_not_answer(tmp_path: Path) -> None:
    """Without the store nobody can know whether another replica is refreshing: no refresh then (a refresh
    token used twice may revoke the whole grant)."""
    store = FleetTokenStore(FleetStore(f"unix://{tmp_path}/none.sock"), FleetKey([SECRET]))
    with pytest.raises(ConfigError, match="has no socket there"):
        await store.refresh_turn("https://a.example/mcp")


def test_one_sign_in_serves_every_process_and_exactly_one_refreshes(tmp_path: Path, redis_server: RedisServer) -> None:
    """Three processes with homes of their own connect at once to a server whose access tokens live 30 s,
    less than the minute before expiry when a token is refreshed: each wants a refresh before its first
    request; one makes it, the others use what it stored."""
    for server in start_server(tmp_path, "--token-lifetime", "30"):
        mcpvisor = partial(run_mcpvisor, tmp_path, server.url, redis_server.url)
        login = mcpvisor("signer", "mcp", "login", "sec")
        assert login.returncode == 0, login.stderr
        assert "the fleet store" in login.stdout
        assert not (tmp_path / "signer" / "home" / ".mcpvisor" / "oauth-tokens.json").exists()
        assert server.events() == ["register", "authorize", "token"]
        with ThreadPoolExecutor(3) as pool:
            results = list(pool.map(partial(status_of, mcpvisor), ["r1", "r2", "r3"]))
        for result in results:
            [row] = json.loads(result.stdout)["servers"]
            assert row["state"] == "connected", result.stderr
        assert server.events().count("refresh") == 1
        for home in ("r1", "r2", "r3"):  # nothing was kept on the replicas' own disks
            store_file = tmp_path / home / "home" / ".mcpvisor" / "oauth-tokens.json"
            assert not store_file.exists() or stat.S_IMODE(store_file.stat().st_mode) == 0o600


def test_a_sign_in_is_not_stored_under_a_key_a_replica_started_meanwhile_cannot_open(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """``mcp login --fleet`` checked the fleet key when it started only: a replica started with another key while
    the browser was open took its key for the fleet's, and the sign-in was stored sealed with a key no replica
    opens (each one then left it out, with a warning). The key is checked again as the sign-in is stored."""
    key_check = FleetStore(redis_server.url).keys.key_check
    starts_meanwhile = (  # in the browser step: a replica with another key starts (it records its key)
        "from mcpvisor.fleet.sealing import FleetKey, check_fleet_key\n"
        "from mcpvisor.fleet.store import FleetStore\n"
        f"check_fleet_key(FleetStore({redis_server.url!r}), FleetKey([{OTHER!r}]), holder='rb')\n"
    )
    for server in start_server(tmp_path, "--token-lifetime", "30"):
        login = run_mcpvisor(
            tmp_path, server.url, redis_server.url, "signer", "mcp", "login", "sec", browser=starts_meanwhile + FOLLOW
        )
        said = " ".join(login.stderr.split())
        assert login.returncode == 1, login.stdout + login.stderr
        assert (
            "could not save the fleet's OAuth sign-ins: MCPVISOR_FLEET_KEY differs from the fleet key of fleet "
            "'default' (running: one starting now)" in said
        ), said
        assert "nothing was stored: run this again with the replicas' key (or restart them with this one)" in said
        assert "Traceback" not in said, said
        with redis_server.client() as client:
            assert FleetKey([OTHER]).verify("mcpvisor fleet key check default", str(client.get(key_check)))
        stored = FleetTokenStore(FleetStore(redis_server.url), FleetKey([SECRET])).get(server.url)
        assert "tokens" not in stored, stored  # (the client registered before the browser step stays)
        assert server.events() == ["register", "authorize", "token"]  # signed in there; refused as it was stored


def test_a_sign_in_the_store_could_not_keep_is_not_said_to_be_a_failed_connection(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """The store stops answering while the browser is open: the sign-in is made at the authorization server, and
    only keeping it fails. The error said "could not connect to server 'sec'" (the MCP server, which answered
    all along), sending people after the wrong thing."""
    stops_meanwhile = (  # in the browser step: the fleet store goes away
        "import redis\n"
        f"client = redis.Redis(unix_socket_path={str(redis_server.socket)!r})\n"
        "try:\n"
        "    client.shutdown(nosave=True)\n"
        "except redis.ConnectionError:\n"
        "    pass\n"
    )
    for server in start_server(tmp_path):
        login = run_mcpvisor(
            tmp_path, server.url, redis_server.url, "signer", "mcp", "login", "sec", browser=stops_meanwhile + FOLLOW
        )
        said = " ".join(login.stderr.split())
        assert login.returncode == 1, login.stdout + login.stderr
        assert server.events() == ["register", "authorize", "token"]  # signed in there; lost as it was stored
        assert "could not connect" not in said, said
        assert "signed in to server 'sec', but the sign-in could not be kept: could not save the fleet's OAuth " in said
        assert "has no socket there (is it running?)" in said, said
        assert "Traceback" not in said, said


def test_a_sign_in_on_a_machine_without_the_publishers_files_signs_in_to_the_fleets_server(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A replica serving a remote server of the fleet's settings (the publisher's user settings) says to run
    ``mcpvisor mcp login --fleet URL sec``; run on that replica's machine, whose own files do not define ``sec``,
    it said "no MCP server of that name is configured". It signs in to the server the replicas serve."""
    for server in start_server(tmp_path):
        root = str(tmp_path.resolve() / "replica" / "ws")  # (the workspace run_mcpvisor makes)
        published = Snapshot(1, root, {"user": json.dumps({"mcpServers": {"sec": _remote(server.url)}})})
        with redis_server.client() as client:  # as the publisher, on another machine, published its files
            keys = FleetStore(redis_server.url).keys
            client.hset(keys.settings, mapping={"gen": 1, "files": published.files, "sha": published.sha, "by": "r1"})
        login = run_mcpvisor(tmp_path, server.url, redis_server.url, "replica", "mcp", "login", "sec", servers={})
        assert login.returncode == 0, login.stdout + login.stderr
        assert server.events() == ["register", "authorize", "token"]
        stored = FleetTokenStore(FleetStore(redis_server.url), FleetKey([SECRET])).get(server.url)
        assert "tokens" in stored


def _remote(url: str) -> dict[str, str]:
    return {"type": "http", "url": url}


def run_mcpvisor(
    tmp_path: Path,
    server_url: str,
    fleet_url: str,
    home: str,
    *args: str,
    browser: str = FOLLOW,
    servers: dict[str, Any] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``mcpvisor ARGS`` with a home of its own (a user server ``sec``, or ``servers``), the fleet and its key; its
    browser follows the sign-in redirect (``browser``: the script it runs)."""
    script = tmp_path / "browser.py"
    script.write_text(browser)
    layout = make_layout(tmp_path / home)
    write_json(layout.paths.user, {"mcpServers": {"sec": _remote(server_url)} if servers is None else servers})
    env = {
        **os.environ,
        **layout.env,
        "BROWSER": f"{sys.executable} {script} %s",
        "MCPVISOR_FLEET": fleet_url,
        "MCPVISOR_FLEET_KEY": SECRET,
    }
    env.pop("DISPLAY", None)
    return subprocess.run(
        [mcpvisor_command(), *args, "--workspace", str(layout.root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
    )


def status_of(mcpvisor: Any, home: str) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = mcpvisor(home, "status", "--json")
    return result


async def test_a_sign_in_stored_or_reported_by_the_fleet_reaches_the_hosts_connections_once(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A write to the fleet's token store, and one the fleet's log reports from another replica, each tell this
    host's connections once to look at the stored sign-in again (the report also reconnects a server that is down
    and got a new sign-in), and nothing more: the report is not taken for another one."""
    tokens = FleetTokenStore(FleetStore(redis_server.url), FleetKey([SECRET]))
    layout = make_layout(tmp_path)
    down = f"http://127.0.0.1:{free_port()}/mcp"  # (nothing listens there)
    write_json(layout.paths.user, {"mcpServers": {"sec": {"type": "http", "url": down}}})
    reconciles: list[ReconcileFinished] = []
    async with Host(HostOptions(env=layout.env, workspace=layout.root, tokens=tokens)) as host:
        host.subscribe(lambda event: reconciles.append(event) if isinstance(event, ReconcileFinished) else None)
        before = tokens.generation
        tokens.update("https://a.example/mcp", tokens={"access_token": "A"})  # e.g. a refresh stored here
        assert tokens.generation == before + 1
        seen = len(reconciles)
        tokens.update(down, tokens={"access_token": "B"})  # as the fleet holds another replica's sign-in of sec
        tokens.changed()  # as the replica does when the fleet's log reports it
        await wait_until(lambda: len(reconciles) > seen, what="the reconcile the report asks for")
        assert tokens.generation == before + 3


def test_a_replica_without_a_fleet_key_says_its_sign_ins_stay_its_own(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    # At the default log level (no -v), as people run it: a warning logged there was never shown.
    layout = make_layout(tmp_path)
    write_json(layout.paths.user, {"mcpServers": {}})
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPVISOR_FLEET_KEY")} | layout.env
    process = subprocess.Popen(
        [mcpvisor_command(), "run", "--workspace", str(layout.root), "--fleet", redis_server.url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:  # until the host follows its files
            if line.startswith("Watching"):
                break
    finally:
        process.terminate()
        _, err = process.communicate(timeout=WAIT_S)
    assert "no fleet key (MCPVISOR_FLEET_KEY or MCPVISOR_FLEET_KEY_FILE): OAuth sign-ins stay with each replica" in (
        " ".join(err.split())
    )
