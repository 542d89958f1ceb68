from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from mcpvisor.core.gating import matches_any
from mcpvisor.host.settings.files import read_settings_file
from mcpvisor.host.settings.loader import (
    MergedSettings,
    ScopeLayer,
    SettingsFileError,
    SettingsScope,
    allowed_by_all,
    changed_paths,
    expand_string,
    expand_vars,
    is_folder_trusted,
    load_settings,
    merge_settings,
    narrow_allowed,
    parse_settings_text,
    parse_trusted_folders,
    values_equal,
)
from tests.layout import Layout, make_layout, write_json

P = Path("/x/settings.json")


# --------------------------------------------------------------------------- parsing


def test_settings_files_allow_comments_and_trailing_commas() -> None:
    text = '{\n  // a comment\n  "ui": {"theme": "dark",}, /* block */\n  "mcp": {"allowed": ["a",],},\n}'
    assert parse_settings_text(text, P) == {"ui": {"theme": "dark"}, "mcp": {"allowed": ["a"]}}


def test_a_syntax_error_names_the_file_line_and_column() -> None:
    with pytest.raises(SettingsFileError) as info:
        parse_settings_text('{\n  "a": [1,\n   2 3]\n}', P)
    report = info.value.report
    assert (report.path, report.line, report.column) == (P, 3, 6)
    assert report.message == "unexpected '3'"
    assert str(report).startswith("invalid settings file /x/settings.json:3:6: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [('{"a": "x""}', "unexpected '\"'"), ('{"a": 1\'}', "unexpected '}'"), ('{"a":\t@}', "unexpected '@'")],
)
def test_a_stray_character_is_named_readably(text: str, message: str) -> None:
    with pytest.raises(SettingsFileError) as info:
        parse_settings_text(text, P)
    assert info.value.report.message == message


@pytest.mark.parametrize("text", ["", "   \n", "\ufeff"])
def test_an_empty_file_is_a_parse_error_never_no_settings(text: str) -> None:
    with pytest.raises(SettingsFileError, match="empty"):
        parse_settings_text(text, P)


def test_a_truncated_file_is_a_parse_error_with_a_position() -> None:
    with pytest.raises(SettingsFileError) as info:
        parse_settings_text('{"mcpServers": {"a": ', P)
    assert info.value.report.line == 1
    assert info.value.report.column is not None


@pytest.mark.parametrize(
    ("text", "kind"),
    [("[1, 2]", "an array"), ('"x"', "a string"), ("3", "a number"), ("2.5", "a number"), ("true", "true or false")]
    + [("null", "null")],
)
def test_a_document_that_is_not_an_object_names_the_file(text: str, kind: str) -> None:
    with pytest.raises(SettingsFileError, match=f"/x/settings.json.*found {kind}"):
        parse_settings_text(text, P)


@pytest.mark.parametrize(("tail", "line", "column"), [('"z": 1\n  "y": 2\n}', 2, 3), ('"z": [1,\n  x]}', 2, 3)])
def test_an_error_in_a_large_file_names_the_column_of_the_character(tail: str, line: int, column: int) -> None:
    """Past 256 KB the compiled parser's position is used; before, every column it named was one too far right."""
    head = "{" + "".join(f'"k{i}": {i},\n' for i in range(30_000))
    with pytest.raises(SettingsFileError) as info:
        parse_settings_text(head + tail, P)
    report = info.value.report
    assert (report.line, report.column) == (30_000 + line, column)


def test_a_byte_order_mark_is_ignored() -> None:
    assert parse_settings_text('\ufeff{"a": 1}', P) == {"a": 1}


@pytest.mark.parametrize(
    ("encoding", "said"),
    [
        ("utf-16", "it is UTF-16 text (it starts with a UTF-16 byte order mark): save it as UTF-8"),
        ("latin-1", "it is not UTF-8 text (byte 0xe9 at offset 15): save it as UTF-8"),
    ],
)
def test_a_file_not_saved_as_utf_8_says_how_to_save_it(tmp_path: Path, encoding: str, said: str) -> None:
    """Before, a file saved as UTF-16 (Notepad's "Unicode", PowerShell 5's >) read 'not UTF-8 text (byte 0xff at
    offset 0)', with no fix."""
    path = tmp_path / "settings.json"
    path.write_bytes('{"mcp": {"x": "é"}}'.encode(encoding))
    with pytest.raises(SettingsFileError) as info:
        read_settings_file(path)
    assert str(info.value).endswith(f"cannot read the file: {said}")


# --------------------------------------------------------------------------- expansion

ENV = {"A": "alpha", "EMPTY": "", "B_2": "beta"}


@pytest.mark.parametrize(
    ("text", "expected", "missing"),
    [
        ("$A", "alpha", set()),
        ("${A}", "alpha", set()),
        ("x-${A}-y", "x-alpha-y", set()),
        ("$A$B_2", "alphabeta", set()),
        ("${A:-d}", "alpha", set()),
        ("${NOPE:-d}", "d", set()),
        ("${EMPTY:-d}", "d", set()),
        ("${NOPE:-}", "", set()),
        ("${NOPE:-a b/c}", "a b/c", set()),
        ("$NOPE", "", {"NOPE"}),
        ("${NOPE}", "", {"NOPE"}),
        ("${EMPTY}", "", set()),
        ("$$A", "$A", set()),
        ("cost $5", "cost $5", set()),
        ("${A", "${A", {"${A"}),  # kept as written, and said (as every form not read)
        ("${env:A}", "${env:A}", {"${env:A}"}),
        ("${A:?must be set}", "${A:?must be set}", {"${A:?must be set}"}),
        ("x ${NOPE-d} y", "x ${NOPE-d} y", {"${NOPE-d}"}),
        ("${A:-${B}}", "${A:-${B}}", {"${A:-${B}}"}),  # a nested default: kept whole (it was "alpha}")
        ("$A ${X:-${A:-${B}}} ${A}", "alpha ${X:-${A:-${B}}} alpha", {"${X:-${A:-${B}}}"}),
        ("${env:A}${A}", "${env:A}alpha", {"${env:A}"}),
        ("$${env:A}", "${env:A}", set()),
        ("$", "$", set()),
        ("no vars", "no vars", set()),
    ],
)
def test_variable_expansion(text: str, expected: str, missing: set[str]) -> None:
    seen: set[str] = set()
    assert expand_string(text, ENV, seen) == expected
    assert seen == missing


def test_expansion_reaches_nested_values_but_not_keys() -> None:
    value = {"$A": ["$A", {"k": "${B_2}"}, 1, True, None]}
    assert expand_vars(value, ENV) == {"$A": ["alpha", {"k": "beta"}, 1, True, None]}


def test_expansion_uses_only_the_mapping_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONLY_IN_OS", "leak")
    assert expand_string("${ONLY_IN_OS}", {}) == ""


# --------------------------------------------------------------------------- diff


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1, True),
        (1, 1.0, False),
        (True, 1, False),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True),
        ([1, 2], [2, 1], False),
        (None, None, True),
        (math.nan, math.nan, True),
        ({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}, True),
        ({"a": None}, {}, False),
    ],
)
def test_values_equal(a: Any, b: Any, equal: bool) -> None:
    assert values_equal(a, b) is equal


@pytest.mark.parametrize(
    ("old", "new", "paths"),
    [
        ({}, {}, []),
        ({"a": 1}, {"a": 1}, []),
        ({"mcpServers": {"a": {"args": ["1"]}}}, {"mcpServers": {"a": {"args": ["2"]}}}, ["mcpServers.a.args"]),
        ({"mcpServers": {}}, {"mcpServers": {"a": {"command": "x"}}}, ["mcpServers.a.command"]),
        ({"mcpServers": {"a": {"command": "x"}}}, {}, ["mcpServers.a.command"]),
        ({}, {"mcp": {"excluded": ["a"]}}, ["mcp.excluded"]),
        (
            {"mcp": {"excluded": ["a"], "serverCommand": "x"}},
            {"mcp": {"serverCommand": "y"}},
            ["mcp.excluded", "mcp.serverCommand"],
        ),
        ({"mcp": 3}, {"mcp": {"allowed": []}}, ["mcp.allowed"]),
        ({"mcp": {"excluded": ["a"]}}, {"mcp": None}, ["mcp.excluded"]),
        ({"mcp": 3}, {"mcp": {}}, ["mcp"]),
        ({"x": [1, 2]}, {"x": [2, 1]}, ["x"]),
        ({"x": 1}, {"x": True}, ["x"]),
        ({"x": {}}, {}, []),
        ({"my.server": 1}, {"my.server": 2}, ["my.server"]),
    ],
)
def test_changed_paths(old: dict[str, Any], new: dict[str, Any], paths: list[str]) -> None:
    assert changed_paths(old, new) == paths


# --------------------------------------------------------------------------- merge (pure)


def _merge(**layers: Mapping[str, Any]) -> MergedSettings:
    scopes: list[SettingsScope] = ["system_defaults", "user", "workspace", "system"]
    return merge_settings(
        [ScopeLayer(s, Path(f"/{s}.json"), layers[s]) for s in scopes if s in layers],
        {"TOKEN": "t0k"},
    )


def _server(cmd: str, **more: Any) -> dict[str, Any]:
    return {"command": cmd, **more}


PAIRS = [("system_defaults", "user"), ("user", "workspace"), ("workspace", "system"), ("system_defaults", "system")]


@pytest.mark.parametrize(("low", "high"), PAIRS)
def test_a_higher_scope_replaces_a_whole_server_of_the_same_name(low: str, high: str) -> None:
    merged = _merge(
        **{
            low: {"mcpServers": {"s": _server("low", args=["x"], trust=True)}},
            high: {"mcpServers": {"s": _server("high")}},
        }
    )
    entry = merged.mcp_servers["s"]
    assert entry.config.command == "high"
    assert entry.config.args == ()  # not field-merged with the lower entry
    assert entry.config.trust is None
    assert (entry.scope, entry.path) == (high, Path(f"/{high}.json"))


@pytest.mark.parametrize(("low", "high"), PAIRS)
def test_a_higher_scope_wins_for_plain_settings_and_objects_merge(low: str, high: str) -> None:
    layers: dict[str, Mapping[str, Any]] = {
        low: {"ui": {"theme": "low", "hideBanner": True}},
        high: {"ui": {"theme": "high"}},
    }
    merged = _merge(**layers)
    assert merged.get("ui.theme") == "high"
    assert merged.get("ui.hideBanner") is True


def test_servers_from_different_scopes_are_all_kept_with_their_provenance() -> None:
    merged = _merge(user={"mcpServers": {"u": _server("u")}}, workspace={"mcpServers": {"w": _server("w")}})
    assert {n: (e.scope, str(e.path)) for n, e in merged.mcp_servers.items()} == {
        "u": ("user", "/user.json"),
        "w": ("workspace", "/workspace.json"),
    }


def test_servers_are_stamped_with_their_scope() -> None:
    merged = _merge(
        system_defaults={"mcpServers": {"d": _server("d")}},
        user={"mcpServers": {"u": _server("u", scope="project")}},
        workspace={"mcpServers": {"w": _server("w")}},
        system={"mcpServers": {"s": _server("s")}},
    )
    assert {n: e.config.scope for n, e in merged.mcp_servers.items()} == {
        "d": None,
        "u": None,
        "w": "workspace",
        "s": "system",
    }


def test_excluded_lists_are_united_across_scopes() -> None:
    merged = _merge(
        user={"mcp": {"excluded": ["a", "b"]}},
        workspace={"mcp": {"excluded": ["b", "c"]}},
        system={"mcp": {"excluded": ["d*"]}},
    )
    assert merged.excluded == ("a", "b", "c", "d*")
    assert merged.get("mcp.excluded") == ["a", "b", "c", "d*"]


def test_no_excluded_anywhere_is_none() -> None:
    assert _merge(user={"mcp": {"serverCommand": "x"}}).excluded is None


def test_allow_lists_narrow_each_scope_keeps_its_own() -> None:
    merged = _merge(user={"mcp": {"allowed": ["a*", "b"]}}, workspace={"mcp": {"allowed": ["a1", "b", "c"]}})
    assert merged.allowed_lists == [("a*", "b"), ("a1", "b", "c")]
    assert [n for n in ("a1", "a2", "b", "c") if merged.is_allowed(n)] == ["a1", "b"]
    assert merged.get("mcp.allowed") is None  # no pretend single list


def test_a_workspace_allow_all_never_widens_the_user_allow_list() -> None:
    merged = _merge(user={"mcp": {"allowed": ["github"]}}, workspace={"mcp": {"allowed": ["*"]}})
    assert merged.is_allowed("github")
    assert not merged.is_allowed("evil")
    assert narrow_allowed(["github", "evil"], merged.allowed_lists) == ("github",)


def test_no_allow_list_anywhere_allows_all_and_an_empty_one_denies_all() -> None:
    assert _merge(user={}).allowed_lists == []
    assert narrow_allowed(["a"], []) is None
    denied = _merge(user={"mcp": {"allowed": []}})
    assert not denied.is_allowed("a")
    assert narrow_allowed(["a"], denied.allowed_lists) == ()


@pytest.mark.parametrize(
    ("name", "lists", "allowed"),
    [
        ("a", [], True),
        ("a", [["*"]], True),
        ("a", [["*"], ["b"]], False),
        ("a", [["a", "b"], ["?"]], True),
        ("ab", [["a*"], ["*b"]], True),
    ],
)
def test_allowed_by_all(name: str, lists: list[list[str]], allowed: bool) -> None:
    assert allowed_by_all(name, lists) is allowed


def test_narrowed_names_are_glob_escaped() -> None:
    (pattern,) = narrow_allowed(["we[i]rd*"], [["*"]]) or ()
    assert pattern == "we[[]i]rd[*]"
    assert matches_any("we[i]rd*", [pattern])
    assert not matches_any("weird-and-more", [pattern])


@pytest.mark.parametrize(("value", "expected"), [("one", ("one",)), (3, ()), (["a", 2], ())])
def test_a_malformed_allow_list_fails_closed(value: Any, expected: tuple[str, ...]) -> None:
    merged = _merge(user={"mcp": {"allowed": value}})
    assert merged.allowed_lists == [expected]
    assert expected or any("mcp.allowed" in w and "deny all" in w for w in merged.warnings)


def test_a_malformed_excluded_list_excludes_all() -> None:
    merged = _merge(user={"mcp": {"excluded": {"a": True}}})
    assert merged.excluded == ("*",)
    assert any("exclude all" in w for w in merged.warnings)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"mcpServers": []}, "ignored 'mcpServers' in /user.json: expected an object of servers by name"),
        ({"mcp": {"allowed": 3}}, "invalid mcp.allowed in /user.json: expected a list of glob patterns; treated as"),
        ({"mcp": {"excluded": ["a", 2]}}, "invalid mcp.excluded in /user.json: expected a list of glob patterns;"),
        ({"mcp": {"allowed": "a"}}, 'mcp.allowed should be array, got string; taken as ["a"] in /user.json'),
    ],
)
def test_a_key_of_the_wrong_type_is_warned_about_once_by_what_its_reading_makes_of_it(
    data: dict[str, Any], said: str
) -> None:
    """Before, the type check said it too (``mcpServers should be object, got array``): two warnings, one problem."""
    [warning] = _merge(user=data).warnings
    assert warning.startswith(said)


@pytest.mark.parametrize("key", ["mcpServers", "lspServers"])
def test_a_null_servers_key_is_warned_about(key: str) -> None:
    """Its reading takes null for no servers and says nothing: the type check says it (it said nothing either)."""
    assert _merge(user={key: None}).warnings == (f"{key} should be object, got null in /user.json",)


def test_settings_values_expand_variables() -> None:
    merged = _merge(user={"ui": {"theme": "${TOKEN}"}, "mcp": {"allowed": ["$TOKEN"]}})
    assert merged.get("ui.theme") == "t0k"
    assert merged.allowed_lists == [("t0k",)]


def test_an_undefined_variable_is_warned_about_by_name() -> None:
    merged = _merge(user={"ui": {"theme": "${MISSING_VAR}"}})
    assert merged.get("ui.theme") == ""
    assert any("'MISSING_VAR'" in w for w in merged.warnings)


def test_an_invalid_server_is_skipped_with_a_warning_and_the_others_load() -> None:
    merged = _merge(user={"mcpServers": {"broken": {"args": ["x"]}, "fine": _server("ok"), "odd": 5}})
    assert list(merged.mcp_servers) == ["fine"]
    broken = next(w for w in merged.warnings if "'broken'" in w)
    assert "/user.json" in broken
    assert "no transport" in broken
    assert "fix mcpServers.broken" in broken
    assert any("'odd'" in w and "expected an object" in w for w in merged.warnings)


def test_a_server_with_a_blank_name_is_skipped_with_a_warning() -> None:
    """Before, it ran: its tools were mcp____echo, its log the hidden .log."""
    merged = _merge(user={"mcpServers": {"": _server("blank"), " ": _server("space"), "fine": _server("ok")}})
    assert list(merged.mcp_servers) == ["fine"]
    assert sum("a server needs a name; fix mcpServers" in w for w in merged.warnings) == 2


def test_a_server_whose_name_holds_a_line_break_an_escape_or_an_invisible_character_is_skipped_with_a_warning() -> None:
    """Before, it ran, and every view showed its name as it is: a line break in a repository's server name split its
    status row so that the rest read as a row of its own, and 'github' with a zero-width space read as 'github'."""
    servers = {"x\n  github · ● connected": _server("a"), "github\u200b": _server("b"), "a\u202eb": _server("c")}
    merged = _merge(user={"mcpServers": {**servers, "café ok": _server("ok")}})
    assert list(merged.mcp_servers) == ["café ok"]
    assert merged.warnings == (
        "skipped MCP server 'x\\n  github · ● connected' in /user.json: its name holds \\n, which would show it as "
        "another name or split its line; rename it in mcpServers",
        "skipped MCP server 'github\\u200b' in /user.json: its name holds \\u200b, which would show it as another "
        "name or split its line; rename it in mcpServers",
        "skipped MCP server 'a\\u202eb' in /user.json: its name holds \\u202e, which would show it as another name or "
        "split its line; rename it in mcpServers",
    )


def test_an_invalid_higher_server_leaves_the_lower_definition() -> None:
    merged = _merge(user={"mcpServers": {"s": _server("u")}}, workspace={"mcpServers": {"s": {"args": []}}})
    assert merged.mcp_servers["s"].config.command == "u"


def test_warnings_never_echo_values() -> None:
    merged = _merge(
        user={"mcpServers": {"s": _server("x", headers={"Authorization": "Bearer literal-secret"}, timeout="soon")}}
    )
    assert merged.mcp_servers == {}
    assert merged.warnings
    assert not any("literal-secret" in w for w in merged.warnings)


def test_unknown_keys_are_warned_about_not_fatal() -> None:
    merged = _merge(user={"uiTypo": 1, "mcp": {"allowd": ["a"]}, "mcpServers": {"s": _server("s", extra=1)}})
    assert "s" in merged.mcp_servers
    assert sorted(w.split("'")[1] for w in merged.warnings if w.startswith("unknown setting")) == [
        "mcp.allowd",
        "uiTypo",
    ]


def test_server_approval_hash_is_taken_before_expansion() -> None:
    entry = {"command": "x", "env": {"T": "${TOKEN}"}}
    a = merge_settings([ScopeLayer("workspace", P, {"mcpServers": {"s": entry}})], {"TOKEN": "one"})
    b = merge_settings([ScopeLayer("workspace", P, {"mcpServers": {"s": entry}})], {"TOKEN": "two"})
    assert a.mcp_servers["s"].config.env == {"T": "one"}
    assert b.mcp_servers["s"].config.env == {"T": "two"}
    assert a.mcp_servers["s"].config.approval_hash == b.mcp_servers["s"].config.approval_hash


# --------------------------------------------------------------------------- trust (pure)


@pytest.mark.parametrize(
    ("root", "listed", "trusted"),
    [
        ("/w/repo", ["/w/repo"], True),
        ("/w/repo/sub", ["/w"], True),
        ("/w/repo", ["/w/repo/sub"], False),
        ("/w/repo2", ["/w/repo"], False),
        ("/w/repo", [], False),
    ],
)
def test_a_folder_is_trusted_if_it_or_a_parent_is_listed(root: str, listed: list[str], trusted: bool) -> None:
    assert is_folder_trusted(Path(root), parse_trusted_folders(listed)) is trusted


@pytest.mark.parametrize("data", [{"a": 1}, ["/a", 3], "x"])
def test_a_trusted_folders_file_must_be_a_list_of_paths(data: Any) -> None:
    with pytest.raises(ValueError, match="list of folder paths"):
        parse_trusted_folders(data)


# --------------------------------------------------------------------------- real files


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


def test_load_reads_every_scope_from_the_paths_the_env_names(layout: Layout) -> None:
    p = layout.paths
    write_json(p.system_defaults, {"ui": {"theme": "defaults", "hideBanner": True}})
    write_json(p.user, {"ui": {"theme": "user"}, "mcpServers": {"u": _server("u")}})
    write_json(p.workspace, {"mcpServers": {"w": _server("w")}})
    write_json(p.system, {"general": {"debugMode": True}, "mcpServers": {"s": _server("s")}})
    settings = load_settings(layout.env, layout.root)
    assert settings.root == layout.root
    assert settings.errors == {}
    assert settings.merged.get("ui.theme") == "user"
    assert settings.merged.get("ui.hideBanner") is True
    assert settings.merged.get("general.debugMode") is True
    assert {n: e.path for n, e in settings.merged.mcp_servers.items()} == {"u": p.user, "w": p.workspace, "s": p.system}
    assert str(p.user).startswith(layout.env["MCPVISOR_HOME"])


def test_missing_files_are_empty_scopes(layout: Layout) -> None:
    settings = layout.settings()
    assert settings.errors == {}
    assert settings.merged.mcp_servers == {}
    assert settings.warnings == ()


def test_a_settings_file_that_is_not_an_object_is_a_clear_error(layout: Layout) -> None:
    write_json(layout.paths.workspace, ["not", "an", "object"])
    write_json(layout.paths.user, {"mcpServers": {"u": _server("u")}})
    settings = layout.settings()
    assert str(layout.paths.workspace) in str(settings.errors["workspace"])
    assert "expected a JSON object" in settings.errors["workspace"].message
    assert list(settings.merged.mcp_servers) == ["u"]


def test_reload_keeps_the_previous_state_on_a_parse_error(layout: Layout) -> None:
    write_json(layout.paths.user, {"mcpServers": {"a": _server("a")}})
    settings = layout.settings()
    layout.paths.user.write_text('{"mcpServers": {"a": ')
    result = settings.reload_scope("user")
    assert result.error is not None
    assert result.error.path == layout.paths.user
    assert result.changed == ()
    assert settings.errors["user"] == result.error
    assert list(settings.merged.mcp_servers) == ["a"]
    write_json(layout.paths.user, {"mcpServers": {"a": _server("a", args=["1"])}})
    result = settings.reload_scope("user")
    assert (result.changed, result.error) == (("mcpServers.a.args",), None)
    assert "user" not in settings.errors
    assert settings.merged.mcp_servers["a"].config.args == ("1",)


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({"command": "x", "args": "not a list"}, "servers.p.args: expected a list"),
        ({"command": "x", "url": "http://h/sse", "timeout": "soon"}, "servers.p.timeout: expected a whole number"),
        ({"args": ["only args"]}, "servers.p: no transport"),
        ("a string", "servers.p: expected an object"),
    ],
)
def test_an_invalid_project_entry_keeps_its_last_good_entry_and_other_changes_apply(
    layout: Layout, bad: Any, problem: str
) -> None:
    write_json(layout.paths.project, {"servers": {"p": _server("p"), "q": _server("q")}})
    settings = layout.settings()
    write_json(layout.paths.project, {"servers": {"p": bad, "q": _server("q2"), "r": _server("r")}})
    result = settings.reload_scope("project")
    assert result.changed == ("servers.q.command", "servers.r.command")
    assert settings.project.servers["p"].config.command == "p"
    assert sorted(settings.project.servers) == ["p", "q", "r"]
    [notice] = result.kept
    assert notice.startswith(f"invalid entry in {layout.paths.project} ({problem}")
    assert notice in settings.warnings
    # Fixed: the notice goes, the new entry applies.
    write_json(layout.paths.project, {"servers": {"p": _server("p3"), "q": _server("q2"), "r": _server("r")}})
    result = settings.reload_scope("project")
    assert (result.changed, result.kept) == (("servers.p.command",), ())
    assert not any("invalid entry" in w for w in settings.warnings)


def test_a_running_entry_saved_with_its_command_misspelt_says_which_field_was_meant(layout: Layout) -> None:
    """Before: "(mcpServers.a: no transport: set 'command' …)" of an entry whose command was written 'comand'."""
    write_json(layout.paths.user, {"mcpServers": {"a": _server("a")}})
    settings = layout.settings()
    write_json(layout.paths.user, {"mcpServers": {"a": {"comand": "a"}}})
    [notice] = settings.reload_scope("user").kept
    assert notice.startswith(f"invalid entry in {layout.paths.user} (mcpServers.a: no transport: ")
    assert "(its field 'comand'; did you mean 'command'?)) — the last good configuration" in notice


def test_a_project_file_whose_servers_key_is_misspelt_keeps_its_last_good_servers_under_the_key_it_used(
    layout: Layout,
) -> None:
    write_json(layout.paths.project, {"servers": {"p": _server("p")}})
    settings = layout.settings()
    write_json(layout.paths.project, {"Servers": {"p": _server("p2")}, "inputs": []})
    [notice] = settings.reload_scope("project").kept
    assert notice.startswith(f"kept the last good servers of {layout.paths.project} ('p') until 'Servers' there")
    assert settings.project.servers["p"].config.command == "p"
    # VS Code's 'servers' and Claude Code's 'mcpServers' are both servers keys of the file: a move is applied.
    write_json(layout.paths.project, {"mcpServers": {"q": _server("q")}})
    assert settings.reload_scope("project").kept == ()
    assert list(settings.project.servers) == ["q"]


def test_removing_the_mcp_servers_of_a_file_that_also_has_language_servers_stops_them(layout: Layout) -> None:
    """Before, 'lspServers' read as a misspelling of 'mcpServers': the last MCP servers of the file were kept
    "until 'lspServers' there is renamed 'mcpServers'"."""
    lsp = {"python": {"command": "pylsp", "extensionToLanguage": {".py": "python"}}}
    write_json(layout.paths.user, {"mcpServers": {"a": _server("a")}, "lspServers": lsp})
    settings = layout.settings()
    write_json(layout.paths.user, {"lspServers": lsp})
    assert settings.reload_scope("user").kept == ()
    assert list(settings.merged.mcp_servers) == []
    assert not any("mcpServers" in w for w in settings.warnings)


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"command": "x", "workingDirectory": 5}, "workingDirectory: expected a string"),
        ({"command": "x", "cwd": 5}, "cwd: expected a string"),
        ({"command": "x", "excludeTools": "t"}, "excludeTools: expected a list"),
        ({"command": "x", "exclude_tools": "t"}, "exclude_tools: expected a list"),
        ({"command": "x", "discoveryTimeout": "soon"}, "discoveryTimeout: expected a whole number"),
        ({"type": "http", "url": 5}, "url: expected a string"),
        ({"httpUrl": 5}, "httpUrl: expected a string"),
    ],
)
def test_an_invalid_field_is_named_as_the_file_wrote_it(layout: Layout, entry: dict[str, Any], said: str) -> None:
    """Before: "cwd: expected a string" of a field written 'workingDirectory', and "exclude_tools: ..." of one
    written 'excludeTools': names the file does not hold."""
    write_json(layout.paths.user, {"mcpServers": {"a": entry}})
    settings = layout.settings()
    [warning] = [w for w in settings.warnings if "skipped MCP server 'a'" in w]
    assert warning == f"skipped MCP server 'a' in {layout.paths.user}: {said}; fix mcpServers.a"


def test_an_entry_invalid_from_the_start_is_skipped_with_a_warning(layout: Layout) -> None:
    write_json(layout.paths.user, {"mcpServers": {"a": {"command": "x", "args": "y"}, "b": _server("b")}})
    settings = layout.settings()
    assert list(settings.merged.mcp_servers) == ["b"]
    assert any("skipped MCP server 'a'" in w and "args: expected a list" in w for w in settings.warnings)
    # Nothing was ever good for 'a': a reload still skips it.
    write_json(layout.paths.user, {"mcpServers": {"a": {"command": "x", "args": "z"}, "b": _server("b")}})
    assert settings.reload_scope("user").kept == ()
    assert list(settings.merged.mcp_servers) == ["b"]


def test_a_deleted_settings_file_is_an_empty_scope(layout: Layout) -> None:
    write_json(layout.paths.user, {"ui": {"theme": "x"}})
    settings = layout.settings()
    layout.paths.user.unlink()
    assert settings.reload_scope("user").changed == ("ui.theme",)


def test_the_project_file_is_loaded_and_diffed_as_its_own_scope(layout: Layout) -> None:
    write_json(layout.paths.project, {"mcpServers": {"p": _server("p")}})
    settings = layout.settings()
    assert settings.project.servers["p"].config.scope == "project"
    write_json(layout.paths.project, {"mcpServers": {"p": _server("p2")}})
    assert settings.reload_scope("project").changed == ("mcpServers.p.command",)
    assert settings.project.servers["p"].config.command == "p2"


def test_folder_trust_disabled_trusts_every_folder(layout: Layout) -> None:
    write_json(layout.paths.workspace, {"mcpServers": {"w": _server("w")}})
    settings = layout.settings()
    assert (settings.folder_trust_enabled, settings.trusted) == (False, True)
    assert "w" in settings.merged.mcp_servers


def test_an_untrusted_folder_drops_the_workspace_layer_and_reports_it(layout: Layout) -> None:
    write_json(layout.paths.user, {"security": {"folderTrust": {"enabled": True}}, "mcpServers": {"u": _server("u")}})
    write_json(layout.paths.workspace, {"mcpServers": {"w": _server("w")}, "mcp": {"allowed": ["w"]}})
    write_json(layout.paths.project, {"mcpServers": {"p": _server("p")}})
    settings = layout.settings()
    assert (settings.folder_trust_enabled, settings.trusted) == (True, False)
    assert list(settings.merged.mcp_servers) == ["u"]
    assert settings.merged.allowed_lists == []
    assert dict(settings.project.servers) == {}
    assert not settings.is_active("workspace")
    assert settings.reload_scope("workspace").changed == ()


def test_a_listed_parent_folder_makes_the_workspace_trusted(layout: Layout) -> None:
    write_json(layout.paths.system, {"security": {"folderTrust": {"enabled": True}}})
    write_json(layout.paths.trusted_folders, [str(layout.root.parent)])
    write_json(layout.paths.workspace, {"mcpServers": {"w": _server("w")}})
    settings = layout.settings()
    assert (settings.folder_trust_enabled, settings.trusted) == (True, True)
    assert "w" in settings.merged.mcp_servers


def test_a_repository_cannot_turn_folder_trust_on_or_off(layout: Layout) -> None:
    write_json(layout.paths.user, {"security": {"folderTrust": {"enabled": True}}})
    write_json(layout.paths.workspace, {"security": {"folderTrust": {"enabled": False}}})
    settings = layout.settings()
    assert (settings.folder_trust_enabled, settings.trusted) == (True, False)


def test_an_unreadable_trusted_folders_file_fails_closed(layout: Layout) -> None:
    write_json(layout.paths.user, {"security": {"folderTrust": {"enabled": True}}})
    layout.paths.trusted_folders.write_text("{oops")
    settings = layout.settings()
    assert settings.trusted is False
    assert any("trusted folders" in w for w in settings.warnings)


def test_a_broken_user_settings_file_at_load_fails_closed_for_trust(layout: Layout) -> None:
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text('{"security": {"folderTrust": {"enabled": true}')
    write_json(layout.paths.workspace, {"mcpServers": {"w": _server("w")}})
    settings = layout.settings()
    assert "user" in settings.errors
    assert settings.trusted is False
    assert settings.merged.mcp_servers == {}
    assert any("folder trust" in w for w in settings.warnings)


def test_a_workspace_at_the_home_folder_is_not_read_twice(tmp_path: Path) -> None:
    home = (tmp_path / "home").resolve()
    env = {"HOME": str(home)}
    write_json(home / ".mcpvisor" / "settings.json", {"mcpServers": {"u": _server("u")}})
    settings = load_settings(env, home)
    assert not settings.is_active("workspace")
    assert settings.merged.mcp_servers["u"].scope == "user"


def test_replace_scope_data_returns_the_changed_paths_and_updates_the_merge(layout: Layout) -> None:
    settings = layout.settings()
    generation = settings.generation("user")
    assert settings.replace_scope_data("user", {"mcp": {"excluded": ["x"]}}) == ("mcp.excluded",)
    assert settings.merged.excluded == ("x",)
    assert settings.generation("user") == generation + 1
    assert settings.replace_scope_data("user", {"mcp": {"excluded": ["x"]}}) == ()
    assert settings.generation("user") == generation + 1


def test_unknown_fields_in_a_server_entry_are_warned_about_with_a_suggestion() -> None:
    from mcpvisor.host.settings.servers import build_server_entries

    entries, warnings, _ = build_server_entries(
        {"x": {"command": "echo", "arg": ["x"]}, "y": {"command": "a", "disabled": True}, "z": {"command": "b"}},
        path=Path("/s.json"),
        scope="user",
        stamp=None,
        env={},
    )
    assert set(entries) == {"x", "y", "z"}
    assert warnings == [
        "unknown field 'arg' in MCP server 'x' (/s.json) is ignored; did you mean 'args'?",
        "unknown field 'disabled' in MCP server 'y' (/s.json) is ignored; "
        "to turn a server off, list its name in mcp.excluded",
    ]


def test_unknown_fields_of_an_oauth_block_are_warned_about_with_a_suggestion() -> None:
    """A misspelt ``oauth`` field (``clientID``) was ignored without a word: the sign-in then registered a client of
    its own, as if none had been given."""
    from mcpvisor.host.settings.servers import build_server_entries

    oauth = {"clientID": "c", "scopes": "a", "authorizationUrl": "https://a.example/authorize", "enabled": True}
    entries, warnings, _ = build_server_entries(
        {"r": {"type": "http", "url": "https://r.example/mcp", "oauth": oauth}},
        path=Path("/s.json"),
        scope="user",
        stamp=None,
        env={},
    )
    assert set(entries) == {"r"}
    assert warnings == [
        "unknown field 'authorizationUrl' in the oauth block of MCP server 'r' (/s.json) is ignored",
        "unknown field 'clientID' in the oauth block of MCP server 'r' (/s.json) is ignored; did you mean 'clientId'?",
        "unknown field 'enabled' in the oauth block of MCP server 'r' (/s.json) is ignored",
    ]


def test_a_language_servers_misspelled_fields_and_seconds_like_timeouts_are_warned_about() -> None:
    from mcpvisor.host.settings.lsp_servers import build_lsp_entries

    py = {".py": "python"}
    entries, warnings, _ = build_lsp_entries(
        {
            "typo": {"comand": "pylsp", "extensionToLanguage": py},  # its command is missing: said why
            "quick": {"command": "pylsp", "extensionToLanguage": py, "startupTimeout": 30, "extensionToLanguag": 1},
        },
        path=Path("/s.json"),
        source="user",
        env={},
    )
    assert set(entries) == {"quick"}
    assert warnings == [
        "skipped language server 'typo' in /s.json: command: required for a stdio language server (its field "
        "'comand'; did you mean 'command'?); fix lspServers.typo",
        "unknown field 'extensionToLanguag' in language server 'quick' (/s.json) is ignored; did you mean "
        "'extensionToLanguage'?",
        "'startupTimeout' of language server 'quick' (/s.json) is in milliseconds: 30 means 0.03 s; for 30 s "
        "write 30000",
    ]


def test_a_timeout_that_looks_like_seconds_is_warned_about() -> None:
    from mcpvisor.host.settings.servers import build_server_entries

    entries, warnings, _ = build_server_entries(
        {"fast": {"command": "a", "timeout": 15}, "slow": {"command": "b", "timeout": 15000}},
        path=Path("/s.json"),
        scope="user",
        stamp=None,
        env={},
    )
    assert entries["fast"].config.timeout == 15  # kept as written: it is a warning, not a fix
    assert warnings == [
        "'timeout' of MCP server 'fast' (/s.json) is in milliseconds: 15 means 0.015 s; for 15 s write 15000"
    ]


@pytest.mark.parametrize("key", ["lspServers", "lsp", "mcp", "$schema"])
def test_a_key_settings_files_know_is_never_taken_for_a_misspelt_mcp_servers(key: str) -> None:
    from mcpvisor.host.settings.servers import keep_last_good_entries, misspelt_servers_key

    previous = {"mcpServers": {"a": {"command": "a"}}}
    data = {key: {"l": {"command": "pylsp", "extensionToLanguage": {".py": "python"}}}}
    kept, notices = keep_last_good_entries(data, previous, path=Path("settings.json"), env={}, settings_file=True)
    assert not misspelt_servers_key(key)
    assert (kept, notices) == (data, {})


@pytest.mark.parametrize("key", ["mcpservers", "mcp_servers", "MCPServers", "mcpServer"])
def test_a_misspelt_mcp_servers_key_keeps_the_servers_before_it(key: str) -> None:
    from mcpvisor.host.settings.servers import keep_last_good_entries

    previous = {"mcpServers": {"a": {"command": "a"}}}
    kept, notices = keep_last_good_entries(
        {key: {"b": {"command": "b"}}}, previous, path=Path("settings.json"), env={}, settings_file=True
    )
    assert kept["mcpServers"] == previous["mcpServers"]
    [notice] = notices.values()
    assert f"until {key!r} there is renamed 'mcpServers'" in notice
