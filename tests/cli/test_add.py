"""``mcp add`` takes its options before ``--`` and the server's command after it: a misspelt or unknown
option is an error, never part of the saved command or the server's name."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mcpvisor.cli.main import app
from tests.helpers import WAIT_S, mcpvisor_command
from tests.layout import Layout, make_layout


@pytest.fixture
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return make_layout(tmp_path_factory.mktemp("add"))


def add(layout: Layout, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["mcp", "add", "--workspace", str(layout.root), *args], env=layout.env)
    return result.exit_code, result.output


def saved(layout: Layout) -> dict[str, object]:
    if not layout.paths.user.exists():
        return {}
    servers: dict[str, object] = json.loads(layout.paths.user.read_text())["mcpServers"]
    return servers


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-s", "workspace", "x", "--", "echo", "hi"], "No such option: -s"),
        (["x", "--scpoe", "workspace", "--", "echo", "hi"], "No such option: --scpoe"),
        (["x", "npx", "-y", "pkg"], "No such option: -y. A server's own options follow its command after --"),
        (["--scope", "user", "x", "python", "-mpkg"], "No such option: -m. A server's own options follow its command"),
        (["--", "-s", "echo"], "a server name cannot start with '-'"),
        (["", "--", "echo"], "cannot add a server without a name"),
        (["a\nb", "--", "echo"], "cannot add server 'a\\nb': its name holds \\n, which would show it as another"),
        (["x", "--sse", "--", "echo"], "--sse says the --url is an SSE endpoint"),
    ],
)
def test_an_unknown_option_or_a_name_like_an_option_is_refused_and_nothing_is_written(
    layout: Layout, args: list[str], said: str
) -> None:
    code, output = add(layout, *args)
    assert code != 0
    assert said in " ".join(output.split())
    assert saved(layout) == {}


@pytest.mark.parametrize("args", [["-s", "workspace", "x", "--", "echo"], ["x", "--scpoe", "workspace", "--", "e"]])
def test_a_misspelt_option_of_add_itself_is_not_sent_after_the_command(layout: Layout, args: list[str]) -> None:
    code, output = add(layout, *args)
    assert code == 2
    assert "No such option" in output
    assert "follow its command" not in output


def test_everything_after_the_double_dash_is_the_command_options_included(layout: Layout) -> None:
    code, output = add(layout, "--scope", "user", "x", "--", "npx", "-y", "pkg", "--scope", "z")
    assert code == 0, output
    assert saved(layout) == {"x": {"command": "npx", "args": ["-y", "pkg", "--scope", "z"]}}


def test_a_workspace_server_added_says_it_waits_for_approval_and_remove_points_at_its_scope(layout: Layout) -> None:
    code, output = add(layout, "--scope", "workspace", "w", "--", "echo", "hi")
    assert code == 0, output
    assert f"It starts once approved: mcpvisor mcp approve --workspace {layout.root} w" in " ".join(output.split())
    result = CliRunner().invoke(app, ["mcp", "remove", "w", "--workspace", str(layout.root)], env=layout.env)
    assert result.exit_code == 1
    assert f"it is in {layout.paths.workspace}: pass --scope workspace" in " ".join(result.output.split())


@pytest.mark.parametrize("where", ["missing", "file"])
def test_a_workspace_that_is_not_an_existing_folder_is_refused_and_nothing_is_created(
    layout: Layout, where: str
) -> None:
    target = layout.root / "typo" / "a" if where == "missing" else layout.root / "a-file"
    if where == "file":
        target.write_text("")
    result = CliRunner().invoke(
        app, ["mcp", "add", "x", "--scope", "workspace", "--workspace", str(target), "--", "y"], env=layout.env
    )
    assert result.exit_code == 2
    assert "Invalid value for '--workspace'" in " ".join(result.output.split())
    assert not (layout.root / "typo").exists()


def test_concurrent_adds_each_keep_the_others(layout: Layout) -> None:
    """Real processes (forked: started at once): before, each read the file, added its server and replaced the file,
    so six at once kept three to five of the six, each saying it added its server."""
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text('{"mcpServers": {}}\n')
    names = [f"b{i}" for i in range(6)]
    processes = [
        subprocess.Popen(
            [mcpvisor_command(), "mcp", "add", "--workspace", str(layout.root), name, "--", "echo", name],
            env={**os.environ, **layout.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for name in names
    ]
    for process in processes:
        out, _ = process.communicate(timeout=WAIT_S)
        assert process.returncode == 0, out
    assert sorted(saved(layout)) == names


def test_a_workspace_server_added_in_the_home_folder_says_no_approval(tmp_path: Path) -> None:
    """In the home folder the workspace settings file is the user's: before, the added server was said to wait for
    an approval that the approve command then refused ("those need no approval")."""
    layout = make_layout(tmp_path)
    home = layout.paths.user.parent.parent
    home.mkdir(parents=True, exist_ok=True)
    args = ["mcp", "add", "--workspace", str(home), "--scope", "workspace", "w", "--", "echo", "hi"]
    result = CliRunner().invoke(app, args, env=layout.env)
    assert result.exit_code == 0, result.output
    assert "approve" not in result.output
    assert saved(layout) == {"w": {"command": "echo", "args": ["hi"]}}


def test_a_workspace_server_named_like_the_language_server_tools_is_refused_and_nothing_is_written(
    layout: Layout,
) -> None:
    """Before, it was written and said to start once approved; the loader then skipped it (a repository's server may
    not take mcp__lsp__*) and approving it said no such server is configured."""
    code, output = add(layout, "--scope", "workspace", "lsp", "--", "echo", "hi")
    assert code == 1
    assert " ".join(output.split()) == (
        f"error: cannot add server 'lsp' to {layout.paths.workspace}: 'lsp' names the language server tools "
        "(mcp__lsp__*), which a repository's server may not take; pick another name, or add it with --scope user"
    )
    assert not layout.paths.workspace.exists()
    code, output = add(layout, "--scope", "user", "lsp", "--", "echo", "hi")  # the user's own may
    assert code == 0, output
    assert saved(layout) == {"lsp": {"command": "echo", "args": ["hi"]}}
    home = layout.paths.user.parent.parent  # where the workspace settings file is the user's
    args = ["mcp", "add", "--workspace", str(home), "--scope", "workspace", "--force", "lsp", "--", "echo", "home"]
    result = CliRunner().invoke(app, args, env=layout.env)
    assert result.exit_code == 0, result.output
    assert saved(layout) == {"lsp": {"command": "echo", "args": ["home"]}}


def test_a_remote_server_takes_headers_and_a_command_takes_env_each_refused_the_other(layout: Layout) -> None:
    code, out = add(layout, "r", "--url", "https://x.example.com/mcp", "-H", "Authorization: Bearer ${TOKEN}")
    assert code == 0, out
    assert saved(layout)["r"] == {
        "type": "http",
        "url": "https://x.example.com/mcp",
        "headers": {"Authorization": "Bearer ${TOKEN}"},
    }
    code, out = add(layout, "r2", "--url", "https://x.example.com/mcp", "-e", "API_KEY=abc")
    assert code == 1
    assert "a remote server (--url) takes what it needs in headers: --header 'NAME: VALUE'" in " ".join(out.split())
    code, out = add(layout, "c", "-H", "X-Key: 1", "--", "echo", "hi")
    assert code == 1
    assert "--header is sent to a remote server (--url)" in " ".join(out.split())
    code, out = add(layout, "r3", "--url", "https://x.example.com/mcp", "-H", "no colon")
    assert code == 1
    assert "--header number 1 must look like 'NAME: VALUE'" in " ".join(out.split())
    assert set(saved(layout)) == {"r"}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--url", "https://x.example.com/mcp", "-H", "A: 1", "-H", "Authorization s3cr3t-t0ken"], "--header number 2"),
        (["--url", "https://x.example.com/mcp", "-H", ": s3cr3t-t0ken"], "--header number 1"),
        (["-e", "A=1", "-e", "s3cr3t-t0ken", "--", "echo"], "--env number 2 must look like KEY=VALUE"),
        (["-e", "=s3cr3t-t0ken", "--", "echo"], "--env number 1 must look like KEY=VALUE"),
    ],
)  # fmt: skip
def test_a_malformed_env_or_header_is_refused_without_showing_it(layout: Layout, args: list[str], said: str) -> None:
    """A value given without its name (a token pasted alone) is a secret: the refusal says which option is wrong,
    never what it holds."""
    code, out = add(layout, "r", *args)
    assert code == 1
    assert said in " ".join(out.split())
    assert "s3cr3t" not in out
    assert saved(layout) == {}


def test_a_value_written_in_clear_into_a_repositorys_file_is_warned_about(layout: Layout) -> None:
    result = CliRunner().invoke(
        app,
        ["mcp", "add", "--workspace", str(layout.root), "--scope", "workspace", "gh", "-e", "GITHUB_TOKEN=ghp_x",
         "-e", "HOME_REF=${HOME}", "--", "gh-mcp"],
        env=layout.env,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert "holds the value of env GITHUB_TOKEN as written: the file belongs to the repository" in said
    assert "HOME_REF" not in said  # a ${VAR} reference is no value
    quiet = CliRunner().invoke(
        app, ["mcp", "add", "--workspace", str(layout.root), "u", "-e", "T=1", "--", "x"], env=layout.env
    )
    assert quiet.exit_code == 0
    assert "as written" not in quiet.stderr  # the user's own file


def test_a_read_only_settings_file_is_not_rewritten(layout: Layout) -> None:
    code, out = add(layout, "one", "--", "echo", "1")
    assert code == 0, out
    before = layout.paths.user.read_text()
    layout.paths.user.chmod(0o444)  # its owner protected it
    code, out = add(layout, "two", "--", "echo", "2")
    assert code == 1
    said = " ".join(out.split())
    assert f"could not save {layout.paths.user}: the file is read-only" in said
    assert "chmod u+w" in said
    assert layout.paths.user.read_text() == before
    assert oct(layout.paths.user.stat().st_mode & 0o777) == "0o444"


def test_a_server_is_not_added_to_a_file_whose_servers_key_is_misspelt_and_the_fix_is_said(layout: Layout) -> None:
    """Before, 'mcpServers' was written beside 'mcp_servers': a running host, which had kept the file's servers on
    their last good configuration, then stopped them, and add said nothing of it."""
    layout.paths.user.parent.mkdir(parents=True)
    text = '{"mcp_servers": {"a": {"command": "echo"}, "b": {"command": "echo"}}}\n'
    layout.paths.user.write_text(text)
    code, output = add(layout, "c", "--", "echo", "hi")
    assert code == 1
    assert " ".join(output.split()) == (
        f"error: cannot add server 'c': {layout.paths.user} has its servers ('a', 'b') under 'mcp_servers', which is "
        "not read (did you mean 'mcpServers'?); rename 'mcp_servers' to 'mcpServers' there first (nothing was "
        "written: 'mcpServers' written beside it would stop those servers in a running mcpvisor, which keeps them "
        "until then)"
    )
    assert layout.paths.user.read_text() == text
    layout.paths.user.write_text(text.replace("mcp_servers", "mcpServers"))
    code, output = add(layout, "c", "--", "echo", "hi")
    assert code == 0, output
    assert list(saved(layout)) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "example.com/mcp",
            "'example.com/mcp' is not an http:// or https:// URL; give it as --url 'https://example.com/mcp'",
        ),
        ("localhost:8080/mcp", "is not an http:// or https:// URL; give it as --url 'https://localhost:8080/mcp'"),
        ("ftp://example.com/mcp", "'ftp://example.com/mcp' is not an http:// or https:// URL"),
    ],
)
def test_a_url_given_without_its_scheme_is_refused_with_the_url_to_give(layout: Layout, url: str, said: str) -> None:
    """Before: "'example.com/mcp' is not an http:// or https:// URL", without the URL that would do."""
    code, output = add(layout, "r", "--url", url)
    assert code == 1
    assert said in " ".join(output.split())
    assert not layout.paths.user.exists()
