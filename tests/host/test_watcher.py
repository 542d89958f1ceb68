"""The SettingsWatcher with real files and the real watchfiles watcher.

"Exactly one event" and "no event" are checked without sleeping: after the expected outcome,
a sentinel write to the approvals store (another watched scope, processed in order after any
earlier pending reload) is awaited; then the recorded events are final.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
import watchfiles

from mcpvisor.host import watcher as watcher_module
from mcpvisor.host.settings.loader import Settings, SettingsError
from mcpvisor.host.settings.writer import set_setting
from mcpvisor.host.watcher import (
    DEBOUNCE_S,
    RestartRequired,
    SettingsChanged,
    SettingsOk,
    SettingsWatcher,
    classify_change,
    is_approvals_file,
    nearest_existing_dir,
)
from tests.helpers import wait_woken
from tests.layout import Layout, make_layout, replace_text, write_json

WAIT_S = 20.0
"""Upper bound for one expected outcome on a slow shared machine (never a duration assertion)."""


class Recorder:
    def __init__(self) -> None:
        self.changes: list[SettingsChanged] = []
        self.errors: list[SettingsError] = []
        self.restarts: list[RestartRequired] = []
        self._updated = anyio.Event()

    def _bump(self) -> None:
        self._updated.set()
        self._updated = anyio.Event()

    async def on_change(self, event: SettingsChanged) -> None:
        self.changes.append(event)
        self._bump()

    async def on_error(self, error: SettingsError) -> None:
        self.errors.append(error)
        self._bump()

    async def on_restart(self, notice: RestartRequired) -> None:
        self.restarts.append(notice)
        self._bump()

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        heard = lambda: f"heard changes {self.changes}, errors {self.errors}, restart notices {self.restarts}"  # noqa: E731
        await wait_woken(condition, lambda: self._updated, seen=heard, timeout_s=WAIT_S)

    def scope_changes(self, scope: str) -> list[SettingsChanged]:
        return [c for c in self.changes if c.scope == scope]


class Env:
    def __init__(self, layout: Layout, settings: Settings, watcher: SettingsWatcher, recorder: Recorder) -> None:
        self.layout = layout
        self.paths = layout.paths
        self.settings = settings
        self.watcher = watcher
        self.rec = recorder
        self._sentinels = 0

    async def settle(self) -> None:
        """Wait until every reload due to earlier file events has been processed.

        Writes the approvals store and waits for its event, twice: a reload marked in the same
        batch as the first sentinel runs in the same round, so it is finished before the second
        sentinel (written after the first one's event) can be processed.
        """
        for _ in range(2):
            self._sentinels += 1
            expected = len(self.rec.scope_changes("approvals")) + 1
            self.paths.approvals.parent.mkdir(parents=True, exist_ok=True)
            self.paths.approvals.write_text(json.dumps({"sentinel": self._sentinels}))
            await self.rec.wait_for(partial(self._approvals_at_least, expected))

    def _approvals_at_least(self, count: int) -> bool:
        return len(self.rec.scope_changes("approvals")) >= count

    def scope_changes_for(self, scope: str) -> list[SettingsChanged]:
        return self.rec.scope_changes(scope)

    def non_sentinel(self) -> list[SettingsChanged]:
        return [c for c in self.rec.changes if c.scope != "approvals"]


@asynccontextmanager
async def watching(layout: Layout, **kwargs: Any) -> AsyncIterator[Env]:
    settings = layout.settings()
    recorder = Recorder()
    watcher = SettingsWatcher(settings, **kwargs)
    watcher.add_change_listener(recorder.on_change)
    watcher.add_error_listener(recorder.on_error)
    watcher.add_restart_listener(recorder.on_restart)
    async with watcher:
        yield Env(layout, settings, watcher, recorder)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    lay = make_layout(tmp_path)
    write_json(lay.paths.user, {"mcpServers": {"a": {"command": "a", "args": ["1"]}}, "mcp": {"excluded": ["z"]}})
    return lay


def _user_with(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"mcpServers": {"a": {"command": "a", "args": ["1"]}}, "mcp": {"excluded": ["z"]}}
    for key, value in changes.items():
        section, _, leaf = key.partition("__")
        base[section][leaf] = value
    return base


# --------------------------------------------------------------------------- pure helpers


def test_approvals_store_files_are_recognised() -> None:
    store = "mcp-approvals.json"
    for name in (store, f"{store}.lock", f"{store}.tmp", f"{store}.tmp8x2k", f".{store}.abc.tmp"):
        assert is_approvals_file(name, store), name
    for name in ("settings.json", "mcp-approvals.jsonx", "trusted-folders.json", ".settings.json.x.tmp"):
        assert not is_approvals_file(name, store), name


def test_classify_change() -> None:
    user = Path("/h/.mcpvisor/settings.json")
    targets = {
        "user": user,
        "approvals": Path("/h/.mcpvisor/mcp-approvals.json"),
        "workspace": Path("/w/.mcpvisor/settings.json"),
        "project": Path("/w/.mcp.json"),
    }
    cases = {
        # A store's folder's other files concern it too (a `..data` swap replaces it without touching it).
        "/h/.mcpvisor/settings.json": ({"user", "approvals"}, False),
        "/h/.mcpvisor/..data": ({"user", "approvals"}, False),
        "/h/.mcpvisor/.settings.json.x.tmp": ({"user", "approvals"}, False),
        "/h/.mcpvisor/mcp-approvals.json": ({"approvals"}, False),
        "/h/.mcpvisor/mcp-approvals.json.lock": ({"approvals"}, False),
        "/h/.mcpvisor/mcp-approvals.json.tmp123": ({"approvals"}, False),
        "/w/.mcp.json": ({"project"}, False),
        "/w/.mcpvisor": ({"project"}, True),
        "/w/.mcpvisor/settings.json": ({"workspace"}, False),
        "/h/.mcpvisor": (set(), True),
        "/h": (set(), True),
        "/elsewhere/x": (set(), False),
        "/h/other/settings.json": (set(), False),
    }
    for raw, expected in cases.items():
        assert classify_change(Path(raw), targets) == expected, raw  # type: ignore[arg-type]


def test_nearest_existing_dir(tmp_path: Path) -> None:
    assert nearest_existing_dir(tmp_path / "a" / "b") == tmp_path
    (tmp_path / "a").mkdir()
    assert nearest_existing_dir(tmp_path / "a" / "b") == tmp_path / "a"
    assert nearest_existing_dir(tmp_path) == tmp_path


# --------------------------------------------------------------------------- the real watcher


async def test_editing_only_mcp_servers_gives_exactly_one_event(layout: Layout) -> None:
    async with watching(layout) as env:
        write_json(env.paths.user, _user_with(mcpServers__a={"command": "a", "args": ["2"]}))
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        await env.settle()
        assert env.non_sentinel() == [SettingsChanged("user", ("mcpServers.a.args",))]
        assert env.watcher.settings.merged.mcp_servers["a"].config.args == ("2",)
        assert env.rec.errors == []
        assert env.rec.restarts == []


async def test_editing_only_mcp_excluded_gives_exactly_one_event(layout: Layout) -> None:
    async with watching(layout) as env:
        write_json(env.paths.user, _user_with(mcp__excluded=["z", "y"]))
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        await env.settle()
        assert env.non_sentinel() == [SettingsChanged("user", ("mcp.excluded",))]
        assert env.settings.merged.excluded == ("z", "y")


async def test_editing_only_the_server_command_gives_a_restart_notice_and_no_event(layout: Layout) -> None:
    async with watching(layout) as env:
        write_json(env.paths.user, _user_with(mcp__serverCommand="other"))
        await env.rec.wait_for(lambda: bool(env.rec.restarts))
        await env.settle()
        assert env.rec.restarts == [RestartRequired("user", ("mcp.serverCommand",))]
        assert env.non_sentinel() == []


async def test_a_mixed_edit_gives_one_event_that_names_the_restart_required_part(layout: Layout) -> None:
    async with watching(layout) as env:
        write_json(env.paths.user, _user_with(mcp__serverCommand="other", mcpServers__b={"command": "b"}))
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        assert env.non_sentinel() == [
            SettingsChanged("user", ("mcp.serverCommand", "mcpServers.b.command"), ("mcp.serverCommand",))
        ]
        assert env.rec.restarts == [RestartRequired("user", ("mcp.serverCommand",))]


async def test_a_formatting_only_save_gives_no_event(layout: Layout) -> None:
    async with watching(layout) as env:
        data = json.loads(env.paths.user.read_text())
        env.paths.user.write_text("// reformatted\n" + json.dumps(data, indent=8, sort_keys=True) + "\n\n")
        await env.settle()
        assert env.non_sentinel() == []
        assert env.rec.errors == []


async def test_ten_saves_in_a_burst_give_one_event(layout: Layout) -> None:
    async with watching(layout) as env:
        # All saves happen before the event loop runs again, so no reload can fall between them.
        for n in range(2, 12):
            write_json(env.paths.user, _user_with(mcpServers__a={"command": "a", "args": [str(n)]}))
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        await env.settle()
        assert env.non_sentinel() == [SettingsChanged("user", ("mcpServers.a.args",))]
        assert env.settings.merged.mcp_servers["a"].config.args == ("11",)


async def test_a_half_written_save_completed_within_the_window_is_never_an_error(layout: Layout) -> None:
    """An editor that writes in two steps: the first read may see half a file; it is read again once the
    window passed, by which time it is whole, so nothing is reported and one change is applied."""
    async with watching(layout, debounce_s=2.0) as env:  # a wide window: the test never races it
        env.paths.user.write_text('{"mcpServers": {"a": {"command": ')
        await anyio.sleep(0.12)  # the half file outlives the settle (its first read), not the window
        write_json(env.paths.user, _user_with(mcp__excluded=["q"]))
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        await env.settle()
        assert env.non_sentinel() == [SettingsChanged("user", ("mcp.excluded",))]
        assert env.rec.errors == []


async def test_saves_after_a_reload_coalesce_into_one_more_at_the_windows_end(layout: Layout) -> None:
    async with watching(layout, debounce_s=2.0) as env:  # a wide window: the test never races it
        write_json(env.paths.user, _user_with(mcp__excluded=["1"]))
        await env.rec.wait_for(lambda: len(env.non_sentinel()) == 1)  # acted on after the short settle
        for n in range(2, 6):  # within the window: they wait for its end, then count as one
            write_json(env.paths.user, _user_with(mcp__excluded=[str(n)]))
            await anyio.sleep(0.02)
        await env.rec.wait_for(lambda: len(env.non_sentinel()) == 2)
        await env.settle()
        assert env.non_sentinel() == [SettingsChanged("user", ("mcp.excluded",))] * 2
        assert env.settings.merged.excluded == ("5",)


async def test_a_save_heard_while_a_reload_reads_waits_for_the_window_that_reload_opens(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save's event that comes while the reload before it is still reading (a non-atomic save's last
    steps, a quick second save) counts as one after that reload: it is read at the window's end, not at once."""
    real_awatch = watchfiles.awatch
    batches_heard = 0
    batch_marked = anyio.Event()

    async def observed_awatch(*paths: Any, **kwargs: Any) -> AsyncIterator[set[tuple[watchfiles.Change, str]]]:
        nonlocal batch_marked, batches_heard
        async for batch in real_awatch(*paths, **kwargs):
            yield batch  # resumed once the watcher has marked the scopes this batch concerns
            batches_heard += 1
            batch_marked.set()
            batch_marked = anyio.Event()

    monkeypatch.setattr(watcher_module, "awatch", observed_awatch)
    async with watching(layout, debounce_s=600.0) as env:  # a window far longer than the test waits
        real_read = env.settings.read_scope
        reading, release = threading.Event(), threading.Event()

        def held_read(scope: Any) -> Any:
            read = real_read(scope)
            if read.data is not None and read.data["mcp"]["excluded"] == ["1"] and not reading.is_set():
                reading.set()  # the reload has read "1": it waits to apply it until the second save was heard
                release.wait(WAIT_S)
            return read

        monkeypatch.setattr(env.settings, "read_scope", held_read)
        write_json(env.paths.user, _user_with(mcp__excluded=["1"]))
        await anyio.to_thread.run_sync(reading.wait, WAIT_S)
        assert reading.is_set()
        heard_before = batches_heard
        write_json(env.paths.user, _user_with(mcp__excluded=["2"]))
        with anyio.fail_after(WAIT_S, reason="the second save was never heard"):
            while batches_heard == heard_before:
                await batch_marked.wait()
        release.set()
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        await env.settle()
        assert env.non_sentinel() == [SettingsChanged("user", ("mcp.excluded",))]
        assert env.settings.merged.excluded == ("1",)  # "2" waits for the window's end


async def test_write_then_rename_is_seen(layout: Layout) -> None:
    async with watching(layout) as env:
        replace_text(env.paths.user, json.dumps(_user_with(mcpServers__b={"command": "b"})))
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        assert env.non_sentinel() == [SettingsChanged("user", ("mcpServers.b.command",))]


async def test_a_read_between_the_steps_of_a_save_does_not_hold_back_its_last_step(layout: Layout) -> None:
    """An editor slower than the settle: its temporary file's event has the settings file read unchanged, and
    the rename is still acted on at once — a read that found nothing new opens no coalescing window (here one
    far longer than the test waits)."""
    async with watching(layout, debounce_s=600.0) as env:
        tmp = env.paths.user.with_name(".settings.json.slow-tmp")
        tmp.write_text(json.dumps(_user_with(mcpServers__b={"command": "b"})))
        await env.settle()  # the temporary file's event has been read: settings.json itself unchanged
        assert env.non_sentinel() == []
        os.replace(tmp, env.paths.user)
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        assert env.non_sentinel() == [SettingsChanged("user", ("mcpServers.b.command",))]


async def test_a_configmap_style_symlink_swap_is_seen(tmp_path: Path) -> None:
    mount = tmp_path / "mount"
    layout = make_layout(tmp_path / "lay", MCPVISOR_HOME=str(mount))
    (mount / "..2024_01").mkdir(parents=True)
    write_json(mount / "..2024_01" / "settings.json", {"mcpServers": {"a": {"command": "v1"}}})
    (mount / "..data").symlink_to("..2024_01")
    (mount / "settings.json").symlink_to("..data/settings.json")
    async with watching(layout) as env:
        assert env.settings.merged.mcp_servers["a"].config.command == "v1"
        (mount / "..2024_02").mkdir()
        write_json(mount / "..2024_02" / "settings.json", {"mcpServers": {"a": {"command": "v2"}}})
        (mount / "..data_tmp").symlink_to("..2024_02")
        os.replace(mount / "..data_tmp", mount / "..data")
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        assert env.non_sentinel() == [SettingsChanged("user", ("mcpServers.a.command",))]
        assert env.settings.merged.mcp_servers["a"].config.command == "v2"


async def test_a_settings_file_linked_through_a_swapped_folder_link_is_followed(tmp_path: Path) -> None:
    """A dotfiles manager's swap: settings.json links to dot/current/settings.json, and dot/current, a link to v1, is
    pointed at v2 with the old version kept. Before, the watch stayed on v1's folder: neither the swap nor edits of
    v2's file were seen."""
    home = tmp_path / "home" / ".mcpvisor"
    layout = make_layout(tmp_path / "lay", MCPVISOR_HOME=str(home))
    dot = tmp_path / "dot"
    for version in ("v1", "v2"):
        (dot / version).mkdir(parents=True)
        write_json(dot / version / "settings.json", {"mcpServers": {"a": {"command": version}}})
    (dot / "current").symlink_to("v1")
    home.mkdir(parents=True)
    (home / "settings.json").symlink_to(dot / "current" / "settings.json")
    async with watching(layout) as env:
        assert env.settings.merged.mcp_servers["a"].config.command == "v1"
        (dot / "tmp").symlink_to("v2")
        os.replace(dot / "tmp", dot / "current")
        await env.rec.wait_for(lambda: env.settings.merged.mcp_servers["a"].config.command == "v2")
        write_json(dot / "v2" / "settings.json", {"mcpServers": {"a": {"command": "v2-edited"}}})
        await env.rec.wait_for(lambda: env.settings.merged.mcp_servers["a"].config.command == "v2-edited")


@pytest.mark.parametrize("broken", ['{"mcpServers": {"a": {"command": ', "", "[1, 2]"])
async def test_a_broken_save_reports_the_error_keeps_the_state_and_the_next_valid_save_is_one_event(
    layout: Layout, broken: str
) -> None:
    async with watching(layout) as env:
        env.paths.user.write_text(broken)
        await env.rec.wait_for(lambda: bool(env.rec.errors))
        error = env.rec.errors[0]
        assert error.path == env.paths.user
        assert error.line is not None
        assert error.column is not None
        assert error.message
        assert env.settings.merged.mcp_servers["a"].config.args == ("1",)
        write_json(env.paths.user, _user_with(mcp__excluded=["q"]))
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        await env.settle()
        assert env.non_sentinel() == [SettingsChanged("user", ("mcp.excluded",))]
        assert len(env.rec.errors) == 1


async def test_a_broken_file_deleted_removes_its_settings_and_is_never_called_valid_again(layout: Layout) -> None:
    """Before, deleting a settings file whose last save did not parse was announced as "... is valid again —
    applied": its servers were removed, as they should be, but there was no file, let alone a valid one."""
    oks: list[SettingsOk] = []

    async def on_ok(ok: SettingsOk) -> None:
        oks.append(ok)

    async with watching(layout) as env:
        env.watcher.add_ok_listener(on_ok)
        env.paths.user.write_text('{"mcpServers": ')
        await env.rec.wait_for(lambda: bool(env.rec.errors))
        env.paths.user.unlink()
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        await env.settle()
        assert [c.scope for c in env.non_sentinel()] == ["user"]
        assert "a" not in env.settings.merged.mcp_servers
        assert oks == []
        write_json(env.paths.user, _user_with(mcp__excluded=["q"]))  # a new file: applied, and no "valid again"
        await env.rec.wait_for(lambda: len(env.non_sentinel()) == 2)
        await env.settle()
        assert env.settings.merged.excluded == ("q",)
        assert oks == []


async def test_a_workspace_file_and_its_folder_created_after_start_are_picked_up(layout: Layout) -> None:
    assert not layout.paths.workspace.parent.exists()
    async with watching(layout) as env:
        env.paths.workspace.parent.mkdir()
        await env.settle()  # the new folder is being watched before the file appears
        write_json(env.paths.workspace, {"mcpServers": {"w": {"command": "w"}}})
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("workspace")))
        assert env.scope_changes_for("workspace") == [SettingsChanged("workspace", ("mcpServers.w.command",))]
        assert env.settings.merged.mcp_servers["w"].config.scope == "workspace"


async def test_a_settings_folder_and_file_created_at_once_after_start_are_picked_up(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_HOME=str(tmp_path / "deep" / "er" / "home"))
    async with watching(layout) as env:
        write_json(env.paths.user, {"mcpServers": {"u": {"command": "u"}}})  # creates deep/er/home too
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("user")))
        assert env.scope_changes_for("user") == [SettingsChanged("user", ("mcpServers.u.command",))]


class _Watching(logging.Handler):
    """Hears the watcher say which folders it watches (its debug log)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.folders: list[str] = []
        self.updated = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("watching "):
            self.folders.append(message.removeprefix("watching "))
            self.updated.set()
            self.updated = anyio.Event()


async def test_a_folder_created_while_the_watch_is_being_armed_is_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    layout = make_layout(tmp_path)
    settings_dir = layout.paths.user.parent  # home/.mcpvisor: neither exists yet
    real_awatch = watchfiles.awatch

    def racing_awatch(*paths: Any, **kwargs: Any) -> Any:
        # Another process's `mkdir -p home/.mcpvisor` lands after the watcher chose `home` to watch and
        # before the watch on it is armed: the armed watch never hears of `.mcpvisor`.
        if settings_dir.parent.exists() and not settings_dir.exists():
            settings_dir.mkdir()
        return real_awatch(*paths, **kwargs)

    monkeypatch.setattr(watcher_module, "awatch", racing_awatch)
    heard = _Watching()
    caplog.set_level(logging.DEBUG, logger=watcher_module.__name__)
    watcher_logger = logging.getLogger(watcher_module.__name__)
    watcher_logger.addHandler(heard)
    try:
        async with watching(layout, scopes=("user",)) as env:
            settings_dir.parent.mkdir()
            with anyio.fail_after(WAIT_S, reason=f"never watched {settings_dir}"):
                while str(settings_dir) not in heard.folders:  # no other event comes to set it right
                    await heard.updated.wait()
            write_json(env.paths.user, {"mcpServers": {"u": {"command": "u"}}})
            await env.rec.wait_for(lambda: bool(env.scope_changes_for("user")))
            assert env.scope_changes_for("user") == [SettingsChanged("user", ("mcpServers.u.command",))]
    finally:
        watcher_logger.removeHandler(heard)


async def test_the_workspace_mcp_json_is_watched(layout: Layout) -> None:
    async with watching(layout) as env:
        write_json(env.paths.project, {"mcpServers": {"p": {"command": "p"}}})
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("project")))
        assert env.scope_changes_for("project") == [SettingsChanged("project", ("mcpServers.p.command",))]
        assert env.settings.project.servers["p"].config.scope == "project"


async def test_approvals_store_files_are_the_approvals_scope_not_user_settings(layout: Layout) -> None:
    async with watching(layout) as env:
        approvals = env.paths.approvals
        approvals.with_name(approvals.name + ".lock").write_text("")
        approvals.with_name(approvals.name + ".tmp42").write_text("{}")
        await env.settle()
        assert [c.paths for c in env.rec.changes] == [(), ()]
        assert {c.scope for c in env.rec.changes} == {"approvals"}
        assert env.rec.errors == []


async def test_the_apps_own_writes_give_no_event(layout: Layout) -> None:
    async with watching(layout) as env:
        set_setting(env.settings, "user", ("mcpServers", "b"), {"command": "b"})
        await env.settle()
        assert env.non_sentinel() == []
        assert "b" in env.settings.merged.mcp_servers


async def test_a_failing_or_hanging_listener_never_stops_the_watcher(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcpvisor.host.watcher")

    async def failing(_: SettingsChanged) -> None:
        raise RuntimeError("listener bug")

    async def hanging(_: SettingsChanged) -> None:
        await anyio.sleep_forever()

    async with watching(layout, listener_timeout_s=DEBOUNCE_S) as env:
        env.watcher.add_change_listener(failing)
        env.watcher.add_change_listener(hanging)
        write_json(env.paths.user, _user_with(mcp__excluded=["1"]))
        await env.rec.wait_for(lambda: len(env.non_sentinel()) == 1)
        write_json(env.paths.user, _user_with(mcp__excluded=["2"]))
        await env.rec.wait_for(lambda: len(env.non_sentinel()) == 2)
    assert "listener bug" in caplog.text
    assert "timed out" in caplog.text


async def test_an_unsubscribed_listener_is_not_called(layout: Layout) -> None:
    calls: list[SettingsChanged] = []

    async def listener(event: SettingsChanged) -> None:
        calls.append(event)

    async with watching(layout) as env:
        unsubscribe = env.watcher.add_change_listener(listener)
        unsubscribe()
        unsubscribe()
        write_json(env.paths.user, _user_with(mcp__excluded=["1"]))
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
    assert calls == []


async def test_run_in_a_task_group_and_stop(layout: Layout) -> None:
    settings = layout.settings()
    watcher = SettingsWatcher(settings)
    recorder = Recorder()
    watcher.add_change_listener(recorder.on_change)
    async with anyio.create_task_group() as tg:
        await tg.start(watcher.run)
        assert set(watcher.targets) == {"user", "workspace", "project", "lsp_project", "approvals", "tokens", "pins"}
        with pytest.raises(RuntimeError, match="already running"):
            await watcher.run()
        write_json(layout.paths.user, _user_with(mcp__excluded=["1"]))
        await recorder.wait_for(lambda: bool(recorder.changes))
        watcher.stop()


async def test_a_watched_folder_removed_and_created_again_is_followed(layout: Layout) -> None:
    write_json(layout.paths.workspace, {"mcpServers": {"w": {"command": "w1"}}})
    async with watching(layout) as env:
        shutil.rmtree(env.paths.workspace.parent)
        await env.rec.wait_for(lambda: bool(env.scope_changes_for("workspace")))
        assert env.scope_changes_for("workspace") == [SettingsChanged("workspace", ("mcpServers.w.command",))]
        assert "w" not in env.settings.merged.mcp_servers
        write_json(env.paths.workspace, {"mcpServers": {"w": {"command": "w2"}}})
        await env.rec.wait_for(lambda: len(env.scope_changes_for("workspace")) == 2)
        assert env.settings.merged.mcp_servers["w"].config.command == "w2"
        shutil.rmtree(env.paths.workspace.parent)
        write_json(env.paths.workspace, {"mcpServers": {"w": {"command": "w3"}}})  # a new folder at once
        await env.rec.wait_for(
            lambda: (
                env.settings.merged.mcp_servers.get("w") is not None
                and env.settings.merged.mcp_servers["w"].config.command == "w3"
            )
        )


async def test_when_the_os_watch_cannot_be_set_up_it_falls_back_to_polling(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_awatch = watchfiles.awatch
    polling: list[bool | None] = []

    def flaky_awatch(*paths: Any, **kwargs: Any) -> Any:
        polling.append(kwargs.get("force_polling"))
        if not kwargs.get("force_polling"):
            raise RuntimeError("inotify watch limit reached")
        return real_awatch(*paths, **{**kwargs, "poll_delay_ms": 20})

    monkeypatch.setattr(watcher_module, "awatch", flaky_awatch)
    async with watching(layout) as env:
        write_json(env.paths.user, _user_with(mcp__excluded=["p"]))
        await env.rec.wait_for(lambda: bool(env.non_sentinel()))
        assert env.non_sentinel() == [SettingsChanged("user", ("mcp.excluded",))]
    assert polling[:2] == [None, True]
    assert "falling back to polling" in caplog.text
