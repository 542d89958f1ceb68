"""Files the real watcher must hear however they change: the stores (approvals, tokens, pins) — measured
against what the app read of them, whichever way their file is written — settings files linked in from
another folder, and paths given relative to the working folder; and a broken file told once, not on
every other file's event in its folder."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from mcpvisor.host import watcher as watcher_module
from mcpvisor.host.settings.loader import SettingsError
from mcpvisor.host.watched_files import read_file_state, watch_folders
from mcpvisor.host.watcher import SettingsChanged, SettingsOk, SettingsWatcher, read_store_states
from tests.helpers import wait_until
from tests.host.test_watcher import watching
from tests.layout import make_layout, replace_text, write_json


async def test_a_store_written_after_the_app_read_it_and_before_the_watcher_started_is_announced(
    tmp_path: Path,
) -> None:
    layout = make_layout(tmp_path)
    write_json(layout.paths.approvals, {"v": 1})
    read = read_store_states(layout.settings())  # the app reads its stores ...
    write_json(layout.paths.approvals, {"v": 2})  # ... another process writes one while the app starts ...
    async with watching(layout, scopes=("user", "approvals"), store_states=read) as env:  # ... then it watches
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("approvals")))
        assert env.scope_changes_for("approvals") == [SettingsChanged("approvals", ())]


async def test_a_store_written_back_byte_for_byte_is_announced(tmp_path: Path) -> None:
    # Approve t, then revoke it: the file holds what it held before, yet the app may have started t meanwhile.
    layout = make_layout(tmp_path)
    replace_text(layout.paths.approvals, json.dumps({"v": "A"}))
    async with watching(layout, scopes=("user", "approvals")) as env:
        replace_text(layout.paths.approvals, json.dumps({"v": "A"}))
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("approvals")))
        assert env.scope_changes_for("approvals") == [SettingsChanged("approvals", ())]


async def test_a_store_in_a_configmap_style_mount_is_followed_when_its_data_link_is_swapped(tmp_path: Path) -> None:
    mount = tmp_path / "mount"
    layout = make_layout(tmp_path / "layout", MCPVISOR_HOME=str(mount))
    (mount / "..v1").mkdir(parents=True)
    write_json(mount / "..v1" / "mcp-approvals.json", {"v": 1})
    (mount / "..data").symlink_to("..v1")
    (mount / "mcp-approvals.json").symlink_to("..data/mcp-approvals.json")
    assert layout.paths.approvals == mount / "mcp-approvals.json"
    async with watching(layout, scopes=("user", "approvals")) as env:
        write_json(layout.paths.user, {"mcpServers": {"u": {"command": "u"}}})  # past the watcher's first reading
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("user")))
        (mount / "..v2").mkdir()
        write_json(mount / "..v2" / "mcp-approvals.json", {"v": 2})
        (mount / "..data_tmp").symlink_to("..v2")
        os.replace(mount / "..data_tmp", mount / "..data")  # the store's own link is never touched
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("approvals")))
        assert env.scope_changes_for("approvals") == [SettingsChanged("approvals", ())]


async def test_a_relative_user_folder_is_watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    layout = make_layout(tmp_path, MCPVISOR_HOME="relative-home")
    assert not layout.paths.user.is_absolute()
    write_json(layout.paths.user, {"mcpServers": {"u": {"command": "u1"}}})
    layout.paths.workspace.parent.mkdir()
    async with watching(layout, scopes=("user", "approvals", "workspace")) as env:
        write_json(layout.paths.workspace, {"mcpServers": {"w": {"command": "w"}}})  # past the first reading
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("workspace")))
        write_json(layout.paths.user, {"mcpServers": {"u": {"command": "u2"}}})
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("user")))
        assert env.settings.merged.mcp_servers["u"].config.command == "u2"
        write_json(layout.paths.approvals, {"v": 1})
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("approvals")))


async def test_a_settings_file_linked_in_from_another_folder_is_followed(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    dotfiles = tmp_path / "dotfiles"
    write_json(dotfiles / "mcpvisor.json", {"mcpServers": {"u": {"command": "u1"}}})
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.symlink_to(dotfiles / "mcpvisor.json")  # as stow or a dotfiles manager links it in
    layout.paths.workspace.parent.mkdir()
    async with watching(layout, scopes=("user", "workspace")) as env:
        write_json(layout.paths.workspace, {"mcpServers": {"w": {"command": "w"}}})  # past the first reading
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("workspace")))
        # An editor's save, then a write in place.
        replace_text(dotfiles / "mcpvisor.json", json.dumps({"mcpServers": {"u": {"command": "u2"}}}))
        await env.rec.wait_for(lambda: len(env.scope_changes_for("user")) == 1)
        write_json(dotfiles / "mcpvisor.json", {"mcpServers": {"u": {"command": "u3"}}})
        await env.rec.wait_for(lambda: len(env.scope_changes_for("user")) == 2)
        assert env.settings.merged.mcp_servers["u"].config.command == "u3"
        # Linked elsewhere: the new folder is followed.
        write_json(tmp_path / "other" / "mcpvisor.json", {"mcpServers": {"u": {"command": "u4"}}})
        swap = layout.paths.user.with_name("link.tmp")
        swap.symlink_to(tmp_path / "other" / "mcpvisor.json")
        os.replace(swap, layout.paths.user)
        await env.rec.wait_for(lambda: len(env.scope_changes_for("user")) == 3)
        write_json(tmp_path / "other" / "mcpvisor.json", {"mcpServers": {"u": {"command": "u5"}}})
        await env.rec.wait_for(lambda: len(env.scope_changes_for("user")) == 4)
        assert env.settings.merged.mcp_servers["u"].config.command == "u5"


async def test_a_broken_settings_file_is_told_once_until_it_is_saved_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcpvisor.host.watcher")
    layout = make_layout(tmp_path)
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text('{"mcpServers": {"a": ')  # broken before the start: told when the app loaded it
    settings = layout.settings()
    assert "user" in settings.errors
    watcher = SettingsWatcher(settings, scopes=("user",))
    errors: list[SettingsError] = []
    fixed: list[SettingsOk] = []

    async def on_error(error: SettingsError) -> None:
        errors.append(error)

    async def on_ok(ok: SettingsOk) -> None:
        fixed.append(ok)

    watcher.add_error_listener(on_error)
    watcher.add_ok_listener(on_ok)
    async with watcher:
        # An editor writes its swap file beside it, again and again: the same broken file, nothing new to tell.
        for size in range(1, 4):
            (layout.paths.user.parent / ".settings.json.swp").write_bytes(b"x" * size)
        await wait_until(lambda: "re-read: still broken as told" in caplog.text, what="a re-read of the broken file")
        assert errors == []
        layout.paths.user.write_text('{"mcpServers": {"b": ')  # saved, still broken: told
        await wait_until(lambda: len(errors) == 1, what="the error of the new save")
        layout.paths.user.write_text('{"mcpServers": {}}')  # fixed: told
        await wait_until(lambda: len(fixed) == 1, what="the fix")
    assert len(errors) == 1


async def test_a_watched_folder_whose_parent_is_renamed_is_followed_at_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watcher_module, "FOLDER_CHECK_S", 0.1)
    layout = make_layout(tmp_path)
    write_json(layout.paths.user, {"mcpServers": {"u": {"command": "u1"}}})
    layout.paths.workspace.parent.mkdir()
    async with watching(layout, scopes=("user", "workspace")) as env:
        write_json(layout.paths.workspace, {"mcpServers": {"w": {"command": "w"}}})  # past the first reading
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("workspace")))
        # The OS watch follows the folder it was set on, now home.old/.mcpvisor: nothing happens there.
        layout.home.rename(tmp_path / "home.old")
        write_json(layout.paths.user, {"mcpServers": {"u": {"command": "u2"}}})  # a new ~/.mcpvisor/settings.json
        await env.rec.wait_for(
            lambda: (
                "u" in env.settings.merged.mcp_servers and env.settings.merged.mcp_servers["u"].config.command == "u2"
            )
        )


def test_a_link_into_a_folder_this_process_cannot_list_leaves_that_folder_unwatched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A settings file linked into a folder that can be read through but not listed (mode 0711, another
    # owner): watching that folder fails, and would take every other folder's watch with it.
    closed = tmp_path / "closed"
    write_json(closed / "settings.json", {})
    target = tmp_path / "home" / "settings.json"
    target.parent.mkdir()
    target.symlink_to(closed / "settings.json")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != closed and real_access(path, mode))
    assert watch_folders({"user": target}) == {"user": (target.parent,)}
    monkeypatch.setattr(os, "access", real_access)
    assert watch_folders({"user": target}) == {"user": (target.parent, closed)}


def test_an_unreadable_store_is_said_once_not_on_every_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    loop = tmp_path / "mcp-approvals.json"
    loop.symlink_to(loop)  # a link to itself: every read fails the same way
    for _ in range(3):  # e.g. three settings saves beside it, each re-reading the stores
        assert read_file_state(loop) is None
    assert caplog.text.count("cannot read") == 1
    loop.unlink()
    write_json(loop, {})
    assert read_file_state(loop) is not None  # readable again: a later failure is said again
    loop.unlink()
    loop.symlink_to(loop)
    assert read_file_state(loop) is None
    assert caplog.text.count("cannot read") == 2
