"""The hot-reload subscriber end to end inside one process: real files, the real watcher, real
example servers (SPEC §8, §11 "Subscriber gate", "Approvals", "Trust")."""

from __future__ import annotations

import importlib
import json
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpvisor.core.errors import ConfigError, ServerUnavailableError
from mcpvisor.core.events import McpClientUpdate, ReconcileFinished
from mcpvisor.core.gating import McpGating, NameList
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.host import Host, HostEvent, HostOptions, SettingsWarning
from mcpvisor.host.hot_reload import McpPendingApprovalChanged, mcp_gating_equal
from mcpvisor.host.settings.loader import ScopeRead, Settings, SettingsError
from mcpvisor.host.settings.scopes import FileScope
from mcpvisor.host.watcher import RestartRequired
from tests.helpers import LIGHT, WAIT_S, light_after_gate, marker_pids, pid_alive, wait_until, wait_woken
from tests.layout import Layout, make_layout, replace_text


def server(name: str, *args: str, marker: Path | None = None) -> dict[str, Any]:
    extra = ["--marker", str(marker)] if marker is not None else []
    return {"command": sys.executable, "args": ["-m", LIGHT, "--name", name, *args, *extra]}


BUSY_STARTING = "import sys\nopen(sys.argv[1], 'a').write('started')\nwhile True: pass"


def save(path: Path, data: Any) -> None:
    replace_text(path, json.dumps(data, indent=2))


class Recorder:
    def __init__(self) -> None:
        self.events: list[HostEvent] = []
        self.gating_at_reconcile: list[McpGating] = []
        self.read_at_reconcile: list[dict[str, Any]] = []
        """What the user and project files held for the host as each pass began (its plan is made then)."""
        self.host: Host | None = None
        self._at_start: tuple[McpGating, dict[str, Any]] | None = None
        self._updated = anyio.Event()

    def __call__(self, event: HostEvent) -> None:
        self.events.append(event)
        if isinstance(event, McpClientUpdate) and event.in_progress and self.host is not None:
            read = {scope: dict(self.host.settings.data(scope)) for scope in ("user", "project")}
            self._at_start = (self.host.config.get_mcp_gating(), read)
        elif isinstance(event, ReconcileFinished) and self._at_start is not None:
            self.gating_at_reconcile.append(self._at_start[0])
            self.read_at_reconcile.append(self._at_start[1])
        self._updated.set()
        self._updated = anyio.Event()

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        seen = lambda: f"the last events: {self.events[-4:]}"  # noqa: E731
        await wait_woken(condition, lambda: self._updated, seen=seen, timeout_s=timeout_s)

    def reconciles(self) -> list[ReconcileFinished]:
        return [e for e in self.events if isinstance(e, ReconcileFinished)]

    def prompts(self) -> list[McpPendingApprovalChanged]:
        return [e for e in self.events if isinstance(e, McpPendingApprovalChanged)]


class Session:
    def __init__(self, layout: Layout, host: Host, rec: Recorder) -> None:
        self.layout = layout
        self.host = host
        self.rec = rec
        self._sentinel = 0

    def live(self) -> set[str]:
        return {n for n, c in self.host.config.manager.clients().items() if c.status == "connected"}

    async def settle(self) -> None:
        """Make every earlier edit visible: a workspace-scope gating edit always reconciles, and it is made again
        until the pass that applied it began with the user and project files read as they are on disk (the
        watcher reads each scope on its own clock: a save of one may be read a moment after a later save of
        another, at the end of its coalescing window)."""
        for _ in range(20):
            on_disk = {scope: _json_of(self.layout.paths.of(scope)) for scope in ("user", "project")}
            self._sentinel += 1
            tag = f"sentinel-{self._sentinel}"
            save(self.layout.paths.workspace, {"mcp": {"excluded": [tag]}})
            await self.rec.wait_for(lambda: any(tag in (g.excluded or ()) for g in self.rec.gating_at_reconcile))  # noqa: B023
            first = next(i for i, g in enumerate(self.rec.gating_at_reconcile) if tag in (g.excluded or ()))
            if self.rec.read_at_reconcile[first] == on_disk:
                return
        raise AssertionError(f"the host never read the files as they are on disk: {on_disk}")


def _json_of(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else {}


@asynccontextmanager
async def session(tmp_path: Path, *, user: Any = None, project: Any = None, **options: Any) -> AsyncIterator[Session]:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    if user is not None:
        save(layout.paths.user, user)
    if project is not None:
        save(layout.paths.project, project)
    rec = Recorder()
    host = Host(HostOptions(env=layout.env, workspace=layout.root, **options))
    rec.host = host
    host.subscribe(rec)
    async with host:
        yield Session(layout, host, rec)


async def test_a_servers_edit_reconciles_with_the_assembled_map_including_the_top_tier(tmp_path: Path) -> None:
    top = tmp_path / "extra.json"
    top.write_text(json.dumps({"mcpServers": {"top": server("top")}}))
    async with session(tmp_path, user={"mcpServers": {"a": server("a")}}, mcp_config=[top]) as s:
        assert s.live() == {"a", "top"}
        before = len(s.rec.reconciles())
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "b": server("b")}})
        await s.rec.wait_for(lambda: len(s.rec.reconciles()) > before)
        assert s.live() == {"a", "b", "top"}
        assert set(s.host.config.get_settings_mcp_servers()) == {"a", "b", "top"}
        assert s.rec.reconciles()[-1].added == ("b",)
        assert set(s.rec.reconciles()[-1].kept) == {"a", "top"}


async def test_a_gating_only_edit_reconciles_with_the_gating_pushed_first(tmp_path: Path) -> None:
    async with session(tmp_path, user={"mcpServers": {"a": server("a"), "b": server("b")}}) as s:
        seen: list[McpGating] = []

        def on_start(event: HostEvent) -> None:
            if isinstance(event, McpClientUpdate) and event.in_progress and event.server is None:
                seen.append(s.host.config.get_mcp_gating())

        s.host.subscribe(on_start)
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "b": server("b")}, "mcp": {"excluded": ["b"]}})
        await s.rec.wait_for(lambda: s.live() == {"a"} and bool(s.rec.reconciles()[-1].gated))
        assert seen
        by = (NameList("mcp.excluded", ("b",), str(s.layout.paths.user)),)
        assert mcp_gating_equal(seen[0], McpGating(excluded=("b",), excluded_by=by))
        assert s.rec.reconciles()[-1].gated == {"b": "excluded"}


async def test_an_unrelated_edit_does_not_reconcile(tmp_path: Path) -> None:
    user = {"mcpServers": {"a": server("a")}}
    async with session(tmp_path, user=user) as s:
        before, sentinels = len(s.rec.reconciles()), s._sentinel
        save(s.layout.paths.user, {**user, "ui": {"theme": "dark"}})
        await s.settle()
        # The sentinels' own reconciles only (one, or more when a pass read the user file before the save landed).
        assert len(s.rec.reconciles()) == before + (s._sentinel - sentinels)


async def test_saves_within_the_debounce_window_give_one_reconcile(
    tmp_path: Path,
) -> None:
    async with session(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        before = len(s.rec.reconciles())
        for i in range(6):
            save(s.layout.paths.user, {"mcpServers": {"a": server("a", "--tools", f"t{i}")}})
        await s.rec.wait_for(lambda: set(s.host.config.tool_registry.names()) == {"mcp__a__t5"})
        await s.settle()  # after the burst's last reconcile: the sentinel's cannot merge with it
        burst = len(s.rec.reconciles()) - before - 1
        assert 1 <= burst <= 2  # six saves: one reconcile, at most one more when the machine is slow
        assert set(s.host.config.tool_registry.names()) == {"mcp__a__t5"}


async def test_a_server_slow_to_start_holds_no_edit_up_and_its_own_edit_replaces_the_start(tmp_path: Path) -> None:
    async with session(tmp_path, user={"mcpServers": {}}) as s:
        # A server that never answers would keep a pass waiting for its discovery timeout (a minute here).
        slow = {**server("slow", "--hang-on-initialize"), "discoveryTimeoutMs": 60000}
        save(s.layout.paths.user, {"mcpServers": {"slow": slow}})
        await s.rec.wait_for(lambda: "slow" in s.host.config.manager.clients())
        save(s.layout.paths.user, {"mcpServers": {"slow": slow, "b": server("b")}})
        await s.rec.wait_for(lambda: s.live() == {"b"})  # the edit went through while slow still starts
        assert s.host.config.manager.clients()["slow"].status == "connecting"
        assert any("slow" in r.starting for r in s.rec.reconciles())
        save(s.layout.paths.user, {"mcpServers": {"slow": server("slow"), "b": server("b")}})  # fixed
        await s.rec.wait_for(lambda: s.live() == {"slow", "b"})


async def test_an_invalid_save_keeps_every_server_and_reports_file_line_and_column(tmp_path: Path) -> None:
    user = {"mcpServers": {"a": server("a")}}
    async with session(tmp_path, user=user) as s:
        pid = s.host.config.manager.clients()["a"].pid
        replace_text(s.layout.paths.user, '{"mcpServers": {"a": ')
        await s.rec.wait_for(lambda: any(isinstance(e, SettingsError) for e in s.rec.events))
        [error] = [e for e in s.rec.events if isinstance(e, SettingsError)]
        assert error.path == s.layout.paths.user
        assert error.line is not None
        assert s.live() == {"a"}
        assert s.host.config.manager.clients()["a"].pid == pid
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "b": server("b")}})
        await s.rec.wait_for(lambda: s.live() == {"a", "b"})
        assert s.host.config.manager.clients()["a"].pid == pid


async def test_the_start_up_ceiling_holds_across_reloads(tmp_path: Path) -> None:
    servers = {n: server(n) for n in "abc"}
    async with session(
        tmp_path, user={"mcpServers": servers, "mcp": {"allowed": ["a", "b", "c"]}}, allowed_mcp_server_names=["a", "b"]
    ) as s:
        assert s.live() == {"a", "b"}
        save(s.layout.paths.user, {"mcpServers": servers, "mcp": {"allowed": ["a"]}})
        await s.rec.wait_for(lambda: s.live() == {"a"})
        save(s.layout.paths.user, {"mcpServers": servers, "mcp": {"allowed": ["*"]}})
        await s.rec.wait_for(lambda: s.live() == {"a", "b"})
        await s.settle()
        assert s.live() == {"a", "b"}
        assert s.host.config.get_mcp_server_unavailable_reason("c") == "not_allowed"


async def test_a_workspace_allow_list_never_widens_the_users(tmp_path: Path) -> None:
    servers = {n: server(n) for n in "ab"}
    async with session(tmp_path, user={"mcpServers": servers, "mcp": {"allowed": ["a"]}}) as s:
        save(s.layout.paths.workspace, {"mcp": {"allowed": ["*"]}})
        await wait_until(lambda: len(s.host.settings.merged.allowed_lists) == 2)  # the edit is loaded
        await s.host.config.reconcile()
        assert s.live() == {"a"}
        assert s.host.config.get_mcp_server_unavailable_reason("b") == "not_allowed"


async def test_a_server_an_allow_list_leaves_out_is_said_to_be_left_out_by_that_list_with_the_fix_that_works(
    tmp_path: Path,
) -> None:
    """The flag given at start-up and the settings file's ``mcp.allowed`` are told apart, in the status rows and in
    what a call of its tool says: adding a name to the settings cannot widen the flag, only relaunching can."""
    servers = {n: server(n) for n in "abc"}
    user = {"mcpServers": servers, "mcp": {"allowed": ["a", "c"]}}
    async with session(tmp_path, user=user, allowed_mcp_server_names=["a", "b"]) as s:
        file = s.layout.paths.user
        flag = "not in --allowed-mcp-server-names given at start-up; relaunch with 'c' added to that flag"
        key = f"not in mcp.allowed of {file}; add it there"
        rows = {row.name: row for row in s.host.server_views()}
        assert (rows["b"].error, rows["c"].error) == (key, flag)
        assert str(s.host.config.not_found("mcp__b__echo", "tool")).endswith(f"server 'b' is not allowed: {key}")
        assert str(s.host.config.not_found("mcp__c__echo", "tool")).endswith(f"server 'c' is not allowed: {flag}")
        save(file, {"mcpServers": servers})  # the same list, now set by the workspace's settings
        save(s.layout.paths.workspace, {"mcp": {"allowed": ["a", "c"]}})
        moved = f"not in mcp.allowed of {s.layout.paths.workspace}; add it there"
        await wait_until(lambda: s.host.config.get_mcp_gating().why_not_allowed("b") == moved, what="the moved list")
        assert {row.name: row.error for row in s.host.server_views()}["b"] == moved


async def test_an_invalid_allow_list_beside_the_start_up_flag_is_said_with_what_the_flag_allows(tmp_path: Path) -> None:
    """Fixing the file alone lets in only what the flag allows: a server the flag leaves out says both fixes."""
    servers = {n: server(n) for n in "ab"}
    async with session(
        tmp_path, user={"mcpServers": servers, "mcp": {"allowed": 5}}, allowed_mcp_server_names=["a"]
    ) as s:
        flag = "--allowed-mcp-server-names given at start-up"
        broken = (
            f"left out by mcp.allowed of {s.layout.paths.user}: it is not a list of glob patterns, read as allowing no"
            " server"
        )
        rows = {row.name: row.error for row in s.host.server_views()}
        assert rows["a"] == f"allowed by {flag}, but {broken}; fix it there"
        fixes = "relaunch with 'b' added to that flag and fix mcp.allowed there"
        assert rows["b"] == f"not in {flag}, and {broken}; {fixes}"
        said = str(s.host.config.not_found("mcp__b__echo", "tool"))
        assert said.endswith(f"server 'b' is not allowed: not in {flag}, and {broken}; {fixes}")
        assert s.live() == set()


async def test_a_server_an_exclude_list_leaves_out_is_said_to_be_left_out_by_that_file_and_pattern(
    tmp_path: Path,
) -> None:
    """The status rows and what a call of its tool says name the file whose ``mcp.excluded`` leaves it out, and
    the glob that matched; the same list moved to another file names that file."""
    servers = {n: server(n) for n in ("a", "b", "db1")}
    user = {"mcpServers": servers, "mcp": {"excluded": ["b", "db*"]}}
    async with session(tmp_path, user=user) as s:
        file = s.layout.paths.user
        name = f"in mcp.excluded of {file}; remove it there"
        glob = f"matched by 'db*' in mcp.excluded of {file}; remove that pattern there"
        rows = {row.name: row for row in s.host.server_views()}
        assert (rows["a"].error, rows["b"].error, rows["db1"].error) == (None, name, glob)
        assert str(s.host.config.not_found("mcp__b__echo", "tool")).endswith(f"server 'b' is excluded: {name}")
        assert str(s.host.config.not_found("mcp__db1__echo", "tool")).endswith(f"server 'db1' is excluded: {glob}")
        save(s.layout.paths.workspace, {"mcp": {"excluded": ["b", "db*"]}})  # the same list, now set there
        save(file, {"mcpServers": servers})
        moved = f"in mcp.excluded of {s.layout.paths.workspace}; remove it there"
        await wait_until(lambda: s.host.config.get_mcp_gating().why_excluded("b") == moved, what="the moved list")
        assert {row.name: row.error for row in s.host.server_views()}["b"] == moved
        assert s.live() == {"a"}


async def test_a_list_a_library_caller_sets_is_said_to_be_the_hosts_and_the_files_lists_keep_their_file(
    tmp_path: Path,
) -> None:
    servers = {n: server(n) for n in "abc"}
    async with session(tmp_path, user={"mcpServers": servers, "mcp": {"allowed": ["a", "b"]}}) as s:
        file = s.layout.paths.user
        s.host.config.set_excluded_mcp_servers(["b"])
        s.host.config.set_pending_mcp_servers(None)
        await s.host.config.reconcile()
        assert s.live() == {"a"}
        rows = {row.name: row.error for row in s.host.server_views()}
        assert rows["b"] == "in the list the host set with set_excluded_mcp_servers()"
        assert rows["c"] == f"not in mcp.allowed of {file}; add it there"
        s.host.config.set_allowed_mcp_servers(["a"])
        s.host.config.set_excluded_mcp_servers(None)
        assert str(s.host.config.not_found("mcp__b__echo", "tool")).endswith(
            "server 'b' is not allowed: not in the list the host set with set_allowed_mcp_servers()"
        )


async def test_lists_a_library_caller_sets_hold_across_reloads_and_only_narrow_the_files_lists(tmp_path: Path) -> None:
    """Before: a settings reload recomputed the gating from the files alone, so a list set with
    set_excluded_mcp_servers or set_allowed_mcp_servers was silently dropped (an excluded server started again)."""
    servers = {n: server(n) for n in "abcd"}
    async with session(tmp_path, user={"mcpServers": servers, "mcp": {"allowed": ["a", "b", "c"]}}) as s:
        s.host.config.set_excluded_mcp_servers(["b"])
        s.host.config.set_allowed_mcp_servers(["a", "b", "d"])  # d: the file's list leaves it out, and that holds
        await s.host.config.reconcile()
        assert s.live() == {"a"}
        save(
            s.layout.paths.user, {"mcpServers": {**servers, "e": server("e")}, "mcp": {"allowed": ["a", "b", "c", "e"]}}
        )
        await s.host.reload()
        assert s.live() == {"a"}
        reasons = {n: s.host.config.get_mcp_server_unavailable_reason(n) for n in "bcde"}
        assert reasons == {"b": "excluded", "c": "not_allowed", "d": "not_allowed", "e": "not_allowed"}
        s.host.config.set_excluded_mcp_servers(None)
        s.host.config.set_allowed_mcp_servers(None)
        await s.host.config.reconcile()
        assert s.live() == {"a", "b", "c", "e"}


async def test_a_list_saved_where_mcp_was_no_object_applies_and_goes_when_mcp_is_no_object_again(
    tmp_path: Path,
) -> None:
    servers = {n: server(n) for n in "ab"}
    async with session(tmp_path, user={"mcpServers": servers}) as s:
        save(s.layout.paths.workspace, {"mcp": None})
        await s.rec.wait_for(lambda: any(isinstance(e, RestartRequired) for e in s.rec.events))  # (no list there)
        assert s.live() == {"a", "b"}
        save(s.layout.paths.workspace, {"mcp": {"excluded": ["b"]}})
        await s.rec.wait_for(lambda: s.live() == {"a"})
        save(s.layout.paths.workspace, {"mcp": None})
        await s.rec.wait_for(lambda: s.live() == {"a", "b"})
        assert sum(isinstance(e, RestartRequired) for e in s.rec.events) == 1  # (no restart needed for the lists)


async def test_reordering_an_allow_or_exclude_list_starts_no_reconcile(tmp_path: Path) -> None:
    servers = {n: server(n) for n in "abc"}
    user = {"mcpServers": servers, "mcp": {"allowed": ["a", "b"], "excluded": ["b", "c"]}}
    async with session(tmp_path, user=user) as s:
        await s.settle()
        save(s.layout.paths.workspace, {})  # settle's sentinel gone: a pass without one is one the reorder began

        def sentinel(gating: McpGating) -> bool:
            return any(p.startswith("sentinel-") for p in gating.excluded or ())

        await s.rec.wait_for(lambda: not sentinel(s.rec.gating_at_reconcile[-1]))
        before = len(s.rec.gating_at_reconcile)
        save(s.layout.paths.user, {"mcpServers": servers, "mcp": {"allowed": ["b", "a"], "excluded": ["c", "b", "c"]}})
        await s.settle()  # each pass from here on is one of settle's own (its sentinel in the workspace's list)
        passes = s.rec.gating_at_reconcile[before:]
        assert all(sentinel(g) for g in passes), passes
        assert s.live() == {"a"}


@pytest.mark.parametrize("edit", ["excluded", "not allowed"])
async def test_a_call_cut_short_by_an_exclusion_says_which_file_leaves_the_server_out_and_the_fix(
    tmp_path: Path, edit: str
) -> None:
    servers = {"s": server("s", "--control"), "t": server("t")}
    async with session(tmp_path, user={"mcpServers": servers}) as s:
        outcome: list[BaseException] = []
        sleeping = anyio.Event()

        async def heard(progress: float, total: float | None, message: str | None) -> None:
            sleeping.set()  # the server reports progress once the call reached it

        async def call() -> None:
            try:
                await s.host.config.call_tool("mcp__s__sleep", {"seconds": 60}, progress=heard, timeout_s=WAIT_S)
            except ServerUnavailableError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(WAIT_S):
                await sleeping.wait()
            gating = {"excluded": ["s"]} if edit == "excluded" else {"allowed": ["t"]}
            save(s.layout.paths.user, {"mcpServers": servers, "mcp": gating})
        file = s.layout.paths.user
        why = (
            f"it was excluded: in mcp.excluded of {file}; remove it there"
            if edit == "excluded"
            else f"it is not allowed any more: not in mcp.allowed of {file}; add it there"
        )
        [said] = outcome
        assert str(said).endswith(f"server 's' was stopped while the call was in flight ({why})")


async def test_an_empty_allow_list_denies_all(tmp_path: Path) -> None:
    async with session(tmp_path, user={"mcpServers": {"a": server("a")}, "mcp": {"allowed": []}}) as s:
        assert s.live() == set()


async def test_a_folder_trusted_or_no_longer_trusted_since_the_start_is_followed_on_reload(tmp_path: Path) -> None:
    marker = tmp_path / "u.pids"
    user = {"mcpServers": {"u": server("u", marker=marker)}, "security": {"folderTrust": {"enabled": True}}}
    async with session(tmp_path, user=user) as s:
        assert not s.host.settings.trusted
        assert s.live() == set()  # an untrusted folder starts nothing
        save(s.layout.paths.trusted_folders, [str(s.layout.root)])  # `mcpvisor mcp trust` in another terminal
        await s.host.reload()
        await s.rec.wait_for(lambda: s.live() == {"u"})
        [pid] = marker_pids(marker)
        save(s.layout.paths.project, {"mcpServers": {"p": server("p")}})  # the folder's own files are watched now
        await s.rec.wait_for(lambda: any(prompt.servers == ("p",) for prompt in s.rec.prompts()))
        save(s.layout.paths.trusted_folders, [])
        await s.host.reload()
        assert s.live() == set()
        assert s.host.config.manager.clients() == {}
        assert s.rec.reconciles()[-1].removed == ("u",)
        assert "u" not in s.host.config.manager.snapshot()
        await wait_until(lambda: not pid_alive(pid), what="u's process to end")
        assert any("no longer trusted" in str(e) for e in s.rec.events)


class PausedRead:
    """Holds the first read of the project file made in a worker thread (``/reload``'s) just after it
    read the file, until :meth:`release`: what the event loop sees meanwhile is what a reader sees."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reading = threading.Event()
        self._go = threading.Event()
        real = Settings.read_scope

        def read_scope(settings: Settings, scope: FileScope) -> ScopeRead:
            read = real(settings, scope)
            if scope == "project" and threading.current_thread() is not threading.main_thread():
                if not self.reading.is_set():
                    self.reading.set()
                    self._go.wait(WAIT_S)
            return read

        monkeypatch.setattr(Settings, "read_scope", read_scope)

    async def read(self) -> None:
        assert await anyio.to_thread.run_sync(self.reading.wait, WAIT_S), "the reload never read the project file"

    def release(self) -> None:
        self._go.set()


async def test_while_a_reload_reads_the_files_the_loop_still_sees_the_whole_last_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with session(tmp_path, project={"mcpServers": {"p": server("p")}}) as s:
        replace_text(s.layout.paths.lsp_project, "{")  # a broken file: its error must stay told meanwhile
        await s.rec.wait_for(lambda: "lsp_project" in s.host.settings.errors)
        paused = PausedRead(monkeypatch)
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.host.reload)
            await paused.read()
            assert set(s.host.settings.data("project")["mcpServers"]) == {"p"}
            assert "lsp_project" in s.host.settings.errors
            paused.release()
        assert set(s.host.settings.project.servers) == {"p"}


async def test_a_save_applied_while_a_reload_reads_the_files_is_not_undone_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with session(tmp_path, project={"mcpServers": {"p": server("p")}}) as s:
        paused = PausedRead(monkeypatch)
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.host.reload)
            await paused.read()  # the reload has read the file as it was
            save(s.layout.paths.project, {"mcpServers": {"p": server("p"), "q": server("q")}})
            await s.rec.wait_for(lambda: "q" in s.host.settings.project.servers)  # the watcher applied the save
            paused.release()
        assert set(s.host.settings.project.servers) == {"p", "q"}
        assert s.rec.prompts()[-1].servers == ("p", "q")


async def test_a_user_settings_file_broken_at_start_and_fixed_since_lets_the_folder_start_its_servers(
    tmp_path: Path,
) -> None:
    # Broken at start, the user's file may have enabled folder trust: the folder is untrusted until it parses.
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    replace_text(layout.paths.user, '{"mcpServers": {')
    rec = Recorder()
    host = Host(HostOptions(env=layout.env, workspace=layout.root))
    rec.host = host
    host.subscribe(rec)
    async with host:
        assert not host.settings.trusted
        save(layout.paths.user, {"mcpServers": {"e": server("e")}})
        await rec.wait_for(lambda: "e" in host.config.manager.clients())
        assert host.settings.trusted
        assert not host.settings.trust_undecided


# -- approvals (SPEC §11 "Approvals") ---------------------------------------------------------------


async def test_a_project_server_waits_for_approval_and_approving_connects_it(tmp_path: Path) -> None:
    marker = tmp_path / "p-started"
    project = {"mcpServers": {"p": server("p", marker=marker)}}
    async with session(tmp_path, project=project) as s:
        assert s.rec.prompts()[-1].servers == ("p",)
        assert not marker.exists()
        await s.host.decide("p", "approve")
        await s.rec.wait_for(lambda: s.live() == {"p"})
        prompts = len(s.rec.prompts())
        await s.settle()
        assert len(s.rec.prompts()) == prompts  # approved: never prompts again


async def test_a_misspelled_verdict_is_refused_and_decides_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "p-started"
    async with session(tmp_path, project={"mcpServers": {"p": server("p", marker=marker)}}) as s:
        for typo in ("approved", "yes", "Reject"):
            with pytest.raises(ValueError, match=f"verdict '{typo}' on server 'p' is neither 'approve' nor 'reject'"):
                await s.host.decide("p", typo)  # type: ignore[arg-type]  # what an untyped caller may pass
        assert s.host.approvals.get_state(s.layout.root, "p", s.host.state.assembled.servers["p"]) == "pending"
        assert not s.layout.paths.approvals.exists()
        await s.host.decide("p", "approve")
        await s.rec.wait_for(lambda: s.live() == {"p"})


async def test_a_project_server_runs_in_its_workspace_folder_and_two_workspaces_run_two_servers(
    tmp_path: Path,
) -> None:
    # A relative marker path lands in the server's working folder: the workspace root, not this process's.
    entry = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "p", "--marker", "here.pids"]}
    roots = []
    for name in ("one", "two"):
        async with session(tmp_path / name, project={"mcpServers": {"p": entry}}) as s:
            await s.host.decide("p", "approve")
            await s.rec.wait_for(partial(lambda s: s.live() == {"p"}, s))
            roots.append(s.layout.root)
            config = s.host.state.assembled.servers["p"]
            assert config.cwd == str(s.layout.root)
            assert config.approved_value("cwd") is None  # what was approved is the entry as written
    assert [len(marker_pids(root / "here.pids")) for root in roots] == [1, 1]
    assert not (Path.cwd() / "here.pids").exists()


async def test_an_approval_made_while_the_host_starts_its_servers_is_followed(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    started = tmp_path / "slow.pids"
    # A server that never answers initialize holds the host's start for its whole discovery timeout.
    slow = {**server("slow", "--hang-on-initialize", marker=started), "discoveryTimeoutMs": 4000}
    save(layout.paths.user, {"mcpServers": {"slow": slow}})
    save(layout.paths.project, {"mcpServers": {"p": server("p")}})
    approved = anyio.Event()

    async def approve_while_the_host_starts() -> None:  # as `mcpvisor mcp approve p` in another process
        await wait_until(started.exists, what="the slow server to start")
        cfg = layout.settings().project.servers["p"].config
        ApprovalStore(layout.paths.approvals).approve(layout.root, "p", cfg)
        approved.set()

    rec = Recorder()
    host = Host(HostOptions(env=layout.env, workspace=layout.root))
    host.subscribe(rec)
    async with anyio.create_task_group() as tg:
        tg.start_soon(approve_while_the_host_starts)
        async with host:
            assert approved.is_set()  # before the host's start was over (its watcher was not running yet)
            await rec.wait_for(lambda: host.config.manager.clients().get("p") is not None)
            client = host.config.manager.clients()["p"]
            await rec.wait_for(lambda: client.status == "connected")


async def test_a_reload_that_finds_its_change_applied_returns_once_the_pass_applying_it_is_over(
    tmp_path: Path,
) -> None:
    """An approval's write is seen by the watcher too, whose pass may apply it first: the decision's own reload then
    found the config as it wanted it and returned at once, while that pass still waited for the server's start. The
    shell, which stops waiting for a slow start after a few seconds (it asks for another pass), had stopped asking by
    then: the start went unsaid ("◌ slow is still starting" never came), and a caller of ``decide`` or ``reload``
    saw the server not yet started. Such a reload returns once the pass applying its change is over."""
    gate = tmp_path / "gate"
    entry = light_after_gate("p", gate)
    async with session(tmp_path, project={"mcpServers": {"p": entry}}) as s:
        cfg = s.layout.settings().project.servers["p"].config
        ApprovalStore(s.layout.paths.approvals).approve(s.layout.root, "p", cfg)  # elsewhere: the watcher's pass
        await wait_until(lambda: s.host.config.manager.starting("p"), what="p's start")
        live_when_reloaded: set[str] = set()

        async def reload() -> None:
            await s.host.reload()  # finds p approved and its entry applied already
            live_when_reloaded.update(s.live() | {"returned"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(reload)
            await anyio.sleep(0.3)
            gate.touch()
        assert live_when_reloaded == {"p", "returned"}


async def test_a_server_rejected_elsewhere_while_its_start_waits_for_a_slot_never_starts(tmp_path: Path) -> None:
    slow_started, x_started = tmp_path / "slow.pids", tmp_path / "x.pids"
    entries = {
        # Busy starting (its CPU in use, as a server loading its modules), never answering: holds the one start slot
        # for its whole discovery timeout (a server that waits idle would hand the slot on).
        "slow": {
            "command": sys.executable,
            "args": ["-c", BUSY_STARTING, str(slow_started)],
            "discoveryTimeoutMs": 3000,
        },
        "x": server("x", marker=x_started),
    }
    async with session(tmp_path, max_concurrent_starts=1) as s:
        store = ApprovalStore(s.layout.paths.approvals)
        for name, entry in entries.items():
            store.approve(s.layout.root, name, McpServerConfig.from_entry(entry, scope="project"))
        save(s.layout.paths.project, {"mcpServers": entries})
        await wait_until(slow_started.exists, what="the slow server to take the start slot")
        store.reject(s.layout.root, "x", McpServerConfig.from_entry(entries["x"], scope="project"))  # elsewhere
        await s.rec.wait_for(lambda: any(r.gated.get("x") == "rejected" for r in s.rec.reconciles()))
        assert not x_started.exists()  # its planned start saw the rejection once it had a slot


async def test_a_server_whose_start_waits_for_a_slot_reads_connecting_not_disconnected(tmp_path: Path) -> None:
    """Servers wait their turn to start (a start slot): the status view (the table ``run`` and ``serve`` print at
    start, ``/mcp``, ``status``) said ``○ disconnected`` of each server still waiting, as of one that failed. It is
    on its way: ``connecting``."""
    # The SDK's client loaded (as after a session's first start): x's connection is made, then waits for the slot.
    # (The first start in a process waits for the slot before it makes its connection: the view reads the same.)
    importlib.import_module("mcpvisor.core.client")
    slow_started = tmp_path / "slow.pids"
    slow = {"command": sys.executable, "args": ["-c", BUSY_STARTING, str(slow_started)], "discoveryTimeoutMs": 60_000}
    async with session(tmp_path, max_concurrent_starts=1) as s:
        save(s.layout.paths.user, {"mcpServers": {"slow": slow, "x": server("x")}})
        await wait_until(slow_started.exists, what="the slow server to take the start slot")
        views = {v.name: v for v in s.host.server_views()}
        assert (views["slow"].state, views["x"].state) == ("connecting", "connecting")
        assert views["x"].error is None
        save(s.layout.paths.user, {"mcpServers": {"x": server("x")}})  # the slot goes to x
        await s.rec.wait_for(lambda: s.live() == {"x"})
        assert {v.name: v.state for v in s.host.server_views()} == {"x": "connected"}


async def test_a_hash_change_of_an_approved_server_prompts_again_and_stops_it(tmp_path: Path) -> None:
    marker = tmp_path / "m"
    async with session(tmp_path, project={"mcpServers": {"p": server("p", marker=marker)}}) as s:
        await s.host.decide("p", "approve")
        await s.rec.wait_for(lambda: s.live() == {"p"})
        [pid] = marker_pids(marker)
        prompts = len(s.rec.prompts())
        save(s.layout.paths.project, {"mcpServers": {"p": server("p", "--tools", "v2", marker=marker)}})
        await s.rec.wait_for(lambda: len(s.rec.prompts()) > prompts)
        assert s.rec.prompts()[-1].servers == ("p",)
        assert s.live() == set()
        await wait_until(lambda: not pid_alive(pid))


async def test_rejected_stays_skipped_without_prompting_until_its_config_changes(tmp_path: Path) -> None:
    marker = tmp_path / "m"
    user = {"mcpServers": {"a": server("a")}}
    async with session(tmp_path, user=user, project={"mcpServers": {"p": server("p", marker=marker)}}) as s:
        await s.host.decide("p", "reject")
        prompts = len(s.rec.prompts())
        # An unrelated edit: no prompt, p stays disconnected.
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "b": server("b")}})
        await s.rec.wait_for(lambda: s.live() == {"a", "b"})
        await s.settle()
        assert len(s.rec.prompts()) == prompts
        assert s.host.config.manager.get_client("p") is None
        views = {v.name: v for v in s.host.server_views()}
        assert views["p"].state == "rejected"
        # Editing the rejected server prompts again.
        save(s.layout.paths.project, {"mcpServers": {"p": server("p", "--tools", "new", marker=marker)}})
        await s.rec.wait_for(lambda: len(s.rec.prompts()) > prompts)
        assert s.rec.prompts()[-1].servers == ("p",)
    assert not marker.exists()


async def test_an_identical_re_add_keeps_its_decision(tmp_path: Path) -> None:
    entry = server("p")
    async with session(tmp_path, project={"mcpServers": {"p": entry}}) as s:
        await s.host.decide("p", "approve")
        await s.rec.wait_for(lambda: s.live() == {"p"})
        save(s.layout.paths.project, {"mcpServers": {}})
        await s.rec.wait_for(lambda: s.live() == set())
        prompts = len(s.rec.prompts())
        save(s.layout.paths.project, {"mcpServers": {"p": entry}})
        await s.rec.wait_for(lambda: s.live() == {"p"})
        assert len(s.rec.prompts()) == prompts


async def test_an_excluded_pending_server_is_never_announced(tmp_path: Path) -> None:
    async with session(tmp_path, user={"mcp": {"excluded": ["p"]}}, project={"mcpServers": {"p": server("p")}}) as s:
        assert s.rec.prompts() == []
        assert s.host.config.get_mcp_server_unavailable_reason("p") == "excluded"


async def test_a_pending_server_the_program_excluded_is_never_announced(tmp_path: Path) -> None:
    """Before: a list set with set_excluded_mcp_servers held across reloads, but a server it excluded that waited for
    approval was still announced (approval_needed, the shell's dialog) when its entry changed."""
    async with session(tmp_path, user={"mcpServers": {"a": server("a")}}, project={"mcpServers": {}}) as s:
        s.host.config.set_excluded_mcp_servers(["p"])
        save(s.layout.paths.project, {"mcpServers": {"p": server("p")}})
        await s.host.reload()
        assert s.host.config.get_mcp_server_unavailable_reason("p") == "excluded"
        assert s.rec.prompts() == []


async def test_decide_refuses_unknown_and_ungated_servers(tmp_path: Path) -> None:
    async with session(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        with pytest.raises(ConfigError, match="no such server"):
            await s.host.decide("zzz", "approve")
        with pytest.raises(ConfigError, match="not a project or workspace server"):
            await s.host.decide("a", "approve")


async def test_reload_with_a_half_saved_settings_file_keeps_the_last_good_configuration(tmp_path: Path) -> None:
    marker = tmp_path / "p"
    async with session(
        tmp_path, user={"mcpServers": {"u": server("u")}}, project={"mcpServers": {"p": server("p", marker=marker)}}
    ) as s:
        await s.host.decide("p", "approve")
        await s.rec.wait_for(lambda: s.live() == {"u", "p"})
        replace_text(s.layout.paths.user, '{"mcpServers": {"u": ')
        await s.host.reload()
        assert s.live() == {"u", "p"}
        assert s.host.settings.errors
        assert s.host.settings.trusted


async def test_a_save_that_moves_the_file_away_and_writes_it_back_restarts_only_what_changed(tmp_path: Path) -> None:
    """An editor's backup-by-rename save: for a moment there is no file. That is no deletion (yet)."""
    user = {"mcpServers": {"a": server("a"), "b": server("b")}}
    async with session(tmp_path, user=user) as s:
        pids = {name: client.pid for name, client in s.host.config.manager.clients().items()}
        path = s.layout.paths.user
        path.rename(path.with_name(path.name + "~"))
        await anyio.sleep(0.1)  # longer than the settle, shorter than the window
        save(path, {"mcpServers": {"a": server("a"), "b": server("b", "--tools", "echo,other")}})
        await s.rec.wait_for(lambda: "mcp__b__other" in s.host.config.tool_registry.names())
        assert s.host.config.manager.clients()["a"].pid == pids["a"]  # untouched: never removed and added
        assert not any(isinstance(e, SettingsWarning) and "was deleted" in e.message for e in s.rec.events)


async def test_deleting_a_settings_file_says_so_and_removes_its_servers(tmp_path: Path) -> None:
    async with session(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        s.layout.paths.user.unlink()
        await s.rec.wait_for(lambda: s.live() == set())
        await s.rec.wait_for(
            lambda: any(isinstance(e, SettingsWarning) and "was deleted" in e.message for e in s.rec.events)
        )


async def test_a_gated_server_deleted_from_the_settings_is_reported_removed(tmp_path: Path) -> None:
    """SPEC §9: a reconcile's ``removed`` lists the servers no longer configured, not only those that ran: an
    excluded, a not-allowed and a pending one deleted from their files are removed, as a running one is."""
    gating = {"excluded": ["x"], "allowed": ["a", "p", "r", "x"]}
    user = {"mcpServers": {"a": server("a"), "r": server("r"), "x": server("x"), "n": server("n")}, "mcp": gating}
    async with session(tmp_path, user=user, project={"mcpServers": {"p": server("p")}}) as s:
        assert s.live() == {"a", "r"}
        assert s.rec.reconciles()[-1].gated == {"x": "excluded", "n": "not_allowed", "p": "pending_approval"}
        save(s.layout.paths.user, {"mcpServers": {"a": server("a")}, "mcp": gating})
        save(s.layout.paths.project, {"mcpServers": {}})
        await s.host.reload()
        last = s.rec.reconciles()[-1]
        assert sorted(last.removed) == ["n", "p", "r", "x"]
        assert last.gated == {}
        assert last.kept == ("a",)
