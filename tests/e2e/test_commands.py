"""The command line itself: fast commands never import the SDK, demo runs, Ctrl-C stops cleanly."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from tests.helpers import LIGHT, WAIT_S, marker_pids, mcpvisor_command, paste_elsewhere, pid_alive, wait_until
from tests.layout import Layout, make_layout, replace_text


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [mcpvisor_command(), *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["mcp", "list"],
        ["mcp", "list", "--json"],
        ["mcp", "approve", "p"],
        ["mcp", "reject", "p"],
        ["lsp", "list"],
        ["lsp", "list", "--json"],
        ["lsp", "approve", "py"],
        ["lsp", "reject", "py"],
    ],
)
def test_commands_that_start_no_server_never_import_the_mcp_sdk(tmp_path: Path, argv: list[str]) -> None:
    layout = make_layout(tmp_path)
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"p": {"command": "x"}}}))
    replace_text(layout.root / ".lsp.json", json.dumps({"py": {"command": "x", "extensionToLanguage": {".py": "py"}}}))
    code = (
        "import sys\n"
        "from mcpvisor.cli.main import app\n"
        "try:\n"
        f"    app({[*argv, '--workspace', str(layout.root)]!r})\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "loaded = sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types')))\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **layout.env}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_approve_names_the_problem_for_unknown_and_own_servers(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"mine": {"command": "x"}}}))
    unknown = cli("mcp", "approve", "nope", "--workspace", str(layout.root), env=layout.env)
    assert unknown.returncode == 1
    assert "cannot approve server 'nope'" in unknown.stderr
    assert "configured: mine" in unknown.stderr
    own = cli("mcp", "approve", "mine", "--workspace", str(layout.root), env=layout.env)
    assert own.returncode == 1
    assert "need no approval" in own.stderr


def test_approve_shows_the_entry_as_written_not_as_this_environment_expands_it(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    entry = {"command": "${TOOL:-npx}", "args": ["srv", "--name", "${XNAME:-evil}", "--token", "${TOKEN}"]}
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"p": entry}}))
    env = {**layout.env, "XNAME": "good", "TOKEN": "t0ps3cret"}
    shown = cli("mcp", "approve", "p", "--workspace", str(layout.root), env=env)
    assert shown.returncode == 0, shown.stderr
    out = " ".join(shown.stdout.split())
    assert 'command: ${TOOL:-npx} args: ["srv", "--name", "${XNAME:-evil}", "--token", "${TOKEN}"]' in out
    assert "${…} is filled in from the environment of the mcpvisor that runs it" in out
    assert "t0ps3cret" not in shown.stdout + shown.stderr


def test_approve_shows_every_part_of_the_entry_and_every_variable_it_reads(tmp_path: Path) -> None:
    # An oauth block could send ${AWS_SECRET_ACCESS_KEY} to a repository's token endpoint; GIT_CONFIG_* makes git
    # run a command of the repository's choice.
    layout = make_layout(tmp_path)
    oauth = {
        "grant": "client_credentials",
        "clientId": "mcpvisor",
        "clientSecret": "${AWS_SECRET_ACCESS_KEY}",
        "issuer": "http://127.0.0.1:9/",
    }
    env = {
        "GIT_CONFIG_VALUE_0": "touch /tmp/x; false",
        "PLUGINS": "./evil",
        "API_TOKEN": "literal-s3cret",
        "NPM_CONFIG__AUTHTOKEN": "npm-s3cret",  # decides what runs, and is a secret
        "HTTPS_PROXY": "http://alice:hunter2-s3cret@proxy:3128",
    }
    project = {
        "docs": {"type": "http", "url": "http://127.0.0.1:9/mcp", "oauth": oauth, "timeout": 5000},
        "git": {"command": "git", "args": ["status"], "env": env},
    }
    replace_text(layout.paths.project, json.dumps({"mcpServers": project}))
    run_env = {**layout.env, "AWS_SECRET_ACCESS_KEY": "AKIA-S3CRET-9876"}
    docs = cli("mcp", "approve", "docs", "--workspace", str(layout.root), env=run_env)
    assert docs.returncode == 0, docs.stderr
    lines = [" ".join(line.split()) for line in docs.stdout.splitlines()]
    shown_oauth = {**oauth, "issuer": "http://127.0.0.1:9/"}
    assert f"oauth: {json.dumps(shown_oauth)}" in lines
    assert "timeout: 5000" in lines
    assert "reads: ${AWS_SECRET_ACCESS_KEY} -> oauth.clientSecret" in lines
    git = cli("mcp", "approve", "git", "--workspace", str(layout.root), env=run_env)
    lines = [" ".join(line.split()) for line in git.stdout.splitlines()]
    assert "env: GIT_CONFIG_VALUE_0=touch /tmp/x; false (decides what code runs)" in lines
    assert "env: NPM_CONFIG__AUTHTOKEN=(hidden) (decides what code runs)" in lines
    assert "env: HTTPS_PROXY=http://proxy:3128 (decides what code runs)" in lines
    assert "env: API_TOKEN, PLUGINS (values hidden)" in lines  # env values are never shown (secrets), but these
    assert "S3CRET" not in (docs.stdout + docs.stderr + git.stdout + git.stderr).upper()


def test_approve_names_the_fields_of_the_entry_as_the_settings_file_spells_them(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    entry = {
        "command": "srv",
        "includeTools": ["a", "b"],
        "excludeTools": ["b"],
        "discoveryTimeoutMs": 20000,
        "maxMessageBytes": 4096,
    }
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"p": entry}}))
    shown = cli("mcp", "approve", "p", "--workspace", str(layout.root), env=layout.env)
    assert shown.returncode == 0, shown.stderr
    lines = [" ".join(line.split()) for line in shown.stdout.splitlines()]
    assert 'includeTools: ["a", "b"]' in lines
    assert 'excludeTools: ["b"]' in lines
    assert "discoveryTimeoutMs: 20000" in lines
    assert "maxMessageBytes: 4096" in lines


def test_status_shows_a_working_folder_as_written_never_what_its_variable_stands_for(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    entry = {"command": sys.executable, "args": ["-c", "pass"], "cwd": "/nonexistent/${MY_SECRET}"}
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"c": entry}}))
    shown = cli("status", "--workspace", str(layout.root), env={**layout.env, "MY_SECRET": "S3CRETzz9q"})
    assert shown.returncode == 1, shown.stderr
    assert "working directory '/nonexistent/${MY_SECRET}' not found; check mcpServers.c.cwd" in shown.stdout
    assert "S3CRETzz9q" not in shown.stdout + shown.stderr


def test_lists_show_a_command_line_without_the_password_of_a_url_in_it(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    entry = {"command": "srv", "args": ["--db", "postgres://app:s3cretPW9@db/prod"]}
    lsp = {"command": "ls", "args": ["postgres://app:s3cretPW9@db/prod"], "extensionToLanguage": {".py": "python"}}
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"db": entry}, "lspServers": {"py": lsp}}))
    for command in (("mcp", "list"), ("mcp", "list", "--json"), ("lsp", "list"), ("lsp", "list", "--json")):
        shown = cli(*command, "--workspace", str(layout.root), env=layout.env)
        assert shown.returncode == 0, shown.stderr
        assert "postgres://db/prod" in shown.stdout
        assert "s3cretPW9" not in shown.stdout + shown.stderr


def test_approving_a_project_server_that_replaces_ones_own_says_so_first(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"echo": {"command": "my-echo"}}}))
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"echo": {"command": "sh", "args": ["-c", "x"]}}}))
    shown = cli("mcp", "approve", "echo", "--workspace", str(layout.root), env=layout.env)
    assert shown.returncode == 0, shown.stderr
    out = " ".join(shown.stdout.split())
    assert f"! MCP server 'echo' of {layout.paths.project} replaces your user server of that name (in " in out
    assert out.index("replaces your user server") < out.index("Approved for")


def test_add_and_approve_say_when_the_settings_keep_the_server_from_running(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, json.dumps({"mcp": {"excluded": ["b"]}}))
    replace_text(layout.paths.workspace, json.dumps({"mcp": {"allowed": ["c", "w"]}}))
    where = ("--workspace", str(layout.root))
    added = cli("mcp", "add", "b", *where, "--", "echo", env=layout.env)
    assert added.returncode == 0, added.stderr
    said = " ".join(added.stdout.split())
    assert f"But it does not run: it is in mcp.excluded of {layout.paths.user}; remove it there." in said
    replace_text(layout.paths.workspace, json.dumps({"mcp": {"allowed": ["c"]}}))
    cli("mcp", "add", "w", "--scope", "workspace", *where, "--", "echo", env=layout.env)
    approved = cli("mcp", "approve", "w", *where, env=layout.env)
    said = " ".join(approved.stdout.split())
    assert f"But it does not run: it is not in mcp.allowed of {layout.paths.workspace}; add it there." in said
    assert "connects it now" not in said
    plain = cli("mcp", "add", "c", *where, "--", "echo", env=layout.env)
    assert "does not run" not in plain.stdout


def test_approving_a_server_approved_already_says_so_instead_of_connecting_it(tmp_path: Path) -> None:
    """Before: approving the exact configuration approved already said "Approved ... A running mcpvisor connects it
    now", as if something had changed."""
    layout = make_layout(tmp_path)
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"p": {"command": "echo"}}}))
    where = ("--workspace", str(layout.root))
    first = cli("mcp", "approve", "p", *where, env=layout.env)
    assert first.returncode == 0, first.stderr
    assert f"Approved for {layout.root}. A running mcpvisor connects it now." in " ".join(first.stdout.split())
    again = cli("mcp", "approve", "p", *where, env=layout.env)
    assert again.returncode == 0, again.stderr
    said = " ".join(again.stdout.split())
    assert f"p was approved already for {layout.root}. Nothing changed." in said
    assert "connects it now" not in said
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"p": {"command": "echo", "args": ["x"]}}}))
    edited = cli("mcp", "approve", "p", *where, env=layout.env)  # another configuration: a new approval
    assert f"Approved for {layout.root}. A running mcpvisor connects it now." in " ".join(edited.stdout.split())


def test_approving_a_language_server_approved_already_says_so(tmp_path: Path) -> None:
    """Before: it said "Approved ... A running mcpvisor may start it now" again, as if something had changed."""
    layout = make_layout(tmp_path)
    replace_text(layout.root / ".lsp.json", json.dumps({"py": {"command": "x", "extensionToLanguage": {".py": "py"}}}))
    where = ("--workspace", str(layout.root))
    first = cli("lsp", "approve", "py", *where, env=layout.env)
    assert first.returncode == 0, first.stderr
    assert "A running mcpvisor may start it now." in " ".join(first.stdout.split())
    again = cli("lsp", "approve", "py", *where, env=layout.env)
    assert again.returncode == 0, again.stderr
    said = " ".join(again.stdout.split())
    assert f"py was approved already for {layout.root}. Nothing changed." in said
    assert "may start it now" not in said


def test_mcp_list_says_which_allow_list_leaves_a_server_out_and_the_fix(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    servers = {n: {"command": "echo"} for n in "abc"}
    replace_text(layout.paths.user, json.dumps({"mcpServers": servers}))
    replace_text(layout.paths.workspace, json.dumps({"mcp": {"allowed": ["a", "c"]}}))
    where = ("--workspace", str(layout.root), "--allowed-mcp-server-names", "a,b")
    flag = "not in --allowed-mcp-server-names given at start-up; relaunch with 'c' added to that flag"
    key = f"not in mcp.allowed of {layout.paths.workspace}; add it there"
    shown = cli("mcp", "list", *where, env=layout.env)
    assert shown.returncode == 0, shown.stderr
    said = " ".join(shown.stdout.split())
    assert f"b · ○ not allowed — {key}" in said
    assert f"c · ○ not allowed — {flag}" in said
    listed = json.loads(cli("mcp", "list", "--json", *where, env=layout.env).stdout)
    assert {row["name"]: row["error"] for row in listed["servers"]} == {"a": None, "b": key, "c": flag}


def test_mcp_list_and_status_say_which_file_and_pattern_exclude_a_server_and_the_fix(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"b": {"command": "echo"}, "db1": {"command": "echo"}}}))
    replace_text(layout.paths.workspace, json.dumps({"mcp": {"excluded": ["b", "db*"]}}))
    where = ("--workspace", str(layout.root))
    name = f"in mcp.excluded of {layout.paths.workspace}; remove it there"
    glob = f"matched by 'db*' in mcp.excluded of {layout.paths.workspace}; remove that pattern there"
    for command in (("mcp", "list"), ("status",)):
        shown = cli(*command, *where, env=layout.env)
        assert shown.returncode == 0, shown.stderr
        said = " ".join(shown.stdout.split())
        assert f"b · ○ disabled — {name}" in said
        assert f"db1 · ○ disabled — {glob}" in said
    listed = json.loads(cli("mcp", "list", "--json", *where, env=layout.env).stdout)
    assert {row["name"]: row["error"] for row in listed["servers"]} == {"b": name, "db1": glob}


def test_lsp_list_says_which_allow_list_leaves_a_language_server_out_and_the_fix(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    servers = {n: {"command": "x", "extensionToLanguage": {f".{n}": n}} for n in "abc"}
    replace_text(layout.paths.user, json.dumps({"lspServers": servers, "lsp": {"allowed": ["a", "c"]}}))
    where = ("--workspace", str(layout.root), "--allowed-lsp-server-names", "a,b")
    flag = "not in --allowed-lsp-server-names given at start-up; relaunch with 'c' added to that flag"
    key = f"not in lsp.allowed of {layout.paths.user}; add it there"
    listed = json.loads(cli("lsp", "list", "--json", *where, env=layout.env).stdout)
    states = {row["name"]: row["state"] for row in listed["servers"]}
    assert (states["b"], states["c"]) == (f"not allowed — {key}", f"not allowed — {flag}")


def test_status_warns_once_about_each_language_server_key_of_the_wrong_type(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    lsp = {"allowed": 5, "excluded": {"a": 1}, "startup": 3, "idleStopSeconds": "x"}
    replace_text(layout.paths.user, json.dumps({"lspServers": ["x"], "lsp": lsp}))
    shown = cli("status", "--workspace", str(layout.root), env=layout.env)
    said = [line for line in shown.stdout.splitlines() if line.startswith("!")]
    for key in ("lspServers", "lsp.allowed", "lsp.excluded", "lsp.startup", "lsp.idleStopSeconds"):
        assert len([line for line in said if f" {key} " in line]) == 1, said
    assert f"! ignored lspServers in {layout.paths.user}: expected an object of language servers by name" in said


def test_an_invalid_language_server_allow_list_is_said_to_deny_all(tmp_path: Path) -> None:
    """It said "treated as none", read as "no list" (every server allowed), when no server may run."""
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, json.dumps({"lsp": {"allowed": 5, "excluded": {"a": 1}}}))
    said = cli("lsp", "list", "--workspace", str(layout.root), env=layout.env).stdout
    invalid = f"in {layout.paths.user}: expected a list of glob patterns; treated as"
    assert f"! invalid lsp.allowed {invalid} deny all: no language server may run" in " ".join(said.split())
    assert f"! invalid lsp.excluded {invalid} exclude all" in " ".join(said.split())


def test_lsp_list_says_which_file_and_pattern_exclude_a_language_server_and_the_fix(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    servers = {n: {"command": "x", "extensionToLanguage": {f".{n}": n}} for n in ("b", "py1")}
    replace_text(layout.paths.user, json.dumps({"lspServers": servers, "lsp": {"excluded": ["b", "py*"]}}))
    where = ("--workspace", str(layout.root))
    name = f"in lsp.excluded of {layout.paths.user}; remove it there"
    glob = f"matched by 'py*' in lsp.excluded of {layout.paths.user}; remove that pattern there"
    listed = json.loads(cli("lsp", "list", "--json", *where, env=layout.env).stdout)
    assert {row["name"]: row["state"] for row in listed["servers"]} == {
        "b": f"disabled — {name}",
        "py1": f"disabled — {glob}",
    }
    shown = cli("lsp", "list", *where, env=layout.env)
    assert shown.returncode == 0, shown.stderr
    assert f"disabled — {glob}" in " ".join(shown.stdout.split())


def test_add_and_remove_edit_the_settings_file(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    added = cli("mcp", "add", "t", "--workspace", str(layout.root), "--", "node", "server.js", env=layout.env)
    assert added.returncode == 0, added.stderr
    assert json.loads(layout.paths.user.read_text())["mcpServers"]["t"] == {"command": "node", "args": ["server.js"]}
    again_added = cli("mcp", "add", "t", "--workspace", str(layout.root), "--", "other", env=layout.env)
    assert again_added.returncode == 1
    assert "already defines it; pass --force" in again_added.stderr
    bad_url = cli("mcp", "add", "u", "--url", "notaurl", "--workspace", str(layout.root), env=layout.env)
    assert bad_url.returncode == 1
    assert "not an http:// or https:// URL" in bad_url.stderr
    removed = cli("mcp", "remove", "t", "--workspace", str(layout.root), env=layout.env)
    assert removed.returncode == 0, removed.stderr
    assert json.loads(layout.paths.user.read_text())["mcpServers"] == {}
    again = cli("mcp", "remove", "t", "--workspace", str(layout.root), env=layout.env)
    assert again.returncode == 1
    assert "not in" in again.stderr


def test_a_missing_mcp_config_file_is_a_clear_error(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    missing = tmp_path / "nope.json"
    result = cli("status", "--mcp-config", str(missing), "--workspace", str(layout.root), env=layout.env)
    assert result.returncode == 1
    assert str(missing) in result.stderr


def test_run_json_tells_an_error_that_stops_it_as_an_event(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": ')
    result = cli("run", "--json", "--mcp-config", str(broken), "--workspace", str(layout.root), env=layout.env)
    assert result.returncode == 1
    said = f"invalid settings file {broken}:1:16: unexpected end of input"
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"event": "error", "message": said, "fatal": True}
    ]
    assert f"error: {said}" in result.stderr


def test_demo_json_tells_an_error_that_stops_it_as_an_event_as_run_json_does(tmp_path: Path) -> None:
    """Before, a demo that could not start said why on stderr only: a script reading its --json output read
    nothing at all."""
    taken = tmp_path / "a-file"
    taken.write_text("")
    result = cli("demo", "--json", "--dir", str(taken), env={**os.environ, "HOME": str(tmp_path)})
    assert result.returncode == 1
    said = f"cannot make the demo in {taken}: Not a directory; name a folder (or a new one) with --dir"
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"event": "error", "message": said, "fatal": True}
    ]
    assert f"error: {said}" in " ".join(result.stderr.split())


async def test_demo_runs_shows_the_approval_flow_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    demo_dir = tmp_path / "demo"
    process = await anyio.open_process(
        [mcpvisor_command(), "demo", "--json", "--dir", str(demo_dir)],
        env={**os.environ, "MCPVISOR_LOG_DIR": str(tmp_path / "logs")},
        stderr=subprocess.DEVNULL,
    )
    events: list[dict[str, object]] = []
    async with process:
        assert process.stdout is not None
        with anyio.fail_after(WAIT_S * 2):
            buffer = ""
            async for chunk in TextReceiveStream(process.stdout):
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                events += [json.loads(line) for line in lines if line.startswith("{")]
                if any(e["event"] == "ready" for e in events):
                    break
        # (its folder was said only by the human output: the first event says where it is and what is in it)
        demo = demo_dir.resolve()
        assert events[0] == {
            "event": "demo",
            "path": str(demo),
            "home": str(demo / "home"),
            "project": str(demo / "project"),
            "user_settings": str(demo / "home" / "settings.json"),
            "mcp_json": str(demo / "project" / ".mcp.json"),
            "logs": str(demo / "logs"),
            "kept": True,
        }
        reconcile = next(e for e in events if e["event"] == "reconcile")
        added = reconcile["added"]
        assert isinstance(added, list)
        assert set(added) == {"clock", "notes"}
        assert reconcile["gated"] == {"repo-tools": "pending_approval"}
        assert any(e["event"] == "approval_needed" and e["servers"] == ["repo-tools"] for e in events)
        assert (demo_dir / "home" / "settings.json").exists()
        assert (demo_dir / "project" / ".mcp.json").exists()
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT_S):
            await process.wait()
        assert process.returncode == 0


async def test_the_demo_removes_its_own_folder_and_its_hints_name_the_running_mcpvisor(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = await anyio.open_process(
        [mcpvisor_command(), "demo"],
        env={**os.environ, "TMPDIR": str(scratch), "PATH": "/usr/bin:/bin", "COLUMNS": "60"},
    )
    async with process:
        assert process.stdout is not None
        assert process.stderr is not None
        stdout = TextReceiveStream(process.stdout)
        with anyio.fail_after(WAIT_S * 2):
            out = ""
            async for chunk in stdout:
                out += chunk
                if "See it all" in out and out.endswith("\n"):
                    break
        [folder] = list(scratch.glob("mcpvisor-demo-*"))
        # mcpvisor is not on that PATH: every hint runs this one, the way it was started; each on one line (however
        # narrow the terminal: a command broken across lines cannot be copied)
        approve = f"{sys.executable} -m mcpvisor mcp approve --workspace {folder / 'project'} repo-tools"
        assert any(line.strip().endswith(approve) for line in out.splitlines()), out
        assert f"{sys.executable} -m mcpvisor mcp list" in out
        home = {**os.environ, "MCPVISOR_HOME": str(folder / "home")}
        reject = [
            sys.executable,
            "-m",
            "mcpvisor",
            "mcp",
            "reject",
            "repo-tools",
            "--workspace",
            str(folder / "project"),
        ]
        await anyio.run_process(reject, env=home, check=True)
        with anyio.fail_after(WAIT_S):
            async for chunk in stdout:
                out += chunk
                if "rejected —" in out and out.endswith("\n"):
                    break
        [rejected] = [line for line in out.splitlines() if "rejected —" in line]
        assert rejected.endswith(f"MCPVISOR_HOME={folder / 'home'} {approve}"), rejected  # (before: a bare command)
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT_S):
            await process.wait()
        err = "".join([chunk async for chunk in TextReceiveStream(process.stderr)])
    assert process.returncode == 0
    assert not folder.exists()
    assert f"Removed the demo folder {folder}" in err


def test_a_running_mcpvisor_outside_the_path_is_named_by_its_full_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcpvisor.cli.demo import cli_command

    venv_bin = Path(sys.executable).parent
    monkeypatch.setattr(sys, "argv", [str(venv_bin / "mcpvisor"), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert cli_command() == str((venv_bin / "mcpvisor").resolve())
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")
    assert cli_command() == "mcpvisor"


async def test_ctrl_c_stops_run_and_leaves_no_server_process(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    servers = {n: {"command": sys.executable, "args": ["-m", LIGHT, "--marker", str(marker)]} for n in "ab"}
    replace_text(layout.paths.user, json.dumps({"mcpServers": servers}))
    process = await anyio.open_process(
        [mcpvisor_command(), "run", "--json", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
        stderr=subprocess.DEVNULL,
    )
    async with process:
        assert process.stdout is not None
        with anyio.fail_after(WAIT_S):
            output = ""
            async for chunk in TextReceiveStream(process.stdout):
                output += chunk
                if '"ready"' in output:
                    break
        pids = marker_pids(marker)
        assert len(pids) == 2
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT_S):
            await process.wait()
        assert process.returncode == 0
    for pid in pids:
        await wait_until(lambda pid=pid: not pid_alive(pid))  # type: ignore[misc]


@pytest.mark.parametrize("command", ["run", "shell", "serve"])
@pytest.mark.parametrize("ending", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_a_kill_or_a_closed_terminal_stops_the_session_and_its_servers(
    tmp_path: Path, command: str, ending: signal.Signals
) -> None:
    """Before, the shell died of SIGTERM and SIGHUP (and run of SIGHUP) without stopping its servers (one that does
    not end when its input closes ran on for good), and serve over stdio waited for its client's end to close."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    server = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "a", "--marker", str(marker)]}
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"a": server}}))
    process = await anyio.open_process(
        [mcpvisor_command(), command, "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
        stderr=subprocess.DEVNULL,
    )  # the shell's input: a pipe left open, so it waits for commands
    async with process:
        try:
            await wait_until(lambda: bool(marker_pids(marker)), what="the server to start")
            await anyio.sleep(0.5)  # past the start: the session waits for its next command or edit
            process.send_signal(ending)
            with anyio.fail_after(WAIT_S * 2):
                await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
        assert process.returncode == 0  # ended as its own way out does, not killed by the signal
    pids = marker_pids(marker)
    await wait_until(lambda: not any(pid_alive(pid) for pid in pids), what="the server to be stopped")


@pytest.mark.parametrize("ending", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_status_killed_while_it_connects_stops_the_servers_it_started(
    tmp_path: Path, ending: signal.Signals
) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    args = ["-m", LIGHT, "--name", "a", "--marker", str(marker), "--hang-on-initialize"]
    server = {"command": sys.executable, "args": args, "discoveryTimeoutMs": 120_000}
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"a": server}}))
    process = await anyio.open_process(
        [mcpvisor_command(), "status", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
        stderr=subprocess.DEVNULL,
    )
    async with process:
        try:
            await wait_until(lambda: bool(marker_pids(marker)), what="the server to start")
            process.send_signal(ending)
            with anyio.fail_after(WAIT_S * 2):
                await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
        assert process.returncode == 1  # it showed nothing: stopped before its servers answered
    pids = marker_pids(marker)
    await wait_until(lambda: not any(pid_alive(pid) for pid in pids), what="the server to be stopped")


async def test_run_names_every_file_it_watches_and_where_a_restart_is_needed(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    replace_text(layout.paths.user, json.dumps({"mcpServers": {}}))
    process = await anyio.open_process(
        [mcpvisor_command(), "run", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env, "COLUMNS": "400"},
        stderr=subprocess.STDOUT,
    )
    async with process:
        assert process.stdout is not None
        output = ""
        try:
            with anyio.fail_after(WAIT_S):
                async for chunk in TextReceiveStream(process.stdout):
                    output += chunk
                    if "Ctrl-C to stop" in " ".join(output.split()):
                        replace_text(layout.paths.user, json.dumps({"mcp": {"serverCommand": "x"}}))
                    if "take effect when mcpvisor restarts" in " ".join(output.split()):
                        break
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(WAIT_S):
                await process.wait()
    said = " ".join(output.split())
    assert f"{layout.root / '.lsp.json'} — edit them and the servers follow" in said
    assert f"! mcp.serverCommand in {layout.paths.user} take effect when mcpvisor restarts" in said


def test_serve_at_a_terminal_stops_on_ctrl_c_and_leaves_the_terminal_as_it_was(tmp_path: Path) -> None:
    """The SDK read stdin in a thread no stop could interrupt: Ctrl-C waited for Enter."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    server = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "a", "--marker", str(marker)]}
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"a": server}}))
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [mcpvisor_command(), "serve", "--workspace", str(layout.root)],
            stdin=terminal,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **layout.env},
        )
        try:
            deadline = time.monotonic() + WAIT_S
            while not marker_pids(marker) and time.monotonic() < deadline:
                time.sleep(0.05)
            [pid] = marker_pids(marker)
            time.sleep(0.5)  # serving: waiting for its client's next line
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=WAIT_S) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert os.get_blocking(terminal)  # the terminal's mode, shared with the shell that started it, is back
    finally:
        os.close(controller)
        os.close(terminal)
    deadline = time.monotonic() + WAIT_S
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)


def test_shell_runs_commands_from_piped_input_and_leaves_no_process(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    server = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "a", "--marker", str(marker)]}
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"a": server}}))
    result = subprocess.run(
        [mcpvisor_command(), "shell", "--workspace", str(layout.root)],
        input='/tools\n/call mcp__a__echo {"text": "hi"}\n/call mcp__zzz__x\n/quit\n',
        env={**os.environ, **layout.env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr  # a script one of whose commands failed
    assert "mcp__a__echo" in result.stdout
    assert "a:echo:hi" in result.stdout
    assert "no MCP server providing it is currently configured" in result.stdout
    [pid] = marker_pids(marker)
    assert not pid_alive(pid)


@pytest.mark.parametrize("command", ["shell", "run", "mcp list"])
def test_a_store_other_users_could_read_is_said_to_have_been_made_private(tmp_path: Path, command: str) -> None:
    """The commands that narrate what happens logged errors only: a store of approvals found readable by other users
    (a copy, a restore) was made private again without a word, however the command was run."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    server = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "proj"]}
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"proj": server}}))
    store = layout.paths.approvals
    cli("mcp", "approve", "proj", "--workspace", str(layout.root), env=layout.env).check_returncode()
    store.chmod(0o644)
    args = [mcpvisor_command(), *command.split(), "--workspace", str(layout.root)]
    env = {**os.environ, **layout.env}
    if command == "run":  # (it follows the files until stopped: the store is read before it is ready)
        with subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith("Watching "):
                    break
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=WAIT_S)
    else:
        err = subprocess.run(args, input="/quit\n", env=env, capture_output=True, text=True, timeout=120).stderr
    assert f"{store} could be read by other users (mode 644): made private again (600)" in err
    assert err.count("made private") == 1
    assert oct(store.stat().st_mode & 0o777) == oct(0o600)


def test_status_exits_1_when_an_admitted_server_fails(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"ghost": {"command": "/nonexistent/ghost"}}}))
    result = cli("status", "--workspace", str(layout.root), env={**layout.env, "COLUMNS": "200"})
    assert result.returncode == 1
    assert "ghost · ✗ disconnected — executable '/nonexistent/ghost' not found" in result.stdout


def test_a_demo_folder_that_cannot_be_made_is_one_line_naming_it(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    result = cli("demo", "--dir", str(a_file), env=layout.env)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: cannot make the demo in {a_file}: Not a directory; name a folder (or a new one) with --dir"
    )


def test_list_and_status_in_a_folder_not_trusted_say_so_and_how_to_trust_it(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, json.dumps({"security": {"folderTrust": {"enabled": True}}}))
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"p": {"command": "x"}}}))
    said = (
        f"! folder {layout.root} is not trusted: its own settings files are not read and no MCP server starts here; "
        f"if you trust it, run: mcpvisor mcp trust --workspace {layout.root}"
    )
    for command in (("mcp", "list"), ("status",)):
        result = cli(*command, "--workspace", str(layout.root), env=layout.env)
        assert result.returncode == 0, result.stderr
        assert said in result.stdout, result.stdout


def test_a_folder_untrusted_because_a_settings_file_does_not_parse_says_to_fix_that_file(tmp_path: Path) -> None:
    """Trusting the folder would change nothing while the file that may turn folder trust on does not parse."""
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, '{"mcpServers" oops}')
    said = (
        f"! folder {layout.root} is not trusted: its own settings files are not read and no MCP server starts here "
        f"until {layout.paths.user} is fixed"
    )
    for command in (("mcp", "list"), ("status",)):
        result = cli(*command, "--workspace", str(layout.root), env=layout.env)
        assert said in " ".join(result.stdout.split()), result.stdout
        assert "mcp trust" not in result.stdout
    trusted = cli("mcp", "trust", "--workspace", str(layout.root), env=layout.env)
    assert "so every folder is trusted anyway" not in trusted.stdout
    assert f"Folder trust may be on: {layout.paths.user} does not parse" in " ".join(trusted.stdout.split())


def pinned_then_edited(tmp_path: Path) -> tuple[Layout, tuple[str, ...]]:
    """A project server ``p`` approved and run (its definitions pinned), then edited; with the ``--workspace`` words
    that name its folder."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    entry = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "p"]}
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"p": entry}}))
    where = ("--workspace", str(layout.root))
    assert cli("mcp", "approve", "p", *where, env=layout.env).returncode == 0
    assert cli("status", *where, env=layout.env).returncode == 0  # it ran: its definitions are pinned
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"p": {**entry, "env": {"MODE": "x"}}}}))
    return layout, where


def test_approving_an_edited_server_says_its_tools_are_compared_with_those_approved_before(tmp_path: Path) -> None:
    layout, where = pinned_then_edited(tmp_path)
    approved = cli("mcp", "approve", "p", *where, env=layout.env)
    assert approved.returncode == 0, approved.stderr
    said = " ".join(approved.stdout.split())
    assert (
        "What it offers is compared with the tools and prompts approved before: any that changed are held until you "
        f"accept them (mcpvisor mcp approve --workspace {layout.root} p again, once it ran)."
    ) in said


async def test_the_approve_command_said_of_an_approved_edit_works_pasted_in_another_folder(tmp_path: Path) -> None:
    """``mcp approve --workspace WS p`` run elsewhere, for an edited server whose definitions were pinned, said to
    accept what changed with ``mcpvisor mcp approve p``: pasted, that found no such server (nor the home)."""
    layout, where = pinned_then_edited(tmp_path)
    approved = await anyio.to_thread.run_sync(lambda: cli("mcp", "approve", "p", *where, env=layout.env))
    assert approved.returncode == 0, approved.stderr
    command = " ".join(approved.stdout.split()).split("accept them (", 1)[1].split(" again, once it ran", 1)[0]
    pasted = await paste_elsewhere(command, layout.env, tmp_path / "elsewhere")
    assert pasted.returncode == 0, (command, pasted.stdout, pasted.stderr)
    assert str(layout.root) in " ".join(pasted.stdout.decode().split())


async def test_ctrl_c_stops_status_while_a_server_is_still_starting(tmp_path: Path) -> None:
    """Ctrl-C is taken as SIGTERM is (its servers stop, exit 130), not left to a KeyboardInterrupt that a start in
    progress may hold up: status would go on waiting for the server's 30 s handshake."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    hang = ["-m", LIGHT, "--name", "hang", "--hang-on-initialize", "--marker", str(marker)]
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"hang": {"command": sys.executable, "args": hang}}}))
    process = await anyio.open_process(
        [mcpvisor_command(), "status", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    async with process:
        await wait_until(lambda: bool(marker_pids(marker)), what="the server to be running")
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(10):  # its handshake would take 30 s
            assert await process.wait() == 130
    [pid] = marker_pids(marker)
    await wait_until(lambda: not pid_alive(pid), what="its server to stop")


@pytest.mark.parametrize("key", ["mcpservers", "mcp_servers", "servers", "MCPServers"])
def test_a_misspelt_servers_key_in_the_settings_is_named_with_the_key_it_was_meant_as(tmp_path: Path, key: str) -> None:
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, json.dumps({key: {"s": {"command": sys.executable, "args": ["-m", LIGHT]}}}))
    result = cli("mcp", "list", "--workspace", str(layout.root), env=layout.env)
    said = " ".join((result.stdout + result.stderr).split())
    assert f"unknown setting {key!r} in {layout.paths.user}; did you mean 'mcpServers'?" in said


@pytest.mark.parametrize("command", [["status"], ["mcp", "list"]])
def test_an_approvals_store_inside_the_project_is_said_where_people_read(tmp_path: Path, command: list[str]) -> None:
    """Before: only a log line said the store's records are ignored there, which these commands keep to themselves
    unless run with -v; the row said to run mcpvisor mcp approve, which then failed."""
    store = tmp_path.resolve() / "ws" / ".approvals" / "mcp-approvals.json"
    layout = make_layout(tmp_path, MCPVISOR_MCP_APPROVALS_PATH=str(store))
    server = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "p"]}
    replace_text(layout.paths.project, json.dumps({"mcpServers": {"p": server}}))
    done = cli(*command, "--workspace", str(layout.root), env=layout.env)
    said = " ".join(done.stdout.split())
    assert (
        f"! MCP approvals store '{store}' lies inside project '{layout.root}', so none of the project's servers can be "
        "approved (a repository can never approve its own servers): point MCPVISOR_MCP_APPROVALS_PATH outside the "
        "project"
    ) in said, done.stdout + done.stderr
    outside = make_layout(tmp_path / "outside")  # the store in its usual place: nothing to say
    replace_text(outside.paths.project, json.dumps({"mcpServers": {"p": server}}))
    assert "lies inside" not in cli(*command, "--workspace", str(outside.root), env=outside.env).stdout
