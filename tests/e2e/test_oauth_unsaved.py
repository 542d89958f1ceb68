"""A running host's refreshed sign-in that cannot be saved (a full disk): the tokens the authorization server
rotated are used in memory, saved once the store can be written, and the user is told once. Against the OAuth
example server (see ``tests.e2e.test_oauth``)."""

from __future__ import annotations

import errno
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpvisor.host import private_files
from mcpvisor.host.host import Host, HostOptions, SettingsWarning
from tests.e2e.test_oauth import Server, cli, setup, start_server, store_path, text_of
from tests.helpers import wait_until


@pytest.fixture
def short_lived(tmp_path: Path) -> Iterator[Server]:
    """The example server issuing access tokens that expire after a second (each refresh rotates the refresh
    token: the one used is refused from then on)."""
    yield from start_server(tmp_path, "--token-lifetime", "1")


def stored(path: Path) -> dict[str, object]:
    [record] = json.loads(path.read_text()).values()
    assert isinstance(record, dict)
    return record


class FullDisk:
    """The token store's writes fail as on a full disk while ``full`` (an error injected at the store's write)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: Path) -> None:
        self.full = True
        self.refused = 0
        write = private_files.write_private

        def write_private(path: Path, text: str) -> private_files.Signature:
            if self.full and path == store:
                self.refused += 1
                raise private_files.not_saved(path, OSError(errno.ENOSPC, "No space left on device"))
            return write(path, text)

        monkeypatch.setattr(private_files, "write_private", write_private)


async def test_a_refreshed_sign_in_that_cannot_be_saved_serves_from_memory_is_said_once_and_saved_later(
    tmp_path: Path, short_lived: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the refresh's save failed the call that needed it, and the refresh token the authorization server had
    just rotated was lost: the store kept the one it refused from then on, so the next refresh (here, or in the next
    process) was refused and the server signed out."""
    server = short_lived
    layout = setup(tmp_path, server)
    assert cli(layout, "mcp", "login", "sec").returncode == 0
    path = store_path(layout)
    said: list[str] = []
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        host.subscribe(lambda event: said.append(event.message) if isinstance(event, SettingsWarning) else None)
        manager = host.config.manager
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected")
        disk = FullDisk(monkeypatch, path)
        before = stored(path)
        start = server.events().count("refresh")
        for call in range(10):  # until two refreshes, each rotating the refresh token, were not saved
            if server.events().count("refresh") >= start + 2:
                break
            made = time.time()
            result = await host.config.call_tool("mcp__sec__echo", {"text": str(call)})
            assert text_of(result) == f"secure:echo:{call}"
            await wait_until(lambda m=made: time.time() > m + 1.5, what="the access token in use to expire")  # type: ignore[misc]
        assert server.events().count("refresh") >= start + 2
        assert disk.refused >= 2
        assert stored(path) == before
        unsaved = [m for m in said if "sign-in could not be saved" in m]
        assert len(unsaved) == 1, said
        [message] = unsaved
        assert str(path) in message
        assert "no space left on device" in message
        assert "mcpvisor mcp login" in message
        for token in ("access_token", "refresh_token"):  # never a token
            assert str(before["tokens"][token]) not in message  # type: ignore[index]
        assert manager.clients()["sec"].status == "connected"
        [view] = [v for v in host.server_views() if v.name == "sec"]
        assert view.sign_in is not None
        assert view.sign_in.startswith("signed in; its refreshed sign-in is not saved (could not save ")
        assert view.sign_in.endswith("): it serves until mcpvisor stops")
        disk.full = False
        result = await host.config.call_tool("mcp__sec__echo", {"text": "c"})  # its refresh saves it
        assert text_of(result) == "secure:echo:c"
        await wait_until(lambda: stored(path)["tokens"] != before["tokens"], what="the sign-in to be saved")
        [view] = [v for v in host.server_views() if v.name == "sec"]
        assert view.sign_in is not None
        assert view.sign_in.startswith("signed in (expires in ")
    # The saved sign-in is the one in use: another process refreshes it.
    listed = cli(layout, "mcp", "list")
    assert listed.returncode == 0, listed.stderr
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        manager = host.config.manager
        await wait_until(lambda: manager.clients()["sec"].status == "connected", what="sec connected again")
        await wait_until(lambda: float(stored(path)["expires_at"]) < time.time(), what="the access token to expire")  # type: ignore[arg-type]
        result = await host.config.call_tool("mcp__sec__echo", {"text": "d"})
        assert text_of(result) == "secure:echo:d"
        assert not manager.clients()["sec"].needs_auth


async def test_a_refreshed_sign_in_not_saved_is_saved_once_its_back_off_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a refresh before then, the sign-in kept in memory is saved at the first request after the back-off;
    until then it is the one in use (and its expiry), and the store's record is left as it was."""
    from mcp.shared.auth import OAuthToken

    from mcpvisor.host import oauth_storage
    from mcpvisor.host.oauth_store import TokenStore

    path = tmp_path / "oauth-tokens.json"
    store = TokenStore(path)
    store.update("k", tokens={"access_token": "a1", "refresh_token": "r1"}, expires_at=1.0)
    told: list[str] = []
    store.on_not_saved(told.append)
    storage = oauth_storage.FileTokenStorage(store, "k", name="docs")
    disk = FullDisk(monkeypatch, path)
    monkeypatch.setattr(oauth_storage, "UNSAVED_RETRY_S", 0.0)
    storage.refreshed_from = "r1"
    await storage.set_tokens(OAuthToken(access_token="a2", refresh_token="r2", expires_in=3600))
    assert stored(path)["tokens"] == {"access_token": "a1", "refresh_token": "r1"}
    assert (await storage.get_tokens()) == OAuthToken(access_token="a2", refresh_token="r2", expires_in=3600)
    assert (storage.expires_at() or 0) > time.time() + 3000
    storage.save_unsaved()  # tried again (the back-off passed): the disk is still full
    assert disk.refused == 2
    assert len(told) == 1  # said once
    assert "run mcpvisor mcp login docs" in told[0]
    disk.full = False
    storage.save_unsaved()
    assert stored(path)["tokens"] == {
        "access_token": "a2",
        "refresh_token": "r2",
        "expires_in": 3600,
        "token_type": "Bearer",
    }
    assert store.unsaved == {}
