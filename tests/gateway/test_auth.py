"""The HTTP gateway's bearer token and the folders a client may name (SPEC §9 "Gateway"): real HTTP on
loopback, real example servers, real files."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import anyio
import httpx2
import pytest

from mcpvisor.cli.serve import run_gateway
from mcpvisor.core.errors import ConfigError
from mcpvisor.gateway.auth import TOKEN_ENV, GatewayToken, gateway_token_path, load_gateway_token
from mcpvisor.gateway.http import WORKSPACE_HEADER
from mcpvisor.gateway.workspaces import WorkspaceGateway
from mcpvisor.host.host import HostOptions
from tests.gateway.test_gateway import running, save, server, tool_names
from tests.gateway.test_workspaces import client_for, make_setup, serving
from tests.helpers import WAIT_S, free_port
from tests.layout import make_layout

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
ACCEPT = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


# -- where the token comes from ----------------------------------------------------------------


def test_the_token_is_generated_once_with_mode_0600_and_reused(tmp_path: Path) -> None:
    env = {"MCPVISOR_HOME": str(tmp_path / "home")}
    first = load_gateway_token(env)
    path = gateway_token_path(env)
    assert first.generated
    assert first.source == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first.value) >= 40
    again = load_gateway_token(env)
    assert again.value == first.value
    assert not again.generated
    assert first.value not in repr(first)
    assert first.value not in first.hint()
    assert str(path) in first.hint()
    assert "Authorization: Bearer <token>" in first.hint()


def test_the_environment_wins_then_the_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-the-token-file\n")
    token_file.chmod(0o600)
    env = {"MCPVISOR_HOME": str(tmp_path / "home"), TOKEN_ENV: "from-the-environment"}
    assert load_gateway_token(env, token_file) == GatewayToken("from-the-environment", f"${TOKEN_ENV}")
    del env[TOKEN_ENV]
    assert load_gateway_token(env, token_file).value == "from-the-token-file"
    assert not gateway_token_path(env).exists()  # nothing generated when a token was given


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        ("secret\n", 0o644, "other users can read it (mode 644); run: chmod 600"),
        ("\n", 0o600, "it must be one line of text"),
        ("two words\n", 0o600, "it must be one line of text"),
        (b"\xff\xfe", 0o600, "it must be one line of text"),
    ],
)
def test_a_bad_token_file_is_a_clear_error_naming_the_file(
    tmp_path: Path, content: str | bytes, mode: int, message: str
) -> None:
    token_file = tmp_path / "token"
    if isinstance(content, bytes):
        token_file.write_bytes(content)
    else:
        token_file.write_text(content)
    token_file.chmod(mode)
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        load_gateway_token({"MCPVISOR_HOME": str(tmp_path / "home")}, token_file)
    assert str(token_file) in str(caught.value)
    assert "secret" not in str(caught.value)


def test_a_missing_token_file_says_which(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the gateway token from .*nope.*--token-file"):
        load_gateway_token({"MCPVISOR_HOME": str(tmp_path)}, tmp_path / "nope")


# -- every request needs it ----------------------------------------------------------------------


async def test_every_http_request_needs_the_bearer_token(tmp_path: Path) -> None:
    async with (
        running(tmp_path, user={"mcpServers": {"a": server("a")}}) as r,
        anyio.create_task_group() as tg,
    ):
        url: str = await tg.start(lambda task_status: r.gateway.serve_http(token="s3cret", task_status=task_status))
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                refused = await http.post(url, json=PING, headers={**ACCEPT, **headers})
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"].startswith("Bearer")
                assert "needs 'Authorization: Bearer <token>'" in refused.json()["error"]["message"]
                assert "s3cret" not in refused.text
            # The streaming GET is guarded as well as POST.
            assert (await http.get(url, headers=ACCEPT)).status_code == 401
        async with client_for(url, None, token="s3cret") as client:
            assert await tool_names(client) == {"mcp__a__echo"}
        tg.cancel_scope.cancel()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


async def test_the_bearer_scheme_is_case_insensitive(tmp_path: Path) -> None:
    """RFC 9110 §11.1: ``bearer``, ``BEARER`` and ``Bearer`` name the same scheme."""
    async with (
        running(tmp_path, user={"mcpServers": {"a": server("a")}}) as r,
        anyio.create_task_group() as tg,
    ):
        url: str = await tg.start(lambda task_status: r.gateway.serve_http(token="s3cret", task_status=task_status))
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            for scheme in ("bearer", "BEARER", "Bearer", "bEaReR"):
                response = await http.post(
                    url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"{scheme} s3cret"}
                )
                assert response.status_code == 200, (scheme, response.text)
            wrong = await http.post(url, json=INITIALIZE, headers={**ACCEPT, "Authorization": "Basic s3cret"})
            assert wrong.status_code == 401
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("address", ["127.0.0.2", "127.42.0.1"])
async def test_every_loopback_listener_refuses_a_foreign_host_or_origin(tmp_path: Path, address: str) -> None:
    """DNS rebinding: without a token (--no-auth) any loopback address is guarded, not only 127.0.0.1."""
    async with (
        running(tmp_path, user={"mcpServers": {"a": server("a")}}) as r,
        anyio.create_task_group() as tg,
    ):
        url: str = await tg.start(lambda task_status: r.gateway.serve_http(address, 0, task_status=task_status))
        port = url.split(":")[2].split("/")[0]
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            foreign = await http.post(url, json=INITIALIZE, headers={**ACCEPT, "Host": "rebind.evil.example"})
            assert foreign.status_code == 421
            origin = {**ACCEPT, "Origin": "http://rebind.evil.example"}
            assert (await http.post(url, json=INITIALIZE, headers=origin)).status_code == 403
            for host in (f"{address}:{port}", f"localhost:{port}", "localhost"):
                ok = await http.post(url, json=INITIALIZE, headers={**ACCEPT, "Host": host})
                assert ok.status_code == 200, (host, ok.text)
            # Pages from this machine, as the refusal says (before: only http:// with a port).
            for page in ("http://localhost", "https://localhost:3000", f"http://{address}:8080", "https://[::1]"):
                ok = await http.post(url, json=INITIALIZE, headers={**ACCEPT, "Origin": page})
                assert ok.status_code == 200, (page, ok.text)
        tg.cancel_scope.cancel()


async def test_a_gateway_off_loopback_without_a_token_is_refused_before_any_server_starts(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    save(layout.paths.user, {"mcpServers": {"a": server("a", "--marker", str(marker))}})
    options = HostOptions(env=layout.env, workspace=layout.root)
    with pytest.raises(ConfigError, match="refusing to serve on 0.0.0.0 without a token"):
        await run_gateway(options, http=("0.0.0.0", free_port()))
    assert not marker.exists()


# -- which folders a client may name ---------------------------------------------------------------


async def test_a_client_may_not_name_a_folder_of_another_user_or_outside_the_workspace_root(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    foreign = setup.layout.home / "foreign"
    foreign.mkdir(parents=True)
    cases = [
        (None, setup.a, tmp_path, "is not under your home folder"),
        (setup.a.parent / "a", setup.a, setup.b, "is not under the gateway's --workspace-root"),
    ]
    if os.getuid() == 0:  # only root can give a folder under its home to another user
        os.chown(foreign, 65534, 65534)  # nobody's
        cases.append((None, setup.a, foreign, "belongs to another user; start the gateway with --workspace-root DIR"))
    options = HostOptions(env=setup.layout.env, workspace=setup.default)
    for workspace_root, allowed, refused, why in cases:
        async with (
            WorkspaceGateway(options, workspace_root=workspace_root) as gateway,
            anyio.create_task_group() as tg,
        ):
            url: str = await tg.start(gateway.serve_http)
            async with httpx2.AsyncClient(timeout=WAIT_S) as http:
                response = await http.post(url, json=PING, headers={**ACCEPT, WORKSPACE_HEADER: str(refused)})
            assert response.status_code == 400
            assert why in response.json()["error"]["message"]
            async with client_for(url, allowed) as client:
                assert await tool_names(client) == {"mcp__common__echo", "mcp__pa__echo"}
            async with client_for(url, None) as client:  # the gateway's own workspace is always served
                assert "mcp__pd__echo" in await tool_names(client)
            assert set(gateway.workspaces()) == {setup.default, setup.a}
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("workspace_root", [None, "/"])
async def test_system_folders_are_never_a_workspace_whoever_runs_the_gateway(
    tmp_path: Path, workspace_root: str | None
) -> None:
    """Even as root (CI runs as root, where "folders you own" means every folder), and even under a
    --workspace-root of /: /etc, /, /proc (/proc/self included, whatever it resolves to), /sys, /dev and
    another home's /root are refused with a 400 that names the problem."""
    setup = make_setup(tmp_path)
    options = HostOptions(env=setup.layout.env, workspace=setup.default)
    root = Path(workspace_root) if workspace_root else None
    async with WorkspaceGateway(options, workspace_root=root) as gateway, anyio.create_task_group() as tg:
        url: str = await tg.start(gateway.serve_http)
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            for folder in ("/etc", "/", "/proc/1", "/proc/self", "/sys", "/dev", "/root", "/etc/../etc/ssl"):
                if not await anyio.Path(folder).is_dir():
                    continue
                response = await http.post(url, json=PING, headers={**ACCEPT, WORKSPACE_HEADER: folder})
                assert response.status_code == 400, (folder, response.text)
                assert "a system folder; name a project folder" in response.json()["error"]["message"], folder
        assert set(gateway.workspaces()) == {setup.default}
        tg.cancel_scope.cancel()


async def test_a_malformed_workspace_header_is_a_short_400_never_a_500(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    async with serving(setup) as (gateway, url), httpx2.AsyncClient(timeout=WAIT_S) as http:
        for value, why in (
            ("/" + "x" * 4200, "too long (4201 characters, at most 4096)"),
            ("/a" * 200, "too deep (201 levels, at most 128)"),
            ("/" + "y" * 300 + "/z", "file name too long"),
            ("relative/path", "not an absolute path"),
            (str(tmp_path / "missing"), "no such folder"),
        ):
            response = await http.post(url, json=PING, headers={**ACCEPT, WORKSPACE_HEADER: value})
            assert response.status_code == 400, (why, response.status_code)
            message = response.json()["error"]["message"]
            assert why in message
            assert len(response.text) < 600
            assert "Traceback" not in response.text
        assert set(gateway.workspaces()) == {setup.default}


@pytest.mark.parametrize("where", ["environment", "file"])
def test_a_token_short_enough_to_guess_is_refused_naming_where_it_came_from(tmp_path: Path, where: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("xq7Zk\n")
    token_file.chmod(0o600)
    env = {"MCPVISOR_HOME": str(tmp_path / "home")} | ({TOKEN_ENV: "xq7Zk"} if where == "environment" else {})
    source = f"${TOKEN_ENV}" if where == "environment" else str(token_file)
    with pytest.raises(ConfigError, match=r"has 5 characters; use at least 16") as caught:
        load_gateway_token(env, token_file)
    assert source in str(caught.value)
    assert "xq7Zk" not in str(caught.value)
