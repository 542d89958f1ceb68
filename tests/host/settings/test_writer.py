from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import json5
import pytest

from mcpvisor.core.errors import ConfigError
from mcpvisor.host.settings import writer
from mcpvisor.host.settings.files import parse_settings_text
from mcpvisor.host.settings.loader import SettingsFileError
from mcpvisor.host.settings.writer import (
    delete_key,
    delete_setting,
    edit_settings_text,
    set_key,
    set_setting,
    split_key,
)
from tests.layout import Layout, make_layout, write_json

COMMENTED = """{
  // my servers
  "mcpServers": {
    "a": {"command": "a-cmd", "args": ["x"]}, // first
    /* the second */
    "b": {
      "command": "b-cmd"
    }
  },
  "ui": {"theme": "dark"}
}
"""


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


# --------------------------------------------------------------------------- pure edits


def test_split_key() -> None:
    assert split_key("mcpServers.a") == ("mcpServers", "a")
    assert split_key(["mcpServers", "my.server"]) == ("mcpServers", "my.server")
    with pytest.raises(ValueError, match="invalid settings key"):
        split_key("a..b")


def test_set_key_and_delete_key_copy() -> None:
    data: dict[str, Any] = {"mcp": {"allowed": ["a"]}, "x": 1}
    assert set_key(data, ("mcp", "excluded"), ["b"]) == {"mcp": {"allowed": ["a"], "excluded": ["b"]}, "x": 1}
    assert set_key({"x": None}, ("x", "y"), 2) == {"x": {"y": 2}}  # null holds nothing to lose
    with pytest.raises(writer.NotAnObject, match="x is a number, not an object"):
        set_key(data, ("x", "y"), 2)  # the 1 would be gone
    assert delete_key(data, ("mcp", "allowed")) == ({"mcp": {}, "x": 1}, True)
    assert delete_key(data, ("mcp", "nope")) == (data, False)
    assert delete_key(data, ("x", "y")) == (data, False)
    assert data == {"mcp": {"allowed": ["a"]}, "x": 1}


@pytest.mark.parametrize(
    ("text", "path", "value", "delete"),
    [
        (COMMENTED, ("mcpServers", "c"), {"command": "c"}, False),
        (COMMENTED, ("mcpServers", "a"), {"command": "new"}, False),
        (COMMENTED, ("mcpServers", "a", "args"), ["y", "z"], False),
        (COMMENTED, ("mcpServers", "a"), None, True),
        (COMMENTED, ("mcpServers", "b"), None, True),
        (COMMENTED, ("ui",), None, True),
        (COMMENTED, ("mcp", "excluded"), ["q"], False),
        (COMMENTED, ("ui", "theme"), "light", False),
        ("{}", ("mcpServers", "a"), {"command": "a"}, False),
        ("{\n}\n", ("a",), 1, False),
        ('{"a": 1}', ("b",), 2, False),
        ('{"a": 1,}', ("b",), 2, False),
        ('{"a": 1}', ("a",), None, True),
        ('{\n  "a": 1,\n  "b": 2,\n}', ("c",), 3, False),
        ('{\n  "a": 1,\n  "b": 2\n}', ("b",), None, True),
        ('{\n  "only": 1\n}', ("only",), None, True),
        ('{\n\t"a": {\n\t\t"b": 1\n\t}\n}', ("a", "c"), [1, 2], False),
        ("{ // nothing yet\n}", ("a",), "x", False),
        ("{unquoted: 1, 'single': 'q'}", ("single",), "r", False),
        ('{"s": "with } and // inside"}', ("t",), 1, False),
    ],
)
def test_text_edits_give_the_intended_content(text: str, path: tuple[str, ...], value: Any, delete: bool) -> None:
    before = json5.loads(text)
    expected = delete_key(before, path)[0] if delete else set_key(before, path, value)
    edited = edit_settings_text(text, path, value, delete=delete)
    assert json5.loads(edited) == expected


def test_text_edits_keep_comments() -> None:
    edited = edit_settings_text(COMMENTED, ("mcpServers", "c"), {"command": "c"})
    assert "// my servers" in edited
    assert "/* the second */" in edited
    assert "// first" in edited
    assert '    "c": {\n      "command": "c"\n    }' in edited
    removed = edit_settings_text(COMMENTED, ("mcpServers", "b"), delete=True)
    assert '"b"' not in removed
    assert "// my servers" in removed


def test_deleting_a_missing_key_leaves_the_text_alone() -> None:
    assert edit_settings_text(COMMENTED, ("nope", "x"), delete=True) == COMMENTED


# --------------------------------------------------------------------------- files


def test_set_setting_writes_the_file_and_memory_first(layout: Layout) -> None:
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text(COMMENTED)
    settings = layout.settings()
    set_setting(settings, "user", ("mcpServers", "c"), {"command": "c-cmd"})
    text = layout.paths.user.read_text()
    assert "// my servers" in text
    assert json5.loads(text)["mcpServers"]["c"] == {"command": "c-cmd"}
    assert settings.merged.mcp_servers["c"].config.command == "c-cmd"
    assert settings.reload_scope("user").changed == ()  # the app's own write is no change


def test_delete_setting_removes_a_server(layout: Layout) -> None:
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text(COMMENTED)
    settings = layout.settings()
    assert delete_setting(settings, "user", "mcpServers.a") is True
    assert sorted(json5.loads(layout.paths.user.read_text())["mcpServers"]) == ["b"]
    assert sorted(settings.merged.mcp_servers) == ["b"]
    assert delete_setting(settings, "user", "mcpServers.a") is False
    assert settings.reload_scope("user").changed == ()


def test_a_new_user_file_and_its_folder_are_created_private(layout: Layout) -> None:
    settings = layout.settings()
    set_setting(settings, "user", "mcp.excluded", ["x"])
    assert json.loads(layout.paths.user.read_text()) == {"mcp": {"excluded": ["x"]}}
    assert stat.S_IMODE(layout.paths.user.stat().st_mode) == 0o600
    assert settings.merged.excluded == ("x",)


def test_an_existing_files_mode_is_kept(layout: Layout) -> None:
    write_json(layout.paths.workspace, {})
    layout.paths.workspace.chmod(0o640)
    settings = layout.settings()
    set_setting(settings, "workspace", "ui.theme", "x")
    assert stat.S_IMODE(layout.paths.workspace.stat().st_mode) == 0o640


def test_the_project_file_can_be_edited(layout: Layout) -> None:
    settings = layout.settings()
    set_setting(settings, "project", ["mcpServers", "p"], {"command": "p"})
    assert json.loads(layout.paths.project.read_text()) == {"mcpServers": {"p": {"command": "p"}}}
    assert settings.project.servers["p"].config.scope == "project"


def test_an_empty_file_is_written_afresh(layout: Layout) -> None:
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text(" \n")  # made with touch, or emptied
    settings = layout.settings()
    set_setting(settings, "user", ("mcpServers", "b"), {"command": "echo"})
    assert json.loads(layout.paths.user.read_text()) == {"mcpServers": {"b": {"command": "echo"}}}


def test_a_file_commented_out_whole_gets_a_document_below_its_comments(layout: Layout) -> None:
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text('// my servers, off for now\n/* { "mcpServers": {} } */\n')
    with pytest.raises(SettingsFileError, match="the file holds only comments; expected a JSON object"):
        parse_settings_text(layout.paths.user.read_text(), layout.paths.user)  # read: never "no settings"
    settings = layout.settings()
    set_setting(settings, "user", ("mcpServers", "b"), {"command": "echo"})
    text = layout.paths.user.read_text()
    assert text.startswith('// my servers, off for now\n/* { "mcpServers": {} } */\n{')
    assert parse_settings_text(text, layout.paths.user) == {"mcpServers": {"b": {"command": "echo"}}}


def test_an_unparsable_file_is_never_overwritten(layout: Layout) -> None:
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text('{"mcpServers": ')
    settings = layout.settings()
    with pytest.raises(SettingsFileError):
        set_setting(settings, "user", "ui.theme", "x")
    assert layout.paths.user.read_text() == '{"mcpServers": '


@pytest.mark.parametrize("servers", ['["keep-me", {"x": 1}]', '"oops"', "3"])
def test_a_server_is_never_added_over_what_is_not_an_object(layout: Layout, servers: str) -> None:
    text = f'{{\n  // mine\n  "mcpServers": {servers}\n}}\n'
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text(text)
    settings = layout.settings()
    with pytest.raises(ConfigError) as info:
        set_setting(settings, "user", ("mcpServers", "b"), {"command": "echo"})
    assert str(info.value).startswith(f"cannot set mcpServers.b in {layout.paths.user}: mcpServers is ")
    assert str(info.value).endswith("not an object; fix or remove mcpServers there first (the file is left as it is)")
    assert layout.paths.user.read_text() == text
    assert "b" not in settings.merged.mcp_servers


def test_a_symlinked_settings_file_stays_a_symlink(layout: Layout, tmp_path: Path) -> None:
    real = tmp_path / "real-settings.json"
    write_json(real, {"ui": {"theme": "a"}})
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.symlink_to(real)
    settings = layout.settings()
    set_setting(settings, "user", "ui.theme", "b")
    assert layout.paths.user.is_symlink()
    assert json.loads(real.read_text()) == {"ui": {"theme": "b"}}


def test_no_temporary_file_is_left_behind(layout: Layout) -> None:
    settings = layout.settings()
    set_setting(settings, "user", "ui.theme", "b")
    assert sorted(p.name for p in layout.paths.user.parent.iterdir()) == ["settings.json"]


def test_a_failed_write_restores_memory(layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    write_json(layout.paths.user, {"ui": {"theme": "a"}})
    settings = layout.settings()

    def fail(*_: object) -> None:
        raise PermissionError("read-only")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(ConfigError, match="could not save .*settings.json: read-only — nothing was changed"):
        set_setting(settings, "user", "ui.theme", "b")
    assert settings.merged.get("ui.theme") == "a"
    assert sorted(p.name for p in layout.paths.user.parent.iterdir()) == ["settings.json"]


def test_when_the_text_cannot_be_edited_the_file_is_rewritten_as_json(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text(COMMENTED)
    settings = layout.settings()

    def cannot(*_: object, **__: object) -> str:
        raise ValueError("no")

    monkeypatch.setattr(writer, "edit_settings_text", cannot)
    set_setting(settings, "user", "ui.theme", "light")
    expected = json5.loads(COMMENTED)
    expected["ui"]["theme"] = "light"
    assert json.loads(layout.paths.user.read_text()) == expected
    assert "comments could not be kept" in caplog.text


def test_an_edit_on_disk_the_watcher_has_not_seen_yet_is_still_reported(layout: Layout) -> None:
    write_json(layout.paths.user, {"ui": {"theme": "a"}})
    settings = layout.settings()
    write_json(layout.paths.user, {"ui": {"theme": "a"}, "mcp": {"excluded": ["e"]}})  # external
    set_setting(settings, "user", "ui.theme", "b")
    assert settings.reload_scope("user").changed == ("mcp.excluded",)
