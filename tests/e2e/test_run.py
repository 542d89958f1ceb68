"""``mcpvisor run --json`` as a subprocess, driven through real file edits (SPEC §9, §11)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import pytest
from anyio.streams.text import TextReceiveStream

from tests.helpers import LIGHT, WAIT_S, marker_pids, mcpvisor_command, pid_alive, wait_until, wait_woken
from tests.layout import Layout, make_layout, replace_text

Event = dict[str, Any]


def server(name: str, marker: Path, *args: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", LIGHT, "--name", name, "--marker", str(marker), *args]}


def save(path: Path, data: Any) -> None:
    replace_text(path, json.dumps(data, indent=2))


class Run:
    """A running ``mcpvisor run --json`` and the events it printed."""

    def __init__(self, layout: Layout, process: anyio.abc.Process) -> None:
        self.layout = layout
        self.process = process
        self.events: list[Event] = []
        self._updated = anyio.Event()

    async def read(self) -> None:
        assert self.process.stdout is not None
        buffer = ""
        async for chunk in TextReceiveStream(self.process.stdout):
            buffer += chunk
            *lines, buffer = buffer.split("\n")
            for line in lines:
                if line.strip():
                    self.events.append(json.loads(line))
            self._updated.set()
            self._updated = anyio.Event()

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        await wait_woken(condition, lambda: self._updated, seen=lambda: f"the last events: {self.events[-4:]}")

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e["event"] == kind]

    def last_server(self, name: str) -> Event | None:
        found = [e for e in self.of("server") if e["server"] == name]
        return found[-1] if found else None

    def status(self, name: str) -> str | None:
        event = self.last_server(name)
        return None if event is None else str(event["status"])

    async def next_reconcile(self, edit: Callable[[], None]) -> Event:
        before = len(self.of("reconcile"))
        edit()
        await self.wait_for(lambda: len(self.of("reconcile")) > before)
        return self.of("reconcile")[before]

    async def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = await anyio.run_process(
            [mcpvisor_command(), *args, "--workspace", str(self.layout.root)],
            env={**os.environ, **self.layout.env},
            check=False,
        )
        return subprocess.CompletedProcess(
            result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
        )


@asynccontextmanager
async def run(tmp_path: Path, *, user: Any = None, project: Any = None) -> AsyncIterator[Run]:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    if user is not None:
        save(layout.paths.user, user)
    if project is not None:
        save(layout.paths.project, project)
    process = await anyio.open_process(
        [mcpvisor_command(), "run", "--json", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
        stderr=subprocess.DEVNULL,
    )
    r = Run(layout, process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(r.read)
        try:
            await r.wait_for(lambda: bool(r.of("ready")))
            yield r
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
                with anyio.move_on_after(WAIT_S):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            tg.cancel_scope.cancel()
    await process.aclose()


async def test_add_change_remove_and_exclude_touch_only_that_server(tmp_path: Path) -> None:
    m = {n: tmp_path / f"{n}.pids" for n in "abc"}
    servers = {"a": server("a", m["a"]), "b": server("b", m["b"])}
    async with run(tmp_path, user={"mcpServers": servers}) as r:
        first = r.of("reconcile")[0]
        assert sorted(first["added"]) == ["a", "b"]
        assert r.of("ready")
        assert r.events.index(r.of("ready")[0]) > r.events.index(first)
        [a_pid], [b_pid] = marker_pids(m["a"]), marker_pids(m["b"])

        # add c: it connects and its tools appear; a and b keep their processes
        servers["c"] = server("c", m["c"], "--tools", "x,y")
        added = await r.next_reconcile(lambda: save(r.layout.paths.user, {"mcpServers": servers}))
        assert added["added"] == ["c"]
        assert sorted(added["kept"]) == ["a", "b"]
        assert r.last_server("c") == {
            "event": "server",
            "server": "c",
            "status": "connected",
            "reason": None,
            "tools": ["mcp__c__x", "mcp__c__y"],
            "prompts": [],
            "error": None,
            "held_tools": [],
            "held_prompts": [],
            "held_why": None,
            "warning": None,
        }
        assert marker_pids(m["a"]) == [a_pid]
        assert marker_pids(m["b"]) == [b_pid]

        # change b's args: only b restarts
        servers["b"] = server("b", m["b"], "--tools", "new")
        changed = await r.next_reconcile(lambda: save(r.layout.paths.user, {"mcpServers": servers}))
        assert changed["restarted"] == ["b"]
        assert marker_pids(m["a"]) == [a_pid]
        assert len(marker_pids(m["b"])) == 2
        await wait_until(lambda: not pid_alive(b_pid))
        assert r.last_server("b")["tools"] == ["mcp__b__new"]  # type: ignore[index]

        # remove c: its process exits and its tools vanish
        [c_pid] = marker_pids(m["c"])
        del servers["c"]
        removed = await r.next_reconcile(lambda: save(r.layout.paths.user, {"mcpServers": servers}))
        assert removed["removed"] == ["c"]
        assert r.last_server("c")["tools"] == []  # type: ignore[index]
        await wait_until(lambda: not pid_alive(c_pid))

        # exclude a: it disconnects
        excluded = await r.next_reconcile(
            lambda: save(r.layout.paths.user, {"mcpServers": servers, "mcp": {"excluded": ["a"]}})
        )
        assert excluded["gated"] == {"a": "excluded"}
        assert r.last_server("a")["reason"] == "excluded"  # type: ignore[index]
        await wait_until(lambda: not pid_alive(a_pid))


async def test_a_theme_edit_gives_no_reconcile_event(tmp_path: Path) -> None:
    servers = {"a": server("a", tmp_path / "a")}
    async with run(tmp_path, user={"mcpServers": servers}) as r:
        before = len(r.of("reconcile"))
        save(r.layout.paths.user, {"mcpServers": servers, "ui": {"theme": "dark"}})
        # A later edit in another scope is handled after the theme edit: the first reconcile after
        # the theme edit must be the sentinel's own (it excludes a), not one the theme caused.
        first = await r.next_reconcile(lambda: save(r.layout.paths.workspace, {"mcp": {"excluded": ["a"]}}))
        assert first["gated"] == {"a": "excluded"}
        assert len(r.of("reconcile")) == before + 1


async def test_unrelated_edits_repeat_nothing_that_did_not_change(tmp_path: Path) -> None:
    """A failed server is retried by the next reconcile, but reported as retried, not added again; a
    server waiting for approval is announced once, not after every edit."""
    broken = {"command": sys.executable, "args": ["-c", "import sys; sys.exit(2)"]}
    project = {"mcpServers": {"p": server("p", tmp_path / "p")}}
    user = {"mcpServers": {"bad": broken}}
    async with run(tmp_path, user=user, project=project) as r:
        first = r.of("reconcile")[0]
        assert first["added"] == ["bad"]
        assert "bad" in first["failed"]
        assert len(r.of("approval_needed")) == 1
        edited = {"mcpServers": {"bad": broken, "v": server("v", tmp_path / "v")}}
        again = await r.next_reconcile(lambda: save(r.layout.paths.user, edited))
        assert again["added"] == ["v"]
        assert again["retried"] == ["bad"]
        assert "bad" in again["failed"]
        assert len(r.of("approval_needed")) == 1  # p still waits, as it did: nothing new to say


async def test_an_invalid_save_keeps_servers_running_and_reports_the_error(tmp_path: Path) -> None:
    marker = tmp_path / "a"
    async with run(tmp_path, user={"mcpServers": {"a": server("a", marker)}}) as r:
        replace_text(r.layout.paths.user, '{"mcpServers": {"a": {"command": ')
        await r.wait_for(lambda: bool(r.of("settings_error")))
        error = r.of("settings_error")[0]
        assert error["path"] == str(r.layout.paths.user)
        assert isinstance(error["line"], int)
        assert error["message"]
        [pid] = marker_pids(marker)
        assert pid_alive(pid)
        assert r.status("a") == "connected"
        # Fixing it says so, once: the last line on screen is no longer the error.
        save(r.layout.paths.user, {"mcpServers": {"a": server("a", marker)}})
        await r.wait_for(lambda: bool(r.of("settings_ok")))
        assert r.of("settings_ok") == [{"event": "settings_ok", "path": str(r.layout.paths.user)}]
        save(r.layout.paths.user, {"mcpServers": {"a": server("a", marker)}, "ui": {"theme": "dark"}})
        await r.next_reconcile(lambda: save(r.layout.paths.workspace, {"mcp": {"excluded": ["other"]}}))
        assert len(r.of("settings_ok")) == 1  # a later good save is nothing to announce


async def test_one_invalid_entry_keeps_its_last_good_config_and_the_rest_of_the_save_applies(
    tmp_path: Path,
) -> None:
    m = {n: tmp_path / f"{n}.pids" for n in "abc"}
    servers = {"a": server("a", m["a"]), "b": server("b", m["b"])}
    async with run(tmp_path, user={"mcpServers": servers}) as r:
        [a_pid], [b_pid] = marker_pids(m["a"]), marker_pids(m["b"])
        # One save: a's args become a string (invalid), b changes, c is added.
        broken = {**servers["a"], "args": "-m mcpvisor.examples.light_server"}
        edited = {"a": broken, "b": server("b", m["b"], "--tools", "new"), "c": server("c", m["c"])}
        reconcile = await r.next_reconcile(lambda: save(r.layout.paths.user, {"mcpServers": edited}))
        assert reconcile["added"] == ["c"]
        assert reconcile["restarted"] == ["b"]
        assert reconcile["kept"] == ["a"]
        assert reconcile["removed"] == []
        [warning] = [w["message"] for w in r.of("warning") if "invalid entry" in w["message"]]
        assert warning.startswith(f"invalid entry in {r.layout.paths.user} (mcpServers.a.args: expected a list)")
        assert "the last good configuration of MCP server 'a' stays in force" in warning
        assert marker_pids(m["a"]) == [a_pid]
        assert pid_alive(a_pid)
        assert r.status("a") == "connected"

        # mcpvisor status (another process, no last good state) says what is wrong with a.
        status = await r.cli("status")
        assert "mcpServers.a" in status.stdout + status.stderr

        # Fixing the entry applies it: a restarts with the fixed config, the others stay.
        b_pids = marker_pids(m["b"])  # the restarted b, and the one status started and stopped
        edited["a"] = server("a", m["a"], "--tools", "fixed")
        fixed = await r.next_reconcile(lambda: save(r.layout.paths.user, {"mcpServers": edited}))
        assert fixed["restarted"] == ["a"]
        assert r.last_server("a")["tools"] == ["mcp__a__fixed"]  # type: ignore[index]
        assert marker_pids(m["b"]) == b_pids
        assert not pid_alive(b_pid)


async def test_a_misspelt_servers_key_in_mcp_json_is_named_with_the_key_it_was_meant_as(tmp_path: Path) -> None:
    p = server("p", tmp_path / "p.pids")
    async with run(tmp_path, project={"mcpServers": {"p": p}}) as r:
        await r.wait_for(lambda: bool(r.of("approval_needed")))
        save(r.layout.paths.project, {"mcp_servers": {"p": p}})
        await r.wait_for(lambda: any(w["message"].startswith("unknown key 'mcp_servers'") for w in r.of("warning")))
        [warning] = [w["message"] for w in r.of("warning") if w["message"].startswith("unknown key 'mcp_servers'")]
        assert (
            warning == f"unknown key 'mcp_servers' in {r.layout.paths.project} is ignored; did you mean 'mcpServers'?"
        )
        save(r.layout.paths.project, {"p": p})  # an entry written without the object around it
        await r.wait_for(lambda: any(w["message"].startswith("unknown key 'p'") for w in r.of("warning")))
        [warning] = [w["message"] for w in r.of("warning") if w["message"].startswith("unknown key 'p'")]
        assert warning.endswith('is ignored; it looks like a server: put it inside "mcpServers": {"p": {...}}')


@pytest.mark.parametrize(("scope", "misspelt"), [("user", "mcpservers"), ("project", "mcp_servers")])
async def test_a_misspelt_mcp_servers_key_keeps_the_last_good_servers_of_the_file_until_fixed(
    tmp_path: Path, scope: Literal["user", "project"], misspelt: str
) -> None:
    """A settings file, or a project's .mcp.json (before, one saved so stopped its servers as if deleted)."""
    marker = tmp_path / "a.pids"
    a = server("a", marker)
    async with run(tmp_path, **{scope: {"mcpServers": {"a": a}}}) as r:
        if scope == "project":
            approved = await r.cli("mcp", "approve", "a")
            assert approved.returncode == 0, approved.stderr
        await r.wait_for(lambda: r.status("a") == "connected")
        [pid] = marker_pids(marker)
        path = r.layout.paths.of(scope)
        save(path, {misspelt: {"a": a}})
        await r.wait_for(
            lambda: r.status("a") != "connected" or any("kept the last good" in w["message"] for w in r.of("warning"))
        )
        assert r.status("a") == "connected"
        [kept] = [w["message"] for w in r.of("warning") if "kept the last good" in w["message"]]
        assert kept == (
            f"kept the last good servers of {path} ('a') until {misspelt!r} there is renamed 'mcpServers' "
            f"(did you mean 'mcpServers'?); to stop them instead, remove {misspelt!r}"
        )
        assert pid_alive(pid)
        # Fixing the key changes nothing that runs (nor asks again); removing the servers then stops a.
        save(path, {"mcpServers": {"a": a}})
        save(path, {})
        await r.wait_for(lambda: any(e["removed"] == ["a"] for e in r.of("reconcile")))
        assert marker_pids(marker) == [pid]  # never restarted
        await wait_until(lambda: not pid_alive(pid))


async def test_a_restart_only_edit_reports_restart_required(tmp_path: Path) -> None:
    async with run(tmp_path, user={"mcpServers": {}}) as r:
        save(r.layout.paths.user, {"mcpServers": {}, "mcp": {"serverCommand": "x"}})
        await r.wait_for(lambda: bool(r.of("restart_required")))
        assert r.of("restart_required")[0]["paths"] == ["mcp.serverCommand"]


async def test_the_project_approval_flow_across_processes(tmp_path: Path) -> None:
    marker = tmp_path / "p"
    project = {"mcpServers": {"p": server("p", marker)}}
    async with run(tmp_path, user={"mcpServers": {"u": server("u", tmp_path / "u")}}, project=project) as r:
        assert r.of("approval_needed")[-1]["servers"] == ["p"]
        assert r.last_server("p")["reason"] == "pending_approval"  # type: ignore[index]
        assert not marker.exists()

        # `mcp list` never starts it either
        listed = await r.cli("mcp", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = {row["name"]: row for row in json.loads(listed.stdout)["servers"]}
        assert rows["p"]["admission"] == "pending_approval"
        assert rows["p"]["approval"] == "pending"
        assert not marker.exists()

        # approve from a second process: the running host connects it
        approved = await r.cli("mcp", "approve", "p")
        assert approved.returncode == 0, approved.stderr
        assert "mcpvisor.examples.light_server" in approved.stdout
        await r.wait_for(lambda: r.status("p") == "connected")
        assert len(marker_pids(marker)) == 1

        # edit its config: pending again, approval_needed again
        prompts = len(r.of("approval_needed"))
        save(r.layout.paths.project, {"mcpServers": {"p": server("p", marker, "--tools", "v2")}})
        await r.wait_for(lambda: len(r.of("approval_needed")) > prompts)
        assert r.of("approval_needed")[-1]["servers"] == ["p"]
        assert r.last_server("p")["reason"] == "pending_approval"  # type: ignore[index]

        # reject: stays skipped; an unrelated edit does not prompt
        rejected = await r.cli("mcp", "reject", "p")
        assert rejected.returncode == 0, rejected.stderr
        # The reconcile the rejection caused is over once its summary says so.
        await r.wait_for(lambda: r.of("reconcile")[-1]["gated"].get("p") == "rejected")
        assert r.last_server("p")["reason"] == "rejected"  # type: ignore[index]
        prompts = len(r.of("approval_needed"))
        unrelated = await r.next_reconcile(
            lambda: save(
                r.layout.paths.user,
                {"mcpServers": {"u": server("u", tmp_path / "u"), "v": server("v", tmp_path / "v")}},
            )
        )
        assert unrelated["added"] == ["v"]
        assert unrelated["gated"] == {"p": "rejected"}
        assert len(r.of("approval_needed")) == prompts

        # reject then edit: prompts again
        save(r.layout.paths.project, {"mcpServers": {"p": server("p", marker, "--tools", "v3")}})
        await r.wait_for(lambda: len(r.of("approval_needed")) > prompts)
        assert len(marker_pids(marker)) == 1


async def test_sigterm_stops_cleanly_and_leaves_no_process(tmp_path: Path) -> None:
    m = tmp_path / "pids"
    servers = {n: server(n, m) for n in "abc"}
    async with run(tmp_path, user={"mcpServers": servers}) as r:
        pids = marker_pids(m)
        assert len(pids) == 3
        r.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT_S):
            await r.process.wait()
        assert r.process.returncode == 0
    for pid in pids:
        await wait_until(lambda pid=pid: not pid_alive(pid))  # type: ignore[misc]


async def test_ctrl_c_pressed_again_while_it_stops_changes_nothing(tmp_path: Path) -> None:
    """A second (third) Ctrl-C while the servers stop: Python's own handler, back once the first was taken, raised
    KeyboardInterrupt somewhere in the shutdown (a traceback, or a loop at full CPU that never ended)."""
    m = tmp_path / "pids"
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.user, {"mcpServers": {n: server(n, m) for n in "abc"}})
    process = await anyio.open_process(
        [mcpvisor_command(), "run", "--json", "--workspace", str(layout.root)], env={**os.environ, **layout.env}
    )
    async with process:
        assert process.stdout is not None
        assert process.stderr is not None
        with anyio.fail_after(WAIT_S):
            async for chunk in TextReceiveStream(process.stdout):
                if '"event": "ready"' in chunk:
                    break
        pids = marker_pids(m)
        for _ in range(40):
            with contextlib.suppress(ProcessLookupError):  # it may have stopped already
                os.kill(process.pid, signal.SIGINT)  # send_signal() polls, and may reap it under asyncio's watcher
            await anyio.sleep(0.005)
        with anyio.fail_after(WAIT_S):
            said = b"".join([chunk async for chunk in process.stderr])
            await process.wait()
    assert process.returncode == 0, said.decode()
    assert b"Traceback" not in said
    for pid in pids:
        await wait_until(lambda pid=pid: not pid_alive(pid))  # type: ignore[misc]


async def test_status_json_connects_admitted_servers_only_and_hides_secrets(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "p"
    secret_server = {**server("a", tmp_path / "a"), "env": {"API_TOKEN": "very-secret-value"}}
    save(layout.paths.user, {"mcpServers": {"a": secret_server}})
    save(layout.paths.project, {"mcpServers": {"p": server("p", marker)}})
    result = await anyio.run_process(
        [mcpvisor_command(), "status", "--json", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
    )
    out = result.stdout.decode()
    rows = {row["name"]: row for row in json.loads(out)["servers"]}
    assert rows["a"]["state"] == "connected"
    assert rows["a"]["tools"] == 1
    assert rows["p"]["state"] == "needs_approval"
    assert not marker.exists()
    assert "very-secret-value" not in out
    human = await anyio.run_process(
        [mcpvisor_command(), "status", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env, "COLUMNS": "200"},
    )
    text = human.stdout.decode()
    assert "a · ● connected (1 tool, 0 prompts)" in text
    assert "p · ? needs approval" in text
    assert "very-secret-value" not in text


class Said:
    """What a process wrote to its stdout so far (``text``), read on as :meth:`until` waits for a line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdout is not None
        self._stdout = TextReceiveStream(process.stdout)
        self.text = ""

    async def until(self, text: str) -> None:
        if text in self.text:  # came with an earlier line
            return
        with anyio.fail_after(WAIT_S):
            async for chunk in self._stdout:
                self.text += chunk
                if text in self.text:
                    return


async def test_human_output_has_a_status_table_and_one_line_per_change(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    m = tmp_path / "pids"
    servers = {"a": server("a", m), "b": server("b", m)}
    save(layout.paths.user, {"mcpServers": servers})
    save(layout.paths.project, {"mcpServers": {"p": server("p", m)}})
    process = await anyio.open_process(
        [mcpvisor_command(), "run", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env, "COLUMNS": "250"},
        stderr=subprocess.DEVNULL,
    )
    said = Said(process)
    until = said.until

    async with process:
        await until("Ctrl-C to stop")
        assert "a · ● connected (1 tool, 0 prompts)" in said.text
        # Said once, in the table, with the command: not also as a line of its own.
        assert f"p · ? needs approval — run: mcpvisor mcp approve --workspace {layout.root} p" in said.text
        assert "? p needs approval" not in said.text
        save(layout.paths.user, {"mcpServers": {**servers, "a": server("a", m, "--tools", "x,y")}})
        await until("↻ restarted a (args changed)")
        save(layout.paths.user, {"mcpServers": {"a": server("a", m, "--tools", "x,y")}})
        await until("- removed b")
        save(layout.paths.user, {"mcpServers": {"a": server("a", m, "--tools", "x,y"), "c": server("c", m)}})
        await until("+ added c (1 tool)")
        # An edit that changes nothing for p says nothing about it.
        save(layout.paths.user, {"mcpServers": {"a": server("a", m, "--tools", "x,y"), "d": server("d", m)}})
        await until("+ added d (1 tool)")
        assert said.text.count("needs approval") == 1
        kept = {"a": server("a", m, "--tools", "x,y"), "d": server("d", m)}
        save(layout.paths.user, {"mcpServers": kept, "mcp": {"excluded": ["d"]}})
        await until(f"○ d disabled — in mcp.excluded of {layout.paths.user}; remove it there")
        save(layout.paths.user, {"mcpServers": {**kept, "e": server("e", m)}, "mcp": {"excluded": ["d"]}})
        await until("+ added e (1 tool)")
        assert said.text.count("○ d disabled") == 1  # said when it changed, not after every reload
        # A server slow to start holds no later edit up; how its start ends is said when it does.
        slow = {**server("slow", m, "--hang-on-initialize"), "discoveryTimeoutMs": 3000}
        kept = {**kept, "e": server("e", m), "slow": slow}
        save(layout.paths.user, {"mcpServers": kept, "mcp": {"excluded": ["d"]}})
        await anyio.sleep(1)  # its start is under way
        save(layout.paths.user, {"mcpServers": {**kept, "f": server("f", m)}, "mcp": {"excluded": ["d"]}})
        await until("◌ slow is still starting")
        await until("+ added f (1 tool)")
        await until("✗ slow failed to start: no answer within 3 s")
        assert "+ added slow" not in said.text
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT_S):
            await process.wait()
    assert process.returncode == 0
    for pid in marker_pids(m):
        await wait_until(lambda pid=pid: not pid_alive(pid))  # type: ignore[misc]


async def test_a_restart_line_names_the_changed_fields_as_the_settings_file_spells_them(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    m = tmp_path / "pids"
    save(layout.paths.user, {"mcpServers": {"a": server("a", m)}})
    process = await anyio.open_process(
        [mcpvisor_command(), "run", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env, "COLUMNS": "250"},
        stderr=subprocess.DEVNULL,
    )
    said = Said(process)
    async with process:
        await said.until("Ctrl-C to stop")
        save(layout.paths.user, {"mcpServers": {"a": {**server("a", m), "maxMessageBytes": 1 << 20}}})
        await said.until("↻ restarted a (")
        await said.until(" changed)")
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT_S):
            await process.wait()
    assert "↻ restarted a (maxMessageBytes changed)" in said.text
    for pid in marker_pids(m):
        await wait_until(lambda pid=pid: not pid_alive(pid))  # type: ignore[misc]


async def test_run_json_tells_of_language_servers_waiting_for_approval_and_of_their_state(tmp_path: Path) -> None:
    from tests.host.lsp.test_lsp_host import pylsp

    async with run(tmp_path) as r:
        save(r.layout.root / ".lsp.json", {"python": pylsp()})
        await r.wait_for(lambda: bool(r.of("lsp_approval_needed")))
        assert r.of("lsp_approval_needed")[-1]["servers"] == ["python"]
        states = [e["state"] for e in r.of("lsp_server") if e["server"] == "python"]
        assert states[-1] == f"needs approval — run: mcpvisor lsp approve --workspace {r.layout.root} python"
        approved = await r.cli("lsp", "approve", "python")
        assert approved.returncode == 0, approved.stderr
        await r.wait_for(
            lambda: (
                [e["state"] for e in r.of("lsp_server") if e["server"] == "python"][-1]
                == "stopped (starts on first use)"
            )
        )
        listed = json.loads((await r.cli("lsp", "list", "--json")).stdout)
        assert listed["servers"][0]["state"] == "approved; starts on first use"


async def test_run_json_tells_what_is_wrong_with_a_connected_servers_listing(tmp_path: Path) -> None:
    from tests.core.test_hostile_servers import TWICE_NAMED_SERVER

    script = tmp_path / "twice.py"
    script.write_text(TWICE_NAMED_SERVER)
    async with run(tmp_path, user={"mcpServers": {"twice": {"command": sys.executable, "args": [str(script)]}}}) as r:
        await r.wait_for(lambda: r.status("twice") == "connected")
        event = r.last_server("twice")
        assert event is not None
        assert event["warning"] == "it lists tool 'same' more than once; the first is served"


async def test_run_json_tells_of_a_withheld_tool_in_its_servers_event(tmp_path: Path) -> None:
    described = tmp_path / "described.json"
    replace_text(described, json.dumps({"bad": {"inputSchema": {"type": "object", "$defs": 5}}}))
    args = ["-m", LIGHT, "--name", "w", "--tools", "echo,bad", "--descriptions", str(described)]
    async with run(tmp_path, user={"mcpServers": {"w": {"command": sys.executable, "args": args}}}) as r:
        await r.wait_for(lambda: r.status("w") == "connected")
        withheld = (
            "tool 'bad' is withheld: its inputSchema is not a valid JSON Schema ($['$defs']: 5 is not of type "
            "'object'); the server needs fixing"
        )
        assert [e["warning"] for e in r.of("server") if e["server"] == "w" and e["warning"]] == [withheld]
        assert "mcp__w__bad" not in r.last_server("w")["tools"]  # type: ignore[index]


async def test_a_server_that_never_answers_holds_up_neither_the_start_nor_an_edit(tmp_path: Path) -> None:
    """``run`` waits a few seconds for a hanging handshake, as ``serve`` and the shell do, then follows edits; the
    hanging server goes on starting (its own discovery timeout: two minutes here)."""
    hang = {**server("hang", tmp_path / "hang.pids", "--hang-on-initialize"), "discoveryTimeoutMs": 120_000}
    servers = {"hang": hang, "a": server("a", tmp_path / "a.pids")}
    async with run(tmp_path, user={"mcpServers": servers}) as r:
        first = r.of("reconcile")[0]
        assert sorted(first["added"]) == ["a", "hang"]  # started by the pass; one of them is still starting
        assert first["starting"] == ["hang"]
        assert r.status("a") == "connected"
        servers["b"] = server("b", tmp_path / "b.pids")
        save(r.layout.paths.user, {"mcpServers": servers})
        await r.wait_for(lambda: r.status("b") == "connected")
        assert r.status("hang") == "connecting"


async def test_an_approve_hint_of_run_pasted_elsewhere_decides_in_the_home_it_runs_with(tmp_path: Path) -> None:
    """``MCPVISOR_HOME=DIR mcpvisor run``: its "needs approval — run: …" carries ``MCPVISOR_HOME=DIR``, so that
    pasted in another terminal it approves in the store this host reads (without it: the default folder's)."""
    layout = make_layout(tmp_path)
    home = tmp_path / "other home"
    m = tmp_path / "pids"
    save(home / "settings.json", {"mcpServers": {}})
    save(layout.paths.project, {"mcpServers": {"p": server("p", m)}})
    env = {**os.environ, **layout.env, "MCPVISOR_HOME": str(home), "COLUMNS": "250"}
    process = await anyio.open_process(
        [mcpvisor_command(), "run", "--workspace", str(layout.root)], env=env, stderr=subprocess.DEVNULL
    )
    said = Said(process)

    async with process:
        try:
            await said.until("Ctrl-C to stop")
            hint = f"MCPVISOR_HOME='{home}' mcpvisor mcp approve --workspace {layout.root} p"
            assert f"p · ? needs approval — run: {hint}" in said.text, said.text
            elsewhere = {k: v for k, v in env.items() if k != "MCPVISOR_HOME"}
            elsewhere["PATH"] = f"{Path(mcpvisor_command()).parent}{os.pathsep}{os.environ['PATH']}"
            pasted = await anyio.run_process(["sh", "-c", hint], env=elsewhere, check=False)
            assert pasted.returncode == 0, pasted.stderr
            await said.until("+ added p")
        finally:
            process.send_signal(signal.SIGINT)
    assert not layout.paths.approvals.exists()


def test_run_json_piped_into_a_reader_that_closes_ends_quietly(tmp_path: Path) -> None:
    """``mcpvisor run --json | head -3``: once the reader is gone, the next event ended every write in a traceback
    on stderr while the host ran on; it stops its servers and exits, as it does on SIGTERM."""
    m = tmp_path / "pids"
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.user, {"mcpServers": {"a": server("a", m)}})
    with subprocess.Popen(
        [mcpvisor_command(), "run", "--json", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            process.stdout.readline()  # the first event came
            process.stdout.close()  # the reader is gone
            anyio.run(wait_until, lambda: len(marker_pids(m)) == 1)
            pids = marker_pids(m)
            save(layout.paths.user, {"mcpServers": {"a": server("a", m), "b": server("b", m)}})  # more events
            code = process.wait(WAIT_S)  # before the fix: it ran on
        finally:
            if process.poll() is None:
                process.kill()
        stderr = process.stderr.read().decode()
    assert "Traceback" not in stderr
    assert "BrokenPipe" not in stderr
    assert code == 0
    for pid in pids:
        anyio.run(wait_until, lambda pid=pid: not pid_alive(pid))
