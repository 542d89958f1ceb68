"""The machine-to-machine grant (``"grant": "client_credentials"``) as the README has it configured, against the
OAuth example server's pre-registered client (``--client ID:SECRET``): status, a call through a host and through
``mcpvisor serve``, a token that expires and is fetched again, and credentials the authorization server refuses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcpvisor.core.errors import ServerUnavailableError, ToolNotFoundError
from mcpvisor.host.host import Host, HostOptions
from tests.e2e.test_oauth import Server, cli, start_server, status_row, store_path, text_of
from tests.helpers import mcpvisor_command, wait_until
from tests.layout import Layout, make_layout, write_json

SECRET = "m2m-s3cret-4417"
WRONG = "wrong-s3cret-9923"


def machine_setup(tmp_path: Path, server: Server, secret: str) -> Layout:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    oauth = {
        "grant": "client_credentials",
        "clientId": "gateway",
        "clientSecret": "${M2M_SECRET}",
        "issuer": f"http://127.0.0.1:{server.port}",
    }
    write_json(layout.paths.user, {"mcpServers": {"sec": {"type": "http", "url": server.url, "oauth": oauth}}})
    layout.env["M2M_SECRET"] = secret
    return layout


def stored_access_token(layout: Layout) -> str:
    [record] = json.loads(store_path(layout).read_text()).values()
    token: str = record["tokens"]["access_token"]
    return token


@pytest.fixture
def short_lived(tmp_path: Path) -> Iterator[Server]:
    yield from start_server(tmp_path, "--client", f"gateway:{SECRET}", "--token-lifetime", "2")


async def test_client_credentials_sign_in_by_themselves_and_fetch_a_new_token_once_it_expires(
    tmp_path: Path, short_lived: Server
) -> None:
    layout = machine_setup(tmp_path, short_lived, SECRET)
    row = status_row(layout)
    assert (row["state"], row["tools"], row["sign_in"]) == ("connected", 1, "signed in (client credentials)")
    assert short_lived.events() == ["client-credentials"]
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        assert text_of(await host.config.call_tool("mcp__sec__echo", {"text": "a"})) == "secure:echo:a"
        token = stored_access_token(layout)
        await wait_until(lambda: not short_lived.accepts(token), what="the access token to expire at the server")
        assert text_of(await host.config.call_tool("mcp__sec__echo", {"text": "b"})) == "secure:echo:b"
        assert stored_access_token(layout) != token
    params = StdioServerParameters(
        command=mcpvisor_command(), args=["serve", "--workspace", str(layout.root)], env=layout.env
    )
    with (tmp_path / "gateway.stderr").open("w") as err:
        async with Client(stdio_client(params, errlog=err)) as client:
            assert text_of(await client.call_tool("mcp__sec__echo", {"text": "c"})) == "secure:echo:c"
    assert "login" not in short_lived.events()
    assert SECRET not in (tmp_path / "gateway.stderr").read_text()


def refusal(layout: Layout) -> str:
    return (
        "server 'sec': its authorization server refused the client credentials (HTTP 401, invalid_client); no "
        f"sign-in mends that: check clientId and clientSecret in mcpServers.sec.oauth in {layout.paths.user}"
    )


async def test_refused_client_credentials_say_what_to_fix_in_which_file_not_to_sign_in(tmp_path: Path) -> None:
    """Credentials the authorization server refuses read "needs authentication — run: mcpvisor mcp login sec" in
    the status, and a tool's not-found error said as much, though no sign-in mends them (``mcp login`` fails the
    same way); and credentials it stops taking under a running host failed the call as a crashed server."""
    servers = start_server(tmp_path, "--client", f"gateway:{SECRET}")
    server = next(servers)
    try:
        layout = machine_setup(tmp_path, server, WRONG)
        row = status_row(layout)
        assert row["state"] == "disconnected", row
        assert row["error"] == refusal(layout)
        shown = cli(layout, "status")
        assert "mcp login" not in shown.stdout
        assert refusal(layout) in " ".join(shown.stdout.split())
        login = cli(layout, "mcp", "login", "sec")
        assert login.returncode == 1
        assert refusal(layout) in " ".join(login.stderr.split())
        async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
            with pytest.raises(ToolNotFoundError) as missing:
                await host.config.call_tool("mcp__sec__echo", {"text": "a"})
            assert refusal(layout) in str(missing.value)
        said = [json.dumps(row), shown.stdout, shown.stderr, login.stdout, login.stderr, str(missing.value)]
        said += [p.read_text() for p in (tmp_path / "logs").glob("*") if p.is_file()]
        assert not [text for text in said if WRONG in text or SECRET in text]

        layout.env["M2M_SECRET"] = SECRET
        async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
            assert text_of(await host.config.call_tool("mcp__sec__echo", {"text": "b"})) == "secure:echo:b"
            servers.close()  # the authorization server forgets the token and takes another secret from now on
            rotated = start_server(tmp_path, "--client", "gateway:rotated-4410", port=server.port)
            next(rotated)
            try:
                with pytest.raises(ServerUnavailableError) as refused:
                    await host.config.call_tool("mcp__sec__echo", {"text": "c"})
                assert str(refused.value) == f"call to tool 'echo' failed: {refusal(layout)}"
                client = host.config.manager.clients()["sec"]
                await wait_until(lambda: client.status == "disconnected", what="sec down")
                assert not client.needs_auth
            finally:
                rotated.close()
    finally:
        servers.close()


@pytest.fixture
def m2m_server(tmp_path: Path) -> Iterator[Server]:
    yield from start_server(tmp_path, "--client", f"gateway:{SECRET}")


@pytest.mark.parametrize("command", [["status"], ["mcp", "list"]])
def test_client_credentials_without_an_issuer_are_warned_about_where_people_read(
    tmp_path: Path, m2m_server: Server, command: list[str]
) -> None:
    """Before: the warning was a log line, which status, run, the shell and serve keep to themselves unless run with
    -v or --json: the README's "a warning says they go to whichever one the MCP server names" reached nobody."""
    layout = machine_setup(tmp_path, m2m_server, SECRET)
    write_json(
        layout.paths.user,
        {
            "mcpServers": {
                "sec": {
                    "type": "http",
                    "url": m2m_server.url,
                    "oauth": {"grant": "client_credentials", "clientId": "gateway", "clientSecret": "${M2M_SECRET}"},
                }
            }
        },
    )
    done = cli(layout, *command)
    said = " ".join(done.stdout.split())
    assert (
        f"MCP server 'sec' ({layout.paths.user}) sends its client credentials to whichever authorization server the "
        "MCP server names: set mcpServers.sec.oauth.issuer to that server's issuer URL to pin them"
    ) in said, done.stdout + done.stderr
    assert SECRET not in done.stdout + done.stderr
    pinned = machine_setup(tmp_path / "pinned", m2m_server, SECRET)  # with "issuer": nothing to say
    assert "issuer" not in cli(pinned, *command).stdout
