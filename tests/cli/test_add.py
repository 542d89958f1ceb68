"""``mcp add`` takes its options before ``--`` and the server's command after it: a misspelt or unknown
option is an error, never part of the saved command or the server's name."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mcpvisor.cli.main import app
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
