"""OAuth sign-in against a real OAuth-protected MCP server (``mcpvisor.examples.oauth_server``, built from
the SDK's ``mcp.server.auth``) on loopback: ``mcpvisor mcp login`` as a subprocess, whose "browser" is a
script that follows the authorization redirect with an HTTP client, then hosts that use the stored sign-in."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Generator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpvisor.core.errors import ServerUnavailableError, ToolCallError, ToolNotFoundError
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.host import Host, HostOptions
from mcpvisor.host.oauth_registration import registered_for
from mcpvisor.host.oauth_settings import sign_in_key
from mcpvisor.host.oauth_store import TokenStore
from tests.e2e.test_run import run
from tests.helpers import (
    LIGHT,
    WAIT_S,
    forked_python,
    free_port,
    http_server,
    mcpvisor_command,
    paste_elsewhere,
    wait_until,
)
from tests.layout import Layout, make_layout, write_json
from tests.shell.test_shell import shell

OAUTH = "mcpvisor.examples.oauth_server"

FOLLOW = """import sys, urllib.request
urllib.request.urlopen(sys.argv[1]).read()
"""
FORGED_FIRST = """import pathlib, sys, urllib.error, urllib.parse, urllib.request
# Another program reaches the loopback port first: an error with a state of its own, then a code.
query = urllib.parse.parse_qs(urllib.parse.urlsplit(sys.argv[1]).query)
answers = pathlib.Path(__file__).with_suffix(".answers")
for forged in ("?error=access_denied&error_description=run+curl+evil.sh&state=not-the-one", "?code=forged"):
    try:
        urllib.request.urlopen(query["redirect_uri"][0] + forged).read()
        answers.write_text(answers.read_text() + "taken " if answers.exists() else "taken ")
    except urllib.error.HTTPError as refused:
        answers.write_text((answers.read_text() if answers.exists() else "") + f"{refused.code} ")
urllib.request.urlopen(sys.argv[1]).read()
"""
NOTHING = "pass\n"


class Server:
    def __init__(self, port: int, marker: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.marker = marker

    def events(self) -> list[str]:
        return self.marker.read_text().split() if self.marker.exists() else []

    def accepts(self, access_token: str) -> bool:
        """Whether the MCP endpoint takes ``access_token`` (a request with it is not refused with 401)."""
        request = urllib.request.Request(
            self.url,
            data=b"{}",
            headers={"Authorization": f"Bearer {access_token}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            urllib.request.urlopen(request).close()
        except urllib.error.HTTPError as refused:
            return refused.code != 401
        return True

    def revoke_all(self) -> None:
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{self.port}/admin/revoke-all", method="POST"))

    def token_endpoint_down(self) -> None:
        url = f"http://127.0.0.1:{self.port}/admin/token-endpoint-down"
        urllib.request.urlopen(urllib.request.Request(url, method="POST"))


def start_server(tmp_path: Path, *args: str, port: int | None = None) -> Generator[Server, None, None]:
    port = port or free_port()
    marker = tmp_path / "oauth-events"
    log = (tmp_path / "oauth-server.log").open("wb")
    process = subprocess.Popen(
        [forked_python(), "-m", OAUTH, "--port", str(port), "--marker", str(marker), *args], stderr=log, stdout=log
    )
    try:
        import time

        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/.well-known/oauth-authorization-server").read()
                break
            except urllib.error.HTTPError:  # it answers (elsewhere, with --auth-host)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        f"the OAuth example server did not start: {(tmp_path / 'oauth-server.log').read_text()}"
                    )
                time.sleep(0.05)  # nothing to wait on but the port itself
        yield Server(port, marker)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # uvicorn waits for open streams (a host's) to end: not for ever
            process.kill()
            process.wait(timeout=WAIT_S)
        log.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from start_server(tmp_path)


def setup(tmp_path: Path, server: Server, **entry: Any) -> Layout:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    write_json(layout.paths.user, {"mcpServers": {"sec": {"type": "http", "url": server.url, **entry}}})
    return layout


def cli(layout: Layout, *args: str, browser: str = FOLLOW) -> subprocess.CompletedProcess[str]:
    script = layout.root.parent / "browser.py"
    script.write_text(browser)
    env = {**os.environ, **layout.env, "BROWSER": f"{sys.executable} {script} %s"}
    env.pop("DISPLAY", None)
    return subprocess.run(
        [mcpvisor_command(), *args, "--workspace", str(layout.root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def store_path(layout: Layout) -> Path:
    return Path(layout.env["MCPVISOR_HOME"]) / "oauth-tokens.json"


def stored_secrets(layout: Layout) -> list[str]:
    records = json.loads(store_path(layout).read_text())
    found = []
    for record in records.values():
        tokens = record.get("tokens", {})
        found += [tokens[k] for k in ("access_token", "refresh_token") if k in tokens]
        found += (
            [record.get("client", {}).get("client_secret")] if record.get("client", {}).get("client_secret") else []
        )
    return found


def status_row(layout: Layout) -> dict[str, Any]:
    result = cli(layout, "status", "--json")
    [row] = json.loads(result.stdout)["servers"]
    assert isinstance(row, dict)
    return row


def test_login_signs_in_and_hosts_use_the_stored_sign_in_until_logout(tmp_path: Path, server: Server) -> None:
    layout = setup(tmp_path, server)
    before = cli(layout, "status")
    assert f"sec · 🔒 needs authentication — run: mcpvisor mcp login --workspace {layout.root} sec" in before.stdout

    login = cli(layout, "mcp", "login", "sec")
    assert login.returncode == 0, login.stderr
    assert "Signed in to sec (1 tool)" in login.stdout
    assert server.events() == ["register", "authorize", "token"]
    assert stat.S_IMODE(store_path(layout).stat().st_mode) == 0o600
    secrets = stored_secrets(layout)
    assert len(secrets) >= 2

    row = status_row(layout)
    assert (row["state"], row["tools"]) == ("connected", 1)
    assert row["sign_in"].startswith("signed in (expires in ")
    listed = cli(layout, "mcp", "list")
    assert "signed in (expires in" in listed.stdout
    everything = login.stdout + login.stderr + listed.stdout + listed.stderr + json.dumps(row)
    everything += "".join(p.read_text() for p in (tmp_path / "logs").glob("*") if p.is_file())
    assert not [s for s in secrets if s in everything]
    assert server.events() == ["register", "authorize", "token"]  # no second sign-in, no refresh

    [tokens] = [record["tokens"] for record in json.loads(store_path(layout).read_text()).values()]
    assert server.accepts(tokens["access_token"])
    logout = cli(layout, "mcp", "logout", "sec")
    assert logout.returncode == 0, logout.stderr
    assert "Signed out of sec" in logout.stdout
    assert f"revoked at http://127.0.0.1:{server.port}/revoke" in logout.stdout
    assert server.events()[-2:] == ["revoke", "revoke"]  # the refresh token, then the access token
    assert not server.accepts(tokens["access_token"])  # signed out at the server, not only here
    assert not [s for s in secrets if s in logout.stdout + logout.stderr]
    assert json.loads(store_path(layout).read_text()) == {}
    assert status_row(layout)["state"] == "needs_auth"
    assert cli(layout, "status").returncode == 1  # a server that cannot connect until a sign-in: not all is well
    assert "Not signed in to sec" in cli(layout, "mcp", "logout", "sec").stdout


def test_logout_deletes_the_sign_in_even_when_the_authorization_server_is_gone(tmp_path: Path) -> None:
    for server in start_server(tmp_path):
        layout = setup(tmp_path, server)
        assert cli(layout, "mcp", "login", "sec").returncode == 0
    # a project's server at the same URL shares the sign-in: signing out of it signs out of both, and says so
    write_json(layout.paths.project, {"mcpServers": {"proj": {"type": "http", "url": server.url}}})
    logout = cli(layout, "mcp", "logout", "proj")  # the server has stopped
    assert logout.returncode == 0, logout.stderr
    assert "Signed out of proj (and of sec: it shares its sign-in)" in " ".join(logout.stdout.split())
    assert "the authorization server could not be reached" in logout.stdout
    assert json.loads(store_path(layout).read_text()) == {}


def test_an_expired_token_is_refreshed_and_a_revoked_one_asks_for_a_new_sign_in(tmp_path: Path) -> None:
    for server in start_server(tmp_path, "--token-lifetime", "2"):
        layout = setup(tmp_path, server)
        assert cli(layout, "mcp", "login", "sec").returncode == 0
        # A token this close to its expiry is refreshed before use: the connection carries on signed in.
        row = status_row(layout)
        assert row["state"] == "connected"
        assert server.events()[-1] == "refresh"
        # The provider revokes access: the refresh token is refused, and people are told what to do.
        server.revoke_all()
        result = cli(layout, "status")
        assert f"sec · 🔒 needs authentication — run: mcpvisor mcp login --workspace {layout.root} sec" in result.stdout
        assert status_row(layout)["state"] == "needs_auth"
        listed = json.loads(cli(layout, "mcp", "list", "--json").stdout)["servers"][0]
        assert "signed in" not in json.dumps(listed).replace("not signed in", "")  # the refused sign-in is over
        [record] = json.loads(store_path(layout).read_text()).values()
        assert "tokens" not in record
        assert "client" in record  # the registration stands: the next login reuses it


def test_mcp_list_says_a_sign_in_that_was_refused_or_expired_and_the_command_that_mends_it(tmp_path: Path) -> None:
    """``mcp list`` connects nothing: it said only "✓ allowed" of a server whose sign-in the authorization server
    had refused, and "sign-in expired" of one that cannot be refreshed — nothing told what to do."""
    for server in start_server(tmp_path, "--token-lifetime", "2"):
        layout = setup(tmp_path, server)
        assert cli(layout, "mcp", "login", "sec").returncode == 0
        server.revoke_all()
        assert status_row(layout)["state"] == "needs_auth"  # its refresh was refused
        login = f"mcpvisor mcp login --workspace {layout.root} sec"  # the table's: it ran elsewhere
        refused = "signed out: the authorization server refused the stored sign-in (revoked or expired)"
        listed = cli(layout, "mcp", "list")
        assert f"sec · ✓ allowed · {refused} — run: {login}" in " ".join(listed.stdout.split())
        row = json.loads(cli(layout, "mcp", "list", "--json").stdout)["servers"][0]
        assert row["sign_in"] == f"{refused} — run: {login}"

        assert cli(layout, "mcp", "login", "sec").returncode == 0
        assert "sec · ✓ allowed · signed in" in cli(layout, "mcp", "list").stdout
        [key] = json.loads(store_path(layout).read_text())
        store = TokenStore(store_path(layout))
        tokens = {k: v for k, v in store.get(key)["tokens"].items() if k != "refresh_token"}
        store.update(key, tokens=tokens, expires_at=1.0)  # a sign-in issued without a refresh token, expired
        expired = json.loads(cli(layout, "mcp", "list", "--json").stdout)["servers"][0]["sign_in"]
        assert expired == f"sign-in expired — run: {login}"

        assert cli(layout, "mcp", "logout", "sec").returncode == 0
        assert json.loads(cli(layout, "mcp", "list", "--json").stdout)["servers"][0]["sign_in"] is None


def test_an_authorization_server_that_fails_to_refresh_leaves_the_unexpired_token_in_use(tmp_path: Path) -> None:
    # A token within the refresh margin (60 s) is refreshed before use; the token endpoint answers 503.
    for server in start_server(tmp_path, "--token-lifetime", "50"):
        layout = setup(tmp_path, server)
        assert cli(layout, "mcp", "login", "sec").returncode == 0
        server.token_endpoint_down()
        row = status_row(layout)
        assert row["state"] == "connected", row  # not "needs authentication": nothing refused the sign-in
        assert "token-endpoint-down" in server.events()  # the refresh was tried, and failed
        assert "refresh" not in server.events()
        [record] = json.loads(store_path(layout).read_text()).values()
        assert record["tokens"]  # kept: refreshed once the authorization server answers again


def test_a_sign_in_is_refreshed_and_revoked_at_the_authorization_server_that_issued_it(tmp_path: Path) -> None:
    # The authorization server is another origin (localhost) than the MCP server (127.0.0.1), whose own
    # /token and /revoke answer 404: a refresh or a revocation sent to a guessed endpoint fails.
    for server in start_server(tmp_path, "--token-lifetime", "2", "--auth-host", "localhost"):
        layout = setup(tmp_path, server)
        login = cli(layout, "mcp", "login", "sec")
        assert login.returncode == 0, login.stderr
        [record] = json.loads(store_path(layout).read_text()).values()
        assert record["authorization_server"]["token_endpoint"] == f"http://localhost:{server.port}/token"
        assert status_row(layout)["state"] == "connected"  # refreshed before use, before any discovery
        assert server.events()[-1] == "refresh"
        logout = cli(layout, "mcp", "logout", "sec")
        assert logout.returncode == 0, logout.stderr
        assert f"revoked at http://localhost:{server.port}/revoke" in " ".join(logout.stdout.split())


async def test_a_sign_in_reaches_a_running_host_without_a_restart(tmp_path: Path, server: Server) -> None:
    user = {"mcpServers": {"sec": {"type": "http", "url": server.url}}}
    async with run(tmp_path, user=user) as r:
        await r.wait_for(lambda: r.last_server("sec") is not None)
        assert r.status("sec") == "disconnected"
        assert f"mcpvisor mcp login --workspace {r.layout.root} sec" in r.last_server("sec")["error"]  # type: ignore[index]
        script = tmp_path / "browser.py"
        script.write_text(FOLLOW)
        login = await anyio.run_process(
            [mcpvisor_command(), "mcp", "login", "sec", "--workspace", str(r.layout.root)],
            env={**os.environ, **r.layout.env, "BROWSER": f"{sys.executable} {script} %s"},
            check=False,
        )
        assert login.returncode == 0, login.stderr.decode()
        await r.wait_for(lambda: r.status("sec") == "connected")
        assert r.last_server("sec")["tools"] == ["mcp__sec__echo"]  # type: ignore[index]


async def test_a_logout_elsewhere_ends_a_running_hosts_connection_at_once(tmp_path: Path, server: Server) -> None:
    """``mcpvisor mcp logout`` in another process: the running host's connection ends, its tools go and its
    status asks for a sign-in — before, it said "connected" and served the tools until a call was refused."""
    user = {"mcpServers": {"sec": {"type": "http", "url": server.url}}}
    script = tmp_path / "browser.py"
    script.write_text(FOLLOW)
    async with run(tmp_path, user=user) as r:
        env = {**os.environ, **r.layout.env, "BROWSER": f"{sys.executable} {script} %s"}
        await r.wait_for(lambda: r.last_server("sec") is not None)
        command = [mcpvisor_command(), "mcp", "login", "sec", "--workspace", str(r.layout.root)]
        assert (await anyio.run_process(command, env=env, check=False)).returncode == 0
        await r.wait_for(lambda: r.status("sec") == "connected")
        command[2] = "logout"
        logout = await anyio.run_process(command, env=env, check=False)
        assert logout.returncode == 0, logout.stderr.decode()
        fix = f"mcpvisor mcp login --workspace {r.layout.root} sec"
        await r.wait_for(lambda: fix in str((r.last_server("sec") or {}).get("error")))
        assert r.status("sec") == "disconnected"
        assert r.last_server("sec")["tools"] == []  # type: ignore[index]


async def test_a_sign_in_made_elsewhere_serves_a_connected_servers_next_call(tmp_path: Path, server: Server) -> None:
    """A host whose connection is up keeps it: after ``mcpvisor mcp login`` in another process, its next call
    carries the new tokens as they are (the old ones were revoked meanwhile: a call with them would be refused,
    and mended only by refreshing with the new refresh token). A scope step-up needs this: there the old
    token is refused for want of scope, and a refresh cannot widen it."""
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        await wait_until(lambda: host.config.manager.clients()["sec"].status == "connected", what="sec connected")
        client = host.config.manager.clients()["sec"]
        assert (await host.config.call_tool("mcp__sec__echo", {"text": "a"})).content[0].text == "secure:echo:a"  # type: ignore[union-attr]
        server.revoke_all()
        seen = host.tokens.generation
        login = await anyio.to_thread.run_sync(lambda: cli(layout, "mcp", "login", "sec"))
        assert login.returncode == 0, login.stderr
        await wait_until(lambda: host.tokens.generation != seen, what="the host to see the token store change")
        result = await host.config.call_tool("mcp__sec__echo", {"text": "b"})
        assert result.content[0].text == "secure:echo:b"  # type: ignore[union-attr]
        assert server.events()[-2:] == ["authorize", "token"]  # the new sign-in, used as it is: no refresh
        assert host.config.manager.clients()["sec"] is client  # the same connection, not a reconnect


async def test_a_call_whose_sign_in_is_revoked_under_it_says_so_not_that_the_server_crashed(
    tmp_path: Path, server: Server
) -> None:
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        assert text_of(await host.config.call_tool("mcp__sec__echo", {"text": "a"})) == "secure:echo:a"
        server.revoke_all()  # the user revokes access at the provider
        with pytest.raises(ServerUnavailableError) as refused:
            await host.config.call_tool("mcp__sec__echo", {"text": "b"})
        # The refused refresh drops the stored sign-in: the watcher may end the connection for that first, as for a
        # sign-out made elsewhere (both say to sign in again; neither that the server crashed).
        why = ("refused its refresh token (signed out or revoked)", "was signed out")
        assert str(refused.value) in {
            f"call to tool 'echo' failed: server 'sec' {said} — run: mcpvisor mcp login --workspace {layout.root} sec"
            for said in why
        }
        client = host.config.manager.clients()["sec"]
        await wait_until(lambda: client.status == "disconnected", what="sec down")
        assert client.last_error is not None
        assert f"run: mcpvisor mcp login --workspace {layout.root} sec" in client.last_error


async def test_a_server_restarted_without_its_sign_ins_waits_for_the_next_and_connects_once_it_comes(
    tmp_path: Path,
) -> None:
    """The server restarts and forgets its clients and tokens: the connection is lost, and the reconnect loop stops
    at its first try that needs a sign-in (it tried every 30 s for ever, and a sign-in made meanwhile waited for
    its next try); the registration the server forgot is made again by that sign-in (it waited out its timeout
    on the browser page's "client not found")."""
    port = free_port()
    first = start_server(tmp_path, port=port)
    server = next(first)
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        manager = host.config.manager
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected")
        first.close()  # the server stops ...
        await wait_until(lambda: manager.clients()["sec"].status == "disconnected", what="sec lost")
        for _ in start_server(tmp_path, port=port):  # ... and starts again, knowing nobody
            await wait_until(
                lambda: (
                    (c := manager.clients().get("sec")) is not None
                    and c.needs_auth
                    and "sec" not in manager._reconnects
                ),
                what="the reconnect loop to find a sign-in is needed and stop",
            )
            login = await anyio.to_thread.run_sync(partial(cli, layout, "mcp", "login", "sec", "--timeout", "20"))
            assert login.returncode == 0, login.stderr
            await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected again")
            assert text_of(await host.config.call_tool("mcp__sec__echo", {"text": "b"})) == "secure:echo:b"


async def test_a_sign_in_under_way_leaves_the_one_before_in_use_and_a_sign_out_ends_it(
    tmp_path: Path, server: Server
) -> None:
    """``mcpvisor mcp login`` keeps the stored sign-in until its own one replaces it: a running host goes on with
    it while the browser is open, and after a sign-in abandoned. A sign-out ends its use at once."""
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    opened = tmp_path / "opened"
    browser = f"import pathlib\npathlib.Path({str(opened)!r}).touch()\n"  # the page opened, never answered
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host, anyio.create_task_group() as tg:
        await wait_until(lambda: host.config.manager.clients()["sec"].status == "connected", what="sec connected")
        [(key, before)] = json.loads(store_path(layout).read_text()).items()
        ended = anyio.Event()

        async def sign_in_again() -> None:
            await anyio.to_thread.run_sync(
                partial(cli, layout, "mcp", "login", "sec", "--timeout", "3", browser=browser)
            )
            ended.set()

        tg.start_soon(sign_in_again)
        await wait_until(opened.exists, what="the second sign-in's browser")
        assert json.loads(store_path(layout).read_text())[key]["tokens"] == before["tokens"]
        assert text_of(await host.config.call_tool("mcp__sec__echo", {"text": "b"})) == "secure:echo:b"
        with anyio.fail_after(WAIT_S):
            await ended.wait()
        assert json.loads(store_path(layout).read_text())[key]["tokens"] == before["tokens"]
        assert text_of(await host.config.call_tool("mcp__sec__echo", {"text": "c"})) == "secure:echo:c"
        assert TokenStore(store_path(layout)).forget(key)  # a sign-out (its revocation aside): the connection ends

        async def refused() -> str:
            try:
                await host.config.call_tool("mcp__sec__echo", {"text": "d"})
            except (ToolNotFoundError, ServerUnavailableError) as exc:  # (a call as it ends: "was signed out")
                return str(exc)
            return ""

        with anyio.fail_after(WAIT_S):  # (a reload the store's change asked for may start it once more meanwhile)
            fix = re.escape(f"mcpvisor mcp login --workspace {layout.root} sec")
            needed = f"needs authentication .*sign in with: {fix}"
            while not re.search(needed, await refused()):  # noqa: ASYNC110 - what the call says is the state
                await anyio.sleep(0.05)


async def test_a_sign_out_ends_the_connection_of_a_server_configured_after_the_start(
    tmp_path: Path, server: Server
) -> None:
    """The servers signed in were counted at the start only: one added to the settings later kept its connection
    after a sign-out."""
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    entry = json.loads(layout.paths.user.read_text())
    write_json(layout.paths.user, {"mcpServers": {}})
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        clients = host.config.manager.clients
        write_json(layout.paths.user, entry)  # added while the host runs, signed in already
        await wait_until(lambda: "sec" in clients() and clients()["sec"].status == "connected", what="sec connected")
        [key] = json.loads(store_path(layout).read_text())
        assert TokenStore(store_path(layout)).forget(key)
        await wait_until(lambda: "sec" in clients() and clients()["sec"].needs_auth, what="sec to need a sign-in")


def test_a_redirect_of_another_sign_in_is_refused_and_the_real_one_still_signs_in(
    tmp_path: Path, server: Server
) -> None:
    layout = setup(tmp_path, server)
    result = cli(layout, "mcp", "login", "sec", "--timeout", "60", browser=FORGED_FIRST)
    assert result.returncode == 0, result.stderr
    assert "evil.sh" not in result.stdout + result.stderr
    assert (layout.root.parent / "browser.answers").read_text().split() == ["400", "400"]
    assert cli(layout, "status", "--json").returncode == 0


@pytest.mark.parametrize(
    ("browser", "args", "message"),
    [(NOTHING, ("--timeout", "1"), "no sign-in to 'sec' within 1 s (was the browser closed?)")],
    ids=["browser closed"],
)
def test_a_failed_sign_in_stores_nothing_and_says_why(
    tmp_path: Path, server: Server, browser: str, args: tuple[str, ...], message: str
) -> None:
    layout = setup(tmp_path, server)
    result = cli(layout, "mcp", "login", "sec", *args, browser=browser)
    assert result.returncode == 1
    assert message in result.stderr
    records = json.loads(store_path(layout).read_text()) if store_path(layout).exists() else {}
    assert not any(record.get("tokens") for record in records.values())
    assert "token" not in server.events()


def test_login_refuses_what_it_cannot_sign_in_to(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    write_json(
        layout.paths.user,
        {
            "mcpServers": {
                "plain": {"type": "http", "url": "http://mcp.example.invalid/mcp"},
                "local": {"command": sys.executable, "args": ["-c", "pass"]},
            }
        },
    )
    write_json(layout.paths.project, {"mcpServers": {"proj": {"type": "http", "url": "https://mcp.example.invalid"}}})
    cases = {
        "plain": "refusing to sign in to server 'plain' over plain HTTP (http://mcp.example.invalid/mcp)",
        "local": "it runs a command (stdio), there is nothing to sign in to",
        "proj": f"not approved; approve it first: mcpvisor mcp approve --workspace {layout.root} proj",
        "nope": "no MCP server of that name is configured",
    }
    for name, message in cases.items():
        result = cli(layout, "mcp", "login", name, browser=NOTHING)
        assert result.returncode == 1, result.stdout
        assert message in " ".join(result.stderr.split())
    assert not store_path(layout).exists()


@pytest.mark.parametrize("home", ["default", "another"])
async def test_the_approve_command_a_refused_login_gives_works_pasted_where_the_login_ran(
    tmp_path: Path, home: str
) -> None:
    """``mcp login --workspace WS proj`` run in another folder, for a project server not approved: it said ``approve
    it first: mcpvisor mcp approve proj``; pasted there, that found no such server. It names the workspace; and, run
    with ``MCPVISOR_HOME=HOME``, the home (without it, pasted in another terminal, it approved in the default home's
    store, and the login was refused again)."""
    layout = make_layout(tmp_path, **({"MCPVISOR_HOME": str(tmp_path / "other home")} if home == "another" else {}))
    write_json(layout.paths.project, {"mcpServers": {"proj": {"type": "http", "url": "https://mcp.example.invalid"}}})
    refused = await anyio.to_thread.run_sync(lambda: cli(layout, "mcp", "login", "proj", browser=NOTHING))
    assert refused.returncode == 1, refused.stdout
    command = " ".join(refused.stderr.split()).split("approve it first: ", 1)[1]
    pasted = await paste_elsewhere(command, layout.env, tmp_path / "elsewhere")
    assert pasted.returncode == 0, (command, pasted.stdout, pasted.stderr)
    cfg = layout.settings().project.servers["proj"].config
    assert ApprovalStore(layout.paths.approvals).get_state(layout.root, "proj", cfg) == "approved"


def test_mcp_list_says_to_sign_in_again_with_the_command_its_table_gives(tmp_path: Path) -> None:
    """``MCPVISOR_HOME=HOME mcpvisor mcp list --workspace WS``, run in another folder: of a sign-in the authorization
    server refused it said ``run: mcpvisor mcp login sec``, which, run there, found no such server (or signed in to
    the default home's store); the same table's other commands name the workspace and the home."""
    home = tmp_path / "other home"
    layout = make_layout(tmp_path, MCPVISOR_HOME=str(home))
    entry = {"type": "http", "url": "https://mcp.example.invalid/mcp"}
    write_json(layout.paths.user, {"mcpServers": {"sec": entry}})
    cfg = McpServerConfig.model_validate(entry)
    key = sign_in_key("sec", cfg)
    assert key is not None
    TokenStore(home / "oauth-tokens.json").update(key, refused=True)
    listed = cli(layout, "mcp", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    said = json.loads(listed.stdout)["servers"][0]["sign_in"]
    assert said.endswith(
        f"— run: MCPVISOR_HOME={shlex.quote(str(home))} mcpvisor mcp login --workspace {layout.root} sec"
    )


async def test_login_to_a_server_that_asks_for_no_sign_in_says_so_and_stores_nothing(tmp_path: Path) -> None:
    async with http_server("open") as url:
        layout = make_layout(tmp_path)
        write_json(layout.paths.user, {"mcpServers": {"open": {"type": "http", "url": url}}})
        result = await anyio.to_thread.run_sync(lambda: cli(layout, "mcp", "login", "open", browser=NOTHING))
    assert result.returncode == 1
    assert "Signed in" not in result.stdout
    said = " ".join(result.stderr.split())
    assert "server 'open' did not ask for a sign-in: it answered without one, so nothing was stored" in said
    assert json.loads(store_path(layout).read_text() if store_path(layout).exists() else "{}") == {}


def test_a_sign_in_to_a_server_configured_with_the_wrong_transport_names_the_transport(
    tmp_path: Path, server: Server
) -> None:
    layout = setup(tmp_path, server, type="sse")  # it speaks streamable HTTP
    result = cli(layout, "mcp", "login", "sec")
    assert result.returncode == 1
    said = " ".join(result.stderr.split())
    assert 'set mcpServers.sec.type to "http"' in said, said
    assert "needs authentication" not in said  # the sign-in went through: that is not what failed


def test_a_server_of_an_mcp_config_file_is_signed_in_to_as_its_status_says(tmp_path: Path, server: Server) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    extra = tmp_path / "extra.json"
    write_json(extra, {"mcpServers": {"sec": {"type": "http", "url": server.url}}})
    status = cli(layout, "status", "--mcp-config", str(extra))
    assert f"run: mcpvisor mcp login --workspace {layout.root} --mcp-config {extra} sec" in " ".join(
        status.stdout.split()
    )
    login = cli(layout, "mcp", "login", "sec", "--mcp-config", str(extra))
    assert login.returncode == 0, login.stderr
    assert "Signed in to sec" in login.stdout


def test_a_corrupt_token_store_is_kept_and_named(tmp_path: Path, server: Server) -> None:
    layout = setup(tmp_path, server)
    store_path(layout).parent.mkdir(parents=True, exist_ok=True)
    store_path(layout).write_text("{not json")
    result = cli(layout, "mcp", "login", "sec")
    assert result.returncode == 1
    assert f"cannot read the OAuth token store {store_path(layout)}: not valid JSON" in result.stderr
    assert store_path(layout).read_text() == "{not json"
    said = " ".join(cli(layout, "status").stdout.split())  # the sign-in it offers waits for the store's fix
    assert f"run: mcpvisor mcp login --workspace {layout.root} sec" in said
    assert "once the token store can be read again (see above)" in said


# -- the shell's /login --------------------------------------------------------------------------


def follow_redirect(url: str) -> bool:
    """A browser that signs in at once: the OAuth example approves every request."""
    urllib.request.urlopen(url).read()
    return True


async def test_the_shell_signs_in_with_login_and_connects_the_server(tmp_path: Path, server: Server) -> None:
    user = {"mcpServers": {"sec": {"type": "http", "url": server.url}}}
    async with shell(tmp_path, user=user, open_url=follow_redirect) as s:
        await s.run("/mcp", "sec · 🔒 needs authentication — run: /login sec")
        out = await s.run("/login sec", "✓ signed in to sec (1 tool)")
        assert "Opening your browser to sign in to sec" in out
        await s.run("/mcp", "sec · ● connected (1 tool, 0 prompts) · signed in (expires in ")
        await s.run('/call mcp__sec__echo {"text": "hi"}', "secure:echo:hi")
        assert server.events() == ["register", "authorize", "token"]
        assert stored_secrets(s.layout)
        assert not [secret for secret in stored_secrets(s.layout) if secret in s.text()]


async def test_a_shell_login_with_no_browser_prints_the_url_and_ctrl_c_cancels_it(
    tmp_path: Path, server: Server
) -> None:
    user = {
        "mcpServers": {
            "sec": {"type": "http", "url": server.url},
            "local": {"command": sys.executable, "args": ["-m", LIGHT]},
        }
    }
    async with shell(tmp_path, user=user, open_url=lambda _url: False) as s:
        out = await s.run("/login sec", "(waiting for the sign-in; Ctrl-C cancels)")
        assert f"Sign in to sec by visiting this URL in a browser:\n  http://127.0.0.1:{server.port}/authorize?" in out
        said = " ".join(out.split())  # (the shell wraps long lines)
        assert "(The sign-in ends at http://127.0.0.1:" in said, said
        assert "from a browser on another one, forward that port first, e.g. ssh -L " in said, said
        since = s.mark()
        s.interrupts.send_nowait(object())
        await s.wait_for("cancelled", since)
        assert not store_path(s.layout).exists() or not any(
            record.get("tokens") for record in json.loads(store_path(s.layout).read_text()).values()
        )
        await s.run("/login local", "✗ cannot sign in to server 'local': it runs a command (stdio)")
        await s.run("/login nope", "✗ cannot sign in to server 'nope': no such server is configured (configured: ")
        await s.run("/login", "✗ usage: /login NAME")
        # The cancelled attempt touched the token store (a client registration): the watcher may be
        # reconnecting sec right now. Look again until it has settled.
        await s.run_until("/mcp", "sec · 🔒 needs authentication — run: /login sec", row="sec · ")


async def test_a_shell_login_that_times_out_says_so_in_one_line_with_the_shells_own_command(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/login sec`` whose sign-in did not come in time said ``✗ /login failed unexpectedly: ExceptionGroup('unhandled
    errors in a TaskGroup', [ConnectError(...)])`` with a traceback in the log, and told to run ``mcpvisor mcp login
    --workspace WS sec`` where ``/login sec`` does. It says why, as the shell's other errors do, and ``/login sec``."""
    defaults = Host.sign_in.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "timeout_s", 0.5)  # (the shell waits 300 s for the browser)
    user = {"mcpServers": {"sec": {"type": "http", "url": server.url}}}
    async with shell(tmp_path, user=user, open_url=lambda _url: False) as s:
        out = await s.run("/login sec", "✗ could not connect to server 'sec': no sign-in to 'sec' within 0.5 s")
        assert "(was the browser closed?); run /login sec again" in " ".join(out.split())
        assert "unexpectedly" not in out
        assert "mcp login" not in out


def test_a_cli_sign_in_interrupted_with_ctrl_c_ends_the_process_at_once(tmp_path: Path, server: Server) -> None:
    """Nothing is left waiting for the browser's redirect (it used to hold the process until --timeout)."""
    layout = setup(tmp_path, server)
    command = [mcpvisor_command(), "mcp", "login", "sec", "--no-browser", "--workspace", str(layout.root)]
    env = {**os.environ, **layout.env}
    with subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stderr is not None
            seen = ""
            while "Sign in to sec by visiting this URL" not in seen:
                line = process.stderr.readline()  # the URL line comes within seconds; --timeout is 300 s
                assert line, f"mcp login ended before printing the URL: {seen}"
                seen += line
            process.send_signal(signal.SIGINT)
            process.wait(timeout=WAIT_S)
        finally:
            process.kill()
    assert process.returncode != 0
    assert not store_path(layout).exists() or not any(
        record.get("tokens") for record in json.loads(store_path(layout).read_text()).values()
    )


@contextlib.contextmanager
def login_in_a_staying_browser(layout: Layout, browser: str, *, stderr: int) -> Iterator[subprocess.Popen[str]]:
    """``python -m mcpvisor mcp login sec`` (not forked: a process that is not waits for its threads at exit) with
    the browser command ``browser``, a script that prints ``browser PID`` first on the shared stdout and then stays;
    yields once it printed it, and kills both at the end."""
    script = layout.root.parent / "staying-browser.py"
    script.write_text(browser)
    env = {**os.environ, **layout.env, "BROWSER": f"{sys.executable} {script} %s"}
    env.pop("DISPLAY", None)
    command = [sys.executable, "-m", "mcpvisor", "mcp", "login", "sec", "--workspace", str(layout.root)]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True) as process:
        assert process.stdout is not None
        opened = process.stdout.readline()
        try:
            assert opened.startswith("browser "), opened
            yield process
        finally:
            process.kill()
            if opened.startswith("browser "):
                os.kill(int(opened.split()[1]), signal.SIGKILL)


STAYING_BROWSER = """import os, sys, time
print(f"browser {os.getpid()}", flush=True)
time.sleep(600)
"""


def test_ctrl_c_while_the_browser_command_has_not_returned_ends_the_sign_in_at_once(
    tmp_path: Path, server: Server
) -> None:
    """A browser command that stays until its window closes (``BROWSER=firefox`` when none runs yet): Python's
    ``webbrowser`` waits for it, and that wait held Ctrl-C, then the interpreter's exit, until it ended. Run as
    ``python -m mcpvisor`` itself: a process that is not forked waits for its threads at exit."""
    layout = setup(tmp_path, server)
    with login_in_a_staying_browser(layout, STAYING_BROWSER, stderr=subprocess.DEVNULL) as process:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=WAIT_S)
    assert process.returncode == 130
    assert not store_path(layout).exists() or not any(
        record.get("tokens") for record in json.loads(store_path(layout).read_text()).values()
    )


STAYING_FOLLOWING_BROWSER = """import os, sys, time, urllib.request
print(f"browser {os.getpid()}", flush=True)
for stream in (1, 2):  # (it leaves mcpvisor's output to it, which is read to its end)
    os.dup2(os.open(os.devnull, os.O_WRONLY), stream)
urllib.request.urlopen(sys.argv[1]).read()
time.sleep(600)
"""


def test_a_sign_in_made_in_a_browser_that_stays_open_ends_without_waiting_for_it_to_close(
    tmp_path: Path, server: Server
) -> None:
    """A browser command that stays until its window closes (``BROWSER=firefox`` when none runs yet), in which the
    person signs in: ``mcp login`` waited for the command to end before it printed the URL's line and went on, so
    the sign-in ended only once the browser was closed."""
    layout = setup(tmp_path, server)
    with login_in_a_staying_browser(layout, STAYING_FOLLOWING_BROWSER, stderr=subprocess.PIPE) as process:
        out, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, err
    assert "Signed in to sec" in out
    assert "Opening your browser to sign in to sec" in err
    assert stored_secrets(layout)


# -- an authorization server that fails ---------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--issuer", "http://127.0.0.1:{down}"),
            "the server needs authentication, but its authorization server http://127.0.0.1:{down} cannot be reached",
        ),
        (
            ("--garbage-token-endpoint",),
            "signing in to {url} failed: Invalid token response: Invalid JSON: expected value at line 1 column 1",
        ),
        (  # the request it echoes holds the code and its verifier: left out
            ("--echoing-token-endpoint",),
            "signing in to {url} failed: Token exchange failed (400) (its answer is not shown: it may hold a secret)",
        ),
    ],
    ids=["authorization server down", "token endpoint answers garbage", "token endpoint echoes the request"],
)
def test_a_failing_authorization_server_is_one_clear_error_and_nothing_is_stored(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    down = free_port()
    args = tuple(a.format(down=down) for a in args)
    for server in start_server(tmp_path, *args):
        layout = setup(tmp_path, server)
        write_json(
            layout.paths.user,
            {
                "mcpServers": {
                    "sec": {"type": "http", "url": server.url},
                    "local": {"command": sys.executable, "args": ["-m", LIGHT]},
                }
            },
        )
        result = cli(layout, "mcp", "login", "sec", "--timeout", "20")
        assert result.returncode == 1, result.stdout
        assert message.format(down=down, url=server.url) in result.stderr
        assert "Traceback" not in result.stderr
        assert "code_verifier" not in result.stderr
        records = json.loads(store_path(layout).read_text()) if store_path(layout).exists() else {}
        assert not any(record.get("tokens") for record in records.values())
        status = cli(layout, "status").stdout
        assert f"sec · 🔒 needs authentication — run: mcpvisor mcp login --workspace {layout.root} sec" in status
        assert "local · ● connected (1 tool" in status


async def test_a_scope_step_up_is_signed_in_by_the_next_login_and_the_refused_call_then_succeeds(
    tmp_path: Path,
) -> None:
    """The server refuses a call for want of a scope (403 insufficient_scope): the next ``mcp login`` asks for
    it — in a new client's registration as in the authorization request — and the same call then succeeds,
    also after a sign-out (the registration is made again for the wider scope)."""
    for server in start_server(tmp_path, "--tools", "echo,admin", "--needs-scope", "admin=mcp:write"):
        layout = setup(tmp_path, server)

        async def command(*args: str, layout: Layout = layout) -> None:
            done = await anyio.to_thread.run_sync(partial(cli, layout, *args))
            assert done.returncode == 0, done.stderr

        async def step_up(host: Host) -> None:
            with pytest.raises(ToolCallError, match=re.escape("needs a wider sign-in (mcp:write)")):
                await host.config.call_tool("mcp__sec__admin", {})
            seen = host.tokens.generation
            await command("mcp", "login", "sec")
            await wait_until(lambda: host.tokens.generation != seen, what="the host to see the token store change")
            assert text_of(await host.config.call_tool("mcp__sec__admin", {})) == "secure:admin:"

        await command("mcp", "login", "sec")
        async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
            await step_up(host)
        await command("mcp", "logout", "sec")  # a new client is registered at the next sign-in
        await command("mcp", "login", "sec")
        async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
            await step_up(host)


def text_of(result: Any) -> str:
    [content] = result.content
    return str(content.text)


def test_a_client_registration_the_server_forgot_is_made_again_at_the_next_sign_in(tmp_path: Path) -> None:
    port = free_port()
    for server in start_server(tmp_path, port=port):
        layout = setup(tmp_path, server)
        assert cli(layout, "mcp", "login", "sec").returncode == 0
    (tmp_path / "again").mkdir()
    for _ in start_server(tmp_path / "again", port=port):  # restarted: it forgot its clients
        forgotten = cli(layout, "mcp", "login", "sec", "--timeout", "2")
        assert forgotten.returncode == 1
        said = " ".join(forgotten.stderr.split())
        assert "an error page about the client means the server forgot the client registered earlier" in said
        again = cli(layout, "mcp", "login", "sec")
        assert again.returncode == 0, again.stderr


def test_an_abandoned_sign_in_leaves_the_one_before_working_and_the_next_registers_again(
    tmp_path: Path, server: Server
) -> None:
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    [before] = json.loads(store_path(layout).read_text()).values()
    abandoned = cli(layout, "mcp", "login", "sec", "--timeout", "1", browser=NOTHING)
    assert abandoned.returncode == 1
    [after] = json.loads(store_path(layout).read_text()).values()
    assert (after["client"], after["tokens"]) == (before["client"], before["tokens"])  # a refresh needs both
    registered = server.events().count("register")
    assert status_row(layout)["state"] == "connected"
    assert server.events().count("register") == registered  # a host that never prompts registers nothing
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    assert server.events().count("register") == registered + 1  # the server may have forgotten it: again
    no_time = cli(layout, "mcp", "login", "sec", "--timeout", "0")  # a login that cannot succeed is no attempt
    assert no_time.returncode == 2
    assert "--timeout" in no_time.stderr


def test_a_step_up_sign_in_abandoned_leaves_the_sign_in_as_it_was(tmp_path: Path, server: Server) -> None:
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    [key] = json.loads(store_path(layout).read_text())
    store = TokenStore(store_path(layout))
    store.update(key, scope_needed="mcp:write")  # a call was refused for want of it
    signed_in = store.get(key)
    abandoned = cli(layout, "mcp", "login", "sec", "--timeout", "1", browser=NOTHING)
    assert abandoned.returncode == 1
    after = store.get(key)
    assert after["client"] == signed_in["client"]  # the tokens stay with the client they were issued to
    assert after["tokens"] == signed_in["tokens"]


@pytest.mark.parametrize(
    ("client", "needed", "stands"),
    [
        (None, "mcp:write", True),  # nothing registered yet
        ({"client_id": "c"}, None, True),  # no step-up: a registration without a scope stands
        ({"client_id": "c", "scope": "mcp:read"}, None, True),
        ({"client_id": "c", "scope": "mcp:read"}, "mcp:write", False),
        ({"client_id": "c"}, "mcp:write", False),
        ({"client_id": "c", "scope": "mcp:read mcp:write"}, "mcp:write", True),
    ],
)
def test_a_registration_is_made_again_only_for_a_scope_a_refused_request_asked_for(
    client: dict[str, str] | None, needed: str | None, stands: bool
) -> None:
    assert registered_for({"client": client, "scope_needed": needed}) is stands


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_a_sign_in_is_revoked_whichever_way_its_client_authenticates(
    tmp_path: Path, server: Server, method: str
) -> None:
    """Against the SDK's own authorization server (whose revocation endpoint wants a client secret, even in
    the form from a client that uses HTTP Basic: the fallback is exercised)."""
    from mcpvisor.host.oauth_revocation import revoke
    from mcpvisor.host.oauth_settings import OAuthSettings

    registration = {
        "redirect_uris": ["http://127.0.0.1:1/callback"],
        "token_endpoint_auth_method": method,
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/register",
        data=json.dumps(registration).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as answer:
        client = json.load(answer)
    record = {"client": client, "tokens": {"access_token": "a-token", "refresh_token": "a-refresh"}}
    said = anyio.run(revoke, f"{server.url}?api_key=s3cret", record, OAuthSettings())
    assert said == f"revoked at http://127.0.0.1:{server.port}/revoke"  # a 200: the client was authenticated
    gone = anyio.run(revoke, f"http://127.0.0.1:{free_port()}/mcp?api_key=s3cret", record, OAuthSettings())
    assert "could not be reached" in gone
    assert "s3cret" not in said + gone


def test_ctrl_c_during_logouts_revocation_skips_it_and_still_signs_out(tmp_path: Path) -> None:
    with socket.socket() as silent:  # an authorization server that never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        layout = make_layout(tmp_path)
        write_json(layout.paths.user, {"mcpServers": {"sec": {"type": "http", "url": url}}})
        store = store_path(layout)
        store.write_text(json.dumps({url: {"tokens": {"access_token": "a-token", "token_type": "Bearer"}}}))
        store.chmod(0o600)
        process = subprocess.Popen(
            [mcpvisor_command(), "mcp", "logout", "sec", "--workspace", str(layout.root)],
            env={**os.environ, **layout.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stderr is not None
        assert "Revoking the sign-in" in process.stderr.readline()
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0
    assert "Signed out of sec" in out
    assert "skipped (Ctrl-C)" in out
    assert json.loads(store.read_text()) == {}


def test_an_oauth_block_that_cannot_be_read_says_what_to_fix_not_to_sign_in(tmp_path: Path, server: Server) -> None:
    layout = setup(tmp_path, server, oauth={"callbackPort": "notanumber"})
    row = status_row(layout)
    assert row["state"] != "needs_auth", row  # no sign-in mends it
    assert row["error"] == "mcpServers.sec.oauth.callbackPort must be a number", row
    assert "mcp login" not in cli(layout, "status").stdout
