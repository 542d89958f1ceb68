"""A full disk while deciding an approval, writing the gateway token or editing settings: one clear line,
exit code 1, and the files exactly as they were. A real, small file system (tmpfs) filled to the brim."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_commands import cli
from tests.e2e.test_oauth import cli as oauth_cli
from tests.e2e.test_oauth import start_server
from tests.helpers import free_port
from tests.layout import make_layout, replace_text, write_json

FULL = "no space left on device — nothing was changed"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs at ``tmp_path / "disk"``, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.getuid() != 0:
        pytest.skip("mounting a small file system to fill needs root (CI runs as root)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> None:
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass  # full
    finally:
        os.close(fd)


def one_red_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_approving_on_a_full_disk_says_so_in_one_line_and_keeps_the_store(tmp_path: Path, small_disk: Path) -> None:
    home = small_disk / "home"
    layout = make_layout(tmp_path, MCPVISOR_HOME=str(home))
    servers = {"mcpServers": {"p": {"command": "x"}, "q": {"command": "y"}}}
    replace_text(layout.paths.project, json.dumps(servers))
    first = cli("mcp", "approve", "p", "--workspace", str(layout.root), env=layout.env)
    assert first.returncode == 0, first.stderr
    store = home / "mcp-approvals.json"
    before = store.read_bytes()
    fill(small_disk)
    refused = cli("mcp", "approve", "q", "--workspace", str(layout.root), env=layout.env)
    assert refused.returncode == 1
    assert one_red_line(refused.stderr).endswith(f"could not save {store}: {FULL}")
    assert store.read_bytes() == before
    assert not [p for p in home.iterdir() if p.name.endswith(".tmp")]
    (small_disk / "filler").unlink()
    again = cli("mcp", "approve", "q", "--workspace", str(layout.root), env=layout.env)
    assert again.returncode == 0, again.stderr


def test_a_new_gateway_token_on_a_full_disk_says_so_in_one_line(tmp_path: Path, small_disk: Path) -> None:
    home = small_disk / "home"
    home.mkdir()
    layout = make_layout(tmp_path, MCPVISOR_HOME=str(home))
    fill(small_disk)
    result = cli("serve", "--http", f"127.0.0.1:{free_port()}", "--workspace", str(layout.root), env=layout.env)
    assert result.returncode == 1
    assert one_red_line(result.stderr).endswith(f"could not save {home / 'gateway-token'}: {FULL}")
    assert not (home / "gateway-token").exists()


def test_adding_a_server_on_a_full_disk_keeps_the_settings_file(tmp_path: Path, small_disk: Path) -> None:
    home = small_disk / "home"
    layout = make_layout(tmp_path, MCPVISOR_HOME=str(home))
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"a": {"command": "x"}}}, indent=2))
    before = layout.paths.user.read_bytes()
    fill(small_disk)
    result = cli("mcp", "add", "b", "--workspace", str(layout.root), "--", "echo", "hi", env=layout.env)
    assert result.returncode == 1
    assert one_red_line(result.stderr).endswith(f"could not save {layout.paths.user}: {FULL}")
    assert layout.paths.user.read_bytes() == before


def test_a_logout_on_a_full_disk_says_its_tokens_were_revoked_but_are_still_kept_here(
    tmp_path: Path, small_disk: Path
) -> None:
    """The sign-in was revoked at the authorization server, then deleting the tokens here failed: the error said
    "could not save … — nothing was changed", though the tokens it kept no longer work anywhere."""
    home = small_disk / "home"
    for server in start_server(tmp_path):
        layout = make_layout(tmp_path, MCPVISOR_HOME=str(home), MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
        write_json(layout.paths.user, {"mcpServers": {"sec": {"type": "http", "url": server.url}}})
        assert oauth_cli(layout, "mcp", "login", "sec").returncode == 0
        store = home / "oauth-tokens.json"
        before = store.read_bytes()
        fill(small_disk)
        logout = oauth_cli(layout, "mcp", "logout", "sec")
        assert logout.returncode == 1
        assert logout.stderr.splitlines()[-1] == (
            f"error: could not sign out of sec here: its tokens could not be deleted from {store} (no space left on "
            f"device), so they are still kept; revoked at http://127.0.0.1:{server.port}/revoke; run mcpvisor mcp "
            "logout again once there is space"
        )
        assert "nothing was changed" not in logout.stderr
        assert server.events()[-2:] == ["revoke", "revoke"]
        assert store.read_bytes() == before
        (small_disk / "filler").unlink()
        again = oauth_cli(layout, "mcp", "logout", "sec")
        assert again.returncode == 0, again.stderr
        assert "Signed out of sec" in again.stdout
        assert json.loads(store.read_text()) == {}
