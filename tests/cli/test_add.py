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
        (["x", "npx", "-y", "pkg"], "No such option: -y"),
        (["--", "-s", "echo"], "a server name cannot start with '-'"),
        (["", "--", "echo"], "cannot add a server without a name"),
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
