"""A refresh of a sign-in that its start (or its connection) stops waiting for: the authorization server rotates
the refresh token all the same, so what it answers is stored. Against the OAuth example server (see
``tests.e2e.test_oauth``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcpvisor.host.oauth_store import TokenStore
from tests.e2e.test_oauth import Server, cli, setup, start_server, status_row, store_path
from tests.e2e.test_oauth_running import admin, stored_tokens
from tests.helpers import mcpvisor_command, wait_until
from tests.layout import Layout


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from start_server(tmp_path)


def signed_in_and_due(layout: Layout) -> str:
    """``mcp login sec``, its sign-in then marked expired (refreshed at the next start); returns its refresh token."""
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    store = TokenStore(store_path(layout))
    [key] = store.read()
    store.update(key, expires_at=1.0)
    return stored_tokens(layout)["refresh_token"]


async def test_a_refresh_the_status_command_gave_up_waiting_for_is_stored_not_lost(
    tmp_path: Path, server: Server
) -> None:
    """The token endpoint keeps the refresh waiting past the start's time, and ``mcpvisor status`` gave up on the
    start and exited: the authorization server answered afterwards, rotating the refresh token, and nothing
    received the new one — the next command said the sign-in was refused. The command waits for the refresh it
    sent, saying so, and stores its tokens."""
    layout = setup(tmp_path, server, discoveryTimeoutMs=1000)
    used = signed_in_and_due(layout)
    admin(server, "hold-refresh")
    errors = tmp_path / "status.stderr"
    command = [mcpvisor_command(), "status", "--workspace", str(layout.root)]
    with errors.open("w") as err:
        status = await anyio.open_process(
            command, env={**os.environ, **layout.env}, stdout=subprocess.DEVNULL, stderr=err
        )
    async with status:
        try:
            await wait_until(lambda: "refresh-held" in server.events(), what="the refresh to reach the token endpoint")
            await wait_until(
                lambda: status.returncode is not None or "waiting for" in errors.read_text(),
                what="status to give up on the start",
            )
        finally:
            admin(server, "release-refresh")
        await status.wait()
    await wait_until(lambda: "refresh" in server.events(), what="the token endpoint to answer the refresh")
    tokens = stored_tokens(layout)
    assert tokens["refresh_token"] != used
    assert server.accepts(tokens["access_token"])
    assert status_row(layout)["state"] == "connected"
    assert "waiting for its authorization server to answer the refresh of server 'sec'" in errors.read_text()
