"""Language servers in a running host, with the real python-lsp-server (pylsp + pyflakes): the approval gate,
the tools, fresh diagnostics, incremental reloads through the real watcher, lazy start and idle stop."""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp_types import CallToolResult, TextContent

from mcpvisor.core.errors import ToolNotFoundError
from mcpvisor.host.host import Host, HostEvent, HostOptions
from mcpvisor.host.lsp import manager as lsp_manager
from mcpvisor.host.lsp.events import LspServerChanged
from mcpvisor.host.lsp.server import LanguageServer
from tests.helpers import WAIT_S, paste_elsewhere, pid_alive, wait_until
from tests.layout import Layout, make_layout, replace_text

MODELS = """class User:
    def __init__(self, name: str) -> None:
        self.name = name

    def greet(self) -> str:
        return "hi " + self.name


def make_user(name: str) -> User:
    return User(name)
"""
SERVICE = """from models import User, make_user

u = make_user("a")
s = "😀😀"; y = make_user("z")
print(u.greet(), User, y)
"""


def basedpyright() -> dict[str, Any]:
    """basedpyright (PyPI): a type checker whose positions are UTF-16 columns as LSP says (pylsp hands the
    wire's column to jedi as a code point index)."""
    command = Path(sys.executable).with_name("basedpyright-langserver")
    return {"command": str(command), "args": ["--stdio"], "extensionToLanguage": {".py": "python"}}


def pylsp(**more: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", "pylsp"], "extensionToLanguage": {".py": "python"}, **more}


def text(result: CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


@dataclass
class Session:
    layout: Layout
    host: Host
    events: list[HostEvent] = field(default_factory=list)

    async def call(self, tool: str, **arguments: Any) -> CallToolResult:
        return await self.host.config.call_tool(f"mcp__lsp__{tool}", arguments)

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.call(tool, **arguments)
        assert not result.is_error, text(result)
        content: dict[str, Any] | None = result.structured_content
        assert content is not None
        return content

    def pid(self, name: str) -> int | None:
        server = self.host.lsp.manager.servers().get(name)
        return server.pid if server is not None and server.state == "ready" else None


def language_server_processes(root: Path) -> list[psutil.Process]:
    """Live processes running pylsp in ``root`` (whoever started them)."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd", "status"]):
        try:
            cmdline, cwd = process.info["cmdline"] or [], process.info["cwd"]
        except (psutil.Error, KeyError):
            continue
        if process.info["status"] != psutil.STATUS_ZOMBIE and "pylsp" in cmdline and cwd == str(root):
            found.append(process)
    return found


@asynccontextmanager
async def session(
    tmp_path: Path,
    *,
    lsp_json: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    watch: bool = True,
    allowed_lsp: list[str] | None = None,
    **env: str,
) -> AsyncIterator[Session]:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"), **env)
    (layout.root / "models.py").write_text(MODELS)
    (layout.root / "service.py").write_text(SERVICE)
    if lsp_json is not None:
        replace_text(layout.root / ".lsp.json", json.dumps(lsp_json))
    if user is not None:
        replace_text(layout.paths.user, json.dumps(user))
    host = Host(HostOptions(env=layout.env, workspace=layout.root, watch=watch, allowed_lsp_server_names=allowed_lsp))
    s = Session(layout, host)
    host.subscribe(s.events.append)
    async with host:
        yield s
    await wait_until(lambda: not language_server_processes(layout.root), what="no language server left")


async def crash_twice(s: Session, server: LanguageServer) -> None:
    """Start ``server`` by a call and kill it, twice in a row (``maxRestarts`` 1 or less: given up)."""
    for _ in range(2):
        await s.ok("document_symbols", file="models.py")
        [process] = [p for p in language_server_processes(s.layout.root) if p.pid != server.pid]
        process.kill()
        await wait_until(lambda: server.state == "failed", what="the crash to be seen through")


async def test_nothing_spawns_before_approval_and_after_it_the_tools_answer(tmp_path: Path) -> None:
    async with session(tmp_path, lsp_json={"python": pylsp()}, watch=False) as s:
        assert "mcp__lsp__go_to_definition" in s.host.config.tool_registry.names()
        refused = await s.call("go_to_definition", file="service.py", line=3, character=6)
        assert refused.is_error
        assert text(refused) == (
            f"language server 'python' needs approval — run: mcpvisor lsp approve --workspace {s.layout.root} python"
        )  # a command that works wherever it is run
        assert not language_server_processes(s.layout.root)
        status = await s.ok("status")
        assert status["servers"][0]["state"] == (
            f"needs approval — run: mcpvisor lsp approve --workspace {s.layout.root} python"
        )

        await s.host.lsp.decide("python", "approve")
        found = await s.ok("go_to_definition", file="service.py", line=3, character=6)
        assert [(loc["file"], loc["line"], loc["character"]) for loc in found["locations"]] == [("models.py", 9, 5)]
        assert found["locations"][0]["preview"] == "def make_user(name: str) -> User:"
        by_name = await s.ok("find_references", file="models.py", symbol="User")
        assert {(r["file"], r["line"]) for r in by_name["references"]} >= {("models.py", 10), ("service.py", 5)}
        hover = await s.ok("hover", file=str(s.layout.root / "service.py"), line=3, character=6)
        assert "make_user(name: str) -> User" in hover["contents"]
        symbols = await s.ok("document_symbols", file="models.py")
        assert [sym["name"] for sym in symbols["symbols"]][:1] == ["User"]
        assert language_server_processes(s.layout.root)


async def test_positions_are_1_based_characters_whatever_utf_16_makes_of_them(tmp_path: Path) -> None:
    """Line 4 of service.py has two emoji before ``make_user``: each is one character for the tool and two
    UTF-16 units on the wire; a position sent as code points would miss the name."""
    async with session(tmp_path, user={"lspServers": {"python": basedpyright()}}, watch=False) as s:
        line = SERVICE.splitlines()[3]
        column = line.index("make_user") + 1
        for character in (column, column + len("make_user") - 1):  # the first and the last character of the name
            found = await s.ok("go_to_definition", file="service.py", line=4, character=character)
            assert [(loc["file"], loc["line"]) for loc in found["locations"]] == [("models.py", 9)]
        refs = await s.ok("find_references", file="models.py", symbol="make_user", include_declaration=True)
        at = [(r["line"], r["character"]) for r in refs["references"] if r["file"] == "service.py"]
        assert (4, column) in at  # and back: the wire's column comes home as the character a person counts


async def test_a_fix_on_disk_clears_the_diagnostic_and_answers_say_how_fresh_they_are(tmp_path: Path) -> None:
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        bad = s.layout.root / "bad.py"
        bad.write_text("import os\nx = undefined_name\n")
        report = await s.ok("diagnostics", files=["bad.py"])
        [file] = report["files"]
        assert file["fresh"] is True
        messages = [d["message"] for d in file["diagnostics"]]
        assert "undefined name 'undefined_name'" in messages
        assert "'os' imported but unused" in messages
        bad.write_text("import os\nx = os.sep\n")  # the agent fixed it behind the server's back
        fixed = await s.ok("diagnostics", files=["bad.py"])
        assert fixed["files"] == [
            {"file": "bad.py", "server": "python", "fresh": True, "diagnostics": [], "problem": None}
        ]
        errors_only = await s.ok("diagnostics", severity="error")  # every open document
        assert {f["file"] for f in errors_only["files"]} == {"bad.py"}


async def test_calls_that_cannot_be_answered_say_why(tmp_path: Path) -> None:
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        (s.layout.root / "main.rs").write_text("fn main() {}\n")
        cases = {
            ("go_to_definition", "main.rs"): "no language server for '.rs' files (configured for: .py)",
            ("go_to_definition", "../outside.py"): "is outside the workspace",
            ("go_to_definition", "missing.py"): "no such file 'missing.py' in the workspace",
            ("go_to_implementation", "models.py"): "does not offer go_to_implementation",
        }
        for (tool, file), why in cases.items():
            result = await s.call(tool, file=file, line=1, character=1)
            assert result.is_error, (tool, file)
            assert why in text(result), text(result)
        no_symbol = await s.call("hover", file="models.py", symbol="Nobody")
        assert text(no_symbol) == "no symbol 'Nobody' in models.py; list them with document_symbols"
        past = await s.call("hover", file="models.py", line=500, character=1)
        assert "line 500 is past the end of models.py (10 lines)" in text(past)
        wrong = {  # what the input schema says, not a guess: true is no line, "bogus" no severity
            ("hover", '{"line": true}'): "hover: line: True is not of type 'integer'",
            ("diagnostics", '{"severity": "bogus"}'): "diagnostics: severity: 'bogus' is not one of ['error',",
            ("diagnostics", '{"wait_ms": -5}'): "diagnostics: wait_ms: -5 is less than the minimum of 0",
        }
        for (tool, written), why in wrong.items():
            arguments = {"file": "models.py", "character": 1} if tool == "hover" else {}
            result = await s.call(tool, **arguments, **json.loads(written))
            assert result.is_error, (tool, written)
            assert text(result).startswith(why), text(result)
        by_symbol = await s.call("hover", file="models.py", symbol="User", line=None, character=None)
        assert not by_symbol.is_error, text(by_symbol)  # null is "not given", as clients send it
        whole = await s.call("go_to_definition", file="service.py", line=3.0, character=6.0)
        assert not whole.is_error, text(whole)  # 3.0 is the number 3
        past_the_line = await s.call("hover", file="models.py", line=1, character=999)
        assert past_the_line.is_error
        assert text(past_the_line) == "character 999 is past the end of models.py:1 (11 characters)"
        misnamed = await s.call("diagnostics", file="../../etc/passwd.py")  # it takes 'files'
        assert misnamed.is_error
        assert text(misnamed).startswith("diagnostics has no argument 'file'; it takes: ")
        assert "files" in text(misnamed)


async def test_a_call_for_a_file_only_an_invalid_entry_claims_says_the_entry_is_invalid_where_and_the_fix(
    tmp_path: Path,
) -> None:
    """Before: "no language server for '.rs' files (configured for: .py)", as if none had been written for them."""
    rust = {"command": ["rust-analyzer"], "extensionToLanguage": {".rs": "rust"}}
    async with session(tmp_path, user={"lspServers": {"python": pylsp(), "rust": rust}}, watch=False) as s:
        (s.layout.root / "main.rs").write_text("fn main() {}\n")
        result = await s.call("hover", file="main.rs", line=1, character=4)
        assert result.is_error
        assert text(result) == (
            f"language server 'rust' for '.rs' files is not started: its entry in {s.layout.paths.user} is invalid — "
            "command: expected a string; fix lspServers.rust"
        )


async def test_a_file_uri_names_its_file_and_a_folder_is_said_to_be_one(tmp_path: Path) -> None:
    """Before, both were "no such file": agents pass the file:// URIs language servers and editors use."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        uri = (s.layout.root / "service.py").as_uri()
        hover = await s.ok("hover", file=uri, line=3, character=6)
        assert "make_user(name: str) -> User" in hover["contents"]
        checked = await s.ok("diagnostics", files=[uri])
        assert [f["file"] for f in checked["files"]] == ["service.py"]
        (s.layout.root / "pkg").mkdir()
        folder = await s.call("document_symbols", file="pkg")
        assert text(folder) == "'pkg' is a folder, not a file; name a file in it"
        outside = (tmp_path / "elsewhere.py").as_uri()
        refused = await s.call("hover", file=outside, line=1, character=1)
        assert text(refused) == f"file {outside!r} is outside the workspace {s.layout.root}; name a file inside it"


async def test_a_failure_shows_the_command_line_as_written_never_what_a_variable_stands_for(tmp_path: Path) -> None:
    user = {"lspServers": {"python": pylsp(command="${LSPCMD}", args=["--token", "${TOK}"])}}
    secrets = {"LSPCMD": "/nonexistent/s3cret-cmd-xyz", "TOK": "tok-s3cret-999"}
    async with session(tmp_path, user=user, watch=False, LSPCMD=secrets["LSPCMD"], TOK=secrets["TOK"]) as s:
        failed = await s.call("hover", file="service.py", line=3, character=6)
        assert failed.is_error
        assert text(failed) == (
            "language server 'python' failed — exited with code 127: cannot start ${LSPCMD}: No such file or "
            "directory; check lspServers.python.command"
        )
        status = await s.ok("status")
        shown = json.dumps(status) + text(await s.call("hover", file="service.py", line=3, character=6))
        assert "cannot start ${LSPCMD}" in shown
        assert not any(secret in shown for secret in secrets.values())


async def test_a_command_not_found_names_the_field_to_fix_once_it_failed_as_before_its_first_use(
    tmp_path: Path,
) -> None:
    """Before its first use, status said "its command 'no-such-langserver' is not found …: fix
    lspServers.python.command"; once a call had tried it, only "cannot start no-such-langserver: No such file or
    directory", with no word of where to fix it (an MCP server's says "check mcpServers.NAME.command")."""
    user = {"lspServers": {"python": pylsp(command="no-such-langserver", args=[])}}
    async with session(tmp_path, user=user, watch=False) as s:
        failed = await s.call("hover", file="service.py", line=3, character=6)
        assert text(failed) == (
            "language server 'python' failed — exited with code 127: cannot start no-such-langserver: No such file "
            "or directory; check lspServers.python.command"
        )
        [entry] = (await s.ok("status"))["servers"]
        assert entry["last_error"].endswith("; check lspServers.python.command"), entry


async def test_the_status_tool_says_a_command_not_found_before_its_first_use_as_mcpvisor_status_does(
    tmp_path: Path,
) -> None:
    """mcpvisor status said the first use would fail; the status tool an agent calls said "stopped (starts on first
    use)"."""
    user = {"lspServers": {"python": pylsp(command="no-such-langserver", args=[])}}
    async with session(tmp_path, user=user, watch=False) as s:
        said = (
            "stopped — its command 'no-such-langserver' is not found, so its first use will fail: fix "
            "lspServers.python.command"
        )
        [entry] = (await s.ok("status"))["servers"]
        assert entry["state"] == said
        [view] = s.host.lsp.views()
        assert view.state == said


async def test_an_mcp_server_named_lsp_takes_the_name_and_the_language_server_tools_move_aside(tmp_path: Path) -> None:
    lsp_server = {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server", "--name", "lsp"]}
    both = {"lspServers": {"python": pylsp()}, "mcpServers": {"lsp": lsp_server}}
    async with session(tmp_path, user=both, watch=False) as s:
        tools = s.host.config.tool_registry.names()
        assert "mcp__lsp__echo" in tools
        assert "mcp__lsp_1__hover" in tools
        echo = await s.host.config.call_tool("mcp__lsp__echo", {"text": "hi"})
        assert text(echo) == "lsp:echo:hi"
        status = await s.host.config.call_tool("mcp__lsp_1__status", {})
        assert not status.is_error, text(status)

        replace_text(s.layout.paths.user, json.dumps({"lspServers": {"python": pylsp()}}))
        await s.host.reload()  # the MCP server is gone: the tools have their name back
        tools = s.host.config.tool_registry.names()
        assert "mcp__lsp__hover" in tools
        assert not any(name.startswith("mcp__lsp_1__") for name in tools)

        replace_text(s.layout.paths.user, json.dumps(both))
        await s.host.reload()  # added mid-session: it takes the name again, nothing is routed to the wrong one
        tools = s.host.config.tool_registry.names()
        assert {"mcp__lsp__echo", "mcp__lsp_1__hover"} <= set(tools)
        assert "mcp__lsp__hover" not in tools
        assert text(await s.host.config.call_tool("mcp__lsp__echo", {"text": "again"})) == "lsp:echo:again"
        assert not (await s.host.config.call_tool("mcp__lsp_1__status", {})).is_error


async def test_a_call_of_a_language_server_tool_by_the_name_an_mcp_server_took_says_where_the_tool_is(
    tmp_path: Path,
) -> None:
    """Before, mcp__lsp__hover with an MCP server named lsp said the server does not provide it (renamed or filtered
    out?), and with that server excluded, to take it out of mcp.excluded: neither gave the language server back."""
    lsp_server = {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server", "--name", "lsp"]}
    both = {"lspServers": {"python": pylsp()}, "mcpServers": {"lsp": lsp_server}}
    said = (
        "tool 'mcp__lsp__hover' is unavailable: MCP server 'lsp' has the name of mcpvisor's own 'lsp' tools, served "
        "as mcp__lsp_1__* meanwhile; call mcp__lsp_1__hover, or rename MCP server 'lsp' in your settings to give them "
        "their name back"
    )
    async with session(tmp_path, user=both, watch=False) as s:
        for settings in (both, {**both, "mcp": {"excluded": ["lsp"]}}):
            replace_text(s.layout.paths.user, json.dumps(settings))
            await s.host.reload()
            with pytest.raises(ToolNotFoundError) as caught:
                await s.host.config.call_tool("mcp__lsp__hover", {"file": "models.py", "line": 1, "character": 7})
            assert str(caught.value) == said
            assert (caught.value.server, caught.value.reason) == ("lsp", "moved")
        with pytest.raises(ToolNotFoundError) as caught:  # a tool neither has is the MCP server's, as before
            await s.host.config.call_tool("mcp__lsp__nothing", {})
        assert caught.value.reason == "excluded"


async def test_a_repositorys_mcp_server_may_not_take_the_language_server_tools_name(tmp_path: Path) -> None:
    # Pending or approved, it would move the tools, then take calls and allow-lists that name mcp__lsp__*.
    lsp_server = {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server", "--name", "lsp"]}
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        replace_text(s.layout.paths.project, json.dumps({"mcpServers": {"lsp": lsp_server, "ok": lsp_server}}))
        await s.host.reload()
        assert "ok" in s.host.config.get_merged_mcp_servers()
        assert "lsp" not in s.host.config.get_merged_mcp_servers()
        tools = s.host.config.tool_registry.names()
        assert "mcp__lsp__hover" in tools
        assert not any(name.startswith("mcp__lsp_1__") for name in tools)
        said = " ".join(str(getattr(e, "message", "")) for e in s.events)
        assert (
            f"skipped MCP server 'lsp' in {s.layout.paths.project}: 'lsp' names the language server tools "
            "(mcp__lsp__*), which a repository's server may not take; rename it in mcpServers.lsp"
        ) in said


async def test_a_crashed_server_stops_reading_as_ready_at_once_and_the_next_call_starts_it_again(
    tmp_path: Path,
) -> None:
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        await s.ok("hover", file="service.py", line=3, character=6)
        server = s.host.lsp.manager.servers()["python"]
        [pylsp_process] = [p for p in language_server_processes(s.layout.root) if p.pid != server.pid]
        seen: list[str] = []
        s.host.subscribe(lambda event: seen.append(event.state) if isinstance(event, LspServerChanged) else None)
        pylsp_process.kill()
        await wait_until(lambda: server.state == "failed", what="the crash to be seen through")
        assert seen[:2] == ["stopping", "failed"]  # never "ready" while what is left of it is cleaned up
        again = await s.ok("hover", file="service.py", line=3, character=6)  # started again on demand
        assert "make_user" in again["contents"]


async def test_the_pid_status_shows_killed_with_sigkill_ends_the_server_and_reads_as_failed(tmp_path: Path) -> None:
    """Before, killing the pid status shows (the reaper's) with kill -9 left pylsp running unseen, its parent gone,
    and status read ready with that dead pid."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        await s.ok("hover", file="service.py", line=3, character=6)
        server = s.host.lsp.manager.servers()["python"]
        shown = server.pid
        assert shown is not None
        os.kill(shown, signal.SIGKILL)
        await wait_until(lambda: server.state == "failed", what="the kill to be seen through")
        assert server.last_error is not None
        assert server.last_error.startswith("the process was killed by SIGKILL")
        await wait_until(lambda: not language_server_processes(s.layout.root), what="pylsp to end with its reaper")
        again = await s.ok("hover", file="service.py", line=3, character=6)  # started again on demand
        assert "make_user" in again["contents"]
        assert s.pid("python") not in (None, shown)


async def test_a_folder_that_is_not_there_is_named_with_the_field_to_fix(tmp_path: Path) -> None:
    user = {"lspServers": {"python": pylsp(workspaceFolder="nonexist")}}
    async with session(tmp_path, user=user, watch=False) as s:
        failed = await s.call("hover", file="service.py", line=3, character=6)
        assert text(failed) == (
            f"language server 'python' failed — could not be started: its folder {s.layout.root.resolve()}/nonexist "
            "is not there; fix lspServers.python.workspaceFolder"
        )


async def test_an_edit_of_one_entry_restarts_and_re_asks_for_that_one_alone(tmp_path: Path) -> None:
    entries = {"python": pylsp(), "stubs": pylsp(extensionToLanguage={".pyi": "python"})}
    async with session(tmp_path, lsp_json=entries) as s:
        (s.layout.root / "api.pyi").write_text("def f(x: int) -> int: ...\n")
        for name in entries:
            await s.host.lsp.decide(name, "approve")
        await s.ok("document_symbols", file="models.py")
        await s.ok("document_symbols", file="api.pyi")
        python_pid, stubs_pid = s.pid("python"), s.pid("stubs")
        assert python_pid is not None
        assert stubs_pid is not None
        old_stubs = weakref.ref(s.host.lsp.manager.servers()["stubs"])

        edited = {**entries, "stubs": pylsp(extensionToLanguage={".pyi": "python"}, args=["-m", "pylsp", "-v"])}
        replace_text(s.layout.root / ".lsp.json", json.dumps(edited))
        await wait_until(lambda: s.host.lsp.state.reason("stubs") == "pending_approval", what="stubs to wait again")
        await wait_until(lambda: not pid_alive(stubs_pid), what="the old stubs server to stop")
        assert s.pid("python") == python_pid
        # The replaced server (and its open documents) is let go once stopped: it was kept for ever.
        await wait_until(lambda: gc.collect() >= 0 and old_stubs() is None, what="the old server to be let go")
        await s.ok("hover", file="models.py", symbol="make_user")  # the other kept answering, same process
        assert s.pid("python") == python_pid
        refused = await s.call("document_symbols", file="api.pyi")
        assert text(refused).startswith(
            f"language server 'stubs' needs approval — run: mcpvisor lsp approve --workspace {s.layout.root} stubs"
        )


async def test_a_settings_only_edit_is_sent_live_and_restarts_nothing(tmp_path: Path) -> None:
    user = {"lspServers": {"python": pylsp()}}
    async with session(tmp_path, user=user) as s:
        bad = s.layout.root / "bad.py"
        bad.write_text("x = undefined_name\n")
        first = await s.ok("diagnostics", files=["bad.py"])
        assert first["files"][0]["diagnostics"]
        pid = s.pid("python")
        quiet = pylsp(settings={"pylsp": {"plugins": {"pyflakes": {"enabled": False}}}})
        replace_text(s.layout.paths.user, json.dumps({"lspServers": {"python": quiet}}))
        await wait_until(lambda: s.host.lsp.manager.servers()["python"].config.settings is not None, what="the edit")
        assert s.host.lsp.manager.last_plan.reconfigure == ("python",)
        bad.write_text("x = undefined_name  # touched\n")
        after = await s.ok("diagnostics", files=["bad.py"])
        assert after["files"][0] == {
            "file": "bad.py",
            "server": "python",
            "fresh": True,
            "diagnostics": [],
            "problem": None,
        }
        assert s.pid("python") == pid


async def test_servers_start_on_first_use_and_stop_when_idle(tmp_path: Path) -> None:
    user = {"lspServers": {"python": pylsp()}, "lsp": {"idleStopSeconds": 1}}
    async with session(tmp_path, user=user) as s:
        assert s.host.lsp.manager.servers()["python"].state == "stopped"
        assert not language_server_processes(s.layout.root)
        await s.ok("document_symbols", file="models.py")
        pid = s.pid("python")
        assert pid is not None
        server = s.host.lsp.manager.servers()["python"]
        await wait_until(
            lambda: not pid_alive(pid) and server.state == "stopped", timeout_s=WAIT_S, what="the idle server to stop"
        )  # its process gone *and* its stop finished (under load the first comes well before the second)
        status = await s.ok("status")
        assert status["servers"][0]["state"] == "idle"
        await s.ok("document_symbols", file="models.py")  # starts again on the next call
        ready = [e.pid for e in s.events if isinstance(e, LspServerChanged) and e.state == "ready"]
        assert len(ready) == 2  # (its pid read from the events: under load it may be idle and stopped again by now)
        assert ready[1] not in (None, pid)


async def test_diagnostics_of_no_file_after_an_idle_stop_say_the_server_stopped_while_idle_and_how_to_start_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said "no document is open yet", as if nothing had ever been opened."""
    monkeypatch.setattr(lsp_manager, "IDLE_CHECK_S", 0.05)
    user = {"lspServers": {"python": pylsp()}, "lsp": {"idleStopSeconds": 0.5}}
    async with session(tmp_path, user=user, watch=False) as s:
        fresh = await s.call("diagnostics")
        assert text(fresh) == "no document is open yet: name the 'files' to check"
        await s.ok("document_symbols", file="models.py")
        server = s.host.lsp.manager.servers()["python"]
        await wait_until(lambda: server.state == "stopped", what="the idle server to stop")
        after = await s.call("diagnostics")
        assert after.is_error
        assert text(after) == (
            "language server 'python' was stopped while idle (lsp.idleStopSeconds), so no document is open: name the "
            "'files' to check; naming them, or any call for a file, starts it again"
        )
        assert (await s.ok("diagnostics", files=["models.py"]))["files"][0]["server"] == "python"


async def test_the_status_tool_shows_an_invalid_entry_and_a_lsp_json_that_does_not_parse(tmp_path: Path) -> None:
    """It listed only the valid entries, and said nothing of a .lsp.json saved with a syntax error."""
    lsp_json = {"python": pylsp(), "rust": {"command": "rust-analyzer"}}
    async with session(tmp_path, lsp_json=lsp_json) as s:
        lsp_file = s.layout.root / ".lsp.json"
        rows = {row["name"]: row["state"] for row in (await s.ok("status"))["servers"]}
        assert rows["rust"] == (
            f"invalid entry in {lsp_file}, not started — extensionToLanguage: required, e.g. "
            '{".py": "python"}: files are routed by extension; fix rust'
        )
        replace_text(lsp_file, '{"python": {')
        await wait_until(lambda: "lsp_project" in s.host.settings.errors, what="the bad save to be read")
        status = await s.ok("status")
        assert status["problems"] == [
            f"invalid settings file {lsp_file}:1:13: unexpected end of input — until it is fixed, its last good "
            "configuration (if any) stays in force"
        ]
        assert [row["name"] for row in status["servers"]] == ["python", "rust"]  # the last good ones


async def test_with_every_entry_invalid_the_tools_are_listed_and_a_call_says_what_to_fix(tmp_path: Path) -> None:
    """The tools were listed only while a valid entry was there: with every entry invalid an agent had no tool, and
    never learnt that a language server was meant to run, nor what to fix."""
    bad = pylsp(startupTimeout=-1)
    async with session(tmp_path, user={"lspServers": {"python": bad}}, watch=False) as s:
        assert "mcp__lsp__hover" in s.host.config.tool_registry.names()
        where = f"its entry in {s.layout.paths.user} is invalid — startupTimeout: must be a positive number of "
        fix = "milliseconds; fix lspServers.python"
        why = f"language server 'python' is not started: {where}{fix}"
        hover = await s.call("hover", file="models.py", line=1, character=1)
        assert text(hover) == f"language server 'python' for '.py' files is not started: {where}{fix}"
        (s.layout.root / "main.rs").write_text("fn main() {}\n")
        other = await s.call("hover", file="main.rs", line=1, character=1)
        assert (
            text(other) == f"no language server for '.rs' files; language server 'python' is not started: {where}{fix}"
        )
        search = await s.call("workspace_symbols", query="User")
        assert text(search) == f"no language server can run here; {why}"
        [row] = (await s.ok("status"))["servers"]
        assert row["state"].startswith(f"invalid entry in {s.layout.paths.user}, not started — ")


async def test_a_diagnostics_call_waiting_for_published_diagnostics_keeps_its_server_from_stopping_as_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call waiting for published diagnostics (``wait_ms``) did not count as a use: with ``lsp.idleStopSeconds``
    shorter than the wait, the server was stopped as idle under it, and the call answered only at the end of its
    wait, with no fresh diagnostics. Here pylsp's checker (pylint, a slow one) finishes only once the idle check
    has looked at the server after its idle time ran out."""
    monkeypatch.setattr(lsp_manager, "IDLE_CHECK_S", 0.05)
    started, release = tmp_path / "checker-started", tmp_path / "checker-release"
    checker = tmp_path / "slow-pylint"
    checker.write_text(f'#!/bin/sh\ntouch "{started}"\nwhile [ ! -e "{release}" ]; do sleep 0.05; done\n')
    checker.chmod(0o755)
    off = {"enabled": False}
    plugins = {
        "pyflakes": off,
        "pycodestyle": off,
        "mccabe": off,
        "pylint": {"enabled": True, "executable": str(checker)},
    }
    idle_stop_s = 0.2
    user = {
        "lspServers": {"python": pylsp(settings={"pylsp": {"plugins": plugins}})},
        "lsp": {"idleStopSeconds": idle_stop_s},
    }
    looked_after: list[float] = []  # how long the server had been unused each time the idle check looked
    busy = LanguageServer.busy

    def looked(server: LanguageServer) -> bool:
        looked_after.append(time.monotonic() - server.last_used)
        return busy(server)

    monkeypatch.setattr(LanguageServer, "busy", looked)
    answers: list[dict[str, Any]] = []
    async with session(tmp_path, user=user, watch=False) as s, anyio.create_task_group() as tg:

        async def diagnose() -> None:
            answers.append(await s.ok("diagnostics", files=["models.py"], wait_ms=int(WAIT_S * 1000)))

        tg.start_soon(diagnose)
        await wait_until(started.exists, what="pylsp to run its checker")
        looked_after.clear()  # (looks before the wait began)
        await wait_until(lambda: any(unused >= idle_stop_s for unused in looked_after), what="an idle check")
        release.touch()  # the checker ends: pylsp publishes
    assert "idle" not in [e.state for e in s.events if isinstance(e, LspServerChanged)]  # never stopped as idle
    [file] = answers[0]["files"]
    assert file["fresh"] is True


async def test_a_planted_log_link_is_refused_and_the_call_says_so(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "lsp-python.log").symlink_to(victim)
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}) as s:
        refused = await s.call("document_symbols", file="models.py")
        assert text(refused).startswith("language server 'python' failed — could not be ")
        assert f"started: log file {tmp_path / 'logs' / 'lsp-python.log'} is a symbolic link; remove it" in text(
            refused
        )
        assert not language_server_processes(s.layout.root)
    assert victim.read_text() == ""


async def test_a_call_while_a_server_is_stopping_starts_it_again(tmp_path: Path) -> None:
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        await s.ok("document_symbols", file="models.py")
        server = s.host.lsp.manager.servers()["python"]
        pid = server.pid
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.stop)  # what the idle check does
            await anyio.lowlevel.checkpoint()
            assert server.state == "stopping"
            await s.ok("document_symbols", file="models.py")
        assert server.state == "ready"
        assert server.pid not in (None, pid)


async def test_eager_startup_starts_admitted_servers_at_once(tmp_path: Path) -> None:
    user = {"lspServers": {"python": pylsp()}, "lsp": {"startup": "eager"}}
    async with session(tmp_path, user=user, watch=False) as s:
        server = s.host.lsp.manager.servers()["python"]
        with anyio.fail_after(WAIT_S):
            assert await server.wait_ready()


async def test_a_server_that_took_longer_to_start_than_its_idle_time_is_not_stopped_as_soon_as_it_is_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unused counts from the moment it is ready: a server started eagerly (or again on a call, after an idle
    stop) that took longer to get ready than ``lsp.idleStopSeconds`` was stopped as idle at the next look, before
    anyone could use it."""
    monkeypatch.setattr(lsp_manager, "IDLE_CHECK_S", 0.05)
    idle_stop_s = 0.2
    slow = {**pylsp(), "command": "/bin/sh", "args": ["-c", 'sleep 0.5; exec "$0" "$@"', sys.executable, "-m", "pylsp"]}
    user = {"lspServers": {"python": slow}, "lsp": {"startup": "eager", "idleStopSeconds": idle_stop_s}}
    seen: list[tuple[float, str]] = []
    async with session(tmp_path, user=user, watch=False) as s:
        s.host.subscribe(
            lambda e: seen.append((time.monotonic(), e.state)) if isinstance(e, LspServerChanged) else None
        )
        await wait_until(lambda: "idle" in [state for _, state in seen], what="the server to stop as idle")
    [ready_at] = [at for at, state in seen if state == "ready"]
    [idle_at] = [at for at, state in seen if state == "idle"]
    assert idle_at - ready_at >= idle_stop_s


@pytest.mark.parametrize(
    ("lsp", "reason"),
    [({"excluded": ["py*"]}, "is excluded"), ({"allowed": []}, "is not allowed")],
)
async def test_excluded_and_not_allowed_servers_never_start(tmp_path: Path, lsp: dict[str, Any], reason: str) -> None:
    async with session(tmp_path, lsp_json={"python": pylsp()}, user={"lsp": lsp}, watch=False) as s:
        assert "mcp__lsp__hover" not in s.host.config.tool_registry.names()  # nothing to serve
        assert s.host.lsp.manager.why_not("python").endswith(
            f"is excluded: matched by 'py*' in lsp.excluded of {s.layout.paths.user}; remove that pattern there"
            if "excluded" in reason
            else f"is not allowed: not in lsp.allowed of {s.layout.paths.user}; add it there"
        )
        assert not language_server_processes(s.layout.root)


async def test_an_excluded_server_names_the_file_whose_lsp_excluded_leaves_it_out_and_follows_it(
    tmp_path: Path,
) -> None:
    user = {"lspServers": {"python": pylsp()}, "lsp": {"excluded": ["python"]}}
    async with session(tmp_path, user=user) as s:
        why = f"in lsp.excluded of {s.layout.paths.user}; remove it there"
        assert s.host.lsp.manager.why_not("python") == f"language server 'python' is excluded: {why}"
        [view] = s.host.lsp.views()
        assert view.state == f"disabled — {why}"
        replace_text(s.layout.paths.workspace, json.dumps({"lsp": {"excluded": ["python"]}}))  # the list moves
        replace_text(s.layout.paths.user, json.dumps({"lspServers": {"python": pylsp()}}))
        moved = f"in lsp.excluded of {s.layout.paths.workspace}; remove it there"
        await wait_until(lambda: s.host.lsp.views()[0].state == f"disabled — {moved}", what="the moved list")
        assert not language_server_processes(s.layout.root)


async def test_a_server_the_start_up_flag_leaves_out_says_so_rather_than_to_edit_the_settings(tmp_path: Path) -> None:
    """``lsp.allowed`` can only narrow ``--allowed-lsp-server-names``: adding the name to the settings cannot help."""
    user = {"lspServers": {"python": pylsp()}, "lsp": {"allowed": ["python"]}}
    async with session(tmp_path, user=user, watch=False, allowed_lsp=["other"]) as s:
        flag = "not in --allowed-lsp-server-names given at start-up; relaunch with 'python' added to that flag"
        assert s.host.lsp.manager.why_not("python") == f"language server 'python' is not allowed: {flag}"
        [view] = s.host.lsp.views()
        assert view.state == f"not allowed — {flag}"
        assert not language_server_processes(s.layout.root)


async def test_a_library_calls_the_same_operations_as_typed_coroutines(tmp_path: Path) -> None:
    from mcpvisor.host.lsp.results import LocationsResult
    from mcpvisor.host.lsp.tool_specs import ToolFailure

    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        found = await s.host.lsp.go_to_definition("service.py", line=3, character=6)
        assert isinstance(found, LocationsResult)
        assert [(loc.file, loc.line) for loc in found.locations] == [("models.py", 9)]
        symbols = await s.host.lsp.document_symbols("models.py", depth=0)
        assert all(not sym.children for sym in symbols.symbols)
        with pytest.raises(ToolFailure, match="no such file 'x.rs' in the workspace"):
            await s.host.lsp.hover("x.rs", line=1, character=1)


async def test_a_crashed_server_restarts_while_restart_on_crash_allows(tmp_path: Path) -> None:
    user = {"lspServers": {"python": pylsp(restartOnCrash=True, maxRestarts=2)}}
    async with session(tmp_path, user=user, watch=False) as s:
        await s.ok("document_symbols", file="models.py")
        server = s.host.lsp.manager.servers()["python"]
        first = server.pid
        assert first is not None
        [process] = [p for p in language_server_processes(s.layout.root) if p.pid != first]
        process.kill()  # the language server itself, under its reaper (whose pid the server reports)
        await wait_until(lambda: server.state == "ready" and server.pid not in (None, first), what="the restart")
        found = await s.ok("go_to_definition", file="service.py", line=3, character=6)
        assert found["locations"][0]["line"] == 9  # its documents were opened again on the new process
        assert server.crashes == 1


async def test_a_server_given_up_after_max_restarts_is_not_started_again_by_an_earlier_crashs_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first crash schedules a restart; a call starts it sooner; it crashes again, past ``maxRestarts``: the
    first crash's pause, ending later, starts nothing."""
    monkeypatch.setattr(lsp_manager, "BACKOFF_INITIAL_S", 4.0)
    user = {"lspServers": {"python": pylsp(restartOnCrash=True, maxRestarts=1)}}
    async with session(tmp_path, user=user, watch=False) as s:
        server = s.host.lsp.manager.servers()["python"]
        await crash_twice(s, server)
        given_up = text(await s.call("hover", file="service.py", line=3, character=6))
        assert given_up.startswith("language server 'python' failed 2 times in a row")
        await anyio.sleep(lsp_manager.BACKOFF_INITIAL_S + 1)  # the first crash's restart would have fired by now
        assert server.state == "failed"
        assert not language_server_processes(s.layout.root)


async def test_status_says_a_server_that_crashed_too_often_waits_for_its_entry_to_be_saved(tmp_path: Path) -> None:
    """Before, status read "failed", as for a server the next call starts again, while every call was refused with
    "failed 2 times in a row …; it starts again when its entry is saved"."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        server = s.host.lsp.manager.servers()["python"]
        await crash_twice(s, server)
        [entry] = (await s.ok("status"))["servers"]
        assert entry["state"] == (
            "failed 2 times in a row; it starts again when its entry is saved (or on /reload in the shell)"
        )
        assert entry["last_error"].startswith("the process was killed by SIGKILL"), entry
        refused = text(await s.call("hover", file="service.py", line=3, character=6))
        assert refused.endswith("; it starts again when its entry is saved (or on /reload in the shell)")
        assert not language_server_processes(s.layout.root)


async def test_reload_starts_again_a_server_given_up_after_crashing_too_often(tmp_path: Path) -> None:
    """The refusal says "it starts again when its entry is saved (or on /reload in the shell)". Before, /reload
    changed nothing: every call was still refused, until the entry itself was edited."""
    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        server = s.host.lsp.manager.servers()["python"]
        await crash_twice(s, server)
        assert (await s.call("hover", file="service.py", line=3, character=6)).is_error
        await s.host.reload()  # /reload in the shell
        again = await s.ok("hover", file="service.py", line=3, character=6)
        assert "make_user" in again["contents"]
        [entry] = (await s.ok("status"))["servers"]
        assert entry["state"] == "ready"


async def test_folder_trust_gained_or_lost_since_the_start_is_followed_on_reload(tmp_path: Path) -> None:
    user = {"lspServers": {"python": pylsp()}, "security": {"folderTrust": {"enabled": True}}}
    async with session(tmp_path, user=user, watch=False) as s:
        untrusted = f"language server 'python' does not start: the folder {s.layout.root} is not trusted"
        assert text(await s.call("hover", file="models.py", line=1, character=7)).startswith(untrusted)
        replace_text(s.layout.paths.trusted_folders, json.dumps([str(s.layout.root)]))  # `mcpvisor mcp trust`
        await s.host.reload()
        await s.ok("hover", file="models.py", line=1, character=7)
        pid = s.pid("python")
        assert pid is not None

        replace_text(s.layout.paths.trusted_folders, "[]")
        await s.host.reload()
        await wait_until(lambda: not pid_alive(pid), what="the language server of the untrusted folder to stop")
        assert text(await s.call("hover", file="models.py", line=1, character=7)).startswith(untrusted)
        assert not language_server_processes(s.layout.root)


async def test_a_repository_server_runs_the_command_the_hosts_path_finds_not_its_env_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare ``pylsp`` in ``.lsp.json`` with ``env.PATH`` leading to the repository's own ``tools/pylsp``."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    marker = tmp_path / "shadow-ran"
    shadowed = {"command": "pylsp", "env": {"PATH": "tools:/usr/bin:/bin"}, "extensionToLanguage": {".py": "python"}}
    ghost = {"command": "ghost-lsp", "env": {"PATH": "tools"}, "extensionToLanguage": {".gh": "ghost"}}
    async with session(tmp_path, lsp_json={"python": shadowed, "ghost": ghost}, watch=False) as s:
        tools = s.layout.root / "tools"
        tools.mkdir()
        for name in ("pylsp", "ghost-lsp"):
            (tools / name).write_text(f'#!/bin/sh\necho "$0" >> {marker}\nexec {sys.executable} -m pylsp "$@"\n')
            (tools / name).chmod(0o755)
        (s.layout.root / "a.gh").write_text("boo\n")
        for name in ("python", "ghost"):
            await s.host.lsp.decide(name, "approve")
        await s.ok("hover", file="models.py", line=1, character=7)
        missing = await s.call("hover", file="a.gh", line=1, character=1)
        assert text(missing) == (
            "language server 'ghost' failed — could not be started: executable 'ghost-lsp' not found on the "
            "host's PATH (a repository's server never runs what its own env.PATH finds); check ghost.command in "
            "its .lsp.json"
        )
    assert not marker.exists()


async def test_a_repository_server_whose_workspace_folder_leads_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    entries = {
        "python": pylsp(workspaceFolder=".."),
        "linked": pylsp(workspaceFolder="link", extensionToLanguage={".pyi": "python"}),
    }
    async with session(tmp_path, lsp_json=entries, watch=False) as s:
        lsp_json = s.layout.root / ".lsp.json"
        assert (
            f"skipped language server 'python' in {lsp_json}: workspaceFolder: a repository's language server must "
            "stay inside the workspace; give a folder relative to it, without '..' (or leave it out: the workspace "
            "itself); fix python"
        ) in s.host.lsp.warnings()
        assert "python" not in s.host.lsp.state.servers

        (s.layout.root / "link").symlink_to(outside)  # inside by its name, outside once followed
        (s.layout.root / "api.pyi").write_text("def f() -> int: ...\n")
        await s.host.lsp.decide("linked", "approve")
        refused = await s.call("document_symbols", file="api.pyi")
        assert text(refused) == (
            "language server 'linked' failed — could not be started: its workspaceFolder "
            f"resolves to {outside.resolve()}, outside the workspace {s.layout.root.resolve()}; a repository's server "
            "must stay inside it: fix linked.workspaceFolder"
        )
        assert not language_server_processes(outside.resolve())


async def test_a_server_that_exits_at_its_start_says_why_and_names_its_log(tmp_path: Path) -> None:
    """The call said the exit and its last stderr line, but not the log the rest of its output is in (a crash
    after its start names it)."""
    script = (
        "import sys; print('reading the config', file=sys.stderr); print('no licence', file=sys.stderr); sys.exit(3)"
    )
    entry = {"command": sys.executable, "args": ["-c", script], "extensionToLanguage": {".py": "python"}}
    async with session(tmp_path, user={"lspServers": {"python": entry}}, watch=False) as s:
        failed = await s.call("hover", file="service.py", line=3, character=6)
        assert failed.is_error
        server = s.host.lsp.manager.servers()["python"]
        assert text(failed) == (
            f"language server 'python' failed — exited with code 3: no licence; see its log {server.log_path}"
        )
        assert "reading the config" in server.log_path.read_text()
        [status] = (await s.ok("status"))["servers"]
        assert status["last_error"] == f"exited with code 3: no licence; see its log {server.log_path}", status


async def test_a_server_that_exits_before_initialize_is_written_says_why_and_names_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host slow to write (a busy machine) found the pipe already closed: that write's failure was not taken for
    the crash it is, and the call and status said the exit without the log to read."""
    from mcpvisor.host.lsp import jsonrpc
    from mcpvisor.host.lsp.process import spawn_language_server

    async def spawned_and_gone(*args: Any, **kwargs: Any) -> Any:
        process = await spawn_language_server(*args, **kwargs)
        await process.wait()  # initialize is written only once the server has exited
        return process

    monkeypatch.setattr(jsonrpc, "spawn_language_server", spawned_and_gone)
    script = "import sys; print('no licence', file=sys.stderr); sys.exit(3)"
    entry = {"command": sys.executable, "args": ["-c", script], "extensionToLanguage": {".py": "python"}}
    async with session(tmp_path, user={"lspServers": {"python": entry}}, watch=False) as s:
        failed = await s.call("hover", file="service.py", line=3, character=6)
        server = s.host.lsp.manager.servers()["python"]
        said = f"exited with code 3: no licence; see its log {server.log_path}"
        assert text(failed) == f"language server 'python' failed — {said}"
        [status] = (await s.ok("status"))["servers"]
        assert (status["state"], status["last_error"]) == ("failed", said)


async def test_a_server_that_never_answers_initialize_is_killed_and_reported_failed_by_the_call_that_waited(
    tmp_path: Path,
) -> None:
    mute = {"command": "sleep", "args": ["1000"], "extensionToLanguage": {".py": "python"}, "startupTimeout": 1000}
    async with session(tmp_path, user={"lspServers": {"python": mute}}, watch=False) as s:
        server = s.host.lsp.manager.servers()["python"]
        async with anyio.create_task_group() as tg:
            calls: list[CallToolResult] = []

            async def call() -> None:
                calls.append(await s.call("hover", file="models.py", line=1, character=7))

            tg.start_soon(call)
            await wait_until(lambda: server.pid is not None, what="the server to be spawned")
            pid = server.pid
        assert text(calls[0]) == (
            f"language server 'python' failed — no answer to 'initialize' within 1 s; raise "
            f"lspServers.python.startupTimeout if it needs longer (its log: {server.log_path})"
        )
        assert server.state == "failed"
        assert pid is not None
        assert not pid_alive(pid)


async def test_a_calls_timeout_bounds_a_language_server_tool_and_a_stop_ends_its_start_at_once(tmp_path: Path) -> None:
    """``timeout_s`` (the adapters' bound on each call) was dropped on the way to the language servers: a call to
    one that never answers waited its whole startupTimeout; so did a host's exit, or an edit that stopped it."""
    from mcpvisor.core.errors import ToolCallTimeoutError

    mute = {"command": "sleep", "args": ["1000"], "extensionToLanguage": {".py": "python"}, "startupTimeout": 60000}
    async with session(tmp_path, user={"lspServers": {"python": mute}}, watch=False) as s:
        arguments = {"file": "models.py", "line": 1, "character": 7}
        with pytest.raises(ToolCallTimeoutError) as timed_out:
            await s.host.config.call_tool("mcp__lsp__hover", arguments, timeout_s=0.5)
        assert str(timed_out.value) == (
            "call to tool 'mcp__lsp__hover' on server 'lsp' timed out after 0.5 s; raise the call's timeout_s if it "
            "needs longer"
        )
        # Stopping it (an edit, the host's exit) ends its start at once, not after its startupTimeout (60 s).
        server = s.host.lsp.manager.servers()["python"]
        pid = server.pid
        with anyio.fail_after(WAIT_S):
            await server.stop()
        assert server.state == "stopped"
        assert pid is not None
        assert not pid_alive(pid)


async def test_a_server_writing_other_text_to_its_stdout_fails_at_once_quoting_it(tmp_path: Path) -> None:
    """Before, a banner on stdout looked like a slow start: the call waited the whole startupTimeout and was told
    to raise it, and the stray text was shown nowhere."""
    banner = "import sys, time; print('Starting my language server v1.2 on stdio', flush=True); time.sleep(100)"
    user = {"lspServers": {"chatty": {"command": sys.executable, "args": ["-c", banner], "startupTimeout": 120_000}}}
    user["lspServers"]["chatty"]["extensionToLanguage"] = {".gb": "garbage"}
    async with session(tmp_path, user=user, watch=False) as s:
        (s.layout.root / "a.gb").write_text("x\n")
        with anyio.fail_after(WAIT_S):  # far less than its startupTimeout
            result = await s.call("hover", file="a.gb", line=1, character=1)
        assert result.is_error
        assert "wrote 'Starting my language server v1.2 on stdio' to its stdout, which is not LSP" in text(result)


async def hover_cut_short(s: Session, then: Callable[[psutil.Process], Awaitable[None]]) -> CallToolResult:
    """A hover sent to a warm server that answers nothing (suspended), and what it gets once ``then`` ran."""
    await s.ok("document_symbols", file="models.py")  # started and warm, whatever the machine's load
    server = s.host.lsp.manager.servers()["python"]
    connection = server._connection
    assert connection is not None
    [process] = [p for p in language_server_processes(s.layout.root) if p.pid != server.pid]
    results: list[CallToolResult] = []

    async def hover() -> None:
        results.append(await s.call("hover", file="service.py", line=3, character=6))

    async with anyio.create_task_group() as tg:
        process.suspend()  # alive, but answers nothing: the call waits
        tg.start_soon(hover)
        await wait_until(
            lambda: any(p.method == "textDocument/hover" for p in connection._pending.values()),
            what="the call's request to be sent",
        )
        await then(process)
        await wait_until(lambda: bool(results), what="the call's answer")
    [result] = results
    return result


@pytest.mark.parametrize("edit", ["restarted", "removed", "changed"])
async def test_a_call_an_edit_cuts_short_says_why_its_server_stopped_and_to_retry(tmp_path: Path, edit: str) -> None:
    """A call in flight when an edit restarts its server (a user's entry changed) or stops it (a repository's entry
    removed, or changed: it waits for approval again) said only that the server "was stopped", neither why nor what
    to do, where a call to an MCP server an edit stops says both."""
    entry = pylsp(shutdownTimeout=500)  # (it is suspended: its shutdown is never answered)
    edited_entry = {**entry, "args": ["-m", "pylsp", "-v"]}
    mine = edit == "restarted"
    async with session(
        tmp_path, user={"lspServers": {"python": entry}} if mine else None, lsp_json=None if mine else {"python": entry}
    ) as s:
        if not mine:
            await s.host.lsp.decide("python", "approve")

        async def edited(_: psutil.Process) -> None:
            if edit == "restarted":
                replace_text(s.layout.paths.user, json.dumps({"lspServers": {"python": edited_entry}}))
            else:
                replace_text(
                    s.layout.root / ".lsp.json", json.dumps({} if edit == "removed" else {"python": edited_entry})
                )

        result = await hover_cut_short(s, edited)
        assert result.is_error
        restarts = "its configuration changed: it restarts with the new one"
        why = restarts if mine else "its configuration changed or it was removed"
        assert text(result) == (
            "textDocument/hover failed: language server 'python' was stopped before it answered "
            f"({why}); retry the call"
        )
        if mine:  # the retry goes to the server the edit made
            again = await s.ok("hover", file="service.py", line=3, character=6)
            assert "make_user" in again["contents"]


async def test_the_trust_command_a_language_server_tool_gives_works_pasted_in_another_folder(tmp_path: Path) -> None:
    """A host in an untrusted folder, with another home: a language-server tool said ``run: mcpvisor mcp trust``;
    pasted in another terminal, it trusted that terminal's folder, in the default home. It names both."""
    user = {"lspServers": {"python": pylsp()}, "security": {"folderTrust": {"enabled": True}}}
    async with session(tmp_path, user=user, watch=False, MCPVISOR_HOME=str(tmp_path / "other home")) as s:
        said = text(await s.call("hover", file="models.py", line=1, character=7))
        command = said.split("run: ", 1)[1]
        pasted = await paste_elsewhere(command, s.layout.env, tmp_path / "elsewhere")
        assert pasted.returncode == 0, (command, pasted.stdout, pasted.stderr)
        await s.host.reload()
        await s.ok("hover", file="models.py", line=1, character=7)
