from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.settings.loader import ServerEntry, ServerScope, load_server_file
from mcpvisor.host.settings.mcp_servers import (
    AssembledServers,
    TopTier,
    assemble_from_settings,
    assemble_mcp_servers,
    load_top_tier,
)
from tests.layout import Layout, make_layout, write_json


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


def _entry(cmd: str, scope: ServerScope) -> ServerEntry:
    return ServerEntry(McpServerConfig(command=cmd), scope, Path(f"/{scope}.json"))


def _assemble(
    layout: Layout,
    settings: dict[str, ServerEntry] | None = None,
    project: dict[str, Any] | None = None,
    top: TopTier | None = None,
) -> AssembledServers:
    if project is not None:
        write_json(layout.paths.project, {"mcpServers": project})
    return assemble_mcp_servers(settings or {}, layout.root, top, env=layout.env)


@pytest.mark.parametrize("low", ["system_defaults", "user"])
def test_mcp_json_wins_over_user_and_default_settings_servers(layout: Layout, low: ServerScope) -> None:
    out = _assemble(layout, {"s": _entry("low", low)}, {"s": {"command": "project"}})
    assert out.servers["s"].command == "project"
    assert out.servers["s"].scope == "project"
    assert (out.sources["s"].label, out.sources["s"].path) == ("Project .mcp.json", layout.paths.project)


def test_a_project_server_that_takes_the_place_of_ones_own_says_so(layout: Layout) -> None:
    out = _assemble(layout, {"s": _entry("mine", "user"), "t": _entry("other", "user")}, {"s": {"command": "theirs"}})
    assert out.warnings == (
        f"MCP server 's' of {layout.paths.project} replaces your user server of that name (in /user.json) in this "
        "workspace: it runs only once approved, and yours does not run here meanwhile; rename one of them to keep "
        "both",
    )
    above = _assemble(layout, {"s": _entry("mine", "user"), "u": _entry("ws", "workspace")}, {"u": {"command": "p"}})
    assert above.warnings == ()  # the workspace's own settings win over .mcp.json: nothing of yours replaced


def test_two_servers_whose_names_look_the_same_but_are_written_differently_are_warned_about(layout: Layout) -> None:
    """'café' as one character (NFC) and as e plus an accent (NFD): two servers shown under one name, each running
    with tools of its own, and a name typed in a command reaching one of them; before, nothing said so."""
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    write_json(layout.paths.user, {"mcpServers": {composed: {"command": "mine"}, "Git": {"command": "g"}}})
    write_json(layout.paths.project, {"mcpServers": {decomposed: {"command": "theirs"}, "git": {"command": "g"}}})
    out = assemble_from_settings(layout.settings())
    assert set(out.servers) == {composed, decomposed, "Git", "git"}  # both run, as before
    assert out.warnings == (
        f"MCP servers {decomposed!r} and {composed!r} in {layout.paths.project} and {layout.paths.user} look the same "
        "but are written with different characters ('cafe\\u0301', 'caf\\xe9'): each is a server of its own; rename "
        "one of them",
    )  # Git and git do not look the same: nothing is said of them


@pytest.mark.parametrize(("high", "label"), [("workspace", "Workspace"), ("system", "System")])
def test_workspace_and_system_settings_servers_win_over_mcp_json(layout: Layout, high: ServerScope, label: str) -> None:
    out = _assemble(layout, {"s": _entry("high", high)}, {"s": {"command": "project"}})
    assert out.servers["s"].command == "high"
    assert out.sources["s"].label == label


@pytest.mark.parametrize("high", ["workspace", "system"])
def test_session_servers_win_over_every_settings_server(layout: Layout, high: ServerScope) -> None:
    top = TopTier(session={"s": McpServerConfig(command="session")})
    out = _assemble(layout, {"s": _entry("high", high)}, top=top)
    assert out.servers["s"].command == "session"
    assert (out.sources["s"].label, out.sources["s"].path) == ("Command line", None)


def test_mcp_config_files_win_over_session_servers_and_later_files_win(layout: Layout, tmp_path: Path) -> None:
    first, second = tmp_path / "one.json", tmp_path / "two.json"
    write_json(first, {"mcpServers": {"s": {"command": "first"}, "t": {"command": "first"}}})
    write_json(second, {"servers": {"t": {"command": "second"}}})  # VS Code spelling
    top = load_top_tier([first, second], layout.env, session={"s": McpServerConfig(command="session")})
    out = _assemble(layout, top=top)
    assert out.servers["s"].command == "first"
    assert out.servers["t"].command == "second"
    assert out.sources["t"].path == second
    assert out.sources["t"].label == "Command line"


def test_the_full_order_with_a_server_defined_everywhere(layout: Layout, tmp_path: Path) -> None:
    names = ["user", "project", "workspace", "session", "file"]
    settings = {"user": _entry("u", "user"), "workspace": _entry("w", "workspace")}
    for n in ("project", "session", "file"):
        settings[n] = _entry("u", "user")
    project = {n: {"command": "p"} for n in ("project", "workspace", "session", "file")}
    write_json(tmp_path / "cli.json", {"mcpServers": {"file": {"command": "f"}}})
    top = load_top_tier([tmp_path / "cli.json"], layout.env, session={"session": McpServerConfig(command="s")})
    out = _assemble(layout, settings, project, top)
    assert [out.servers[n].command for n in names] == ["u", "p", "w", "s", "f"]
    assert out.grouped() == {
        "User": ["user"],
        "Project .mcp.json": ["project"],
        "Workspace": ["workspace"],
        "Command line": ["file", "session"],
    }


def test_mcp_json_entries_are_normalised_and_stamped_project(layout: Layout) -> None:
    out = _assemble(layout, project={"h": {"type": "http", "url": "http://h", "headers": {"X": "1"}}})
    cfg = out.servers["h"]
    assert (cfg.transport, cfg.http_url, cfg.scope) == ("http", "http://h", "project")


def test_mcp_json_is_hashed_before_expansion(layout: Layout) -> None:
    write_json(layout.paths.project, {"mcpServers": {"p": {"command": "x", "env": {"TOKEN": "${TOKEN}"}}}})
    one = assemble_mcp_servers({}, layout.root, env={**layout.env, "TOKEN": "one"}).servers["p"]
    two = assemble_mcp_servers({}, layout.root, env={**layout.env, "TOKEN": "two"}).servers["p"]
    assert (one.env, two.env) == ({"TOKEN": "one"}, {"TOKEN": "two"})
    assert one.approval_hash == two.approval_hash
    write_json(layout.paths.project, {"mcpServers": {"p": {"command": "x", "env": {"TOKEN": "${OTHER}"}}}})
    three = assemble_mcp_servers({}, layout.root, env=layout.env).servers["p"]
    assert three.approval_hash != one.approval_hash


def test_a_bad_mcp_json_entry_is_skipped_with_a_warning_naming_file_and_entry(layout: Layout) -> None:
    out = _assemble(layout, project={"bad": {"args": []}, "worse": {"type": "carrier-pigeon"}, "ok": {"command": "x"}})
    assert list(out.servers) == ["ok"]
    assert len(out.warnings) == 2
    for name in ("bad", "worse"):
        warning = next(w for w in out.warnings if f"'{name}'" in w)
        assert str(layout.paths.project) in warning
        assert f"fix mcpServers.{name}" in warning


def test_an_unparsable_mcp_json_is_an_error_and_the_other_servers_stay(layout: Layout) -> None:
    layout.paths.project.write_text('{"mcpServers": {')
    out = _assemble(layout, {"u": _entry("u", "user")})
    assert list(out.servers) == ["u"]
    assert [e.path for e in out.errors] == [layout.paths.project]


def test_a_missing_mcp_json_is_no_servers(layout: Layout) -> None:
    assert _assemble(layout) == AssembledServers({}, {})


def test_a_missing_mcp_config_file_is_an_error(layout: Layout, tmp_path: Path) -> None:
    top = load_top_tier([tmp_path / "nope.json"], layout.env)
    out = _assemble(layout, top=top)
    assert out.errors[0].path == tmp_path / "nope.json"
    assert out.errors[0].message == "the file does not exist; check the path given with --mcp-config"


def test_a_missing_lsp_config_file_is_an_error_naming_the_option(tmp_path: Path) -> None:
    from mcpvisor.host.settings.lsp_servers import load_lsp_file

    read = load_lsp_file(tmp_path / "nope.json", {})
    assert read.error is not None
    missing = "the file does not exist; check the path given with --lsp-config"
    assert str(read.error) == f"invalid settings file {tmp_path / 'nope.json'}: {missing}"


def test_reading_mcp_json_needs_an_explicit_environment(layout: Layout) -> None:
    with pytest.raises(TypeError, match="env="):
        assemble_mcp_servers({}, layout.root)


def test_assemble_from_settings_uses_the_last_good_mcp_json(layout: Layout) -> None:
    write_json(layout.paths.user, {"mcpServers": {"u": {"command": "u"}}})
    write_json(layout.paths.project, {"mcpServers": {"p": {"command": "p"}}})
    settings = layout.settings()
    layout.paths.project.write_text("")  # a save in progress
    assert settings.reload_scope("project").error is not None
    out = assemble_from_settings(settings)
    assert sorted(out.servers) == ["p", "u"]
    assert out.errors == ()


def test_both_keys_in_a_server_file_prefers_mcp_servers(tmp_path: Path) -> None:
    path = tmp_path / "both.json"
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "a"}}, "servers": {"b": {"command": "b"}}}))
    layer = load_server_file(path, {}, scope="mcp_config")
    assert list(layer.servers) == ["a"]
    assert any("'servers'" in w for w in layer.warnings)
