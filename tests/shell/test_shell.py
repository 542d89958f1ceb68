"""``run_shell`` driven line by line against real example servers, real settings files and the
real watcher (SPEC §0 item 2, §7 "Approve/Reject", §8 steps 5-6, §9)."""

from __future__ import annotations

import io
import json
import math
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from mcpvisor.core.errors import ConfigError
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.host import HostOptions
from mcpvisor.shell import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, run_shell
from mcpvisor.shell.session import HELP_HINT
from tests.helpers import (
    LIGHT,
    WAIT_S,
    in_memory_unless_a_process_is_needed,
    marker_pids,
    mcpvisor_command,
    pid_alive,
    raw_server,
    wait_until,
)
from tests.layout import Layout, make_layout, replace_text


def server(name: str, *args: str, marker: Path | None = None, **fields: Any) -> dict[str, Any]:
    extra = ["--marker", str(marker)] if marker is not None else []
    return {"command": sys.executable, "args": ["-m", LIGHT, "--name", name, *args, *extra], **fields}


def save(path: Path, data: Any) -> None:
    replace_text(path, json.dumps(data, indent=2))


class Shell:
    """A running shell: type lines into it, read what it printed."""

    def __init__(self, layout: Layout, console: Console) -> None:
        self.layout = layout
        self.console = console
        self.lines, self.shell_input = anyio.create_memory_object_stream[str](0)
        self.interrupts, self.shell_interrupts = anyio.create_memory_object_stream[object](math.inf)
        self.code: int | None = None
        self.done = anyio.Event()

    def text(self, since: int = 0) -> str:
        return self.console.export_text(clear=False)[since:]

    def mark(self) -> int:
        return len(self.text())

    async def wait_for(self, text: str, since: int = 0) -> str:
        """Wait until ``text`` was printed since ``since`` (the console may have wrapped it across lines)."""
        words = " ".join(text.split())
        await wait_until(lambda: words in " ".join(self.text(since).split()), what=repr(text))
        return self.text(since)

    async def type(self, line: str) -> None:
        """Returns once the shell has taken the line (the input stream has no buffer)."""
        with anyio.fail_after(WAIT_S):
            await self.lines.send(line)

    async def run(self, line: str, expect: str) -> str:
        """Type ``line`` and wait until ``expect`` appears after it; returns the output since."""
        since = self.mark()
        await self.type(line)
        return await self.wait_for(expect, since)

    async def run_until(self, line: str, expect: str, *, row: str) -> str:
        """Type ``line`` again until the output of one run, read up to ``row``, holds ``expect`` (a view of
        state that settles in the background, such as ``/mcp`` after a list change or a reconnect)."""
        out = ""
        with anyio.fail_after(WAIT_S):
            while expect not in out:
                since = self.mark()
                await self.type(line)
                out = await self.wait_for(row, since)
        return out

    async def wait_exit(self) -> int:
        with anyio.fail_after(WAIT_S):
            await self.done.wait()
        assert self.code is not None
        return self.code


@asynccontextmanager
async def shell(
    tmp_path: Path,
    *,
    user: Any = None,
    project: Any = None,
    open_url: Callable[[str], bool] | None = None,
    startup_wait_s: float | None = None,
    home: str | None = None,
) -> AsyncIterator[Shell]:
    """``home``: an ``MCPVISOR_HOME`` of that name, elsewhere than ``~/.mcpvisor``."""
    other_home = {"MCPVISOR_HOME": str(tmp_path / home)} if home else {}
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"), **other_home)
    if user is not None:
        save(layout.paths.user, user)
    if project is not None:
        save(layout.paths.project, project)
    s = Shell(layout, Console(record=True, width=200, file=io.StringIO()))

    async def run() -> None:
        s.code = await run_shell(
            HostOptions(
                env=layout.env,
                workspace=layout.root,
                in_memory=in_memory_unless_a_process_is_needed,
                startup_wait_s=startup_wait_s,
            ),
            console=s.console,
            input_lines=s.shell_input,
            interrupts=s.shell_interrupts,
            open_url=open_url,
        )
        s.done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await s.wait_for(HELP_HINT)
        try:
            yield s
        finally:
            s.lines.close()  # end of input, if the test did not leave already
            await s.wait_exit()
            for stream in (s.shell_input, s.interrupts, s.shell_interrupts):
                stream.close()


def all_gone(*markers: Path) -> bool:
    return not any(pid_alive(pid) for marker in markers for pid in marker_pids(marker))


# -- status, tools, calls ---------------------------------------------------------------------


async def test_mcp_shows_each_server_with_its_state(tmp_path: Path) -> None:
    user = {"mcpServers": {"a": server("a", "--tools", "echo,rev"), "b": server("b")}, "mcp": {"excluded": ["b"]}}
    async with shell(tmp_path, user=user) as s:
        out = await s.run("/mcp", "b · ")
        assert "a · ● connected (2 tools, 0 prompts)" in out
        assert f"b · ○ disabled — in mcp.excluded of {s.layout.paths.user}; remove it there" in out


async def test_mcp_given_an_argument_says_it_takes_none_rather_than_showing_every_server(tmp_path: Path) -> None:
    user = {"mcpServers": {"a": server("a"), "b": server("b")}}
    async with shell(tmp_path, user=user) as s:
        out = await s.run("/mcp a", "/mcp takes no argument")
        assert " · " not in out
    assert s.code == EXIT_FAILED


async def test_tools_lists_registered_names_grouped_by_server_with_descriptions(tmp_path: Path) -> None:
    user = {"mcpServers": {"a": server("a", "--tools", "echo,rev"), "b": server("b")}}
    async with shell(tmp_path, user=user) as s:
        out = await s.run("/tools", "mcp__b__echo")
        assert "a (2 tools)" in out
        assert "b (1 tool)" in out
        assert "  mcp__a__echo — Return 'a:echo:{text}'." in out
        assert "  mcp__a__rev — Return 'a:rev:{text}'." in out
        assert (
            out.index("a (2 tools)") < out.index("mcp__a__echo") < out.index("b (1 tool)") < out.index("mcp__b__echo")
        )


async def test_tools_and_prompts_of_one_server_are_those_its_name_asks_for(tmp_path: Path) -> None:
    user = {"mcpServers": {"a": server("a", "--tools", "echo,rev"), "b": server("b")}}
    async with shell(tmp_path, user=user) as s:
        await s.run("/tools", "mcp__b__echo")
        out = await s.run("/tools b", "mcp__b__echo")
        assert "b (1 tool)" in out
        assert "mcp__a__" not in out
        out = await s.run("/tools zz", "No tools registered from a server named 'zz'")
        assert "mcp__" not in out
        await s.run("/prompts zz", "No prompts registered from a server named 'zz' (/mcp shows the servers")


async def test_a_server_name_with_a_space_is_read_in_quotes_as_completion_writes_it(tmp_path: Path) -> None:
    user = {"mcpServers": {"my srv": server("m", "--prompts", "brief"), "my": server("x")}}
    async with shell(tmp_path, user=user) as s:
        for quoted in ("'my srv'", '"my srv"'):
            out = await s.run(f"/tools {quoted}", "my srv (1 tool)")
            assert "my (1 tool)" not in out
            await s.run(f"/prompts {quoted}", "my srv (1 prompt)")
        await s.run("/tools my srv", "my srv (1 tool)")  # as typed, unquoted, it reads as before


async def test_call_prints_the_tool_result_text(tmp_path: Path) -> None:
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        out = await s.run('/call mcp__a__echo {"text":"hi"}', "a:echo:hi")
        assert "✗" not in out


async def test_call_of_a_name_no_server_owns_says_none_is_configured(tmp_path: Path) -> None:
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        await s.run(
            "/call mcp__gone__x", "✗ tool 'mcp__gone__x' not found: no MCP server providing it is currently configured"
        )


async def test_call_of_an_excluded_servers_tool_names_the_server_and_the_fix(tmp_path: Path) -> None:
    user = {"mcpServers": {"a": server("a"), "b": server("b")}, "mcp": {"excluded": ["b"]}}
    async with shell(tmp_path, user=user) as s:
        why = f"in mcp.excluded of {s.layout.paths.user}; remove it there"
        await s.run("/call mcp__b__echo", f"server 'b' is excluded: {why}")


async def test_a_server_an_edit_takes_out_of_the_allow_list_is_said_to_be_left_out_by_that_file(tmp_path: Path) -> None:
    servers = {"a": server("a"), "b": server("b")}
    async with shell(tmp_path, user={"mcpServers": servers}) as s:
        await s.run("/mcp", "b · ● connected")
        save(s.layout.paths.user, {"mcpServers": servers, "mcp": {"allowed": ["a"]}})
        await s.wait_for(f"○ b not allowed — not in mcp.allowed of {s.layout.paths.user}; add it there")


async def test_call_arguments_that_are_not_a_json_object_are_refused_with_an_example(tmp_path: Path) -> None:
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        await s.run("/call mcp__a__echo {text: hi}", "arguments are not valid JSON")
        await s.run('/call mcp__a__echo ["hi"]', "arguments must be a JSON object, e.g. /call mcp__server__tool")
        await s.run("/call", "usage: /call NAME [JSON]")


async def test_unknown_commands_and_plain_text_point_to_help(tmp_path: Path) -> None:
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        await s.run("/nope", "✗ unknown command /nope; type /help for the list")
        await s.run("hello", "Commands start with '/'; type /help for the list.")
        out = await s.run("/help", "/quit")
        for command in ("/mcp", "/tools", "/prompts", "/call NAME [JSON]", "/reload", "/approve NAME", "/reject NAME"):
            assert command in out


async def test_a_long_call_says_ctrl_c_cancels_it_and_ctrl_c_does(tmp_path: Path) -> None:
    async with shell(
        tmp_path, user={"mcpServers": {"a": server("a", "--tools", "echo,slow", "--hang-on-call", "slow")}}
    ) as s:
        since = s.mark()
        await s.run("/call mcp__a__slow", "still waiting for mcp__a__slow (Ctrl-C cancels)")
        await s.interrupts.send(object())
        await s.wait_for("cancelled", since)
        await s.run('/call mcp__a__echo {"text":"after"}', "a:echo:after")
        assert "press Ctrl-C again" not in s.text(since)  # cancelling a call is not a step towards leaving


# -- prompts ----------------------------------------------------------------------------------


async def test_prompts_are_listed_fetched_and_offered_as_slash_commands(tmp_path: Path) -> None:
    async with shell(tmp_path, user={"mcpServers": {"a": server("a", "--prompts", "greet")}}) as s:
        out = await s.run("/prompts", "greet")
        assert "a (1 prompt)" in out
        assert "greet (topic?)" in out
        await s.run('/prompt greet {"topic":"json"}', "[user] a:greet:json")
        await s.run("/greet plain words", "[user] a:greet:plain words")
        await s.run("/help", "/greet")
        await s.run('/prompt mcp__a__greet {"topic":"served"}', "[user] a:greet:served")  # the gateway's name too
        await s.run("/prompt nope", "prompt 'nope' not found: no connected MCP server provides it; prompts: greet")


async def test_slash_commands_follow_the_prompts_when_settings_change(tmp_path: Path) -> None:
    a = server("a", "--prompts", "greet")
    async with shell(tmp_path, user={"mcpServers": {"a": a}}) as s:
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"a": a, "c": server("c", "--prompts", "hello")}})
        await s.wait_for("prompt commands: /greet /hello", since)
        await s.run("/hello there", "[user] c:hello:there")
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"c": server("c", "--prompts", "hello")}})
        await s.wait_for("prompt commands: /hello", since)
        await s.run("/greet x", "✗ unknown command /greet")


# -- the approval dialog ----------------------------------------------------------------------


async def test_a_project_server_opens_the_dialog_with_its_command_and_file_and_approving_connects_it(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "proj.pids"
    entry = server("proj", marker=marker, env={"API_TOKEN": "s3cret-value"})
    async with shell(tmp_path, project={"mcpServers": {"proj": entry}}) as s:
        out = await s.wait_for("Approve proj? [a]pprove / approve [A]ll / [r]eject / [s]kip")
        assert f"? proj needs approval — Project .mcp.json ({s.layout.paths.project})" in out
        assert f"    command: {sys.executable}" in out
        assert f"    args:    {json.dumps(entry['args'])}" in out
        assert "    env:     API_TOKEN (values hidden)" in out
        assert "s3cret-value" not in out
        assert marker_pids(marker) == []  # nothing starts before the answer
        await s.run("a", "+ added proj")
        assert len(marker_pids(marker)) == 1
        await s.run('/call mcp__proj__echo {"text":"x"}', "proj:echo:x")
    assert "s3cret-value" not in s.text()


async def test_the_dialog_names_the_entrys_fields_as_the_settings_file_spells_them(tmp_path: Path) -> None:
    entry = server("proj", excludeTools=["echo"], discoveryTimeoutMs=20000)
    async with shell(tmp_path, project={"mcpServers": {"proj": entry}}) as s:
        out = await s.wait_for("Approve proj? [a]pprove / approve [A]ll / [r]eject / [s]kip")
        await s.run("r", "✗ rejected proj")
    assert "    discoveryTimeoutMs: 20000" in out
    assert '    excludeTools: ["echo"]' in out
    assert "discovery_timeout_ms" not in out
    assert "exclude_tools" not in out


async def test_rejecting_leaves_the_server_disconnected_and_mcp_says_rejected(tmp_path: Path) -> None:
    marker = tmp_path / "proj.pids"
    async with shell(tmp_path, project={"mcpServers": {"proj": server("proj", marker=marker)}}) as s:
        await s.wait_for("Approve proj?")
        await s.run("r", "✗ rejected proj")
        out = await s.run("/mcp", "proj · ✗ rejected — edit config to re-approve")
        assert "+ added" not in out
        # (as for a server waiting for approval, the shell's own command is named too)
        out = await s.run("/call mcp__proj__echo", "was rejected; edit its configuration to be asked again")
        assert "(in the shell: /approve proj)" in out
        assert s.text().count("Approve proj?") == 1
    assert marker_pids(marker) == []


async def test_a_server_added_to_mcp_json_mid_session_opens_the_dialog_for_that_server_only(tmp_path: Path) -> None:
    markers = [tmp_path / "proj.pids", tmp_path / "p2.pids"]
    first = {"proj": server("proj", marker=markers[0])}
    async with shell(tmp_path, project={"mcpServers": first}) as s:
        await s.wait_for("Approve proj?")
        await s.run("a", "+ added proj")
        since = s.mark()
        save(s.layout.paths.project, {"mcpServers": {**first, "p2": server("p2", marker=markers[1])}})
        out = await s.wait_for("Approve p2?", since)
        assert "? p2 needs approval — Project .mcp.json" in out
        assert "proj" not in out
        await s.run("a", "+ added p2")
        await s.run('/call mcp__p2__echo {"text":"y"}', "p2:echo:y")
        assert s.text().count("? proj needs approval") == 1
        assert s.text().count("? p2 needs approval") == 1
        assert len(marker_pids(markers[0])) == 1  # proj kept its process
    assert all_gone(*markers)


async def test_a_waiting_server_whose_configuration_changes_is_shown_again_before_any_answer_counts(
    tmp_path: Path,
) -> None:
    async with shell(tmp_path, project={"mcpServers": {"proj": server("proj")}}) as s:
        await s.wait_for("Approve proj?")
        since = s.mark()
        save(s.layout.paths.project, {"mcpServers": {"proj": server("proj", "--tools", "other")}})
        out = await s.wait_for("Approve proj?", since)
        assert "no decision needed for proj any more: its configuration changed" in out
        assert '"--tools", "other"' in out
        await s.run("a", "+ added proj")
        await s.run('/call mcp__proj__other {"text":"new"}', "proj:other:new")


async def test_approve_all_connects_every_waiting_server(tmp_path: Path) -> None:
    project = {"mcpServers": {"p1": server("p1"), "p2": server("p2")}}
    async with shell(tmp_path, project=project) as s:
        out = await s.wait_for("Approve p1?")
        assert "? p1 needs approval" in out
        assert "? p2 needs approval" in out  # every server approve-all would start was shown
        assert "(2 waiting)" in out
        since = s.mark()
        await s.type("A")
        await s.wait_for("+ added p2")
        await s.run('/call mcp__p1__echo {"text":"1"}', "p1:echo:1")
        await s.run('/call mcp__p2__echo {"text":"2"}', "p2:echo:2")
        said = s.text(since)
        assert "Approve p2?" not in said  # not asked about what the answer was approving
        assert "no decision needed" not in said


async def test_approving_language_servers_in_the_dialog_says_only_that_they_were_approved(tmp_path: Path) -> None:
    async with shell(tmp_path) as s:
        pylsp = {"command": sys.executable, "args": ["-m", "pylsp"], "extensionToLanguage": {".py": "python"}}
        replace_text(s.layout.root / ".lsp.json", json.dumps({"one": pylsp, "two": pylsp}))
        await s.wait_for("Approve language server one?")
        since = s.mark()
        await s.type("a")
        await s.wait_for("✓ approved language server one", since)
        await s.wait_for("Approve language server two?", since)
        await s.type("A")
        await s.wait_for("✓ approved language server two", since)
        said = s.text(since)
        assert "no decision needed" not in said  # before, the answer's own decision read as made elsewhere
        assert said.count("Approve language server two?") == 1


async def test_mcp_shows_an_invalid_language_server_entry_as_a_row(tmp_path: Path) -> None:
    """Before: the Language servers section left it out; only the warning at start-up said it was skipped."""
    async with shell(tmp_path, user={"lspServers": {"py": {"command": 3, "extensionToLanguage": {".py": "py"}}}}) as s:
        row = (
            f"py · ✗ invalid entry in {s.layout.paths.user}, not started — command: expected a string; fix "
            "lspServers.py"
        )
        out = await s.run("/mcp", row)
        assert "Language servers" in out


async def test_mcp_says_a_language_server_whose_entry_an_edit_made_invalid_runs_on_its_last_good_one(
    tmp_path: Path,
) -> None:
    """Before: its row read as if nothing had happened, while the file no longer said what ran."""
    pylsp = {"command": sys.executable, "args": ["-m", "pylsp"], "extensionToLanguage": {".py": "python"}}
    async with shell(tmp_path, user={"lspServers": {"py": pylsp}}) as s:
        since = s.mark()
        save(s.layout.paths.user, {"lspServers": {"py": {**pylsp, "command": 3}}})
        notice = (
            f"invalid entry in {s.layout.paths.user} (lspServers.py: command: expected a string) — the last good "
            "configuration of language server 'py' stays in force; fix the entry and save to apply it"
        )
        row = f"py · ○ stopped (starts on first use)  .py · ! {notice}"
        out = await s.run_until("/mcp", "py · ○ stopped (starts on first use)  .py · ! invalid", row="apply it")
        assert " ".join(row.split()) in " ".join(out.split())
        assert "not started" not in s.text(since)


async def test_answers_are_checked_and_commands_still_run_while_the_dialog_is_open(tmp_path: Path) -> None:
    async with shell(tmp_path, project={"mcpServers": {"proj": server("proj")}}) as s:
        await s.wait_for("Approve proj?")
        since = s.mark()
        await s.type("yes please")
        out = await s.wait_for("Approve proj?", since)
        assert "answer a (approve proj), A (approve all), r (reject) or s (skip)" in out
        since = s.mark()
        await s.type("/mcp")
        out = await s.wait_for("Approve proj?", since)
        assert "proj · ? needs approval" in out
        await s.run("a", "+ added proj")


async def test_a_command_cancelled_while_the_dialog_is_open_is_followed_by_the_question_again(tmp_path: Path) -> None:
    """A command run at the dialog's prompt is followed by the question; one cancelled with Ctrl-C was followed by the
    bare answer prompt, the question left above its output."""
    user = {"mcpServers": {"a": server("a", "--tools", "echo,slow", "--hang-on-call", "slow")}}
    async with shell(tmp_path, user=user, project={"mcpServers": {"proj": server("proj")}}) as s:
        await s.wait_for("Approve proj?")
        await s.run("/call mcp__a__slow", "still waiting for mcp__a__slow (Ctrl-C cancels)")
        since = s.mark()
        await s.interrupts.send(object())
        out = await s.wait_for("Approve proj?", since)
        assert out.index("cancelled") < out.index("Approve proj?")
        await s.run("a", "+ added proj")


async def test_approving_a_server_slow_to_start_gives_the_prompt_back_and_says_it_is_still_starting(
    tmp_path: Path,
) -> None:
    """The answer (or /approve, or /reload) waited for the server's whole start, up to its discovery timeout (a first
    npx download, a hang), with no word and no prompt; like the session's own start, it waits a few seconds at most
    (``startup_wait_s``): the server goes on starting, and how its start ends is said when it does — once: a later
    pass, which finds it starting still, said so again each time."""
    slow = server("slow", "--hang-on-initialize", discoveryTimeoutMs=600_000)
    async with shell(tmp_path, project={"mcpServers": {"slow": slow}}, startup_wait_s=0.1) as s:
        await s.wait_for("Approve slow?")
        await s.run("a", "slow is still starting")
        await s.run("/mcp", "slow · ◌ connecting")
        await s.run("/reload", "settings re-read")
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"b": server("b")}})  # a pass that finds slow starting still
        await s.wait_for("+ added b", since)
        assert "still starting" not in s.text(since)


async def test_a_server_slow_to_start_added_by_an_edit_is_said_to_be_still_starting(tmp_path: Path) -> None:
    """An edit's reconcile waited for a slow start (a first npx download, a hang) until its discovery timeout, and
    the shell said nothing of the server until then; like the session's start and a decision, an edit's reconcile
    waits a few seconds at most (``startup_wait_s``), and the start that goes on is said."""
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}, startup_wait_s=0.1) as s:
        since = s.mark()
        slow = server("slow", "--hang-on-initialize", discoveryTimeoutMs=600_000)
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "slow": slow}})
        await s.wait_for("slow is still starting", since)
        await s.run("/mcp", "slow · ◌ connecting")


async def test_a_skipped_server_stays_pending_is_not_asked_again_and_can_be_approved_later(tmp_path: Path) -> None:
    project = {"mcpServers": {"proj": server("proj")}}
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}, project=project) as s:
        await s.wait_for("Approve proj?")
        await s.run("s", "skipped proj: it stays pending; /approve proj when ready")
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "b": server("b")}})
        await s.wait_for("+ added b", since)
        await s.run("/mcp", "proj · ? needs approval")
        assert "Approve proj?" not in s.text(since)
        out = await s.run("/approve proj", "+ added proj")
        assert "? proj (approve) — Project .mcp.json" in out
        await s.run('/call mcp__proj__echo {"text":"z"}', "proj:echo:z")


async def test_approving_a_connected_server_again_says_it_was_approved_already(tmp_path: Path) -> None:
    """It said 'approved proj — connecting', and nothing connected: the server was connected all along."""
    async with shell(tmp_path, project={"mcpServers": {"proj": server("proj")}}) as s:
        await s.wait_for("Approve proj?")
        await s.run("a", "+ added proj")
        out = await s.run("/approve proj", "✓ proj was approved already")
        assert "connecting" not in out


async def test_approve_and_reject_commands_refuse_servers_that_need_no_approval(tmp_path: Path) -> None:
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        await s.run("/approve a", "cannot approve server 'a': it is not a project or workspace server")
        await s.run("/reject zzz", "cannot reject server 'zzz': no such server is configured")
        await s.run("/reject A", "cannot reject server 'A': no such server is configured, but 'a' is (names are case")
        await s.run("/approve", "usage: /approve NAME")


async def test_a_server_that_never_started_is_said_to_have_failed_once_and_a_crash_to_have_disconnected(
    tmp_path: Path,
) -> None:
    crashing = server("c", "--crash-on-call", "echo")
    async with shell(tmp_path, user={"mcpServers": {"c": crashing}}) as s:
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"c": crashing, "bad": {"command": "/nonexistent/bin/tool"}}})
        await s.wait_for("✗ bad failed to start: executable '/nonexistent/bin/tool' not found", since)
        await s.run('/call mcp__c__echo {"text": "x"}', "✗ c disconnected")
        await s.wait_for("+ c connected again (", since)  # its reconnect: "disconnected" is not the last word
        out = " ".join(s.text(since).split())
        assert "bad disconnected" not in out  # it never connected
        assert out.count("✗ c disconnected") == 1


async def test_the_line_saying_a_server_disconnected_names_its_log_as_mcp_does(tmp_path: Path) -> None:
    crashing = server("c", "--crash-on-call", "echo", "--stderr", "starting c")
    async with shell(tmp_path, user={"mcpServers": {"c": crashing}}) as s:
        log = tmp_path / "logs" / "c.log"
        since = s.mark()
        await s.run('/call mcp__c__echo {"text": "x"}', "✗ c disconnected")
        await s.wait_for("+ c connected again (", since)
    out = " ".join(s.text(since).split())
    assert f"; see error logs: {log}" in out.split("✗ c disconnected: ", 1)[1].split("+ c connected again")[0]


async def test_reload_rereads_the_files(tmp_path: Path) -> None:
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        await s.run("/reload", "✓ settings re-read — no MCP changes")
        replace_text(s.layout.paths.user, '{\n "mcpServers": {')
        out = await s.run("/reload", "✗ settings re-read, but a file does not parse")
        assert "✓" not in out


async def test_reload_starts_again_a_server_that_failed_to_start(tmp_path: Path) -> None:
    """A call of a tool of a server whose start failed says ``/reload`` starts it again; with the settings
    unchanged, ``/reload`` said "no MCP changes" and left it down, its executable installed since or not."""
    tool = tmp_path / "bin" / "tool"
    async with shell(tmp_path, user={"mcpServers": {"t": {"command": str(tool)}}}) as s:
        await s.run("/call mcp__t__echo {}", "(in the shell: /reload)")
        tool.parent.mkdir()
        tool.write_text(f"#!/bin/sh\nexec {sys.executable} -m {LIGHT} --name t\n")
        tool.chmod(0o755)
        out = await s.run("/reload", "✓ settings re-read")
        assert "no MCP changes" not in out
        await s.run_until("/mcp", "t · ● connected (1 tool", row="t · ")
        await s.run('/call mcp__t__echo {"text": "hi"}', "t:echo:hi")


async def test_reload_says_a_server_it_started_again_failed_again(tmp_path: Path) -> None:
    """``/reload`` starts a server whose start failed again; when it fails again the same way, the session says
    so (it said only "settings re-read", as if the server had been started)."""
    tool = tmp_path / "bin" / "tool"
    async with shell(tmp_path, user={"mcpServers": {"t": {"command": str(tool)}}}) as s:
        await s.run("/call mcp__t__echo {}", "(in the shell: /reload)")
        await s.run("/reload", "t failed to start")
        out = await s.run("/reload", "✓ settings re-read")
        assert "t failed to start" in out, out


async def test_the_sessions_lines_say_to_approve_with_its_own_approve_command(tmp_path: Path) -> None:
    """The status shown at the start, and a rejection made elsewhere, said 'run: MCPVISOR_HOME=HOME mcpvisor mcp
    approve --workspace WS NAME', a command for another terminal, where ``/mcp`` says ``/approve NAME``. They say
    the shell's own command too, which decides in the session's workspace and home."""
    async with shell(tmp_path, project={"mcpServers": {"proj": server("proj")}}, home="elsewhere") as s:
        await s.wait_for("proj · ? needs approval — run: /approve proj")
        cfg = s.layout.settings().project.servers["proj"].config
        ApprovalStore(s.layout.paths.approvals).reject(s.layout.root, "proj", cfg)  # as `mcp reject` elsewhere
        await s.wait_for("✗ proj rejected — edit its config to be asked again, or approve it after all: /approve proj")
        await s.run("/approve proj", "+ added proj")
        assert "mcp approve" not in s.text()


async def test_with_an_approvals_store_that_cannot_be_read_the_status_says_approving_waits_for_its_fix(
    tmp_path: Path,
) -> None:
    """The status shown at the start, and ``/mcp``, said 'needs approval — run: …' as though approving could work,
    where ``status`` says it waits until the store can be read again."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "mcp-approvals.json").write_text("{not json")
    async with shell(tmp_path, project={"mcpServers": {"proj": server("proj")}}, home="elsewhere") as s:
        assert s.layout.paths.approvals == tmp_path / "elsewhere" / "mcp-approvals.json"
        await s.wait_for(
            "proj · ? needs approval — run: /approve proj, once the approvals store can be read again (see above)"
        )
        out = await s.run("/mcp", "proj · ")
        assert "proj · ? needs approval — run: /approve proj, once the approvals store can be read again" in out


async def test_a_tool_pin_store_that_cannot_be_read_is_said_and_why_a_servers_tools_are_held(tmp_path: Path) -> None:
    """The store of approved tool definitions could not be read: every tool of a project server, once approved, was
    held, and the session (and run) said only that they had changed since approval; why was logged, below the level
    shown. It is said, as an unreadable token store is, once."""
    home = tmp_path / "elsewhere"
    home.mkdir()
    (home / "tool-pins.json").write_text("{not json")
    project = {"mcpServers": {"proj": server("proj")}}
    async with shell(tmp_path, project=project, home="elsewhere") as s:
        await s.wait_for(f"! cannot read the tool pin store {home / 'tool-pins.json'}: not valid JSON")
        waits = "proj · ? needs approval — run: /approve proj, once the tool pin store can be read again (see above)"
        await s.wait_for(waits)  # (as status says it)
        await s.run("/reload", "settings re-read")
        out = await s.run("/mcp", "proj · ")
        assert waits in out
        assert s.text().count("cannot read the tool pin store") == 1


async def test_a_tool_pin_store_that_cannot_be_read_is_said_once_however_many_servers_it_holds(tmp_path: Path) -> None:
    """Before: the same line was printed once more for each pinned server whose definitions it held."""
    home = tmp_path / "elsewhere"
    home.mkdir()
    (home / "tool-pins.json").write_text("{broken")
    user = {"mcp": {"pinTools": "all"}, "mcpServers": {name: server(name) for name in ("a", "b", "c")}}
    async with shell(tmp_path, user=user, home="elsewhere") as s:
        for name in ("a", "b", "c"):
            out = await s.run_until("/mcp", f"{name} · ● connected", row="c · ")
        assert "c · ● connected (0 tools, 0 prompts) · 1 tool held — cannot read the tool pin store" in out
        assert s.text().count("! cannot read the tool pin store") == 1, s.text()
        (home / "tool-pins.json").unlink()  # fixed: what they offer is pinned
        await s.run_until("/mcp", "c · ● connected (1 tool, 0 prompts)", row="c · ")
        since = s.mark()
        (home / "tool-pins.json").write_text("{broken")  # broken again: said again, once
        await s.wait_for("! cannot read the tool pin store", since)
        await s.run_until("/mcp", "c · ● connected (0 tools, 0 prompts)", row="c · ")
        assert s.text(since).count("! cannot read the tool pin store") == 1, s.text(since)


SPOILED_BY_CALLS = raw_server(
    "spoiling",
    """
    listings = []
    def answer(method, params):
        if method == "tools/list":
            listings.append(method)
            tools = [{"name": "ok", "inputSchema": {"type": "object"}}]
            if len(listings) in (2, 3):  # its listings after the first two calls are not valid MCP
                return {"tools": [*tools, {"name": "bad", "inputSchema": {"type": "string"}}]}
            if len(listings) > 3:  # and the one after the third is refused
                send({"id": msg["id"], "error": {"code": -32603, "message": "the catalogue is down"}})
                return None
            return {"tools": tools}
        if method == "tools/call":
            send({"method": "notifications/tools/list_changed"})
            return {"content": [{"type": "text", "text": "ok"}]}
        return {}
    """,
    capabilities={"tools": {"listChanged": True}},
)


async def test_what_is_wrong_with_a_connected_servers_new_listing_is_said_once_each_time_it_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: only the /mcp row said it; the session printed nothing when it happened."""
    script = tmp_path / "spoiling.py"
    script.write_text(SPOILED_BY_CALLS)
    async with shell(
        tmp_path, user={"mcpServers": {"spoiling": {"command": sys.executable, "args": [str(script)]}}}
    ) as s:
        await s.run_until("/tools", "mcp__spoiling__ok", row="mcp__spoiling__ok")

        def refused() -> int:
            return sum("refreshing its listings failed" in r.getMessage() for r in caplog.records)

        since = s.mark()
        await s.run("/call mcp__spoiling__ok {}", "ok")  # (it announces a change: its new listing is invalid)
        invalid = (
            "! spoiling: its new listing is not valid MCP (tools.1.inputSchema.type: Input should be 'object'); "
            "the one before is served"
        )
        await s.wait_for(invalid, since)
        await s.run("/call mcp__spoiling__ok {}", "ok")  # the same again: not said again
        await wait_until(lambda: refused() == 2, what="the second listing to be refused")
        await s.run("/call mcp__spoiling__ok {}", "ok")  # another problem: said
        refusal = "! spoiling: listing it again failed: the catalogue is down (code -32603); the one before is served"
        await s.wait_for(refusal, since)
        assert s.text(since).count("its new listing is not valid MCP") == 1, s.text(since)
        await s.run("/call mcp__spoiling__ok {}", "ok")


async def test_a_session_in_a_folder_not_trusted_says_no_language_server_starts_there_either(tmp_path: Path) -> None:
    entry = {"command": "pylsp", "extensionToLanguage": {".py": "python"}}
    user = {"security": {"folderTrust": {"enabled": True}}, "lspServers": {"py": entry}}
    async with shell(tmp_path, user=user) as s:
        await s.wait_for(f"! folder {s.layout.root} is not trusted: no MCP server or language server starts here")


async def test_the_trust_command_the_session_starts_with_trusts_its_folder_in_its_home(tmp_path: Path) -> None:
    """The shell has no command that trusts a folder: the status shown at the start names the one to paste in
    another terminal, with the session's workspace and home."""
    user = {"mcpServers": {"a": server("a")}, "security": {"folderTrust": {"enabled": True}}}
    async with shell(tmp_path, user=user, project={"mcpServers": {"proj": server("proj")}}, home="elsewhere") as s:
        home = s.layout.env["MCPVISOR_HOME"]
        command = f"MCPVISOR_HOME={home} mcpvisor mcp trust --workspace {s.layout.root}"
        await s.wait_for(f"a · ○ untrusted folder — run: {command}")


async def test_the_trust_command_the_mcp_view_prints_trusts_the_sessions_folder_in_its_home(tmp_path: Path) -> None:
    """In an untrusted folder, ``/mcp`` said ``untrusted folder — run: mcpvisor mcp trust``: pasted in another
    terminal, it trusted that terminal's folder, in the default home, not the session's. It names both."""
    user = {"mcpServers": {"a": server("a")}, "security": {"folderTrust": {"enabled": True}}}
    async with shell(tmp_path, user=user, project={"mcpServers": {"proj": server("proj")}}, home="elsewhere") as s:
        out = await s.run("/mcp", "a · ○ untrusted folder — run: ")
        home = s.layout.env["MCPVISOR_HOME"]
        command = f"MCPVISOR_HOME={home} mcpvisor mcp trust --workspace {s.layout.root}"
        assert f"untrusted folder — run: {command}" in " ".join(out.split())  # (a line the view wrapped)
        elsewhere = tmp_path / "elsewhere terminal"
        elsewhere.mkdir()
        path = f"{Path(mcpvisor_command()).parent}{os.pathsep}{os.environ['PATH']}"
        another = {**os.environ, **s.layout.env, "PATH": path}
        del another["MCPVISOR_HOME"]  # another terminal: only what the command says
        pasted = await anyio.run_process(["sh", "-c", command], cwd=elsewhere, env=another, check=False)
        assert pasted.returncode == 0, (command, pasted.stdout, pasted.stderr)
        listed = await anyio.run_process(
            ["sh", "-c", f"{command.replace(' trust ', ' list ')} --json"], cwd=elsewhere, env=another
        )
        assert json.loads(listed.stdout)["trusted"] is True  # the session's folder, in the session's home


# -- leaving ----------------------------------------------------------------------------------


async def test_what_a_settings_file_names_is_printed_as_written_never_read_as_markup(tmp_path: Path) -> None:
    a = server("a")
    async with shell(tmp_path, user={"mcpServers": {"a": a}}) as s:
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"a": a, "[conceal]b[/conceal]": server("b")}})
        await s.wait_for("+ added [conceal]b[/conceal] (1 tool)", since)
        since = s.mark()
        name = "[conceal]p[/conceal]"
        save(s.layout.paths.project, {"mcpServers": {name: server("p")}})
        await s.wait_for(f"Approve {name}?", since)
        cfg = s.layout.settings().project.servers[name].config
        ApprovalStore(s.layout.paths.approvals).reject(s.layout.root, name, cfg)  # as `mcp reject` elsewhere
        await s.wait_for(f"✗ {name} rejected — edit its config to be asked again", since)


async def test_the_start_says_it_is_connecting_and_how_to_leave_before_anything_else(tmp_path: Path) -> None:
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        await s.wait_for(HELP_HINT)
        text = s.text()
        assert text.index("Connecting to the admitted servers… (Ctrl-C leaves)") < text.index("a · ●")


async def test_an_invalid_entry_is_a_row_of_mcp_until_an_edit_fixes_it(tmp_path: Path) -> None:
    """With a file's only entry invalid, the table at the start and ``/mcp`` said "No MCP servers configured." once
    its warning was said: the entry is a row saying it is invalid, where and the fix, until the fix starts it."""
    secret = "s3cret-value"
    user = {"mcpServers": {"h": {"comand": "x", "env": {"TOKEN": secret}}}}
    row = f"h · ✗ invalid entry in {tmp_path / 'home' / '.mcpvisor' / 'settings.json'}, not started — no transport"
    async with shell(tmp_path, user=user) as s:
        assert s.layout.paths.user == tmp_path / "home" / ".mcpvisor" / "settings.json"
        await s.wait_for(row)  # the table at the start
        out = await s.run("/mcp", "fix mcpServers.h")
        assert row in " ".join(out.split())
        assert "No MCP servers configured" not in s.text()
        assert secret not in s.text()
        save(s.layout.paths.user, {"mcpServers": {"h": server("h")}})
        out = await s.run_until("/mcp", "h · ● connected (1 tool", row="h · ")
        assert "invalid entry" not in out


async def test_a_call_of_an_invalid_entrys_tool_says_the_entry_is_invalid_where_and_the_fix(tmp_path: Path) -> None:
    """A call of a tool of a server whose entry is invalid said "no MCP server providing it is currently configured",
    as for a server nobody wrote: it says the entry is invalid, where, why and the fix."""
    user = {"mcpServers": {"h": {"comand": "x", "env": {"TOKEN": "s3cret-value"}}}}
    async with shell(tmp_path, user=user) as s:
        out = await s.run("/call mcp__h__echo {}", "fix mcpServers.h")
        said = " ".join(out.split())
        where = tmp_path / "home" / ".mcpvisor" / "settings.json"
        assert f"tool 'mcp__h__echo' is unavailable: the entry of MCP server 'h' in {where} is invalid — " in said
        assert "did you mean 'command'?" in said
        assert "currently configured" not in said
        assert "s3cret-value" not in s.text()


async def test_a_running_servers_entry_made_invalid_runs_on_and_mcp_says_so_until_fixed(tmp_path: Path) -> None:
    """An edit that made a running server's entry invalid kept its last good configuration running, said once; an
    hour later ``/mcp`` showed it connected as if its file were fine: its row says the last good one runs."""
    notice = "the last good configuration of MCP server 'h' stays in force; fix the entry and save to apply it"
    async with shell(tmp_path, user={"mcpServers": {"h": server("h")}}) as s:
        await s.run_until("/mcp", "h · ● connected (1 tool", row="h · ")
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"h": {**server("h"), "args": "oops"}}})
        await s.wait_for(notice, since)
        out = " ".join((await s.run("/mcp", "fix the entry and save to apply it")).split())
        assert f"h · ● connected (1 tool, 0 prompts) · ! invalid entry in {s.layout.paths.user}" in out
        assert "(mcpServers.h.args: expected a list)" in out
        assert notice in out
        save(s.layout.paths.user, {"mcpServers": {"h": server("h", "--tools", "echo,rev")}})
        out = await s.run_until("/mcp", "h · ● connected (2 tools", row="h · ")
        assert "last good" not in out


async def test_a_broken_save_and_its_fix_are_both_said(tmp_path: Path) -> None:
    a = server("a")
    async with shell(tmp_path, user={"mcpServers": {"a": a}}) as s:
        since = s.mark()
        replace_text(s.layout.paths.user, '{"mcpServers": {"a": ')
        await s.wait_for("its last good content (if any) stays in force", since)
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"a": a}})
        await s.wait_for(f"✓ {s.layout.paths.user} is valid again — applied", since)


async def test_quit_exits_with_code_0_and_leaves_no_server_process(tmp_path: Path) -> None:
    markers = [tmp_path / "a.pids", tmp_path / "proj.pids"]
    user = {"mcpServers": {"a": server("a", marker=markers[0])}}
    async with shell(tmp_path, user=user, project={"mcpServers": {"proj": server("proj", marker=markers[1])}}) as s:
        await s.wait_for("Approve proj?")
        await s.run("a", "+ added proj")
        assert all(len(marker_pids(m)) == 1 for m in markers)
        await s.type("/quit")
        assert await s.wait_exit() == EXIT_OK
    assert all_gone(*markers)


async def test_end_of_input_exits_with_code_0_and_leaves_no_server_process(tmp_path: Path) -> None:
    marker = tmp_path / "a.pids"
    async with shell(tmp_path, user={"mcpServers": {"a": server("a", marker=marker)}}) as s:
        await s.run("/tools", "mcp__a__echo")
        s.lines.close()
        assert await s.wait_exit() == EXIT_OK
    assert len(marker_pids(marker)) == 1
    assert all_gone(marker)


async def test_a_script_of_which_a_command_failed_exits_1_after_running_the_rest(tmp_path: Path) -> None:
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        await s.run("/call mcp__zzz__x", "not found")
        await s.run('/call mcp__a__echo {"text":"on"}', "a:echo:on")
        s.lines.close()
        assert await s.wait_exit() == EXIT_FAILED


async def test_ctrl_c_at_the_prompt_warns_once_and_twice_leaves(tmp_path: Path) -> None:
    marker = tmp_path / "a.pids"
    async with shell(tmp_path, user={"mcpServers": {"a": server("a", marker=marker)}}) as s:
        since = s.mark()
        await s.interrupts.send(object())
        await s.wait_for("(press Ctrl-C again to leave, or type /quit)", since)
        await s.run("/tools", "mcp__a__echo")  # a line in between starts the count again
        since = s.mark()
        await s.interrupts.send(object())
        await s.wait_for("press Ctrl-C again", since)
        await s.interrupts.send(object())
        assert await s.wait_exit() == EXIT_INTERRUPTED
    assert all_gone(marker)


async def test_ctrl_c_while_servers_are_still_starting_leaves_at_once(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "stuck.pids"
    stuck = server("stuck", "--hang-on-initialize", marker=marker, discovery_timeout_ms=600_000)
    save(layout.paths.user, {"mcpServers": {"stuck": stuck}})
    send, receive = anyio.create_memory_object_stream[object](math.inf)
    codes: list[int] = []
    console = Console(record=True, width=200, file=io.StringIO())

    async def run() -> None:
        codes.append(
            await run_shell(
                HostOptions(env=layout.env, workspace=layout.root),
                console=console,
                input_lines=_never(),
                interrupts=receive,
            )
        )

    with send, receive:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await wait_until(lambda: len(marker_pids(marker)) == 1, what="the stuck server to be spawned")
            send.send_nowait(object())
            await wait_until(lambda: bool(codes), what="the shell to leave")  # long before the discovery timeout
    assert codes == [EXIT_INTERRUPTED]
    assert HELP_HINT not in console.export_text()
    assert all_gone(marker)


async def _never() -> AsyncIterator[str]:
    await anyio.sleep_forever()
    yield ""  # pragma: no cover - makes this an async generator


async def test_a_configuration_that_prevents_start_up_is_raised_as_is(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    options = HostOptions(env=layout.env, workspace=layout.root, mcp_config=[tmp_path / "missing.json"])
    with pytest.raises(ConfigError, match="missing.json"):
        await run_shell(options, console=Console(record=True, width=200, file=io.StringIO()), input_lines=_never())


async def test_a_remote_server_down_at_the_start_is_said_to_connect_when_it_comes_up(tmp_path: Path) -> None:
    from tests.helpers import free_port, http_server

    port = free_port()
    late = {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}
    async with shell(tmp_path, user={"mcpServers": {"late": late}}) as s:
        since = s.mark()
        async with http_server("late", port=port):  # tried again by itself, no /reload
            await s.wait_for("+ connected late (1 tool)", since)


def test_a_prompts_change_heard_as_the_session_ends_is_passed_over_quietly(tmp_path: Path) -> None:
    """Ctrl-C while the shell connects: the prompts of the servers stopping change once the host is no longer
    running. Before, reading them raised NotRunningError in the listener: an ERROR and a traceback."""
    from mcpvisor.core.events import PromptsChanged
    from mcpvisor.host.host import Host
    from mcpvisor.shell.session import ShellSession

    layout = make_layout(tmp_path)
    session = ShellSession(Host(HostOptions(env=layout.env, workspace=layout.root)), Console(file=io.StringIO()))
    session._ready = True  # (as after its first start)
    session.on_event(PromptsChanged())  # the host never ran: as one that exited


async def test_a_server_still_starting_restarted_by_an_edit_is_said_restarted_not_also_connected(
    tmp_path: Path,
) -> None:
    """A start an edit's pass left going, restarted by a later edit (its arguments changed): the new start's coming
    up was said as the end of the old one ("+ connected slow") and the pass said it restarted too."""
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}, startup_wait_s=0.1) as s:
        hangs = server("slow", "--hang-on-initialize", discoveryTimeoutMs=600_000)
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "slow": hangs}})
        await s.wait_for("slow is still starting")
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "slow": server("slow")}})
        said = await s.wait_for("restarted slow", since)
        await s.run("/mcp", "slow · ● connected")
        assert "connected slow" not in said


async def test_a_server_whose_start_hangs_is_not_said_again_to_start_and_fail_at_every_unrelated_edit(
    tmp_path: Path,
) -> None:
    """Every pass starts a failed server again. A start that outlasts its pass ends after it, and that ending was
    said whatever was said before: each unrelated save said "◌ slow is still starting", then the very failure said
    already ("a retry that fails the same way says nothing", as when the pass itself sees it fail)."""
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}, startup_wait_s=0.1) as s:
        marker = tmp_path / "slow.pids"
        hangs = server("slow", "--hang-on-initialize", marker=marker, discoveryTimeoutMs=1_000)
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "slow": hangs}})
        await s.wait_for("slow failed to start")
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "slow": hangs, "b": server("b")}})
        await wait_until(lambda: len(marker_pids(marker)) == 2, what="slow's retry")
        await wait_until(lambda: not pid_alive(marker_pids(marker)[1]), what="slow's retry to end")
        await s.run_until("/mcp", "slow · ✗ disconnected", row="slow ·")  # (its end is in, said or not)
        said = s.text(since)
        assert "slow failed to start" not in said
        assert "slow is still starting" not in said


async def test_a_start_that_failed_after_its_pass_and_fails_again_the_same_way_is_said_once(tmp_path: Path) -> None:
    """A start that fails after its pass returned (another pass was asked for) was said to fail, but not remembered:
    a later pass retrying it, failing the same way, said it again (a start failing within its pass is said once)."""
    gate, started = tmp_path / "gate", tmp_path / "started"
    fails_at_gate = (
        "import pathlib, sys, time\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        f"while not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.02)\n"
        "sys.exit(3)"
    )
    x = {"command": sys.executable, "args": ["-c", fails_at_gate]}
    async with shell(tmp_path, user={"mcpServers": {"a": server("a")}}) as s:
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "x": x}})
        await wait_until(started.exists, what="x's start")
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "x": x, "b": server("b")}})  # x's pass ends
        await s.wait_for("+ added b", since)
        assert "x is still starting" in s.text(since)
        gate.touch()
        await s.wait_for("✗ x failed to start", since)
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "x": x, "c": server("c")}})  # retries x
        await s.wait_for("+ added c", since)
        out = " ".join(s.text(since).split())
        assert out.count("x failed to start") == 1, out


async def test_a_running_server_changed_to_an_entry_that_cannot_start_is_said_to_have_failed_to_restart(
    tmp_path: Path,
) -> None:
    """An edit restarting a connected server with a command that does not exist: its failure was said as a
    disconnection ("✗ b disconnected"), then "↻ restarted b" as if it ran again; it is one line, with the fix."""
    async with shell(tmp_path, user={"mcpServers": {"a": server("a"), "b": server("b")}}) as s:
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "b": {"command": "/nonexistent/bin/tool"}}})
        said = await s.wait_for(
            "✗ b failed to restart (command, args changed): executable '/nonexistent/bin/tool' not found; "
            "check mcpServers.b.command",
            since,
        )
        await s.run("/mcp", "b · ✗ disconnected — executable '/nonexistent/bin/tool' not found")
        assert "b disconnected" not in said
        assert "restarted b" not in said


async def test_a_server_that_failed_to_start_and_is_changed_is_said_once_to_restart_or_to_fail(tmp_path: Path) -> None:
    """A server whose start failed, changed by an edit, is both retried and restarted: a failing change was said
    "✗ b failed to start" then "↻ restarted b", and a fixing one "+ connected b" then "↻ restarted b"."""
    tool = {"command": "/nonexistent/bin/tool"}
    async with shell(tmp_path, user={"mcpServers": {"a": server("a"), "b": tool}}) as s:
        await s.run("/mcp", "b · ✗")
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "b": {**tool, "args": ["-v"]}}})
        failed = await s.wait_for("✗ b failed to restart (args changed): executable '/nonexistent/bin/tool'", since)
        assert "restarted b" not in failed
        assert "b failed to start" not in failed
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"a": server("a"), "b": server("b")}})
        await s.wait_for("↻ restarted b (command, args changed)", since)
        await s.run("/mcp", "b · ● connected (1 tool")
        assert "connected b" not in s.text(since)


async def test_fixing_an_invalid_entry_is_said_as_fixing_a_file_that_did_not_parse_is(tmp_path: Path) -> None:
    """An invalid entry is said with "fix the entry and save to apply it"; the save that fixed it, as written before
    (so no server changed), was followed by nothing, leaving the user to wonder whether it was read."""
    async with shell(tmp_path, user={"mcpServers": {"h": server("h")}}) as s:
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"h": {**server("h"), "args": "oops"}}})
        await s.wait_for("fix the entry and save to apply it", since)
        since = s.mark()
        save(s.layout.paths.user, {"mcpServers": {"h": server("h")}})
        await s.wait_for(f"✓ {s.layout.paths.user} is valid again — applied", since)
        out = await s.run("/mcp", "h · ● connected (1 tool, 0 prompts)")
        assert "invalid entry" not in out


async def test_a_server_restarted_by_an_edit_and_still_starting_is_said_restarted_then_still_starting(
    tmp_path: Path,
) -> None:
    """A connected server whose edit restarts it into a slow start: "◌ slow is still starting" came before
    "↻ restarted slow", as if the old start were still going when the edit landed."""
    async with shell(tmp_path, user={"mcpServers": {"slow": server("slow")}}, startup_wait_s=0.1) as s:
        since = s.mark()
        hangs = server("slow", "--hang-on-initialize", discoveryTimeoutMs=600_000)
        save(s.layout.paths.user, {"mcpServers": {"slow": hangs}})
        said = " ".join((await s.wait_for("slow is still starting", since)).split())
        assert "↻ restarted slow (args changed) ◌ slow is still starting" in said, said


async def test_a_language_server_given_up_after_its_second_crash_in_a_row_is_said_to_have_failed(
    tmp_path: Path,
) -> None:
    """Its state reads "failed 2 times in a row; …" after the second crash (calls are refused until /reload). Before,
    the shell said only states reading "failed" exactly: the second crash passed without a word."""
    from tests.host.lsp.test_lsp_host import language_server_processes, pylsp

    async with shell(tmp_path, user={"lspServers": {"python": pylsp()}}) as s:
        (s.layout.root / "models.py").write_text("class User: ...\n")
        call = '/call mcp__lsp__document_symbols {"file": "models.py"}'
        for _ in range(2):
            since = s.mark()
            await s.run(call, "Class User")
            running = language_server_processes(s.layout.root)
            [pylsp_process] = [p for p in running if not any("reaper" in part for part in p.cmdline())]
            pylsp_process.kill()  # the language server, not the reaper in front of it
            await s.wait_for("✗ language server python failed: the process was killed by SIGKILL", since)
