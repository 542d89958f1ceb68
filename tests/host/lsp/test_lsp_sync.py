"""What a language server is told of the files, and how fresh its answers are, with real servers (pylsp and
basedpyright): diagnostics across restarts and settings changes, files edited or deleted behind its back."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from mcpvisor.host.lsp import tools
from tests.helpers import WAIT_S, wait_until
from tests.host.lsp.test_lsp_host import basedpyright, language_server_processes, pylsp, session, text
from tests.layout import replace_text

LONG_WAIT_MS = 30_000
"""A diagnostics wait long enough for a cold server on a loaded machine (a fresh answer ends it early)."""


async def test_diagnostics_published_before_a_restart_are_never_fresh_after_it(tmp_path: Path) -> None:
    """basedpyright numbers its diagnostics by document version, and a restarted server sees version 1 again:
    the error it published for the old text's version 1 must not pass for the fixed text's."""
    async with session(tmp_path, user={"lspServers": {"python": basedpyright()}}, watch=False) as s:
        bad = s.layout.root / "bad.py"
        bad.write_text("x: int = 'a'\n")
        before = await s.ok("diagnostics", files=["bad.py"], severity="error", wait_ms=LONG_WAIT_MS)
        assert before["files"][0]["fresh"] is True
        assert before["files"][0]["diagnostics"]
        server = s.host.lsp.manager.servers()["python"]
        await server.stop()  # what an idle stop does; the next call starts it again
        bad.write_text("x: int = 1\n")
        after = await s.ok("diagnostics", files=["bad.py"], severity="error", wait_ms=LONG_WAIT_MS)
        assert after["files"] == [
            {"file": "bad.py", "server": "python", "fresh": True, "diagnostics": [], "problem": None}
        ]


async def test_diagnostics_from_before_a_live_settings_change_are_not_fresh(tmp_path: Path) -> None:
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}) as s:
        bad = s.layout.root / "bad.py"
        bad.write_text("x = undefined_name\n")
        first = await s.ok("diagnostics", files=["bad.py"])
        assert first["files"][0]["diagnostics"]
        quiet = pylsp(settings={"pylsp": {"plugins": {"pyflakes": {"enabled": False}}}})
        replace_text(s.layout.paths.user, json.dumps({"lspServers": {"python": quiet}}))
        await wait_until(lambda: s.host.lsp.manager.servers()["python"].config.settings is not None, what="the edit")
        after = await s.ok("diagnostics", files=["bad.py"], wait_ms=LONG_WAIT_MS)  # the file is untouched
        assert after["files"] == [
            {"file": "bad.py", "server": "python", "fresh": True, "diagnostics": [], "problem": None}
        ]


@pytest.mark.parametrize("server", [pylsp(), basedpyright()], ids=["pylsp", "basedpyright"])
async def test_open_documents_edited_or_deleted_on_disk_are_synced_before_a_call_that_names_another(
    tmp_path: Path, server: dict[str, Any]
) -> None:
    async with session(tmp_path, user={"lspServers": {"python": server}}, watch=False) as s:
        await s.ok("document_symbols", file="models.py")  # models.py is open on the server now
        before = await s.ok("go_to_definition", file="service.py", line=3, character=6)
        assert [(loc["file"], loc["line"]) for loc in before["locations"]] == [("models.py", 9)]
        models = s.layout.root / "models.py"
        models.write_text("import os\n\n\n" + models.read_text())  # three lines above everything
        after = await s.ok("go_to_definition", file="service.py", line=3, character=6)
        assert [(loc["file"], loc["line"]) for loc in after["locations"]] == [("models.py", 12)]
        assert after["locations"][0]["preview"] == "def make_user(name: str) -> User:"
        models.unlink()
        await s.ok("hover", file="service.py", line=3, character=6)
        open_now = s.host.lsp.manager.servers()["python"].documents.paths()
        assert open_now == [s.layout.root / "service.py"]  # the deleted one was closed


@pytest.mark.parametrize("change", ["deleted", "grown too large to send"])
async def test_diagnostics_of_every_open_document_close_a_deleted_one_and_report_the_rest(
    tmp_path: Path, change: str
) -> None:
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        (s.layout.root / "a.py").write_text("import os\n")
        (s.layout.root / "old.py").write_text("import sys\n")
        await s.ok("diagnostics", files=["a.py", "old.py"])
        if change == "deleted":
            (s.layout.root / "old.py").unlink()
        else:  # regenerated: 18 MiB
            (s.layout.root / "old.py").write_text("x = 1\n" * (3 * 1024 * 1024))
        report = await s.ok("diagnostics")
        assert [(f["file"], [d["message"] for d in f["diagnostics"]]) for f in report["files"]] == [
            ("a.py", ["'os' imported but unused"])
        ]
        assert s.host.lsp.manager.servers()["python"].documents.paths() == [s.layout.root / "a.py"]


async def test_a_request_that_is_not_answered_in_time_is_a_tool_error_that_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        await s.ok("document_symbols", file="models.py")  # started and warm, whatever the machine's load
        monkeypatch.setattr(tools, "REQUEST_TIMEOUT_S", 0.5)
        server = s.host.lsp.manager.servers()["python"]
        [process] = [p for p in language_server_processes(s.layout.root) if p.pid != server.pid]
        process.suspend()  # alive, but answers nothing
        try:
            result = await s.call("hover", file="service.py", line=3, character=6)
        finally:
            process.resume()
        assert result.is_error
        assert text(result) == (
            "textDocument/hover failed: language server 'python' did not answer within 0.5 s; retry in a moment "
            f"(it may still be indexing the workspace), and if it never answers, see its log {server.log_path}"
        )


async def test_a_file_too_large_to_send_is_a_tool_error_that_names_the_server(tmp_path: Path) -> None:
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        (s.layout.root / "big.py").write_text("x = 1\n" * (3 * 1024 * 1024))  # 18 MiB
        result = await s.call("document_symbols", file="big.py")
        assert result.is_error
        assert text(result) == (
            "textDocument/didOpen failed: big.py cannot be sent to language server 'python': It is 18.0 MB; "
            "a document sent to a language server may be at most 16 MB; language servers are not sent files that "
            "large (generated code, data): ask about another file"
        )


async def test_diagnostics_of_several_files_check_the_others_when_one_is_too_large_to_send(tmp_path: Path) -> None:
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        (s.layout.root / "big.py").write_text("x = 1\n" * (3 * 1024 * 1024))  # 18 MiB
        (s.layout.root / "a.py").write_text("import os\n")
        report = await s.ok("diagnostics", files=["big.py", "a.py"])
        [big, small] = report["files"]
        assert (big["file"], big["server"], big["diagnostics"]) == ("big.py", "python", [])
        assert big["problem"].startswith("textDocument/didOpen failed: big.py cannot be sent to language server")
        assert (small["file"], [d["message"] for d in small["diagnostics"]]) == ("a.py", ["'os' imported but unused"])
        alone = await s.call("diagnostics", files=["big.py"])  # nothing could be checked: the call fails, saying why
        assert alone.is_error
        assert text(alone).startswith("textDocument/didOpen failed: big.py cannot be sent to language server 'python'")


async def test_a_server_that_stopped_answering_is_stopped_as_hung_and_the_next_call_starts_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a hung server (SIGSTOP, stuck on a file) cost every call its whole timeout, status read ready, and
    nothing restarted it."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        await s.ok("document_symbols", file="models.py")  # started and warm, whatever the machine's load
        monkeypatch.setattr(tools, "REQUEST_TIMEOUT_S", 0.5)
        server = s.host.lsp.manager.servers()["python"]
        [process] = [p for p in language_server_processes(s.layout.root) if p.pid != server.pid]
        process.suspend()  # alive, but answers nothing; stopped for good: only a kill ends it
        first = await s.call("hover", file="service.py", line=3, character=6)
        assert text(first).endswith(f"see its log {server.log_path}")
        second = await s.call("hover", file="service.py", line=3, character=6)
        assert text(second) == (
            "textDocument/hover failed: language server 'python' did not answer within 0.5 s, nor the request "
            "before: it was stopped as hung and the next call starts it again"
        )
        await wait_until(lambda: not process.is_running() or process.status() == "zombie", what="the hung one gone")
        status = await s.ok("status")
        [entry] = status["servers"]
        assert "did not answer 2 requests in a row in time: stopped as hung" in (entry["last_error"] or ""), entry
        monkeypatch.setattr(tools, "REQUEST_TIMEOUT_S", 60.0)
        again = await s.ok("hover", file="service.py", line=3, character=6)
        assert again["server"] == "python"


async def test_a_file_created_on_disk_reaches_a_server_that_watches_files(tmp_path: Path) -> None:
    """basedpyright registers for workspace/didChangeWatchedFiles. Before, it was never fed: a file the agent wrote
    was missing from references and workspace symbols until a tool named it."""
    async with session(tmp_path, user={"lspServers": {"python": basedpyright()}}, watch=False) as s:
        before = await s.ok("find_references", file="models.py", symbol="make_user")
        assert {r["file"] for r in before["references"]} == {"service.py"}
        (s.layout.root / "extra.py").write_text('from models import make_user\n\nmake_user("bob")\n')
        files: set[str] = set()
        with anyio.fail_after(WAIT_S):
            while "extra.py" not in files:
                await anyio.sleep(0.2)
                refs = await s.ok("find_references", file="models.py", symbol="make_user")
                files = {r["file"] for r in refs["references"]}


async def test_an_edit_of_another_file_makes_the_diagnostics_of_a_file_fresh_only_once_re_checked(
    tmp_path: Path,
) -> None:
    """service.py imports make_user from models.py. Before, its diagnostics passed for fresh after models.py
    changed (its own text had not): the error a rename caused was missing, then the fixed one still there."""
    async with session(tmp_path, user={"lspServers": {"python": basedpyright()}}, watch=False) as s:
        models = s.layout.root / "models.py"
        clean = await s.ok("diagnostics", files=["service.py", "models.py"], severity="error", wait_ms=LONG_WAIT_MS)
        assert [(f["fresh"], f["diagnostics"]) for f in clean["files"]] == [(True, []), (True, [])]
        models.write_text(models.read_text().replace("make_user", "build_user"))
        broken = await s.ok("diagnostics", files=["service.py", "models.py"], severity="error", wait_ms=LONG_WAIT_MS)
        service = broken["files"][0]  # asked first: right after models.py was sent
        assert service["fresh"] is True
        assert any('"make_user" is unknown import symbol' in d["message"] for d in service["diagnostics"]), service
        models.write_text(models.read_text().replace("build_user", "make_user"))
        fixed = await s.ok("diagnostics", files=["service.py", "models.py"], severity="error", wait_ms=LONG_WAIT_MS)
        assert [(f["fresh"], f["diagnostics"]) for f in fixed["files"]] == [(True, []), (True, [])]


async def test_a_file_a_server_does_not_re_check_after_another_changed_is_not_fresh_and_not_waited_for_long(
    tmp_path: Path,
) -> None:
    """pylsp lints one file at a time: after models.py changed, service.py is not checked again. Before, its last
    diagnostics passed for fresh; now they are the last known ones, once pylsp went quiet (not the whole wait)."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        models = s.layout.root / "models.py"
        first = await s.ok("diagnostics", files=["models.py", "service.py"], wait_ms=LONG_WAIT_MS)
        assert [f["fresh"] for f in first["files"]] == [True, True]
        models.write_text(models.read_text() + "\nimport os\n")
        with anyio.fail_after(LONG_WAIT_MS / 1000 / 2):  # well before the wait asked for: pylsp went quiet
            after = await s.ok("diagnostics", files=["models.py", "service.py"], wait_ms=LONG_WAIT_MS)
        [of_models, of_service] = after["files"]
        assert of_models["fresh"] is True
        assert [d["message"] for d in of_models["diagnostics"]] == ["'os' imported but unused"]
        assert (of_service["fresh"], of_service["diagnostics"]) == (False, [])
        shown = text(await s.call("diagnostics", files=["service.py"], wait_ms=0))
        assert shown.startswith("service.py: not re-checked yet; these may be stale")


async def test_a_file_deleted_a_moment_ago_is_in_no_answer(tmp_path: Path) -> None:
    """Before, references and symbols right after a deletion still named the file (the server had not yet heard
    of it), with no preview."""
    async with session(tmp_path, user={"lspServers": {"python": basedpyright()}}, watch=False) as s:
        extra = s.layout.root / "extra.py"
        extra.write_text("from models import make_user\n\n\ndef extra() -> None:\n    make_user('e')\n")
        ask = {"file": "models.py", "symbol": "make_user"}

        async def files() -> set[str]:
            return {ref["file"] for ref in (await s.ok("find_references", **ask))["references"]}

        for _ in range(100):
            if "extra.py" in await files():
                break
            await anyio.sleep(0.2)
        assert "extra.py" in await files()
        extra.unlink()
        assert "extra.py" not in await files()
        found = await s.ok("workspace_symbols", query="extra")
        assert "extra.py" not in {sym["loc"]["file"] for sym in found["symbols"]}


async def test_a_file_that_is_no_source_written_beside_them_leaves_the_diagnostics_fresh(tmp_path: Path) -> None:
    """basedpyright watches the whole folder; a log or a note written there is no change of the program. Before,
    every diagnostics call after one waited its whole wait and said "not fresh"."""
    async with session(tmp_path, user={"lspServers": {"python": basedpyright()}}, watch=False) as s:
        first = await s.ok("diagnostics", files=["service.py", "models.py"], wait_ms=LONG_WAIT_MS)
        assert [f["fresh"] for f in first["files"]] == [True, True]
        (s.layout.root / "notes.txt").write_text("remember the milk\n")
        await anyio.sleep(1)  # the watcher's batch has reached the server
        with anyio.fail_after(LONG_WAIT_MS / 1000 / 2):
            after = await s.ok("diagnostics", files=["service.py", "models.py"], wait_ms=LONG_WAIT_MS)
        assert [f["fresh"] for f in after["files"]] == [True, True]


async def test_an_open_file_deleted_on_disk_is_told_deleted_before_another_files_diagnostics_are_read(
    tmp_path: Path,
) -> None:
    """service.py imports models.py. Before, right after models.py was deleted its open document was closed, but the
    server was not told the file was gone: service.py's diagnostics came back clean, marked fresh."""
    async with session(tmp_path, user={"lspServers": {"python": basedpyright()}}, watch=False) as s:
        clean = await s.ok("diagnostics", files=["service.py", "models.py"], severity="error", wait_ms=LONG_WAIT_MS)
        assert [(f["fresh"], f["diagnostics"]) for f in clean["files"]] == [(True, []), (True, [])]
        (s.layout.root / "models.py").unlink()
        after = await s.ok("diagnostics", files=["service.py"], severity="error", wait_ms=LONG_WAIT_MS)
        [service] = after["files"]
        assert service["fresh"] is True
        assert service["diagnostics"], service  # the import of models (its wording depends on basedpyright's timing)
        assert {d["loc"]["line"] for d in service["diagnostics"]} == {1}, service


async def test_a_server_that_dies_as_file_changes_are_sent_to_it_reads_as_ended_so_not_as_an_internal_error(
    tmp_path: Path,
) -> None:
    """basedpyright watches the folder. Before, when the batch of changes after a save found it dead, status said
    "failed — ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)" and a traceback was logged."""
    async with session(tmp_path, user={"lspServers": {"python": basedpyright()}}, watch=False) as s:
        ask = {"file": "models.py", "symbol": "make_user"}
        assert {r["file"] for r in (await s.ok("find_references", **ask))["references"]} == {"service.py"}
        (s.layout.root / "first.py").write_text('from models import make_user\n\nmake_user("b")\n')
        files: set[str] = set()
        with anyio.fail_after(WAIT_S):  # the folder is watched: a new file is among the references
            while "first.py" not in files:
                await anyio.sleep(0.2)
                files = {r["file"] for r in (await s.ok("find_references", **ask))["references"]}
        server = s.host.lsp.manager.servers()["python"]
        assert server.pid is not None
        kill_group_after_a_save(server.pid, s.layout.root / "second.py")
        await wait_until(lambda: server.state == "failed", what="the kill to be seen through")
        assert server.last_error is not None
        assert server.last_error.startswith("the process was killed by SIGKILL"), server.last_error
        again = await s.ok("hover", file="service.py", line=3, character=6)  # started again on demand
        assert "make_user" in again["contents"]


def kill_group_after_a_save(pid: int, saved: Path) -> None:
    """Save ``saved``, then kill the process group ``pid`` leads, holding the event loop (this blocks) until the
    watcher's thread has its batch of changes ready and the group is gone: the batch is sent to a server already
    dead, before the host has read its end."""
    group = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    saved.write_text("x = 1\n")
    time.sleep(0.5)  # the watcher's batch is ready, waiting for the loop
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_S
    while any(alive(process) for process in group) and time.monotonic() < deadline:
        time.sleep(0.01)  # not psutil's wait: it would reap the host's child, whose exit the host reads


def alive(process: psutil.Process) -> bool:
    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
