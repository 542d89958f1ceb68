"""Two ``mcpvisor serve --fleet`` replicas with different homes and one real redis-server: a decision made
by a third process reaches both, a settings edit on the publisher reaches the other, a handshake
session is forwarded to its owner or refused at once, and without Redis both hold the gated server
while the user's server keeps answering."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError, types

from mcpvisor.fleet.store import FleetStore
from tests.fleet.conftest import RedisServer
from tests.gateway.test_client_requests import Answers
from tests.gateway.test_gateway import server
from tests.gateway.test_workspaces import client_for
from tests.helpers import WAIT_S, free_port, mcpvisor_command, wait_until
from tests.layout import replace_text

pytestmark = pytest.mark.fleet

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@dataclass
class Replica:
    id: str
    port: int
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Fleet:
    root: Path
    url: str
    tmp: Path
    replicas: list[Replica]

    def env(self, home: Path) -> dict[str, str]:
        """A process's environment: its own home, no system settings."""
        return {
            **os.environ,
            "HOME": str(home),
            "MCPVISOR_HOME": str(home / ".mcpvisor"),
            "MCPVISOR_SYSTEM_DEFAULTS_PATH": str(self.tmp / "etc" / "system-defaults.json"),
            "MCPVISOR_SYSTEM_SETTINGS_PATH": str(self.tmp / "etc" / "settings.json"),
        }

    def start(self, rid: str, home: Path, *extra_args: str, verbose: bool = True, **extra_env: str) -> Replica:
        """Replica ``rid`` with its own ``home``; ``verbose``: with ``-v`` (else at the default log level)."""
        env = {**self.env(home), **extra_env}
        port = free_port()
        log = self.tmp / f"{rid}.stderr"
        args = ["serve", "--http", f"127.0.0.1:{port}", "--no-auth", "--workspace", str(self.root), *extra_args]
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [mcpvisor_command(), *args, "--fleet", self.url, "--replica-id", rid, *(["-v"] if verbose else [])],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        replica = Replica(rid, port, env, proc, log)
        self.replicas.append(replica)
        return replica

    def command(self, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [mcpvisor_command(), *args, "--fleet", self.url],
            env=self.env(home),
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )


@contextlib.contextmanager
def fleet_of(tmp_path: Path, redis_server: RedisServer) -> Iterator[Fleet]:
    root = tmp_path / "ws"
    root.mkdir()
    replace_text(root / ".mcp.json", json.dumps({"mcpServers": {"p": server("p")}}))
    fleet = Fleet(root, redis_server.url, tmp_path, [])
    try:
        yield fleet
    finally:
        for replica in fleet.replicas:
            if replica.proc.poll() is None:
                replica.proc.send_signal(signal.SIGTERM)
        for replica in fleet.replicas:
            try:
                replica.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                replica.proc.kill()


@contextlib.asynccontextmanager
async def three_replicas(tmp_path: Path, redis_server: RedisServer, servers: dict[str, Any]) -> AsyncIterator[Fleet]:
    """Replicas r1 (the publisher: ``servers`` are its user settings), r2 and r3, all ready."""
    with fleet_of(tmp_path, redis_server) as fleet:
        home = tmp_path / "r1"
        replace_text(home / ".mcpvisor" / "settings.json", json.dumps({"mcpServers": servers}))
        await ready(fleet.start("r1", home))
        for rid in ("r2", "r3"):
            fleet.start(rid, tmp_path / rid)
        for replica in fleet.replicas:
            await ready(replica)
        yield fleet


async def ready(replica: Replica) -> None:
    """Until ``/readyz`` answers 200: the replica applied the fleet's settings."""
    async with httpx2.AsyncClient() as http:
        with anyio.fail_after(WAIT_S):
            while True:
                try:
                    if (await http.get(replica.url + "/readyz")).status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
                assert replica.proc.poll() is None, replica.log.read_text()
                await anyio.sleep(0.05)  # nothing to wait on but the port and its answer


@contextlib.asynccontextmanager
async def client(replica: Replica) -> AsyncIterator[Client]:
    async with Client(replica.url + "/mcp") as c:
        yield c


async def tools(replica: Replica) -> set[str]:
    async with client(replica) as c:
        return {tool.name for tool in (await c.list_tools(cache_mode="bypass")).tools}


async def wait_tools(replica: Replica, wanted: set[str], *, absent: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    current: set[str] = set()

    async def check() -> bool:
        nonlocal current
        current = await tools(replica)
        return wanted <= current and not (absent & current)

    with anyio.fail_after(WAIT_S):
        while not await check():  # noqa: ASYNC110 - a remote process's tool list: no event reaches this test
            await anyio.sleep(0.1)


async def echo(replica: Replica, tool: str) -> str:
    async with client(replica) as c:
        result = await c.call_tool(tool, {"text": "hi"})
    [content] = result.content
    return str(getattr(content, "text", ""))


async def test_two_replicas_share_decisions_settings_and_sessions(tmp_path: Path, redis_server: RedisServer) -> None:
    with fleet_of(tmp_path, redis_server) as fleet:
        home_a, home_b, home_c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
        replace_text(home_a / ".mcpvisor" / "settings.json", json.dumps({"mcpServers": {"u": server("u")}}))
        a = fleet.start("ra", home_a)
        await ready(a)  # the first replica up publishes its settings files
        b = fleet.start("rb", home_b)  # no settings of its own: it serves the fleet's
        await ready(b)
        for replica in (a, b):
            await wait_tools(replica, {"mcp__u__echo"}, absent={"mcp__p__echo"})  # p waits for approval

        # The hint says to decide in the fleet (the same command without --fleet writes a file nobody reads).
        pending = fleet.command("mcp", "list", "--workspace", str(fleet.root), home=home_c)
        assert f"run: mcpvisor mcp approve --workspace {fleet.root} --fleet {fleet.url} p" in " ".join(
            pending.stdout.split()
        )
        # A decision made by a third process, with a home of its own, reaches both.
        approved = fleet.command("mcp", "approve", "p", "--workspace", str(fleet.root), home=home_c)
        assert approved.returncode == 0, approved.stderr
        for replica in (a, b):
            await wait_tools(replica, {"mcp__p__echo", "mcp__u__echo"})
        listed = fleet.command("mcp", "list", "--workspace", str(fleet.root), "--json", home=home_c)
        [p_row] = [row for row in json.loads(listed.stdout)["servers"] if row["name"] == "p"]
        assert p_row["approval"] == "approved"
        rejected = fleet.command("mcp", "reject", "p", "--workspace", str(fleet.root), home=home_c)
        assert rejected.returncode == 0, rejected.stderr
        for replica in (a, b):
            await wait_tools(replica, {"mcp__u__echo"}, absent={"mcp__p__echo"})

        # An edit of the publisher's settings file reaches the other replica; B's own files play no part.
        replace_text(home_a / ".mcpvisor" / "settings.json", json.dumps({"mcpServers": {"v": server("v")}}))
        await wait_tools(b, {"mcp__v__echo"}, absent={"mcp__u__echo"})
        assert "v:echo:hi" in await echo(b, "mcp__v__echo")

        await wait_until(lambda: fleet_lag(fleet, home_c) == 0, what="every replica on the newest settings")
        status = fleet.command("fleet", "status", "--json", home=home_c)
        assert status.returncode == 0, status.stdout + status.stderr
        said = json.loads(status.stdout)
        rows = {row["id"]: row for row in said["replicas"]}
        assert set(rows) == {"ra", "rb"}
        assert rows["ra"]["publisher"]
        assert not rows["rb"]["publisher"]
        assert rows["ra"]["address"] == a.url + "/mcp"
        # The approval, p's first pin and the rejection: both replicas applied the store's revision.
        assert rows["ra"]["revision"] == rows["rb"]["revision"] == said["revision"] == 3

        # A handshake session made on A: sent to B it is forwarded to A; once A is gone, B answers 404 at once.
        async with httpx2.AsyncClient(headers=ACCEPT) as http:
            made = await http.post(a.url + "/mcp", json=INITIALIZE)
            session = made.headers["mcp-session-id"]
            assert session.startswith("ra.")
            headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(b.url + "/mcp", json=note, headers=headers)).status_code == 202
            listed_on_b = await http.post(
                b.url + "/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers
            )
            assert listed_on_b.status_code == 200
            assert "mcp__v__echo" in listed_on_b.text
            foreign = await http.post(b.url + "/mcp", json=note, headers={**headers, "Mcp-Session-Id": "abc"})
            assert foreign.status_code == 404
            a.proc.kill()  # kill -9: A never leaves the registry by itself
            a.proc.wait()
            await port_closed(a.url)  # (the forked process ends a moment after its stand-in)
            began = time.monotonic()
            gone = await http.post(
                b.url + "/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=headers
            )
            took = time.monotonic() - began
        assert gone.status_code == 404
        assert "start a new session" in gone.json()["error"]["message"]
        assert took < 5.0  # at once, not after a forwarding timeout (the registry still lists A for 10 s)


async def port_closed(url: str) -> None:
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    with anyio.fail_after(WAIT_S):
        while True:
            try:
                stream = await anyio.connect_tcp(host, int(port))
            except OSError:
                return
            await stream.aclose()
            await anyio.sleep(0.02)  # nothing to wait on but the port itself


def fleet_lag(fleet: Fleet, home: Path) -> int:
    out = json.loads(fleet.command("fleet", "status", "--json", home=home).stdout)
    return max(int(row["lag"]) for row in out["replicas"])


async def test_without_redis_both_replicas_hold_the_gated_server_and_the_users_server_answers(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with fleet_of(tmp_path, redis_server) as fleet:
        home_a, home_b = tmp_path / "a", tmp_path / "b"
        replace_text(home_a / ".mcpvisor" / "settings.json", json.dumps({"mcpServers": {"u": server("u")}}))
        a = fleet.start("ra", home_a, MCPVISOR_FLEET_FRESHNESS_S="2")
        await ready(a)
        b = fleet.start("rb", home_b, MCPVISOR_FLEET_FRESHNESS_S="2")
        await ready(b)
        approved = fleet.command("mcp", "approve", "p", "--workspace", str(fleet.root), home=tmp_path / "c")
        assert approved.returncode == 0, approved.stderr
        for replica in (a, b):
            await wait_tools(replica, {"mcp__p__echo", "mcp__u__echo"})

        redis_server.kill()
        for replica in (a, b):
            await wait_tools(replica, {"mcp__u__echo"}, absent={"mcp__p__echo"})
            assert "u:echo:hi" in await echo(replica, "mcp__u__echo")
        async with httpx2.AsyncClient() as http:
            said = (await http.get(a.url + "/readyz")).json()
        assert "has not answered since" in said["approvals"]

        redis_server.start()  # with its data: the approval is still there
        for replica in (a, b):
            await wait_tools(replica, {"mcp__p__echo", "mcp__u__echo"})


async def test_a_round_retry_landing_on_another_replica_reaches_the_call_waiting_for_input(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """2026-07-28: a call whose server asked for input runs on in the replica that received it; the
    client's retry carries ``requestState`` naming that replica, so wherever it lands it reaches the call."""
    with fleet_of(tmp_path, redis_server) as fleet:
        home_a = tmp_path / "a"
        control = {"mcpServers": {"k": server("k", "--control")}}
        replace_text(home_a / ".mcpvisor" / "settings.json", json.dumps(control))
        fleet_key = "a fleet key of at least thirty-two characters"
        a = fleet.start("ra", home_a, MCPVISOR_FLEET_KEY=fleet_key)
        await ready(a)
        b = fleet.start("rb", tmp_path / "b", MCPVISOR_FLEET_KEY=fleet_key)
        await ready(b)
        await wait_tools(b, {"mcp__k__ask_client"})
        async with (
            Answers().client(a.url + "/mcp", mode="auto") as on_a,
            Answers().client(b.url + "/mcp", mode="auto") as on_b,
        ):
            first = await on_a.session.call_tool("mcp__k__ask_client", {"kind": "roots"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            assert first.request_state is not None
            assert first.request_state.startswith("mcpvisor-round-ra.")
            assert first.input_requests is not None
            [key] = first.input_requests
            answer = types.ListRootsResult(roots=[types.Root(uri="file:///from/b")])
            done = await on_b.session.call_tool(
                "mcp__k__ask_client",
                {"kind": "roots"},
                input_responses={key: answer},
                request_state=first.request_state,
                allow_input_required=True,
            )
            assert isinstance(done, types.CallToolResult)
            assert "roots: file:///from/b" in str(done.content)
            # A round whose replica is gone is answered at once: make the call again.
            again = await on_a.session.call_tool("mcp__k__ask_client", {"kind": "roots"}, allow_input_required=True)
            assert isinstance(again, types.InputRequiredResult)
            assert again.request_state is not None
            # A round name the fleet did not make (here: one naming another replica) is refused, not forwarded.
            with pytest.raises(MCPError, match="requestState was not made by this fleet"):
                await on_b.session.call_tool(
                    "mcp__k__ask_client",
                    {"kind": "roots"},
                    input_responses={key: answer},
                    request_state=again.request_state.replace("-ra.", "-rx.", 1),
                    allow_input_required=True,
                )
            a.proc.kill()
            a.proc.wait()
            await port_closed(a.url)
            with pytest.raises(MCPError, match="which is gone; make the call again"):
                await on_b.session.call_tool(
                    "mcp__k__ask_client",
                    {"kind": "roots"},
                    input_responses={key: answer},
                    request_state=again.request_state,
                    allow_input_required=True,
                )


def text(result: types.CallToolResult) -> str:
    """The text of a one-text result."""
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def publisher_and_follower(fleet: Fleet, tmp_path: Path, *, verbose: bool = True) -> tuple[Replica, Replica]:
    """Replica ra, whose settings have server u, publishes; rb, with none of its own, follows them."""
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    replace_text(home_a / ".mcpvisor" / "settings.json", json.dumps({"mcpServers": {"u": server("u")}}))
    replace_text(home_b / ".mcpvisor" / "settings.json", json.dumps({"mcpServers": {}}))
    a = fleet.start("ra", home_a, verbose=verbose)
    await ready(a)
    b = fleet.start("rb", home_b, verbose=verbose)
    await ready(b)
    await wait_tools(b, {"mcp__u__echo"})  # A's files are the fleet's
    return a, b


async def test_the_publisher_lease_moves_on_when_its_holder_dies(tmp_path: Path, redis_server: RedisServer) -> None:
    with fleet_of(tmp_path, redis_server) as fleet:
        # At the default log level, as people run them: the line saying whose files were replaced was logged
        # below it, and the servers went without a word why.
        a, b = await publisher_and_follower(fleet, tmp_path, verbose=False)
        a.proc.kill()  # kill -9: it never gives the lease back
        a.proc.wait()

        # Within the lease's 10 s (and one heartbeat) B publishes: its own files are the fleet's now (a deploy
        # whose new replicas bring new files relies on it), and its log says whose it replaced.
        await wait_tools(b, set(), absent={"mcp__u__echo"})
        said = b.log.read_text()
        assert "replica rb takes over publishing from ra, whose settings files differ from its own" in said
        replace_text(tmp_path / "b" / ".mcpvisor" / "settings.json", json.dumps({"mcpServers": {"w": server("w")}}))
        await wait_tools(b, {"mcp__w__echo"})
        status = json.loads(fleet.command("fleet", "status", "--json", home=tmp_path / "c").stdout)
        publishers = [row["id"] for row in status["replicas"] if row["publisher"]]
        assert publishers == ["rb"]


async def test_a_store_that_lost_the_settings_gets_them_back_from_their_publisher(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Emptied (or restored from a copy without them) while the publisher lives: the first replica to find the
    lease free does not make the fleet follow its own files; the replica that published them publishes again."""
    with fleet_of(tmp_path, redis_server) as fleet:
        a, b = await publisher_and_follower(fleet, tmp_path)
        keys = FleetStore(fleet.url).keys
        with redis_server.client() as store:
            for _ in range(3):  # whoever beats first, each time
                store.flushall()
                await wait_until(lambda: store.hget(keys.settings, "by") is not None, what="settings published again")
                assert store.hget(keys.settings, "by") == "ra"
        assert await tools(b) >= {"mcp__u__echo"}
        assert await tools(a) >= {"mcp__u__echo"}
        assert "takes over publishing" not in b.log.read_text()


async def test_a_replica_serving_per_client_workspaces_follows_the_fleet(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Each workspace a client opens has its listen bus while it is open; decisions reach its host."""
    with fleet_of(tmp_path, redis_server) as fleet:
        home = tmp_path / "a"
        replace_text(home / ".mcpvisor" / "settings.json", json.dumps({"mcpServers": {"u": server("u")}}))
        a = fleet.start("ra", home, "--per-client-workspaces", "--workspace-root", str(tmp_path))
        await ready(a)
        async with client_for(a.url + "/mcp", fleet.root, mode="auto") as c:
            names = {t.name for t in (await c.list_tools(cache_mode="bypass")).tools}
            assert "mcp__u__echo" in names
            assert "mcp__p__echo" not in names
            approved = fleet.command("mcp", "approve", "p", "--workspace", str(fleet.root), home=tmp_path / "c")
            assert approved.returncode == 0, approved.stderr
            with anyio.fail_after(WAIT_S):
                while "mcp__p__echo" not in {t.name for t in (await c.list_tools(cache_mode="bypass")).tools}:  # noqa: ASYNC110
                    await anyio.sleep(0.1)


async def test_a_client_folders_own_files_are_followed_by_a_replica(tmp_path: Path, redis_server: RedisServer) -> None:
    """The fleet publishes the publisher's default workspace only: a folder a client opens is its own, and its
    edits apply as on a lone gateway (they were never applied)."""
    with fleet_of(tmp_path, redis_server) as fleet:
        home = tmp_path / "a"
        replace_text(home / ".mcpvisor" / "settings.json", json.dumps({"mcpServers": {"u": server("u")}}))
        other = tmp_path / "ws2"
        replace_text(other / ".mcp.json", json.dumps({"mcpServers": {"q": server("q")}}))
        a = fleet.start("ra", home, "--per-client-workspaces", "--workspace-root", str(tmp_path))
        await ready(a)

        async def listed(client: Any) -> set[str]:
            return {t.name for t in (await client.list_tools(cache_mode="bypass")).tools}

        async with client_for(a.url + "/mcp", other, mode="auto") as c:
            for name in ("q", "q3"):
                if name == "q3":
                    servers = {"q": server("q"), "q3": server("q3")}
                    replace_text(other / ".mcp.json", json.dumps({"mcpServers": servers}))
                with anyio.fail_after(WAIT_S):
                    while True:  # (the command reads the files itself)
                        approved = fleet.command("mcp", "approve", name, "--workspace", str(other), home=tmp_path / "c")
                        if approved.returncode == 0:
                            break
                        await anyio.sleep(0.2)
                with anyio.fail_after(WAIT_S):
                    while f"mcp__{name}__echo" not in await listed(c):  # noqa: ASYNC110 - another process's state
                        await anyio.sleep(0.1)


async def test_a_password_in_clear_in_the_publishers_settings_is_never_published(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Its settings file's text is what a publisher shares through the store: a ``fleet.url`` with a password in it
    (the replica itself was pointed at the store with --fleet) is refused, said once, and the next good save goes."""
    with fleet_of(tmp_path, redis_server) as fleet:
        settings = tmp_path / "a" / ".mcpvisor" / "settings.json"
        replace_text(settings, json.dumps({"mcpServers": {"u": server("u")}}))
        a = fleet.start("ra", tmp_path / "a")
        await ready(a)
        clear = {"url": "redis://:S3cretPW@127.0.0.1:6379/0"}
        replace_text(settings, json.dumps({"fleet": clear, "mcpServers": {"u": server("u"), "v": server("v")}}))
        with anyio.fail_after(WAIT_S):
            while "not publishing settings" not in a.log.read_text():  # noqa: ASYNC110 - another process's log
                await anyio.sleep(0.1)
        await anyio.sleep(4)  # a heartbeat's retry (every 3 s) publishes nothing either, and says nothing more
        with redis_server.client() as store:
            published = json.dumps([store.hgetall(key) for key in store.keys("*settings*")])
        assert "S3cretPW" not in published
        assert a.log.read_text().count("holds a password in clear") == 1
        assert "write it as ${VAR}" in a.log.read_text()
        assert await tools(a) == {"mcp__u__echo"}  # the fleet's settings are the last published
        status = fleet.command("fleet", "status", home=tmp_path / "c")
        assert status.returncode == 1  # the fleet follows files its publisher no longer publishes: said
        assert f"publishes no settings while {settings}: 'fleet.url' holds a password in clear" in " ".join(
            status.stdout.split()
        )
        fixed = {"url": "redis://:${REDIS_PASSWORD}@127.0.0.1:6379/0"}
        replace_text(settings, json.dumps({"fleet": fixed, "mcpServers": {"u": server("u"), "v": server("v")}}))
        await wait_tools(a, {"mcp__u__echo", "mcp__v__echo"})
        await wait_until(
            lambda: fleet.command("fleet", "status", home=tmp_path / "c").returncode == 0, what="the problem gone"
        )


async def test_a_call_in_flight_to_a_server_rejected_elsewhere_is_told_so(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A rejection made elsewhere stops the server on every replica: a call in flight there is answered that the
    server was rejected, not told to retry a call that would be refused."""
    with fleet_of(tmp_path, redis_server) as fleet:
        replace_text(fleet.root / ".mcp.json", json.dumps({"mcpServers": {"p": server("p", "--control")}}))
        a, b = await publisher_and_follower(fleet, tmp_path)
        approved = fleet.command("mcp", "approve", "p", "--workspace", str(fleet.root), home=tmp_path / "c")
        assert approved.returncode == 0, approved.stderr
        await wait_tools(b, {"mcp__p__sleep"})
        outcome: list[types.CallToolResult] = []
        sleeping = anyio.Event()

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            sleeping.set()  # the call reached p

        async def call(c: Client) -> None:
            outcome.append(await c.call_tool("mcp__p__sleep", {"seconds": 60}, progress_callback=progress))

        async with Client(b.url + "/mcp") as c, anyio.create_task_group() as tg:
            tg.start_soon(call, c)
            with anyio.fail_after(WAIT_S):
                await sleeping.wait()
            rejected = fleet.command("mcp", "reject", "p", "--workspace", str(fleet.root), home=tmp_path / "c")
            assert rejected.returncode == 0, rejected.stderr
        [result] = outcome
        assert result.is_error
        said = text(result)
        assert "server 'p' was stopped while the call was in flight (it was rejected" in said, said
        assert "retry the call" not in said
