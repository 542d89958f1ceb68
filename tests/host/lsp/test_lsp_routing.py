"""Several language servers for one extension (real pylsp and basedpyright): an operation goes to the first by name
that offers it, or to the one the caller names; and a diagnostics call reports per file what it cannot check."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import anyio
import pytest

from mcpvisor.host.lsp import manager as lsp_manager
from tests.helpers import WAIT_S
from tests.host.lsp.test_lsp_host import basedpyright, pylsp, session, text

BOTH = {"lspServers": {"alpha": pylsp(), "beta": basedpyright()}}
"""pylsp first by name: it offers no call hierarchy and no implementations; basedpyright does."""


async def test_an_operation_goes_to_the_first_server_that_offers_it(tmp_path: Path) -> None:
    """Before, every call went to the first server by name: 'alpha does not offer incoming_calls', though beta,
    running beside it for the same files, does."""
    async with session(tmp_path, user=BOTH, watch=False) as s:
        hover = await s.ok("hover", file="models.py", symbol="make_user")
        assert hover["server"] == "alpha"
        calls = await s.ok("incoming_calls", file="models.py", symbol="make_user")
        assert calls["server"] == "beta"
        assert {call["symbol"]["loc"]["file"] for call in calls["calls"]} == {"service.py"}


async def test_the_caller_may_name_the_server(tmp_path: Path) -> None:
    async with session(tmp_path, user=BOTH, watch=False) as s:
        hover = await s.ok("hover", file="models.py", symbol="make_user", server="beta")
        assert hover["server"] == "beta"
        symbols = await s.ok("document_symbols", file="models.py", server="beta")
        assert symbols["server"] == "beta"
        unknown = await s.call("hover", file="models.py", symbol="make_user", server="gamma")
        assert unknown.is_error
        assert text(unknown) == "no language server 'gamma' is configured here (configured: 'alpha', 'beta')"
        unable = await s.call("incoming_calls", file="models.py", symbol="make_user", server="alpha")
        assert unable.is_error
        assert text(unable).startswith("language server 'alpha' does not offer incoming_calls (it offers: ")


async def test_a_call_naming_a_server_not_configured_says_which_are_and_one_for_other_files_says_which_answer(
    tmp_path: Path,
) -> None:
    """Before: naming a server configured nowhere said "language server 'nope' does not answer for '.py' files;
    'python' does", as if it were configured for other files."""
    user = {"lspServers": {"python": pylsp(), "markdown": pylsp(extensionToLanguage={".md": "markdown"})}}
    async with session(tmp_path, user=user, watch=False) as s:
        unknown = await s.call("hover", file="models.py", symbol="make_user", server="nope")
        assert text(unknown) == "no language server 'nope' is configured here (configured: 'markdown', 'python')"
        other = await s.call("hover", file="models.py", symbol="make_user", server="markdown")
        assert text(other) == "language server 'markdown' does not answer for '.py' files; 'python' does"
        checked = await s.call("diagnostics", files=["models.py"], server="nope")
        assert "no language server 'nope' is configured here (configured: 'markdown', 'python')" in text(checked)


async def test_no_server_offering_the_operation_names_each_and_what_it_offers(tmp_path: Path) -> None:
    async with session(tmp_path, user={"lspServers": {"alpha": pylsp(), "beta": pylsp()}}, watch=False) as s:
        result = await s.call("go_to_implementation", file="models.py", line=1, character=7)
        assert result.is_error
        why = text(result)
        assert why.startswith("no language server for '.py' files can answer go_to_implementation: ")
        assert "language server 'alpha' does not offer go_to_implementation (it offers: " in why
        assert "language server 'beta' does not offer go_to_implementation (it offers: " in why


async def test_diagnostics_check_the_files_they_can_and_say_why_not_the_others(tmp_path: Path) -> None:
    """Before, one file no server takes (or one not there) failed the whole call, and the others went unchecked."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        (s.layout.root / "bad.py").write_text("import os\n")
        (s.layout.root / "README.md").write_text("# notes\n")
        report = await s.ok("diagnostics", files=["bad.py", "README.md", "missing.py"])
        by_file = {entry["file"]: entry for entry in report["files"]}
        assert [d["message"] for d in by_file["bad.py"]["diagnostics"]] == ["'os' imported but unused"]
        assert by_file["README.md"]["problem"] == "no language server for '.md' files (configured for: .py)"
        assert by_file["missing.py"]["problem"].startswith("no such file 'missing.py' in the workspace ")
        shown = text(await s.call("diagnostics", files=["bad.py", "README.md"]))
        assert "README.md: not checked: no language server for '.md' files" in shown
        none = await s.call("diagnostics", files=["README.md", "missing.py"])
        assert none.is_error
        assert text(none) == (
            "README.md: no language server for '.md' files (configured for: .py); "
            f"missing.py: no such file 'missing.py' in the workspace {s.layout.root.resolve()}; name it relative to "
            "that folder, or by its absolute path"
        )


async def test_diagnostics_of_a_file_named_twice_report_it_once(tmp_path: Path) -> None:
    """Before, each naming was checked and reported: the same diagnostics (or the same problem) twice."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        (s.layout.root / "bad.py").write_text("import os\n")
        report = await s.ok("diagnostics", files=["bad.py", "./bad.py", "missing.py", "bad.py", "missing.py"])
        by_file = {entry["file"]: entry for entry in report["files"]}
        assert sorted(entry["file"] for entry in report["files"]) == ["bad.py", "missing.py"]
        assert [d["message"] for d in by_file["bad.py"]["diagnostics"]] == ["'os' imported but unused"]
        shown = text(await s.call("diagnostics", files=["bad.py", "bad.py"]))
        assert shown.count("'os' imported but unused") == 1


async def test_diagnostics_of_a_file_come_from_every_running_server_or_the_one_named(tmp_path: Path) -> None:
    """Before, named files got the first server's diagnostics only (no 'server' argument: basedpyright's type
    errors could not be had), and entries of two servers for one file could not be told apart."""
    async with session(tmp_path, user=BOTH, watch=False) as s:
        (s.layout.root / "bad.py").write_text('import os\n\nx: int = "text"\n')
        only_first = await s.ok("diagnostics", files=["bad.py"])  # none runs yet: the first is started
        assert [(f["file"], f["server"]) for f in only_first["files"]] == [("bad.py", "alpha")]
        typed = await s.ok("diagnostics", files=["bad.py"], server="beta", severity="error", wait_ms=20_000)
        [beta] = typed["files"]
        assert (beta["server"], beta["fresh"]) == ("beta", True), beta
        assert any(
            "is not assignable" in d["message"] or "cannot be assigned" in d["message"] for d in beta["diagnostics"]
        )
        both = await s.ok("diagnostics", files=["bad.py"])  # now both run
        assert sorted(f["server"] for f in both["files"]) == ["alpha", "beta"]
        shown = text(await s.call("diagnostics", files=["bad.py"]))
        assert "(pyflakes)" in shown
        assert "(basedpyright" in shown
        everywhere = await s.ok("diagnostics", server="beta")  # every open document, of that server
        assert {f["server"] for f in everywhere["files"]} == {"beta"}
        unknown = await s.call("diagnostics", server="gamma")
        assert text(unknown) == "no language server 'gamma' is configured here (configured: 'alpha', 'beta')"


async def test_a_file_outside_the_workspace_is_one_file_not_checked(tmp_path: Path) -> None:
    """Before, it failed the whole call, the other files unchecked."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        (s.layout.root / "bad.py").write_text("import os\n")
        report = await s.ok("diagnostics", files=["bad.py", "/etc/passwd"])
        by_file = {entry["file"]: entry for entry in report["files"]}
        assert by_file["bad.py"]["diagnostics"]
        assert "outside the workspace" in by_file["/etc/passwd"]["problem"]


async def test_references_cut_by_the_limit_count_the_files_of_those_shown(tmp_path: Path) -> None:
    """Before: '1 reference in 2 files', the files counted before the cut."""
    async with session(tmp_path, user={"lspServers": {"python": basedpyright()}}, watch=False) as s:
        refs = await s.ok("find_references", file="models.py", symbol="User", include_declaration=True, limit=1)
        assert refs["truncated"] is True
        assert (len(refs["references"]), refs["file_count"]) == (1, 1)


async def test_workspace_symbols_ask_every_server_at_once_and_name_those_that_could_not_answer(tmp_path: Path) -> None:
    """Before, each server was started and asked in turn (one that never answers initialize cost its whole
    startupTimeout first), and one that could not be asked was left out without a word."""
    hanging = {"command": "sleep", "args": ["1000"], "extensionToLanguage": {".hg": "hang"}, "startupTimeout": 3000}
    user = {"lspServers": {"a-hang": hanging, "python": basedpyright()}}
    async with session(tmp_path, user=user, watch=False) as s:
        found = await s.ok("workspace_symbols", query="make_user")
        assert {sym["server"] for sym in found["symbols"]} == {"python"}
        [skipped] = found["not_asked"]
        assert skipped.startswith("a-hang: ")
        shown = text(await s.call("workspace_symbols", query="make_user"))
        assert "(not asked: a-hang: " in shown


async def test_a_folder_linked_inside_the_workspace_names_each_file_once_by_its_real_place(tmp_path: Path) -> None:
    """Before, references came twice (shop/models.py and linkshop/models.py) and symbols under the link's name."""
    async with session(tmp_path, user={"lspServers": {"python": basedpyright()}}, watch=False) as s:
        shop = s.layout.root / "shop"
        shop.mkdir()
        (shop / "__init__.py").write_text("")
        (shop / "models.py").write_text((s.layout.root / "models.py").read_text())
        (shop / "use.py").write_text("from shop.models import User\n\nprint(User)\n")
        (s.layout.root / "linkshop").symlink_to("shop")
        files: list[str] = []
        with anyio.fail_after(WAIT_S):  # (asked again until the server has read use.py: a busy machine delays it)
            while "shop/use.py" not in files:
                refs = await s.ok("find_references", file="shop/models.py", symbol="User", include_declaration=True)
                files = [r["file"] for r in refs["references"]]
                assert not [f for f in files if f.startswith("linkshop/")], files
                assert len(files) == len(set(zip(files, [r["line"] for r in refs["references"]], strict=True)))
                await anyio.sleep(0.2)  # nothing to wait on but the server's own reading


async def test_pylsps_flat_symbols_point_at_names_a_request_finds_and_nest_by_depth(tmp_path: Path) -> None:
    """Before, pylsp's symbols pointed at ``class``/``def`` (a hover there found nothing) and ``depth`` did
    nothing; and a ``symbol`` given with a ``line`` and ``character`` was passed over for them."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        found = await s.ok("document_symbols", file="models.py")
        top = [(sym["name"], sym["loc"]["line"], sym["loc"]["character"]) for sym in found["symbols"]]
        assert top == [("User", 1, 7), ("make_user", 9, 5)]
        assert "greet" in [child["name"] for child in found["symbols"][0]["children"]]
        for name, line, character in top:
            hover = await s.ok("hover", file="models.py", line=line, character=character)
            assert name in hover["contents"]
        shallow = await s.ok("document_symbols", file="models.py", depth=0)
        assert [sym["children"] for sym in shallow["symbols"]] == [[], []]
        named = await s.ok("hover", file="models.py", symbol="make_user", line=1, character=7)  # (User's place)
        assert "make_user" in named["contents"]


async def test_diagnostics_naming_a_server_waiting_for_approval_say_so(tmp_path: Path) -> None:
    """Before: "no language server 'proj' is configured here", of a server configured in .lsp.json."""
    async with session(tmp_path, lsp_json={"proj": pylsp()}, user={"lspServers": {"python": pylsp()}}) as s:
        await s.ok("hover", file="models.py", symbol="make_user")  # the user's runs
        said = text(await s.call("diagnostics", server="proj"))
        assert said.startswith(
            f"language server 'proj' needs approval — run: mcpvisor lsp approve --workspace {s.layout.root} proj"
        ), said


async def test_a_server_that_does_not_offer_the_operation_names_the_one_beside_it_waiting_for_approval(
    tmp_path: Path,
) -> None:
    """Before, only 'alpha does not offer incoming_calls' was said, though approving the repository's beta, which
    takes the same files, is what makes the call answerable."""
    lsp_json = {"beta": basedpyright()}
    async with session(tmp_path, user={"lspServers": {"alpha": pylsp()}}, lsp_json=lsp_json, watch=False) as s:
        result = await s.call("incoming_calls", file="models.py", symbol="make_user")
        assert result.is_error
        why = text(result)
        assert why.startswith("no language server for '.py' files can answer incoming_calls: ")
        assert "language server 'alpha' does not offer incoming_calls (it offers: " in why
        approve = f"mcpvisor lsp approve --workspace {s.layout.root} beta"
        assert why.endswith(f"language server 'beta' needs approval — run: {approve}")
        assert s.pid("beta") is None


async def test_a_call_naming_a_server_waiting_for_approval_says_so(tmp_path: Path) -> None:
    """Before: "language server 'beta' does not answer for '.py' files; 'alpha' do", of the repository's beta, which
    takes .py files and only waits for the user's approval."""
    lsp_json = {"beta": basedpyright()}
    async with session(tmp_path, user={"lspServers": {"alpha": pylsp()}}, lsp_json=lsp_json, watch=False) as s:
        approve = f"mcpvisor lsp approve --workspace {s.layout.root} beta"
        hover = await s.call("hover", file="models.py", symbol="make_user", server="beta")
        assert text(hover) == f"language server 'beta' needs approval — run: {approve}"
        checked = await s.call("diagnostics", files=["models.py"], server="beta")
        assert text(checked) == f"language server 'beta' needs approval — run: {approve}"
        unknown = await s.call("hover", file="models.py", symbol="make_user", server="gamma")
        assert text(unknown) == "no language server 'gamma' is configured here (configured: 'alpha', 'beta')"
        assert s.pid("beta") is None


async def test_workspace_symbols_no_running_server_offers_name_the_one_waiting_for_approval(tmp_path: Path) -> None:
    """pylsp has no workspace/symbol; basedpyright, from the repository, waits for approval. Before, the call said only
    "no running language server here searches the workspace", not that approving beta would answer it."""
    lsp_json = {"beta": basedpyright()}
    async with session(tmp_path, user={"lspServers": {"alpha": pylsp()}}, lsp_json=lsp_json, watch=False) as s:
        approve = f"mcpvisor lsp approve --workspace {s.layout.root} beta"
        result = await s.call("workspace_symbols", query="User")
        assert text(result) == (
            "no running language server here searches the workspace (workspace/symbol); language server 'beta' needs "
            f"approval — run: {approve}"
        )
        assert s.pid("beta") is None


async def test_workspace_symbols_of_a_language_no_server_takes_say_which_languages_they_take(tmp_path: Path) -> None:
    """Before: "no language server for 'rust' may run", as if one were configured and held back."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        of_rust = await s.call("workspace_symbols", query="User", language="rust")
        assert of_rust.is_error
        assert text(of_rust) == "no language server for 'rust' (configured for: python)"


async def test_a_server_that_failed_to_start_is_passed_over_for_the_next_until_reload_saying_so_once(
    tmp_path: Path,
) -> None:
    """Every call started the failed server again, waited for it to fail, then asked the next one, without a word."""
    script = "import sys; print('no licence', file=sys.stderr); sys.exit(3)"
    broken = {"command": sys.executable, "args": ["-c", script], "extensionToLanguage": {".py": "python"}}
    async with session(tmp_path, user={"lspServers": {"alpha": broken, "beta": pylsp()}}, watch=False) as s:
        alpha = s.host.lsp.manager.servers()["alpha"]
        said = (
            f"language server 'alpha' failed — exited with code 3: no licence; see its log {alpha.log_path}; 'beta' "
            "answers for its files until it starts again when its entry is saved (or on /reload in the shell)"
        )
        first = await s.call("hover", file="models.py", symbol="make_user")
        assert not first.is_error, text(first)
        assert text(first).startswith(said + "\n")
        assert first.structured_content is not None
        assert first.structured_content["server"] == "beta"
        again = await s.call("document_symbols", file="models.py")
        assert not again.is_error
        assert "alpha" not in text(again), text(again)
        assert (alpha.state, alpha.crashes) == ("failed", 1)  # not started again
        symbols = await s.call("workspace_symbols", query="make_user")  # (pylsp does not search the workspace)
        assert text(symbols).endswith(f"; language server 'alpha' failed — {alpha.last_error}")
        assert alpha.crashes == 1
        await s.host.lsp.reload(retry=True)  # /reload: it is tried again, and said again when it fails
        retried = await s.call("hover", file="models.py", symbol="make_user")
        assert text(retried).startswith(said + "\n")
        assert alpha.crashes == 2


async def test_a_failed_server_passed_over_is_tried_again_when_no_other_offers_the_operation(tmp_path: Path) -> None:
    """Passed over while pylsp answered, basedpyright (failing at its first start only) is still the one asked for
    incoming calls, which pylsp does not offer."""
    once = tmp_path / "failed-once"
    bp = basedpyright()
    script = (
        f"import os, sys; m = {str(once)!r}\n"
        "if not os.path.exists(m): open(m, 'w').close(); sys.exit(3)\n"
        f"os.execv({bp['command']!r}, [{bp['command']!r}, '--stdio'])"
    )
    flaky = {"command": sys.executable, "args": ["-c", script], "extensionToLanguage": {".py": "python"}}
    async with session(tmp_path, user={"lspServers": {"alpha": flaky, "beta": pylsp()}}, watch=False) as s:
        hover = await s.call("hover", file="models.py", symbol="make_user")
        assert text(hover).startswith("language server 'alpha' failed — exited with code 3")
        calls = await s.ok("incoming_calls", file="models.py", symbol="make_user")
        assert calls["server"] == "alpha"


async def test_diagnostics_no_server_can_give_name_the_operation(tmp_path: Path) -> None:
    """It read "no language server for '.py' files can answer None"."""
    script = "import sys; sys.exit(3)"
    broken = {"command": sys.executable, "args": ["-c", script], "extensionToLanguage": {".py": "python"}}
    async with session(tmp_path, user={"lspServers": {"alpha": broken, "beta": broken}}, watch=False) as s:
        result = await s.call("diagnostics", files=["models.py"])
        assert result.is_error
        assert text(result).startswith(
            "no language server for '.py' files can answer diagnostics: language server 'alpha' failed — exited with "
            "code 3"
        ), text(result)


async def test_a_failed_server_passed_over_says_in_its_status_which_server_answers_for_it_and_until_when(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its status row read only "failed", though calls for its files went to another server until its crash's pause
    ended, its entry was saved or /reload."""
    monkeypatch.setattr(lsp_manager, "BACKOFF_INITIAL_S", 20.0)
    script = "import sys; sys.exit(3)"
    broken = {"command": sys.executable, "args": ["-c", script], "extensionToLanguage": {".py": "python"}}
    user = {"lspServers": {"a": {**broken, "restartOnCrash": True}, "b": broken, "c": pylsp()}}
    async with session(tmp_path, user=user, watch=False) as s:
        hover = await s.ok("hover", file="models.py", symbol="make_user")
        assert hover["server"] == "c"
        rows = {row["name"]: row["state"] for row in (await s.ok("status"))["servers"]}
        paused = re.fullmatch(r"failed — 'c' answers for its files until it starts again in (\d+) s", rows["a"])
        assert paused is not None, rows["a"]
        assert 0 < int(paused[1]) <= 20
        assert rows["b"] == (
            "failed — 'c' answers for its files until it starts again when its entry is saved (or on /reload in the "
            "shell)"
        )
        assert {view.name: view.state for view in s.host.lsp.views()}["b"] == rows["b"]  # mcpvisor status, /mcp
        await s.host.lsp.reload(retry=True)  # /reload: the next call tries them first again
        rows = {row["name"]: row["state"] for row in (await s.ok("status"))["servers"]}
        assert (rows["a"], rows["b"]) == ("failed", "failed")
        await s.ok("hover", file="models.py", symbol="make_user")  # b fails again: given up
        [b] = [row for row in (await s.ok("status"))["servers"] if row["name"] == "b"]
        assert b["state"] == (
            "failed 2 times in a row; it starts again when its entry is saved (or on /reload in the shell); "
            "'c' answers for its files meanwhile"
        )
