"""The hash-bound approval store (SPEC §7, §11 "Approvals")."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host import approvals as approvals_module
from mcpvisor.host.approvals import (
    ApprovalRecord,
    ApprovalStore,
    is_gated,
    parse_store,
    pending_gated_names,
    promptable_names,
    root_key,
    state_from_records,
)
from mcpvisor.host.private_files import TMP_SUFFIX, lock_path_of, tmp_prefix
from mcpvisor.host.watcher import is_approvals_file
from tests.helpers import WAIT_S


def project(entry: dict[str, Any]) -> McpServerConfig:
    return McpServerConfig.from_entry(entry, scope="project")


def workspace(entry: dict[str, Any]) -> McpServerConfig:
    return McpServerConfig.from_entry(entry, scope="workspace")


GITHUB = project({"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"]})
FILES = project({"command": "uvx", "args": ["mcp-server-files", "."]})
SEARCH = workspace({"httpUrl": "https://search.example/mcp"})
USER_SERVER = McpServerConfig.from_entry({"command": "user-server"})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    return path


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".mcpvisor" / "mcp-approvals.json"


@pytest.fixture
def store(store_path: Path) -> ApprovalStore:
    return ApprovalStore(store_path)


# --- gated scopes and pure decisions -----------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "gated"),
    [("project", True), ("workspace", True), ("system", False), (None, False)],
)
def test_only_project_and_workspace_servers_are_gated(scope: str | None, gated: bool) -> None:
    assert is_gated(McpServerConfig.from_entry({"command": "x"}, scope=scope)) is gated


def test_state_comes_from_a_record_only_when_its_hash_matches() -> None:
    records = {"github": ApprovalRecord(hash=GITHUB.approval_hash, status="rejected")}
    assert state_from_records(records, "github", GITHUB) == "rejected"
    assert state_from_records(records, "files", FILES) == "pending"
    changed = project({"command": "npx", "args": ["-y", "other"]})
    assert state_from_records(records, "github", changed) == "pending"


def test_pure_helpers_keep_the_order_of_the_server_map() -> None:
    servers = {"files": FILES, "user": USER_SERVER, "github": GITHUB, "search": SEARCH}
    records = {"search": ApprovalRecord(hash=SEARCH.approval_hash, status="rejected")}
    assert pending_gated_names(servers, records) == ("files", "github", "search")
    assert promptable_names(servers, records) == ("files", "github")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[]", "top level"),
        ('{"/r": []}', "object of servers"),
        ('{"/r": {"a": "approved"}}', "must be an object"),
        ('{"/r": {"a": {"status": "approved"}}}', "'hash'"),
        ('{"/r": {"a": {"hash": "h", "status": "maybe"}}}', "status 'maybe'"),
        ('{"/r": {"a": {"hash": "h"}}}', "status None"),
        ('{"/r": ', "Expecting"),
    ],
)
def test_a_malformed_store_is_rejected_whole(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_store(text)


def test_a_blank_store_file_holds_no_decisions() -> None:
    assert parse_store("") == {}
    assert parse_store("  \n") == {}


# --- construction and missing files ------------------------------------------------------------


def test_the_constructor_does_no_io(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir" / "store.json"
    store = ApprovalStore(path)
    assert not path.parent.exists()
    assert store.path == path
    assert store.lock_path == tmp_path / "missing-dir" / "store.json.lock"


def test_a_missing_store_means_every_gated_server_is_pending(store: ApprovalStore, root: Path) -> None:
    servers = {"github": GITHUB, "search": SEARCH, "user": USER_SERVER}
    assert store.get_pending_gated_mcp_servers(servers, root) == ("github", "search")
    assert store.get_promptable_mcp_servers(servers, root) == ("github", "search")
    assert store.error is None
    assert not store.path.exists()


# --- SPEC §11 "Approvals" ---------------------------------------------------------------------


def test_a_server_without_a_decision_is_pending_and_promptable(store: ApprovalStore, root: Path) -> None:
    assert store.get_state(root, "github", GITHUB) == "pending"
    assert store.get_promptable_mcp_servers({"github": GITHUB}, root) == ("github",)
    assert store.get_pending_gated_mcp_servers({"github": GITHUB}, root) == ("github",)


def test_a_rejected_server_is_not_promptable_but_stays_pending(store: ApprovalStore, root: Path) -> None:
    store.reject(root, "github", GITHUB)
    assert store.get_state(root, "github", GITHUB) == "rejected"
    assert store.get_promptable_mcp_servers({"github": GITHUB}, root) == ()
    assert store.get_pending_gated_mcp_servers({"github": GITHUB}, root) == ("github",)


def test_an_approved_server_is_neither_promptable_nor_pending(store: ApprovalStore, root: Path) -> None:
    store.approve(root, "github", GITHUB)
    assert store.get_state(root, "github", GITHUB) == "approved"
    assert store.get_promptable_mcp_servers({"github": GITHUB}, root) == ()
    assert store.get_pending_gated_mcp_servers({"github": GITHUB}, root) == ()


def test_a_hash_change_of_an_approved_server_prompts_again(store: ApprovalStore, root: Path) -> None:
    store.approve(root, "github", GITHUB)
    edited = project({"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github@2"]})
    assert store.get_state(root, "github", edited) == "pending"
    assert store.get_promptable_mcp_servers({"github": edited}, root) == ("github",)
    assert store.get_pending_gated_mcp_servers({"github": edited}, root) == ("github",)


def test_editing_a_rejected_server_prompts_again(store: ApprovalStore, root: Path) -> None:
    store.reject(root, "github", GITHUB)
    edited = project({"command": "npx", "args": ["-y", "server-github", "--read-only"]})
    assert store.get_promptable_mcp_servers({"github": edited, "files": FILES}, root) == ("github", "files")


def test_editing_an_unrelated_server_does_not_prompt_for_a_rejected_one(store: ApprovalStore, root: Path) -> None:
    store.reject(root, "github", GITHUB)
    store.approve(root, "files", FILES)
    edited_files = project({"command": "uvx", "args": ["mcp-server-files", "/srv"]})
    servers = {"github": GITHUB, "files": edited_files}
    assert store.get_promptable_mcp_servers(servers, root) == ("files",)
    assert store.get_pending_gated_mcp_servers(servers, root) == ("github", "files")


def test_servers_outside_gated_scopes_are_never_pending(store: ApprovalStore, root: Path) -> None:
    system = McpServerConfig.from_entry({"command": "sys"}, scope="system")
    store.reject(root, "user", USER_SERVER)
    servers = {"user": USER_SERVER, "system": system}
    assert store.get_pending_gated_mcp_servers(servers, root) == ()
    assert store.get_promptable_mcp_servers(servers, root) == ()


@pytest.mark.parametrize(
    "change",
    [
        {"command": "npx2"},
        {"args": ["-y", "@modelcontextprotocol/server-github", "--extra"]},
        {"args": ["@modelcontextprotocol/server-github", "-y"]},
        {"env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}},
        {"cwd": "/tmp"},
        {"timeout": 5000},
        {"discoveryTimeoutMs": 1000},
        {"trust": True},
        {"trust": None},
        {"includeTools": ["search"]},
        {"excludeTools": ["delete_repo"]},
        {"headers": {"X-Key": "k"}},
        {"shared": False},
        {"oauth": {"enabled": True}},
        {"somethingNew": 1},
    ],
)
def test_any_change_to_an_approved_server_makes_it_pending_again(
    store: ApprovalStore, root: Path, change: dict[str, Any]
) -> None:
    entry: dict[str, Any] = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"]}
    store.approve(root, "github", project(entry))
    edited = project({**entry, **change})
    assert store.get_state(root, "github", edited) == "pending"
    assert store.get_promptable_mcp_servers({"github": edited}, root) == ("github",)


def test_description_and_scope_are_not_part_of_the_approval(store: ApprovalStore, root: Path) -> None:
    entry: dict[str, Any] = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"]}
    store.approve(root, "github", project(entry))
    assert store.get_state(root, "github", project({**entry, "description": "GitHub"})) == "approved"
    assert store.get_state(root, "github", workspace(entry)) == "approved"


def test_records_outlive_removal_and_an_identical_re_add_keeps_its_decision(
    store: ApprovalStore, store_path: Path, root: Path
) -> None:
    store.approve(root, "github", GITHUB)
    store.reject(root, "files", FILES)
    # Both servers are removed from the configuration: nothing is deleted.
    assert store.get_pending_gated_mcp_servers({}, root) == ()
    assert set(json.loads(store_path.read_text())[root_key(root)]) == {"github", "files"}
    # An identical re-add keeps its decision, in this process and in a fresh one.
    for current in (store, ApprovalStore(store_path)):
        servers = {"github": GITHUB, "files": FILES}
        assert current.get_state(root, "github", GITHUB) == "approved"
        assert current.get_state(root, "files", FILES) == "rejected"
        assert current.get_promptable_mcp_servers(servers, root) == ()
        assert current.get_pending_gated_mcp_servers(servers, root) == ("files",)


def test_a_later_decision_replaces_the_earlier_one(store: ApprovalStore, root: Path) -> None:
    store.reject(root, "github", GITHUB)
    store.approve(root, "github", GITHUB)
    assert store.get_state(root, "github", GITHUB) == "approved"
    store.reject(root, "github", GITHUB)
    assert store.get_state(root, "github", GITHUB) == "rejected"


# --- one project root ---------------------------------------------------------------------------


def test_every_spelling_of_a_root_reads_and_writes_the_same_record(
    store: ApprovalStore, store_path: Path, root: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link-to-repo"
    link.symlink_to(root)
    (root / "sub").mkdir()
    store.approve(link, "github", GITHUB)
    store.reject(str(root / "sub" / ".."), "files", FILES)
    assert store.get_state(root, "github", GITHUB) == "approved"
    assert store.get_state(link, "files", FILES) == "rejected"
    assert list(json.loads(store_path.read_text())) == [str(root.resolve())]


def test_decisions_are_kept_per_project(store: ApprovalStore, tmp_path: Path, root: Path) -> None:
    other = tmp_path / "other-repo"
    other.mkdir()
    store.approve(root, "github", GITHUB)
    assert store.get_state(other, "github", GITHUB) == "pending"


# --- the file ----------------------------------------------------------------------------------


def test_the_store_file_has_the_documented_shape_and_mode_0600(
    store: ApprovalStore, store_path: Path, root: Path
) -> None:
    store.approve(root, "github", GITHUB)
    store.reject(root, "search", SEARCH)
    assert json.loads(store_path.read_text()) == {
        root_key(root): {
            "github": {"hash": GITHUB.approval_hash, "status": "approved"},
            "search": {"hash": SEARCH.approval_hash, "status": "rejected"},
        }
    }
    assert stat.S_IMODE(store_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.lock_path.stat().st_mode) & 0o077 == 0
    assert sorted(p.name for p in store_path.parent.iterdir()) == [store_path.name, store.lock_path.name]


def test_a_write_replaces_the_file_and_keeps_unrelated_content(
    store: ApprovalStore, store_path: Path, root: Path
) -> None:
    store_path.parent.mkdir(parents=True)
    original = {
        "/elsewhere": {"x": {"hash": "abc", "status": "approved", "note": "kept"}},
    }
    store_path.write_text(json.dumps(original))
    store_path.chmod(0o644)
    inode = store_path.stat().st_ino
    store.approve(root, "github", GITHUB)
    data = json.loads(store_path.read_text())
    assert data["/elsewhere"] == original["/elsewhere"]
    assert data[root_key(root)]["github"]["status"] == "approved"
    assert store_path.stat().st_ino != inode  # replaced, not rewritten in place
    assert stat.S_IMODE(store_path.stat().st_mode) == 0o600


def test_a_store_others_can_read_is_made_private_when_read_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mcpvisor.host.oauth_store import TokenStore

    path = tmp_path / "oauth-tokens.json"
    path.write_text(json.dumps({"https://x/mcp": {"tokens": {"access_token": "t0ps3cret"}}}))
    path.chmod(0o644)  # a copy, a restore, a chmod by hand
    with caplog.at_level(logging.WARNING):
        assert TokenStore(path).read()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f"{path} could be read by other users (mode 644): made private again (600)" in caplog.text
    assert "t0ps3cret" not in caplog.text


def test_the_watcher_can_tell_the_store_files_apart(store_path: Path) -> None:
    """What the store writes beside itself (its lock, its temporary files) is the store's, for the watcher;
    a settings file in the same folder is not. (Which folder an event is in, the watcher checks first.)"""
    name = store_path.name
    assert is_approvals_file(name, name)
    assert is_approvals_file(lock_path_of(store_path).name, name)
    assert is_approvals_file(f"{tmp_prefix(store_path)}k2j3h4{TMP_SUFFIX}", name)
    assert not is_approvals_file("settings.json", name)
    assert not is_approvals_file("mcp-approvals.jsonl", name)


# --- corrupt and unreadable stores --------------------------------------------------------------


CORRUPT = b'{"/repo": {"github": {"hash": "abc", "status": "approved"}},,, oops\n'


def test_a_corrupt_store_at_start_up_fails_closed_and_is_kept(
    store_path: Path, store: ApprovalStore, root: Path
) -> None:
    store_path.parent.mkdir(parents=True)
    store_path.write_bytes(CORRUPT)
    servers = {"github": GITHUB, "search": SEARCH, "user": USER_SERVER}
    assert store.get_pending_gated_mcp_servers(servers, root) == ("github", "search")
    assert store.get_promptable_mcp_servers(servers, root) == ("github", "search")
    error = store.error
    assert error is not None
    assert str(store_path) in error
    assert "not valid JSON" in error
    assert "fix or delete the file" in error
    assert "stays pending" in error
    assert store_path.read_bytes() == CORRUPT


@pytest.mark.parametrize("decide", [ApprovalStore.approve, ApprovalStore.reject])
def test_decisions_refuse_to_write_over_a_corrupt_store(
    store_path: Path, store: ApprovalStore, root: Path, decide: Any
) -> None:
    store_path.parent.mkdir(parents=True)
    store_path.write_bytes(CORRUPT)
    with pytest.raises(ConfigError, match=r"could not record .* of server 'github': .*fix or delete the file"):
        decide(store, root, "github", GITHUB)
    assert store_path.read_bytes() == CORRUPT
    assert store.get_state(root, "github", GITHUB) == "pending"


def test_a_running_store_keeps_its_last_good_decisions_when_the_file_breaks(
    store_path: Path, store: ApprovalStore, root: Path
) -> None:
    store.approve(root, "github", GITHUB)
    store.reject(root, "files", FILES)
    good = store_path.read_bytes()
    store_path.write_bytes(CORRUPT)
    store.reload()
    error = store.error
    assert error is not None
    assert "last good decisions stay in force" in error
    assert store.get_state(root, "github", GITHUB) == "approved"
    assert store.get_state(root, "files", FILES) == "rejected"
    assert store.get_pending_gated_mcp_servers({"github": GITHUB, "files": FILES}, root) == ("files",)
    with pytest.raises(ConfigError):
        store.approve(root, "files", FILES)
    assert store_path.read_bytes() == CORRUPT
    # Mended: the error goes away and the file rules again.
    store_path.write_bytes(good)
    store.reload()
    assert store.error is None
    assert store.get_state(root, "github", GITHUB) == "approved"


def test_a_corrupted_file_is_noticed_without_an_explicit_reload(
    store_path: Path, store: ApprovalStore, root: Path
) -> None:
    store.approve(root, "github", GITHUB)
    tmp = store_path.with_name("replacement")
    tmp.write_bytes(b"not json")
    os.replace(tmp, store_path)
    assert store.get_state(root, "github", GITHUB) == "approved"
    assert store.error is not None


def test_a_store_that_is_not_a_file_fails_closed(store_path: Path, store: ApprovalStore, root: Path) -> None:
    store_path.mkdir(parents=True)
    assert store.get_pending_gated_mcp_servers({"github": GITHUB}, root) == ("github",)
    assert store.error is not None
    assert str(store_path) in store.error
    with pytest.raises(ConfigError):
        store.approve(root, "github", GITHUB)


def test_a_store_with_a_bad_record_fails_closed(store_path: Path, store: ApprovalStore, root: Path) -> None:
    store_path.parent.mkdir(parents=True)
    text = json.dumps({root_key(root): {"github": {"hash": GITHUB.approval_hash, "status": "yes"}}})
    store_path.write_text(text)
    assert store.get_state(root, "github", GITHUB) == "pending"
    assert store.error is not None
    assert "status 'yes'" in store.error
    assert store_path.read_text() == text


# --- external edits -----------------------------------------------------------------------------


def test_another_store_s_decision_is_seen_without_a_reload(store_path: Path, root: Path) -> None:
    running = ApprovalStore(store_path)
    assert running.get_state(root, "github", GITHUB) == "pending"
    ApprovalStore(store_path).approve(root, "github", GITHUB)
    assert running.get_state(root, "github", GITHUB) == "approved"


def test_reload_picks_up_an_in_place_edit(store_path: Path, store: ApprovalStore, root: Path) -> None:
    store.approve(root, "github", GITHUB)
    data = json.loads(store_path.read_text())
    data[root_key(root)]["github"]["status"] = "rejected"
    with store_path.open("r+") as fh:  # same inode, written in place
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps(data))
    store.reload()
    assert store.get_state(root, "github", GITHUB) == "rejected"


def test_deleting_the_store_file_resets_every_decision(store_path: Path, store: ApprovalStore, root: Path) -> None:
    store.approve(root, "github", GITHUB)
    store_path.unlink()
    store.reload()
    assert store.get_state(root, "github", GITHUB) == "pending"
    assert store.error is None


# --- a repository can never approve itself -----------------------------------------------------


@pytest.mark.parametrize("decide", [ApprovalStore.approve, ApprovalStore.reject])
def test_a_store_inside_the_project_cannot_decide_for_it(root: Path, decide: Any) -> None:
    inside = ApprovalStore(root / ".mcpvisor" / "mcp-approvals.json")
    with pytest.raises(ConfigError, match=r"lies inside the project .*never approve its own servers"):
        decide(inside, root, "github", GITHUB)
    assert not (root / ".mcpvisor").exists()


def test_records_in_a_store_inside_the_project_are_ignored_for_it(root: Path, tmp_path: Path) -> None:
    path = root / ".mcpvisor" / "mcp-approvals.json"
    path.parent.mkdir()
    path.write_text(json.dumps({root_key(root): {"github": {"hash": GITHUB.approval_hash, "status": "approved"}}}))
    inside = ApprovalStore(path)
    assert inside.get_state(root, "github", GITHUB) == "pending"
    assert inside.get_pending_gated_mcp_servers({"github": GITHUB}, root) == ("github",)
    # The same file may still decide for a project it does not lie in.
    other = tmp_path / "other"
    other.mkdir()
    inside.approve(other, "github", GITHUB)
    assert inside.get_state(other, "github", GITHUB) == "approved"


def test_a_symlinked_store_pointing_into_the_project_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "approvals").mkdir()
    link = tmp_path / "approvals-link"
    link.symlink_to(root / "approvals")
    with pytest.raises(ConfigError, match="lies inside the project"):
        ApprovalStore(link / "store.json").approve(root, "github", GITHUB)


# --- two processes deciding at once -------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from mcpvisor.host.approvals import ApprovalStore
    from mcpvisor.core.server_config import McpServerConfig

    store_path, root, sync, who, rounds = sys.argv[1:]
    sync = Path(sync)
    store = ApprovalStore(store_path)
    store.load()
    (sync / f"ready-{who}").touch()
    for r in range(int(rounds)):
        go = sync / f"go-{r}"
        deadline = time.monotonic() + 20
        while not go.exists():
            if time.monotonic() > deadline:
                sys.exit("barrier timed out")
        cfg = McpServerConfig.from_entry({"command": "srv", "args": [who, str(r)]}, scope="project")
        store.approve(root, f"{who}-{r}", cfg)
        (sync / f"done-{who}-{r}").touch()
    """
)

ROUNDS = 12
WHO = ("left", "right")


def _wait_for(paths: list[Path], procs: list[subprocess.Popen[bytes]], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(p.exists() for p in paths):
        for proc in procs:
            if proc.poll() not in (None, 0):
                _, err = proc.communicate()
                pytest.fail(f"child failed: {err.decode()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {[p.name for p in paths if not p.exists()]}")
        time.sleep(0.002)


def test_two_processes_deciding_at_once_never_lose_a_decision(store_path: Path, root: Path, tmp_path: Path) -> None:
    sync = tmp_path / "sync"
    sync.mkdir()
    running = ApprovalStore(store_path)
    assert running.get_pending_gated_mcp_servers({}, root) == ()
    env = {**os.environ, "HOME": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(store_path), str(root), str(sync), who, str(ROUNDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=tmp_path,
        )
        for who in WHO
    ]
    try:
        _wait_for([sync / f"ready-{who}" for who in WHO], procs)
        for r in range(ROUNDS):
            (sync / f"go-{r}").touch()  # releases both children together
            _wait_for([sync / f"done-{who}-{r}" for who in WHO], procs)
            on_disk = parse_store(store_path.read_text())[root_key(root)]
            assert {f"{who}-{n}" for who in WHO for n in range(r + 1)} <= set(on_disk)
        for proc in procs:
            _, err = proc.communicate(timeout=20)
            assert proc.returncode == 0, err.decode()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    servers = {f"{who}-{r}": project({"command": "srv", "args": [who, str(r)]}) for who in WHO for r in range(ROUNDS)}
    # The running process sees every decision the others made, without an explicit reload.
    assert running.get_pending_gated_mcp_servers(servers, root) == ()
    assert ApprovalStore(store_path).get_pending_gated_mcp_servers(servers, root) == ()
    assert stat.S_IMODE(store_path.stat().st_mode) == 0o600


def test_an_approvals_store_locked_elsewhere_records_nothing_and_says_to_try_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(approvals_module, "LOCK_TIMEOUT_S", 0.2)
    store = ApprovalStore(tmp_path / "approvals.json")
    root = tmp_path / "ws"
    root.mkdir()
    cfg = McpServerConfig.model_validate({"command": sys.executable, "args": ["-m", "x"], "scope": "project"})
    with FileLock(store.lock_path):  # another process (here: another lock on the same file) holds it
        with pytest.raises(ConfigError, match="another process holds the lock .*; try again"):
            store.approve(root, "p", cfg)
    assert not (tmp_path / "approvals.json").exists()
    assert store.get_state(root, "p", cfg) == "pending"
    store.approve(root, "p", cfg)  # free again: recorded
    assert ApprovalStore(tmp_path / "approvals.json").get_state(root, "p", cfg) == "approved"


def test_a_decision_over_one_made_after_the_question_was_shown_is_refused(tmp_path: Path) -> None:
    """Two people answering at once: the second answer names the record as it was shown, and a decision
    made meanwhile is never overwritten unseen (the file store compares it under the lock)."""
    from mcpvisor.host.approvals import DecidedSinceShown

    cfg = project({"command": "x"})
    root, store = tmp_path / "project", tmp_path / "home" / "a.json"
    mine, theirs = ApprovalStore(store), ApprovalStore(store)
    shown = mine.stamp(root, "p")
    theirs.reject(root, "p", cfg)
    with pytest.raises(DecidedSinceShown, match="another decision on it was made since it was shown"):
        mine.approve(root, "p", cfg, shown=shown)
    assert ApprovalStore(store).get_state(root, "p", cfg) == "rejected"
    mine.approve(root, "p", cfg, shown=mine.stamp(root, "p"))  # looked again: decided
    assert ApprovalStore(store).get_state(root, "p", cfg) == "approved"


def test_a_decision_waiting_for_the_lock_leaves_reading_the_store_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """While another process holds the lock, a decision made in this one waits for it; the host's gating reads
    the store on its event loop all the while and must not wait with it."""
    monkeypatch.setattr(approvals_module, "LOCK_TIMEOUT_S", 2 * WAIT_S)  # what a reader waits without the fix
    caplog.set_level(logging.DEBUG, logger="filelock")
    store = ApprovalStore(tmp_path / "approvals.json")
    root = tmp_path / "ws"
    root.mkdir()
    cfg = project({"command": "x"})
    deciding = threading.Thread(target=store.approve, args=(root, "p", cfg))
    waiting = threading.Event()

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if threading.current_thread() is deciding and record.getMessage().startswith("Attempting to acquire"):
                waiting.set()

    heard = Heard()
    logging.getLogger("filelock").addHandler(heard)
    try:
        with FileLock(store.lock_path), ThreadPoolExecutor(1) as reader:  # another process holds the lock
            deciding.start()
            assert waiting.wait(WAIT_S), "the decision never tried to take the lock"
            assert reader.submit(store.get_state, root, "p", cfg).result(timeout=WAIT_S) == "pending"
        deciding.join(WAIT_S)
    finally:
        logging.getLogger("filelock").removeHandler(heard)
    assert store.get_state(root, "p", cfg) == "approved"
