"""``status`` and ``mcp list`` say what is wrong with the configuration, each problem once; a file that
cannot be read fails ``status``."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mcpvisor.cli.main import app
from tests.helpers import free_port, mcpvisor_command
from tests.layout import Layout, make_layout, write_json


@pytest.fixture
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return make_layout(tmp_path_factory.mktemp("problems"))


def invoke(layout: Layout, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--workspace", str(layout.root)], env=layout.env)
    return result.exit_code, result.stdout


def failing(layout: Layout, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--workspace", str(layout.root)], env=layout.env)
    return result.exit_code, result.stderr


def test_status_shows_a_settings_file_that_does_not_parse_with_its_position_and_fails(layout: Layout) -> None:
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text('{"mcpServers": {\n')
    for command in ("status", "mcp list"):
        code, out = invoke(layout, *command.split())
        assert code == 1, command
        assert f"invalid settings file {layout.paths.user}:2:1" in " ".join(out.split())
        assert "No MCP servers configured" not in out, command  # they may well be: the file did not say
        assert "No MCP servers to show: a settings file did not parse" in " ".join(out.split()), command
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    [problem, *_] = json.loads(out)["problems"]
    assert problem.startswith(f"invalid settings file {layout.paths.user}:2:1")


def test_status_shows_an_approvals_store_that_cannot_be_read_and_fails(layout: Layout) -> None:
    layout.paths.approvals.parent.mkdir(parents=True)
    layout.paths.approvals.write_text("{garbage")
    layout.paths.approvals.chmod(0o600)
    for command in (["status", "--json"], ["mcp", "list", "--json"]):
        code, out = invoke(layout, *command)
        assert code == 1, command
        assert any(str(layout.paths.approvals) in problem for problem in json.loads(out)["problems"])
    write_json(layout.paths.project, {"mcpServers": {"p": {"command": "x"}}})
    for words in ("status", "mcp list"):
        code, out = invoke(layout, *words.split())
        assert f"needs approval — run: mcpvisor mcp approve --workspace {layout.root} p" in " ".join(out.split())
        assert "once the approvals store can be read again (see above)" in " ".join(out.split())


def test_each_problem_is_said_once(layout: Layout) -> None:
    write_json(layout.paths.project, {"mcpServers": {"p": {"command": "x", "env": {"REF": "${UNSET_FOR_THIS_TEST}"}}}})
    for command in (["mcp", "list", "--json"], ["status", "--json"]):
        code, out = invoke(layout, *command)
        problems = json.loads(out)["problems"]
        undefined = [p for p in problems if "UNSET_FOR_THIS_TEST" in p]
        assert len(undefined) == 1, (command, problems)
        assert code == 0, (command, problems)


@pytest.mark.parametrize("where", ["elsewhere", "in the workspace"])
def test_a_fix_hint_works_from_where_it_is_printed(
    layout: Layout, where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    write_json(layout.paths.project, {"mcpServers": {"p": {"command": "x"}}})
    monkeypatch.chdir(layout.root if where == "in the workspace" else tmp_path)
    for command in (["mcp", "list"], ["status"]):
        code, out = invoke(layout, *command)
        said = " ".join(out.split())
        assert code == 0, out
        if where == "in the workspace":
            assert "needs approval — run: mcpvisor mcp approve p" in said
            assert "--workspace" not in said
        else:
            assert f"needs approval — run: mcpvisor mcp approve --workspace {layout.root} p" in said
    trusting = {"security": {"folderTrust": {"enabled": True}}, "mcpServers": {"u": {"command": "x"}}}
    write_json(layout.paths.user, trusting)
    for command in (["mcp", "list"], ["status"]):
        code, out = invoke(layout, *command)
        said = " ".join(out.split())
        if where == "in the workspace":
            assert "u · ○ untrusted folder — run: mcpvisor mcp trust" in said
            assert "untrusted folder — run: mcpvisor mcp trust --workspace" not in said
        else:
            assert f"u · ○ untrusted folder — run: mcpvisor mcp trust --workspace {layout.root}" in said


def test_a_suggested_command_takes_a_servers_name_as_one_word_whatever_the_repository_named_it(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pasted = tmp_path / "pasted"
    names = [f"helper; touch {pasted} #", "-x", "it's", "a b"]
    lsp_name = f"-py; touch {pasted}"
    write_json(layout.paths.project, {"mcpServers": {name: {"command": "x"} for name in names}})
    write_json(layout.paths.lsp_project, {lsp_name: {"command": "x", "extensionToLanguage": {".py": "p"}}})
    monkeypatch.chdir(tmp_path)
    env = {**layout.env, "COLUMNS": "1000"}
    said = []
    for command in (["mcp", "list"], ["status"], ["lsp", "list"]):
        result = CliRunner().invoke(app, [*command, "--workspace", str(layout.root)], env=env)
        said += [
            line.split(" — run: ", 1)[1] for line in result.stdout.splitlines() if "needs approval — run: " in line
        ]
    hints = set()
    for name in [*names, lsp_name]:  # the command ends with the name as one word (a row may go on after it)
        word = f"-- {shlex.quote(name)}" if name.startswith("-") else shlex.quote(name)
        found = [hint[: hint.index(word) + len(word)] for hint in said if word in hint]
        assert len(found) == 2, (name, said)  # (language servers: status and lsp list)
        hints.update(found)
    # Pasted into a real shell, with this mcpvisor first on its PATH: the very command, and nothing else.
    shell_env = {**os.environ, **env, "PATH": f"{Path(mcpvisor_command()).parent}{os.pathsep}{os.environ['PATH']}"}
    for hint in sorted(hints):
        words = shlex.split(hint)
        assert words[:2] == ["mcpvisor", "lsp" if "lsp approve" in hint else "mcp"], hint
        pasted_in = subprocess.run(["sh", "-c", hint], env=shell_env, capture_output=True, text=True, timeout=120)
        assert pasted_in.returncode == 0, (hint, pasted_in.stdout, pasted_in.stderr)
    assert not pasted.exists()
    listed = json.loads(CliRunner().invoke(app, ["mcp", "list", "--json", "-w", str(layout.root)], env=env).stdout)
    assert {server["name"]: server["approval"] for server in listed["servers"]} == dict.fromkeys(names, "approved")


def test_a_fix_hint_pasted_decides_in_the_mcpvisor_home_the_command_ran_with(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``MCPVISOR_HOME=DIR mcpvisor mcp list`` (the demo suggests one) said ``run: mcpvisor mcp approve …``: pasted,
    that approved into the default folder's store and the host using DIR never heard of it. A MCPVISOR_HOME
    naming another folder than ``~/.mcpvisor`` is carried by the hints (the default one is not repeated)."""
    other = tmp_path / "other home"
    write_json(layout.paths.project, {"mcpServers": {"p": {"command": "x"}}})
    write_json(other / "settings.json", {"security": {"folderTrust": {"enabled": True}}})
    monkeypatch.chdir(tmp_path)
    env = {**layout.env, "MCPVISOR_HOME": str(other), "COLUMNS": "1000"}
    shell_env = {**os.environ, **env, "PATH": f"{Path(mcpvisor_command()).parent}{os.pathsep}{os.environ['PATH']}"}
    del shell_env["MCPVISOR_HOME"]  # another terminal: only what the hint says
    for fix, then in (("if you trust it, run: ", "needs approval"), ("needs approval — run: ", "approved")):
        result = CliRunner().invoke(app, ["mcp", "list", "--workspace", str(layout.root)], env=env)
        hint = next(line.split(fix, 1)[1] for line in result.stdout.splitlines() if fix in line)
        hint = hint.split(" · ")[0].strip()
        assert hint.startswith(f"MCPVISOR_HOME={shlex.quote(str(other))} mcpvisor mcp "), hint
        pasted_in = subprocess.run(["sh", "-c", hint], env=shell_env, capture_output=True, text=True, timeout=120)
        assert pasted_in.returncode == 0, (hint, pasted_in.stdout, pasted_in.stderr)
        listed = CliRunner().invoke(app, ["mcp", "list", "--workspace", str(layout.root)], env=env).stdout
        assert then in listed, listed
    assert not layout.paths.approvals.exists()  # the default folder's store: untouched


@pytest.mark.parametrize("command", ["status", "lsp list"])
def test_a_language_servers_approve_hint_pasted_decides_in_the_mcpvisor_home_the_command_ran_with(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str
) -> None:
    """Before: an MCP server's hint named the MCPVISOR_HOME, a language server's did not (``run: mcpvisor lsp approve
    python``), also in the views of a running shell: pasted, it approved into the default folder's store, said so,
    and the host using the other home kept the server waiting."""
    other = tmp_path / "other home"
    lsp = {"command": sys.executable, "extensionToLanguage": {".py": "python"}}  # (never started: lazy)
    write_json(layout.paths.lsp_project, {"python": lsp})
    monkeypatch.chdir(tmp_path)
    env = {**layout.env, "MCPVISOR_HOME": str(other), "COLUMNS": "1000"}
    shell_env = {**os.environ, **env, "PATH": f"{Path(mcpvisor_command()).parent}{os.pathsep}{os.environ['PATH']}"}
    del shell_env["MCPVISOR_HOME"]  # another terminal: only what the hint says
    fix = "needs approval — run: "
    result = CliRunner().invoke(app, [*command.split(), "--workspace", str(layout.root)], env=env)
    hint = next(line.split(fix, 1)[1] for line in result.stdout.splitlines() if fix in line).split("  ")[0].strip()
    assert hint.startswith(f"MCPVISOR_HOME={shlex.quote(str(other))} mcpvisor lsp approve "), hint
    pasted_in = subprocess.run(["sh", "-c", hint], env=shell_env, capture_output=True, text=True, timeout=120)
    assert pasted_in.returncode == 0, (hint, pasted_in.stdout, pasted_in.stderr)
    listed = CliRunner().invoke(app, ["lsp", "list", "--workspace", str(layout.root)], env=env).stdout
    assert "python · approved; starts on first use" in listed, listed
    assert not layout.paths.approvals.exists()  # the default folder's store: untouched


def test_approving_a_server_that_is_not_in_force_says_why(layout: Layout) -> None:
    write_json(layout.paths.project, {"mcpServers": {"r": {"command": ["python"]}}})
    code, out = failing(layout, "mcp", "approve", "r")
    assert code == 1
    assert "its entry is not valid (skipped MCP server 'r'" in " ".join(out.split())
    write_json(layout.paths.lsp_project, {"py": {"command": "pylsp", "extensionToLanguage": {".py": "python"}}})
    write_json(
        layout.paths.user, {"security": {"folderTrust": {"enabled": True}}, "mcpServers": {"helper": {"command": "x"}}}
    )
    for command in (["mcp", "approve", "r"], ["lsp", "approve", "py"]):
        code, out = failing(layout, *command)
        assert code == 1
        assert f"{layout.root} is not trusted" in " ".join(out.split())
        assert "run: mcpvisor mcp trust --workspace" in " ".join(out.split())
    code, out = failing(layout, "mcp", "approve", "helpr")  # a typo is a typo, trusted or not
    assert "no MCP server of that name is configured" in " ".join(out.split())
    assert "(configured: helper)" in " ".join(out.split())
    result = CliRunner().invoke(
        app, ["mcp", "add", "--scope", "workspace", "w", "--workspace", str(layout.root), "--", "x"], env=layout.env
    )
    assert result.exit_code == 0, result.output
    assert f"{layout.root} is not trusted, so its own settings are not read" in " ".join(result.stdout.split())


def test_approving_or_removing_by_a_name_that_differs_only_in_case_or_in_unicode_composition_says_which_is_meant(
    layout: Layout,
) -> None:
    """Before, approve café (as typed: one character) of a server written e plus an accent said no server of that
    name is configured (configured: Git, café), naming what looks like the very name given."""
    decomposed, composed = "cafe\u0301", "caf\u00e9"
    write_json(layout.paths.project, {"mcpServers": {decomposed: {"command": "x"}, "Git": {"command": "y"}}})
    write_json(layout.paths.lsp_project, {"Py": {"command": "pylsp", "extensionToLanguage": {".py": "python"}}})
    head = f"no MCP server of that name is configured for {layout.root}, but"
    expected = {
        ("mcp", composed): f"{head} {decomposed!r} is, written with other characters ('cafe\\u0301'; the name "
        "given is 'caf\\xe9'): paste its name as mcpvisor lists it",
        ("mcp", "git"): f"{head} 'Git' is (names are case-sensitive): give it as 'Git'",
        ("lsp", "py"): f"no language server of that name is configured for {layout.root}, but 'Py' is (names are "
        "case-sensitive): give it as 'Py'",
    }
    for (kind, name), said in expected.items():
        code, out = failing(layout, kind, "approve", name)
        assert code == 1
        assert said in " ".join(out.split()), out
    write_json(layout.paths.user, {"mcpServers": {"Zed": {"command": "z"}}})
    code, out = failing(layout, "mcp", "remove", "zed")
    assert code == 1
    assert (
        f"cannot remove server 'zed': it is not in {layout.paths.user}, but 'Zed' is (names are case-sensitive): "
        "give it as 'Zed'"
    ) in " ".join(out.split())
    code, out = failing(layout, "mcp", "approve", "gti")  # no near name: as before
    assert "no MCP server of that name is configured" in " ".join(out.split())
    assert f"(configured: Git, Zed, {decomposed})" in " ".join(out.split())


def test_removing_a_server_kept_under_a_misspelt_servers_key_says_where_it_is_and_how_to_fix_it(
    layout: Layout,
) -> None:
    """Before: "cannot remove server 'a': it is not in FILE", of a server written in FILE under 'mcp_servers',
    which a running host keeps running on its last good configuration."""
    write_json(layout.paths.workspace, {"mcp_servers": {"a": {"command": "x"}}})
    code, out = failing(layout, "mcp", "remove", "a", "--scope", "workspace")
    assert code == 1
    assert (
        f"cannot remove server 'a': in {layout.paths.workspace} it is under 'mcp_servers', which is not read "
        "(did you mean 'mcpServers'?); rename 'mcp_servers' to 'mcpServers' there (a running mcpvisor keeps the "
        "file's last good servers until then), then remove it"
    ) in " ".join(out.split())
    assert json.loads(layout.paths.workspace.read_text()) == {"mcp_servers": {"a": {"command": "x"}}}
    code, out = failing(layout, "mcp", "remove", "a")  # (--scope user): the other file is named, and its --scope
    assert code == 1
    assert (
        f"cannot remove server 'a': in {layout.paths.workspace} it is under 'mcp_servers', which is not read "
    ) in " ".join(out.split())
    assert " ".join(out.split()).endswith("then remove it with --scope workspace")


def test_mcp_list_says_the_scope_of_every_server(layout: Layout) -> None:
    write_json(layout.paths.user, {"mcpServers": {"u": {"command": "x"}}})
    write_json(layout.paths.project, {"mcpServers": {"p": {"command": "x"}}})
    code, out = invoke(layout, "mcp", "list", "--json")
    assert code == 0
    assert {row["name"]: row["scope"] for row in json.loads(out)["servers"]} == {"u": "user", "p": "project"}


def test_status_says_a_language_server_whose_command_is_not_there_before_its_first_use_fails(
    layout: Layout,
) -> None:
    servers = {
        "gone": {"command": "no-such-language-server-xyz", "extensionToLanguage": {".py": "python"}},
        "here": {"command": "python3", "extensionToLanguage": {".md": "markdown"}},
    }
    write_json(layout.paths.user, {"lspServers": servers})
    code, out = invoke(layout, "status", "--json")
    assert code == 0, out
    states = {row["name"]: row["state"] for row in json.loads(out)["language_servers"]}
    assert states["gone"] == (
        "stopped — its command 'no-such-language-server-xyz' is not found, so its first use will fail: fix "
        "lspServers.gone.command"
    )
    assert states["here"] == "stopped (starts on first use)"


def test_status_shows_an_invalid_language_server_entry_and_fails_on_one_that_failed_to_start(layout: Layout) -> None:
    servers = {
        "bad": {"command": "pylsp", "extensionToLanguage": {".py": "python"}, "args": "oops"},
        "dies": {"command": "python3", "args": ["-c", "raise SystemExit(7)"], "extensionToLanguage": {".md": "md"}},
        "hangs": {  # never answers initialize: failed once its startupTimeout is over, not "starting"
            "command": "python3",
            "args": ["-c", "import time; time.sleep(60)"],
            "extensionToLanguage": {".txt": "text"},
            "startupTimeout": 1000,
        },
    }
    write_json(layout.paths.user, {"lspServers": servers, "lsp": {"startup": "eager"}})
    code, out = invoke(layout, "status", "--json")
    assert code == 1, out
    shown = json.loads(out)
    assert any("'bad'" in problem and "args" in problem for problem in shown["problems"]), shown["problems"]
    bad, dies, hangs = shown["language_servers"]
    assert bad["state"].startswith(f"invalid entry in {layout.paths.user}, not started — args:"), bad
    assert "exited with code 7" in dies["error"]
    assert "no answer to 'initialize' within 1 s" in hangs["error"]


def test_a_command_written_with_its_arguments_is_told_where_they_go(layout: Layout) -> None:
    write_json(
        layout.paths.user,
        {
            "mcpServers": {"m": {"command": "python3 -m mcpvisor.examples.light_server"}},
            "lspServers": {"l": {"command": "pylsp --stdio", "extensionToLanguage": {".py": "python"}}},
        },
    )
    code, out = invoke(layout, "status")
    said = " ".join(out.split())
    assert code == 1
    assert (
        'check mcpServers.m.command (its arguments go in args: "command": "python3", "args": '
        '["-m", "mcpvisor.examples.light_server"])' in said
    )
    assert 'fix lspServers.l.command (its arguments go in args: "command": "pylsp", "args": ["--stdio"])' in said
    # The hint shows the command as written: what a ${VAR} in it stands for is never printed.
    secret = {"API_KEY": "sk-s3cret-123456"}
    write_json(
        layout.paths.user,
        {
            "mcpServers": {"m": {"command": "nosuchtool-xyz --api-key ${API_KEY}"}},
            "lspServers": {"l": {"command": "nosuchlsp-xyz --key ${API_KEY}", "extensionToLanguage": {".py": "py"}}},
        },
    )
    result = CliRunner().invoke(app, ["status", "--workspace", str(layout.root)], env={**layout.env, **secret})
    said = " ".join(result.stdout.split())
    assert '"args": ["--api-key", "${API_KEY}"]' in said
    assert '"args": ["--key", "${API_KEY}"]' in said
    assert "sk-s3cret" not in result.output


def test_lsp_list_fails_when_a_file_cannot_be_read(layout: Layout) -> None:
    (layout.root / ".lsp.json").write_text("{,")
    code, out = invoke(layout, "lsp", "list")
    assert code == 1
    assert "invalid settings file" in out
    (layout.root / ".lsp.json").write_text("{}")
    assert invoke(layout, "lsp", "list")[0] == 0


def test_lsp_list_says_a_language_server_given_twice_in_lsp_json_as_mcp_list_does(layout: Layout) -> None:
    """Before: ``lsp list`` showed the later entry without a word; ``mcp list`` and ``status`` warned."""
    path = layout.root / ".lsp.json"
    path.write_text(
        '{\n "py": {"command": "a", "extensionToLanguage": {".py": "python"}},\n "py": {"command": "b"}\n}\n'
    )
    for command in ("lsp list", "mcp list"):
        code, out = invoke(layout, *command.split())
        said = " ".join(out.split())
        assert f"'py' is given twice in {path} (lines 2 and 3): only the later one is used" in said, command


@pytest.mark.parametrize("wrapper", ["lspServers", "servers"])
def test_an_lsp_json_with_its_servers_wrapped_in_an_object_says_to_move_them_to_the_top_level(
    layout: Layout, wrapper: str
) -> None:
    """Before: the wrapper was read as a server of that name, said to lack extensionToLanguage."""
    pylsp = {"command": "pylsp", "extensionToLanguage": {".py": "python"}}
    write_json(layout.root / ".lsp.json", {wrapper: {"python": pylsp}})
    code, out = invoke(layout, "lsp", "list")
    said = " ".join(out.split())
    assert (
        f"skipped {wrapper!r} in {layout.root / '.lsp.json'}: this file is itself the object of language servers by "
        f"name; move the servers inside {wrapper!r} to the top level ('lspServers' is the key of settings files)"
    ) in said
    assert "extensionToLanguage" not in said


def test_lsp_list_says_a_command_is_not_found_as_status_does_and_lists_the_arguments_as_written(
    layout: Layout,
) -> None:
    """Before: 'starts on first use' where status said the first use would fail; the arguments joined unquoted
    ("--log-file my log.txt", three words) and not listed in --json."""
    ghost = {"command": "nosuchlsp-xyz", "args": ["--log-file", "my log.txt"], "extensionToLanguage": {".gh": "g"}}
    write_json(layout.paths.user, {"lspServers": {"ghost": ghost}})
    code, out = invoke(layout, "lsp", "list")
    said = " ".join(out.split())
    assert code == 0
    assert (
        "ghost · stopped — its command 'nosuchlsp-xyz' is not found, so its first use will fail: "
        "fix lspServers.ghost.command"
    ) in said
    assert "nosuchlsp-xyz --log-file 'my log.txt'" in said
    code, out = invoke(layout, "lsp", "list", "--json")
    [row] = json.loads(out)["servers"]
    assert row["args"] == ["--log-file", "my log.txt"]
    assert row["command"] == "nosuchlsp-xyz --log-file 'my log.txt'"


def test_a_repositorys_language_server_named_like_the_users_says_it_replaces_it(layout: Layout) -> None:
    """As an MCP server of .mcp.json does (before, nothing said why the user's own no longer ran there)."""
    mine = {"command": "pylsp", "extensionToLanguage": {".py": "python"}}
    theirs = {"command": "basedpyright-langserver", "args": ["--stdio"], "extensionToLanguage": {".py": "python"}}
    write_json(layout.paths.user, {"lspServers": {"upy": mine}})
    write_json(layout.root / ".lsp.json", {"upy": theirs})
    said = (
        f"language server 'upy' of {layout.root / '.lsp.json'} replaces your own of that name (in "
        f"{layout.paths.user}) in this workspace: it runs only once approved, and yours does not run here meanwhile; "
        "rename one of them to keep both"
    )
    for command in (["lsp", "list"], ["lsp", "approve", "upy"], ["status"]):
        code, out = invoke(layout, *command)
        assert said in " ".join(out.split()), command


def test_a_corrupt_token_store_is_a_problem_of_status_and_mcp_list(layout: Layout) -> None:
    tokens = layout.paths.approvals.parent / "oauth-tokens.json"
    tokens.parent.mkdir(parents=True, exist_ok=True)
    tokens.write_text("{garbage")
    tokens.chmod(0o600)
    write_json(layout.paths.user, {"mcpServers": {"r": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}})
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    assert any(str(tokens) in problem for problem in json.loads(out)["problems"])
    code, out = invoke(layout, "mcp", "list", "--json")
    listed = json.loads(out)
    assert any(str(tokens) in problem for problem in listed["problems"])
    assert listed["servers"][0]["sign_in"] is None


def test_a_settings_file_that_is_a_symlink_loop_is_a_file_that_cannot_be_read(layout: Layout) -> None:
    """A repository may ship one; before, every command ended in a RuntimeError's traceback."""
    workspace_file = layout.root / ".mcpvisor" / "settings.json"
    workspace_file.parent.mkdir(parents=True)
    workspace_file.symlink_to(workspace_file)
    for command in (["mcp", "list"], ["status"]):
        code, out = invoke(layout, *command)
        assert code == 1, out
        said = " ".join(out.split())
        assert f"invalid settings file {workspace_file}" in said
        assert "too many levels of symbolic links" in said.lower()


def test_no_home_folder_to_be_found_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_home() -> Path:  # HOME unset, and an account with no passwd entry (a container's --user 1234)
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["mcp", "list"], env={"HOME": None, "MCPVISOR_HOME": None})
    assert result.exit_code == 1
    assert "cannot tell your home folder: HOME is not set and this account has none; set HOME" in " ".join(
        result.stderr.split()
    )
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_folder_whose_name_reads_like_markup_is_printed_as_it_is(layout: Layout, tmp_path: Path) -> None:
    folder = tmp_path / "rc_[" / "x]proj [v2]"  # the path holds '[/x]' and '[v2]'
    folder.mkdir(parents=True)
    write_json(folder / ".mcp.json", {"mcpServers": {"p": {"command": "x"}}})
    env = {**layout.env, "COLUMNS": "1000"}
    for command, said in ((["mcp", "reject", "p"], f"Rejected for {folder}."), (["mcp", "trust"], f"Trusted {folder}")):
        result = CliRunner().invoke(app, [*command, "--workspace", str(folder)], env=env)
        assert result.exit_code == 0, result.output
        assert said in result.stdout


def test_a_json_listing_that_cannot_start_is_json_saying_why(layout: Layout, tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    for command in (
        ["status", "--json", "--mcp-config", str(missing)],
        ["mcp", "list", "--json", "--mcp-config", str(missing)],
        ["lsp", "list", "--json", "--lsp-config", str(missing)],
    ):
        result = CliRunner().invoke(app, [*command, "--workspace", str(layout.root)], env=layout.env)
        assert result.exit_code == 1, command
        said = json.loads(result.stdout)  # a script reads why, not an empty output
        assert str(missing) in said["error"], command
        assert said["problems"] == [said["error"]]


def test_a_variable_form_not_read_is_said_rather_than_sent_as_written(layout: Layout) -> None:
    write_json(layout.paths.user, {"mcpServers": {"gh": {"command": "x", "env": {"TOKEN": "${env:GITHUB_TOKEN}"}}}})
    code, out = invoke(layout, "mcp", "list", "--json")
    [said] = [p for p in json.loads(out)["problems"] if "GITHUB_TOKEN" in p]
    assert said.startswith("'${env:GITHUB_TOKEN}' in MCP server 'gh' (")
    assert "is kept as written: only ${VAR} and ${VAR:-default} are read (${env:VAR} is written ${VAR})" in said


def test_deciding_on_a_server_of_the_other_kind_names_the_command_that_does(layout: Layout) -> None:
    write_json(layout.paths.project, {"mcpServers": {"p": {"command": "x"}}})
    write_json(layout.paths.lsp_project, {"py": {"command": "pylsp", "extensionToLanguage": {".py": "python"}}})
    code, out = failing(layout, "mcp", "approve", "py")
    assert code == 1
    assert "cannot approve server 'py': that name is a language server's; run: mcpvisor lsp approve py" in out
    code, out = failing(layout, "lsp", "reject", "p")
    assert code == 1
    assert "cannot reject language server 'p': that name is an MCP server's; run: mcpvisor mcp reject p" in out


def test_a_path_option_starting_with_a_tilde_is_under_the_home_folder(layout: Layout) -> None:
    """A client's JSON config has no shell to expand ``~`` (before: "dir '~/ws' does not exist")."""
    home = Path(layout.env["HOME"])
    extra = home / "extra.json"
    write_json(extra, {"mcpServers": {"x": {"command": "echo"}}})
    relative = os.path.relpath(layout.root, home)
    result = CliRunner().invoke(
        app, ["mcp", "list", "--json", "-w", f"~/{relative}", "--mcp-config", "~/extra.json"], env=layout.env
    )
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed["workspace"] == str(layout.root)
    assert [s["name"] for s in listed["servers"]] == ["x"]
    missing = CliRunner().invoke(app, ["mcp", "list", "-w", "~/nope"], env=layout.env)
    assert missing.exit_code == 2
    assert f"'~/nope' does not exist ({home / 'nope'})" in " ".join(missing.output.split())


def test_a_command_made_empty_by_an_unset_variable_says_so(layout: Layout) -> None:
    """Before: "permission denied running ''"."""
    write_json(layout.paths.user, {"mcpServers": {"e": {"command": "${UNSET_CMD_FOR_THIS_TEST}"}}})
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    [row] = json.loads(out)["servers"]
    assert (
        "its command is empty (written '${UNSET_CMD_FOR_THIS_TEST}': a variable in it is unset or empty)"
        in (row["error"])
    )


def test_a_command_written_empty_is_not_said_to_hold_a_variable(layout: Layout) -> None:
    """Before: "its command is empty (written '': a variable in it is unset or empty)", of a command with no
    variable in it."""
    write_json(layout.paths.user, {"mcpServers": {"e": {"command": ""}}})
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    [row] = json.loads(out)["servers"]
    assert row["error"] == "its command is empty (written ''); check mcpServers.e.command"


def test_a_url_left_without_a_host_by_an_unset_variable_says_so(layout: Layout) -> None:
    """Before: httpx's "Request URL is missing an 'http://' or 'https://' protocol" beside https://${…}."""
    write_json(layout.paths.user, {"mcpServers": {"r": {"type": "http", "url": "https://${UNSET_HOST_FOR_TEST}/mcp"}}})
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    [row] = json.loads(out)["servers"]
    assert (
        "its URL has no host (written 'https://${UNSET_HOST_FOR_TEST}/mcp': a variable in it is unset" in (row["error"])
    )


@pytest.mark.parametrize("url", ["example.com/mcp", "localhost:8080/mcp"])
def test_a_url_written_without_its_scheme_says_to_add_it(layout: Layout, url: str) -> None:
    """Before: "its URL has no host", of a URL whose host is there and whose https:// is not."""
    write_json(layout.paths.user, {"mcpServers": {"r": {"type": "http", "url": url}}})
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    [row] = json.loads(out)["servers"]
    assert row["error"] == (
        f"its URL has no scheme (written {url!r}); write it as 'https://{url}' "
        "(or http:// for a server without TLS) in mcpServers.r.url"
    )


def test_a_fleet_without_its_extra_installed_says_what_to_install(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the ``fleet`` extra (the Redis client), a fleet named anywhere was a ModuleNotFoundError traceback
    in every command, even ``mcp list`` with ``MCPVISOR_FLEET`` set."""
    monkeypatch.setitem(sys.modules, "redis", None)  # (an import of it raises ImportError)
    env = {**layout.env, "MCPVISOR_FLEET": "redis://:hunter2@127.0.0.1:6379/0"}
    for command in (["mcp", "list", "-w", str(layout.root)], ["status", "-w", str(layout.root)], ["fleet", "status"]):
        result = CliRunner().invoke(app, command, env=env)
        assert result.exit_code == 1, (command, result.output)
        said = " ".join(result.stderr.split())
        assert "the Redis client is not installed — run: pip install 'mcpvisor[fleet]'" in said, (command, said)
        assert "Traceback" not in result.output
        assert "hunter2" not in result.output


def test_fleet_status_as_json_says_an_unreachable_store_in_json(layout: Layout) -> None:
    """``fleet status --json`` with a store nothing answers at printed its error as a line of text on stderr only:
    a script reading its output read nothing."""
    env = {**layout.env, "MCPVISOR_FLEET": f"redis://:hunter2@127.0.0.1:{free_port()}/0"}
    result = CliRunner().invoke(app, ["fleet", "status", "--json"], env=env)
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert "cannot use the fleet store redis://:***@127.0.0.1:" in out["error"], out
    assert out["problems"] == [out["error"]]
    assert "cannot use the fleet store" in result.stderr
    assert "hunter2" not in result.output


def test_a_tool_pin_store_that_cannot_be_read_fails_status_and_the_listing(layout: Layout) -> None:
    """Every tool of a pinned server is held while the pin store cannot be read: ``status`` said so only as "N
    tools changed since approval — run: mcpvisor mcp approve p" (which then failed on the store) and exited 0, as
    ``mcp list`` did."""
    light = {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server", "--name", "p"]}
    write_json(layout.paths.project, {"mcpServers": {"p": light}})
    assert invoke(layout, "mcp", "approve", "p")[0] == 0
    assert invoke(layout, "status")[0] == 0  # pins what p offers
    pins = layout.home / ".mcpvisor" / "tool-pins.json"
    assert pins.exists()
    pins.write_text("{broken")
    for command in (["mcp", "list"], ["status"], ["status", "--json"]):
        code, out = invoke(layout, *command)
        said = " ".join(out.split())
        assert code == 1, (command, out)
        assert "cannot read the tool pin store" in said, (command, said)
    code, out = invoke(layout, "status")
    said = " ".join(out.split())
    assert "p · ● connected (0 tools, 0 prompts) · 1 tool held — cannot read the tool pin store" in said, said
    assert "changed since approval" not in said, said


def test_a_fleet_store_named_in_the_settings_that_cannot_be_reached_names_the_file(layout: Layout) -> None:
    """The fix named ``--fleet`` / ``MCPVISOR_FLEET`` to someone who had only the settings' ``fleet`` block."""

    write_json(layout.paths.user, {"fleet": {"url": f"redis://127.0.0.1:{free_port()}/0"}})
    code, out = failing(layout, "mcp", "list")
    said = " ".join(out.split())
    assert code == 1
    assert f"start it, or check the URL (fleet.url in {layout.paths.user}), and try again" in said, said


def test_a_fleet_key_without_the_cryptography_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fleet extra brings the Redis client and cryptography (which seals sign-ins with the fleet key): a key
    without the second was a ModuleNotFoundError traceback."""
    from mcpvisor.core.errors import ConfigError
    from mcpvisor.fleet.sealing import FleetKey

    for module in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(ConfigError, match=r"cryptography package, which is not installed — run: pip install "):
        FleetKey(["k" * 40])


def test_a_relative_mcpvisor_home_is_carried_as_the_folder_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hint is pasted elsewhere (that is why it names --workspace): a relative MCPVISOR_HOME would name another
    folder there; it is carried as the folder it names here ("~" is kept: mcpvisor expands it itself)."""
    from mcpvisor.host.paths import named_home

    monkeypatch.chdir(tmp_path)
    home = {"HOME": str(tmp_path / "home")}
    assert named_home({**home, "MCPVISOR_HOME": "relhome"}) == str(tmp_path / "relhome")
    assert named_home({**home, "MCPVISOR_HOME": "~/elsewhere"}) == "~/elsewhere"
    assert named_home({**home, "MCPVISOR_HOME": str(tmp_path / "home" / ".mcpvisor")}) is None


def test_a_server_whose_name_holds_half_a_surrogate_pair_is_skipped_with_a_warning_not_a_traceback(
    layout: Layout,
) -> None:
    """JSON may spell half of a UTF-16 surrogate pair in a key ("a\\ud800"): that is no character, and a
    repository's .mcp.json server so named made status and mcp list fail with a UnicodeEncodeError traceback
    (they could not write its row), hiding every other server."""
    layout.paths.project.write_text('{"mcpServers": {"a\\ud800": {"command": "x"}, "b": {"command": "x"}}}')
    skipped = (
        f"skipped MCP server 'a\\ud800' in {layout.paths.project}: its name holds \\ud800, half of a surrogate pair"
    )
    for command in ("status", "mcp list"):
        code, out = invoke(layout, *command.split())
        said = " ".join(out.split())
        assert code == 1, command  # an invalid entry fails status and mcp list
        assert skipped in said, command
        assert "b · ? needs approval" in said, command


@pytest.mark.parametrize("name", ["c\u200b", " "])
def test_status_fails_on_a_server_entry_skipped_for_its_name_as_on_any_invalid_entry(layout: Layout, name: str) -> None:
    """Before: a name blank or holding an invisible character was skipped with a warning and status exited 0, where
    any other invalid entry fails it (its --help: a server entry is invalid (skipped))."""
    light = {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server"]}
    layout.paths.user.parent.mkdir(parents=True, exist_ok=True)
    layout.paths.user.write_text(json.dumps({"mcpServers": {name: {"command": "x"}, "ok": light}}))
    code, out = invoke(layout, "status")
    said = " ".join(out.split())
    assert f"skipped {'MCP server' if name.strip() else 'an MCP server named'} {name!r} in {layout.paths.user}" in said
    assert "ok · ● connected" in said
    assert code == 1


def test_status_says_where_the_language_server_tools_are_while_an_mcp_server_is_named_lsp(layout: Layout) -> None:
    """Before, it showed the MCP server 'lsp' and the language servers, but nowhere that their tools were served as
    mcp__lsp_1__* meanwhile (an allow-list or a prompt naming mcp__lsp__hover reached the MCP server)."""
    light = {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server", "--name", "lsp"]}
    pylsp = {"command": sys.executable, "args": ["-m", "pylsp"], "extensionToLanguage": {".py": "python"}}
    write_json(layout.paths.user, {"mcpServers": {"lsp": light}, "lspServers": {"python": pylsp}})
    code, out = invoke(layout, "status", "--json")
    assert code == 0, out
    assert json.loads(out)["language_server_tools"] == "mcp__lsp_1__*"
    code, out = invoke(layout, "status")
    assert code == 0, out
    assert "Language servers  tools served as mcp__lsp_1__*: an MCP server is named 'lsp'" in out

    write_json(layout.paths.user, {"lspServers": {"python": pylsp}})
    code, out = invoke(layout, "status", "--json")
    assert json.loads(out)["language_server_tools"] == "mcp__lsp__*"
    code, out = invoke(layout, "status")
    assert "tools served as" not in out


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (
            {"command": "npx", "url": "https://example.com/mcp"},
            "sets both 'command' and 'url': 'command' is used (stdio), 'url' ignored; remove the one not meant",
        ),
        (
            {"type": "sse", "command": "npx"},
            """has "type": "sse" but 'command' is used (stdio); fix "type" or 'command'""",
        ),
        ({"type": "http", "command": "npx"}, """has "type": "http" but 'command' is used (stdio)"""),
        ({"type": "stdio", "url": "https://example.com/sse"}, """has "type": "stdio" but 'url' is used (SSE)"""),
    ],
)
def test_an_entry_naming_two_transports_says_which_one_is_used(
    layout: Layout, entry: dict[str, str], said: str
) -> None:
    """Before: the command ran (or the URL was reached), and nothing said the rest of the entry was ignored."""
    write_json(layout.paths.user, {"mcpServers": {"s": entry}})
    code, out = invoke(layout, "mcp", "list", "--json")
    assert code == 0
    listed = json.loads(out)
    assert [row["name"] for row in listed["servers"]] == ["s"]
    assert f"MCP server 's' ({layout.paths.user}) {said}" in "\n".join(listed["problems"])
    assert any(p.endswith("in mcpServers.s") for p in listed["problems"])


def test_an_entry_naming_one_transport_says_nothing_of_transports(layout: Layout) -> None:
    servers = {"s": {"type": "http", "url": "https://example.com/mcp"}, "t": {"type": "stdio", "command": "npx"}}
    write_json(layout.paths.user, {"mcpServers": servers})
    code, out = invoke(layout, "mcp", "list", "--json")
    assert code == 0
    assert json.loads(out)["problems"] == []


@pytest.mark.parametrize(
    ("entry", "hint"),
    [
        ({"comand": "npx"}, "(its field 'comand'; did you mean 'command'?)"),
        ({"URL": "https://example.com/mcp"}, "(its field 'URL'; did you mean 'url'?)"),
        ({"command": "npx", "args": "-y", "ars": []}, "(its field 'ars'; did you mean 'args'?)"),
    ],
)
def test_an_invalid_entry_with_a_misspelt_field_says_which_field_was_meant(
    layout: Layout, entry: dict[str, str], hint: str
) -> None:
    """Before: "no transport: set 'command' (stdio), …" of an entry whose command was written 'comand'."""
    write_json(layout.paths.user, {"mcpServers": {"s": entry}})
    code, out = invoke(layout, "mcp", "list", "--json")
    assert code == 1  # an invalid entry fails the listing
    [problem] = json.loads(out)["problems"]
    assert problem.startswith(f"skipped MCP server 's' in {layout.paths.user}: ")
    assert problem.endswith(f" {hint}; fix mcpServers.s")


@pytest.mark.parametrize(
    "other",
    [
        {"globalShortcut": "Ctrl+Space", "preferences": {"menuBarEnabled": False}},  # Claude Desktop's
        {"theme": "Dark", "selectedAuthType": "oauth-personal", "mcp": {"allowed": ["s"]}},  # Gemini CLI's
    ],
)
def test_another_tools_config_given_as_mcp_config_loads_its_servers_without_a_word_on_its_other_settings(
    layout: Layout, tmp_path: Path, other: dict[str, object]
) -> None:
    """Before: one "unknown key 'globalShortcut' … is ignored" per setting of the other tool, at every start, of a file
    that is that tool's, not mcpvisor's to fix."""
    config = tmp_path / "config.json"
    write_json(config, {"mcpServers": {"s": {"command": "npx", "args": ["-y", "server"]}}, **other})
    code, out = invoke(layout, "mcp", "list", "--json", "--mcp-config", str(config))
    assert code == 0
    listed = json.loads(out)
    assert [row["name"] for row in listed["servers"]] == ["s"]
    assert listed["problems"] == []
    write_json(config, {"mcp_servers": {"s": {"command": "npx"}}, **other})
    code, out = invoke(layout, "mcp", "list", "--json", "--mcp-config", str(config))
    assert json.loads(out)["problems"] == [
        f"unknown key 'mcp_servers' in {config} is ignored; did you mean 'mcpServers'?"
    ]


def test_a_url_with_a_scheme_other_than_http_is_not_said_to_lack_one(layout: Layout) -> None:
    """Before: "its URL has no scheme (written 'unix:/tmp/mcp.sock'); write it as 'https://unix:/tmp/mcp.sock'"."""
    write_json(layout.paths.user, {"mcpServers": {"r": {"type": "http", "url": "unix:/tmp/mcp.sock"}}})
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    [row] = json.loads(out)["servers"]
    assert row["error"] == "its URL has no host (written 'unix:/tmp/mcp.sock'); check mcpServers.r.url"


@pytest.mark.parametrize("url", ["ftp://example.com/mcp", "ws://localhost:8080/mcp"])
def test_a_url_with_a_scheme_mcp_is_not_served_over_says_to_write_an_http_one(layout: Layout, url: str) -> None:
    """Before: httpx's "UnsupportedProtocol: Request URL has an unsupported protocol 'ftp://'." with no fix."""
    write_json(layout.paths.user, {"mcpServers": {"r": {"type": "http", "url": url}}})
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    [row] = json.loads(out)["servers"]
    scheme = url.partition(":")[0]
    assert row["error"] == (
        f"its URL's scheme {scheme!r} is not one MCP is served over (written {url!r}); write an https:// (or "
        "http://) URL in mcpServers.r.url"
    )


def test_a_url_whose_variable_is_set_but_has_no_scheme_says_to_add_the_scheme(layout: Layout) -> None:
    """Before: "a variable in it is unset or empty", of a variable that was set (to a host without https://)."""
    layout.env["MCP_HOST"] = "example.com"
    write_json(layout.paths.user, {"mcpServers": {"r": {"type": "http", "url": "${MCP_HOST}/mcp"}}})
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    [row] = json.loads(out)["servers"]
    assert row["error"] == (
        "its URL has no scheme (written '${MCP_HOST}/mcp'); write it as 'https://${MCP_HOST}/mcp' "
        "(or http:// for a server without TLS) in mcpServers.r.url"
    )


def test_a_url_whose_host_variable_is_unset_is_shown_once_as_written(layout: Layout) -> None:
    """Before: "written '${NOPE}${NOPE}/mcp'": what the URL ran as ("/mcp") was put back as written inside the
    written form the message already showed."""
    write_json(layout.paths.user, {"mcpServers": {"r": {"type": "http", "url": "${NOPE}/mcp"}}})
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    [row] = json.loads(out)["servers"]
    assert row["error"] == (
        "its URL has no host (written '${NOPE}/mcp': a variable in it is unset or empty); check mcpServers.r.url"
    )


def test_an_invalid_server_entry_is_a_row_of_status_and_mcp_list_and_fails_status(layout: Layout) -> None:
    """The only server entry of a file being invalid, the warning said so, but the views then said "No MCP servers
    configured." and ``status`` exited 0: the entry is a row saying it is invalid, where, and the fix; ``mcp list``
    fails on it too (it exited 0, while ``lsp list`` fails on an invalid language server entry)."""
    secret = "s3cret-value"
    entries = {"h": {"comand": "x", "env": {"TOKEN": secret}}, "web": {"type": "http", "headers": {"X": secret}}}
    write_json(layout.paths.user, {"mcpServers": entries})
    for command in ("status", "mcp list"):
        code, out = invoke(layout, *command.split())
        said = " ".join(out.split())
        assert code == 1, command
        assert "No MCP servers configured" not in said, command
        assert (
            f"h · ✗ invalid entry in {layout.paths.user}, not started — no transport: set 'command' (stdio), 'url' "
            "(SSE) or 'httpUrl' (streamable HTTP) (its field 'comand'; did you mean 'command'?); fix mcpServers.h"
        ) in said, command
        assert "web · ✗ invalid entry in" in said, command
        assert "needs 'url' (the server's address); fix mcpServers.web" in said, command
        assert secret not in out, command
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    h, web = json.loads(out)["servers"]
    assert (h["name"], h["state"], h["file"]) == ("h", "invalid", str(layout.paths.user))
    assert h["error"].endswith("fix mcpServers.h")
    assert web["error"].endswith("fix mcpServers.web")
    code, out = invoke(layout, "mcp", "list", "--json")
    assert code == 1
    assert [(row["name"], row["admission"]) for row in json.loads(out)["servers"]] == [
        ("h", "invalid"),
        ("web", "invalid"),
    ]
    assert secret not in out


@pytest.mark.parametrize(
    ("key", "meaning", "command"),
    [
        ("mcp.excluded", "excluding every server", "mcp list"),
        ("mcp.allowed", "allowing no server", "mcp list"),
        ("mcp.excluded", "excluding every server", "mcp approve web"),
        ("mcp.allowed", "allowing no server", "mcp approve web"),
        ("lsp.excluded", "excluding every server", "lsp list"),
        ("lsp.allowed", "allowing no server", "lsp list"),
    ],
)
def test_a_server_left_out_by_a_list_that_is_no_list_says_to_fix_that_value(
    layout: Layout, key: str, meaning: str, command: str
) -> None:
    """Before: an exclude-list given as an object was said to leave the server out by "matched by '*' …; remove that
    pattern there" (a pattern the file does not hold), and an allow-list so given "not in mcp.allowed …; add it
    there" (to an object)."""
    section, field = key.split(".")
    web = {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server"]}
    py = {"command": sys.executable, "extensionToLanguage": {".py": "python"}}
    write_json(layout.paths.user, {"lspServers": {"py": py}, section: {field: {"web": 1}}})
    write_json(layout.paths.workspace, {"mcpServers": {"web": web}})  # (one to approve)
    result = CliRunner().invoke(app, [*command.split(), "--workspace", str(layout.root)], env=layout.env)
    said = " ".join(result.output.split())  # (mcp approve says it on stderr)
    why = (
        f"left out by {key} of {layout.paths.user}: it is not a list of glob patterns, read as {meaning}; fix it there"
    )
    assert why in said, said
    assert "'*'" not in said
    assert "add it there" not in said


def test_a_tool_pin_store_that_cannot_be_saved_holds_the_tools_and_says_why(layout: Layout) -> None:
    """Pins that could not be saved held the server's tools while ``status`` said "1 tool changed since approval —
    run: mcpvisor mcp approve p" and exited 0, and ``mcp approve p`` said "Approved" while the tool stayed held."""
    light = {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server", "--name", "p"]}
    write_json(layout.paths.project, {"mcpServers": {"p": light}})
    assert invoke(layout, "mcp", "approve", "p")[0] == 0
    lock = layout.home / ".mcpvisor" / "tool-pins.json.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()  # the pins cannot be saved (chmod would not stop root)
    code, out = invoke(layout, "status")
    said = " ".join(out.split())
    assert code == 1, out
    assert "changed since approval" not in said, said
    assert "1 tool held — the tool pins of server 'p' could not be saved" in said, said
    code, out = invoke(layout, "status", "--json")
    [row] = json.loads(out)["servers"]
    assert code == 1
    assert row["held_tools"] == ["echo"]
    assert "could not save" in row["held_why"], row
    assert f"{lock}: is a directory; remove it (it must be a file)" in row["held_why"], row
    code, err = failing(layout, "mcp", "approve", "p")
    assert code == 1
    assert "cannot approve server 'p': its tool pins cannot be saved" in " ".join(err.split()), err


def test_an_invalid_language_server_entry_is_a_row_of_lsp_list_and_status_which_fail_as_for_an_mcp_server(
    layout: Layout,
) -> None:
    """Before: only a ``! skipped`` warning; ``lsp list`` said "No language servers configured", and both exited 0."""
    write_json(layout.paths.user, {"lspServers": {"py": {"command": 3, "extensionToLanguage": {".py": "python"}}}})
    write_json(layout.root / ".lsp.json", {"noext": {"command": sys.executable, "args": ["-m", "pylsp"]}})
    bad = {
        "py": f"invalid entry in {layout.paths.user}, not started — command: expected a string; fix lspServers.py",
        "noext": f"invalid entry in {layout.root / '.lsp.json'}, not started — extensionToLanguage: required, e.g. "
        '{".py": "python"}: files are routed by extension; fix noext',
    }
    for command in ("lsp list", "status"):
        code, out = invoke(layout, *command.split())
        said = " ".join(out.split())
        assert code == 1, command
        assert "No language servers configured" not in said
        for name, row in bad.items():
            assert f"{name} · ✗ {row}" in said, (command, said)
    code, out = invoke(layout, "lsp", "list", "--json")
    assert code == 1
    rows = {row["name"]: row for row in json.loads(out)["servers"]}
    assert {name: (row["admission"], row["state"]) for name, row in rows.items()} == {
        name: ("invalid", row) for name, row in bad.items()
    }
    assert rows["py"]["error"] == "command: expected a string; fix lspServers.py"
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    assert {row["name"]: row["state"] for row in json.loads(out)["language_servers"]} == bad
    write_json(layout.paths.user, {})
    (layout.root / ".lsp.json").unlink()
    assert invoke(layout, "lsp", "list")[0] == 0


def test_lsp_list_shows_a_language_server_entry_with_a_blank_name_as_an_invalid_entry_and_fails(
    layout: Layout,
) -> None:
    """Before: only a warning above the list said it; it had no row, and lsp list exited 0 as if every entry were
    valid."""
    entry = {"command": "pylsp", "extensionToLanguage": {".py": "python"}}
    write_json(layout.paths.user, {"lspServers": {"": entry, "py": entry}})
    code, out = invoke(layout, "lsp", "list")
    said = " ".join(out.split())
    assert code == 1
    assert (
        f"'' · ✗ invalid entry in {layout.paths.user}, not started — a language server needs a name; fix lspServers"
    ) in said
    code, out = invoke(layout, "lsp", "list", "--json")
    rows = {row["name"]: row for row in json.loads(out)["servers"]}
    assert (rows[""]["admission"], rows[""]["file"], rows[""]["extensions"]) == (
        "invalid",
        str(layout.paths.user),
        [".py"],
    )


def test_status_in_a_folder_not_trusted_says_no_language_server_starts_there_either(layout: Layout) -> None:
    """Before: "no MCP server starts here", and nothing of the language servers configured, which do not start
    either."""
    entry = {"command": "pylsp", "extensionToLanguage": {".py": "python"}}
    write_json(layout.paths.user, {"security": {"folderTrust": {"enabled": True}}, "lspServers": {"py": entry}})
    _, out = invoke(layout, "status")
    said = " ".join(out.split())
    assert (
        f"! folder {layout.root} is not trusted: its own settings files are not read and no MCP server or language "
        "server starts here; if you trust it, run: "
    ) in said, said


def test_lsp_list_and_status_give_the_command_that_trusts_the_folder_of_a_language_server_not_started_there(
    layout: Layout,
) -> None:
    """They said "not started: the folder is not trusted" and no more, where an MCP server's row gives the command."""
    entry = {"command": "pylsp", "extensionToLanguage": {".py": "python"}}
    write_json(layout.paths.user, {"security": {"folderTrust": {"enabled": True}}, "lspServers": {"py": entry}})
    for command in (["lsp", "list"], ["status"]):
        code, out = invoke(layout, *command)
        said = " ".join(out.split())
        assert f"py · {'○ ' if command == ['status'] else ''}not started: the folder is not trusted — run: " in said
        assert "mcpvisor mcp trust" in said.partition("py · ")[2], said


def test_an_mcp_server_entry_with_a_blank_name_is_an_invalid_entry_row_of_mcp_list_and_status(layout: Layout) -> None:
    """Before: only a warning above the list said it; mcp list, status and status --json had no row for it (a
    language server entry with a blank name has one)."""
    light = {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server"]}
    write_json(layout.paths.user, {"mcpServers": {"": {"command": "x", "env": {"TOKEN": "s3cret"}}, "ok": light}})
    row = f"'' · ✗ invalid entry in {layout.paths.user}, not started — a server needs a name; fix mcpServers"
    for command in ("status", "mcp list"):
        code, out = invoke(layout, *command.split())
        assert code == 1, command
        assert row in " ".join(out.split()), command
        assert "s3cret" not in out
    code, out = invoke(layout, "status", "--json")
    assert code == 1
    rows = {row["name"]: row for row in json.loads(out)["servers"]}
    assert (rows[""]["state"], rows[""]["file"], rows[""]["error"]) == (
        "invalid",
        str(layout.paths.user),
        "a server needs a name; fix mcpServers",
    )
    assert rows["ok"]["state"] == "connected"
    code, out = invoke(layout, "mcp", "list", "--json")
    assert code == 1
    assert [(row["name"], row["admission"]) for row in json.loads(out)["servers"]] == [
        ("", "invalid"),
        ("ok", "allowed"),
    ]


def test_mcp_list_names_the_mcp_config_file_each_command_line_server_comes_from(layout: Layout) -> None:
    """Before, the servers of --mcp-config files were listed under 'Command line' alone, the one group whose
    header named no file."""
    one, two = layout.root / "one.json", layout.root / "two.json"
    write_json(one, {"mcpServers": {"a": {"command": "a-mcp"}, "c": {"command": "c-mcp"}}})
    write_json(two, {"mcpServers": {"b": {"command": "b-mcp"}}})
    result = CliRunner().invoke(
        app,
        ["mcp", "list", "--mcp-config", str(one), "--mcp-config", str(two), "--workspace", str(layout.root)],
        env={**layout.env, "COLUMNS": "300"},
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("Command line")] == [
        f"Command line ({one})",
        f"Command line ({two})",
    ]
    assert lines[lines.index(f"Command line ({one})") + 1].startswith("  a · ")
    assert lines[lines.index(f"Command line ({one})") + 3].startswith("  c · ")  # a file's servers together
    assert lines[lines.index(f"Command line ({two})") + 1].startswith("  b · ")
