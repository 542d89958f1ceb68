"""Gating lists and the reload gate's equality helpers (SPEC §8, §11 "Trust" and "Pure helpers")."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mcpvisor.core.gating import McpGating, NameList, excluded_by, not_allowed_by
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.gating import (
    mcp_gating_equal,
    mcp_servers_equal,
    recompute_mcp_gating,
    resolve_allowed,
    resolve_excluded,
)

NAMES = ("a", "b", "c", "d")


@pytest.mark.parametrize(
    ("user", "workspace", "said"),
    [
        (["web"], ["api"], None),
        (["db"], [], "in mcp.excluded of /u; remove it there"),
        (["db"], ["db"], "in mcp.excluded of /u, /w; remove it there"),
        (["d*"], [], "matched by 'd*' in mcp.excluded of /u; remove that pattern there"),
        (
            ["db"],
            ["d*"],
            "matched by 'db' in mcp.excluded of /u and 'd*' in mcp.excluded of /w; remove those patterns there",
        ),
    ],
)
def test_an_exclude_list_says_which_file_and_pattern_leave_a_server_out(
    user: list[str], workspace: list[str], said: str | None
) -> None:
    lists = [NameList("mcp.excluded", tuple(user), "/u"), NameList("mcp.excluded", tuple(workspace), "/w")]
    assert excluded_by("db", lists) == said
    assert McpGating(excluded=(*user, *workspace), excluded_by=tuple(lists)).why_excluded("db") == said


HOST_EXCLUDED = NameList("set_excluded_mcp_servers", ("db",), call=True)
HOST_ALLOWED = NameList("set_allowed_mcp_servers", ("web",), call=True)
HOST_SET = "the list the host set with set_{}_mcp_servers()"


@pytest.mark.parametrize(
    ("lists", "said"),
    [
        ([HOST_EXCLUDED], f"in {HOST_SET.format('excluded')}"),
        (
            [NameList("mcp.excluded", ("db",), "/u"), HOST_EXCLUDED],
            f"in mcp.excluded of /u and in {HOST_SET.format('excluded')}; remove it from mcp.excluded there",
        ),
        (
            [NameList("mcp.excluded", ("d*",), "/u"), HOST_EXCLUDED],
            f"matched by 'd*' in mcp.excluded of /u and 'db' in {HOST_SET.format('excluded')}; "
            "remove that pattern from mcp.excluded there",
        ),
        ([HOST_ALLOWED], f"not in {HOST_SET.format('allowed')}"),
        (
            [NameList("mcp.allowed", ("web",), "/w"), HOST_ALLOWED],
            f"not in mcp.allowed of /w nor in {HOST_SET.format('allowed')}; add it to mcp.allowed there",
        ),
        (
            [NameList("mcp.allowed", ("web",), "/w"), NameList("--allowed", ("web",)), HOST_ALLOWED],
            f"not in --allowed given at start-up nor in mcp.allowed of /w nor in {HOST_SET.format('allowed')}; "
            "relaunch with 'db' added to that flag and add it to mcp.allowed there",
        ),
    ],
)
def test_a_fix_names_the_list_it_is_for_when_the_hosts_own_list_leaves_the_server_out_too(
    lists: list[NameList], said: str
) -> None:
    # "…nor in the list the host set with set_allowed_mcp_servers(); add it there" read as if "there" were the
    # host's list, which no settings file holds.
    assert (excluded_by if lists[-1].key.startswith("set_excluded") else not_allowed_by)("db", lists) == said


def test_an_exclude_list_moved_to_another_file_is_a_change() -> None:
    user = McpGating(excluded=("b",), excluded_by=(NameList("mcp.excluded", ("b",), "/u"),))
    workspace = McpGating(excluded=("b",), excluded_by=(NameList("mcp.excluded", ("b",), "/w"),))
    assert mcp_gating_equal(user, user)
    assert not mcp_gating_equal(user, workspace)


def test_a_list_reordered_or_with_a_pattern_repeated_in_the_same_file_is_no_change() -> None:
    def gating(patterns: tuple[str, ...]) -> McpGating:
        lists = (NameList("mcp.excluded", patterns, "/u"),)
        return McpGating(excluded=patterns, allowed=patterns, excluded_by=lists, allowed_by=lists)

    assert mcp_gating_equal(gating(("b", "c")), gating(("c", "b", "c")))
    assert not mcp_gating_equal(gating(("b", "c")), gating(("b",)))


# --- allow-lists (SPEC §11 "Trust") -------------------------------------------------------------


@pytest.mark.parametrize(
    ("allowed_lists", "cli_allowed", "expected"),
    [
        pytest.param([], None, None, id="no lists and no flag admit all"),
        pytest.param([["a", "b", "c"]], ["a", "b"], ("a", "b"), id="the flag is a ceiling over settings"),
        pytest.param([["a"]], ["a", "b"], ("a",), id="settings narrow the flag"),
        pytest.param([["a", "b", "c"]], None, ("a", "b", "c"), id="without the flag settings rule"),
        pytest.param([[]], None, (), id="an empty settings list denies all"),
        pytest.param([[]], ["a", "b"], (), id="an empty settings list denies all under the flag"),
        pytest.param([], ["a", "b"], ("a", "b"), id="absent settings leave the flag"),
        pytest.param([], [], (), id="an empty flag denies all"),
        pytest.param([["a", "b"], ["b", "c"]], None, ("b",), id="scopes narrow each other"),
        pytest.param([["a", "b", "c"], ["a", "c"]], ["c", "d"], ("c",), id="a name must match every list"),
        pytest.param([["z"]], ["a"], (), id="disjoint lists deny all"),
        pytest.param([["a*", "b"]], None, ("a*", "b"), id="a single list keeps its globs"),
        pytest.param([], ["?"], ("?",), id="the flag alone keeps its globs"),
    ],
)
def test_allow_lists_combine_by_narrowing(
    allowed_lists: list[list[str]], cli_allowed: list[str] | None, expected: tuple[str, ...] | None
) -> None:
    assert resolve_allowed(allowed_lists, cli_allowed, NAMES) == expected


def test_several_lists_with_globs_resolve_to_concrete_names() -> None:
    names = ["gh-issues", "gh-prs", "search", "gh-admin"]
    assert resolve_allowed([["gh-*", "search"]], ["gh-i*", "gh-p*", "search"], names) == (
        "gh-issues",
        "gh-prs",
        "search",
    )


def test_excluded_drops_duplicates_and_empty_means_none() -> None:
    assert resolve_excluded(None) is None
    assert resolve_excluded([]) is None
    assert resolve_excluded(["b", "a", "b"]) == ("b", "a")


# --- recompute_mcp_gating --------------------------------------------------------------------


def project(command: str, *args: str) -> McpServerConfig:
    return McpServerConfig.from_entry({"command": command, "args": list(args)}, scope="project")


def user(command: str) -> McpServerConfig:
    return McpServerConfig.from_entry({"command": command})


@pytest.fixture
def store(tmp_path: Path) -> ApprovalStore:
    return ApprovalStore(tmp_path / "home" / "mcp-approvals.json")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    return path


def test_recompute_builds_all_three_lists(store: ApprovalStore, root: Path) -> None:
    servers = {"a": user("a"), "b": project("b"), "c": project("c"), "d": user("d")}
    store.approve(root, "c", servers["c"])
    gating = recompute_mcp_gating(
        allowed_lists={"/s.json": ["a", "b", "c"]},
        excluded={"/s.json": ["d"]},
        cli_allowed=["a", "b"],
        servers=servers,
        approvals=store,
        root=root,
    )
    assert gating == McpGating(excluded=("d",), allowed=("a", "b"), pending=("b",))


def test_recompute_with_nothing_set_admits_all_and_pends_nothing(store: ApprovalStore, root: Path) -> None:
    gating = recompute_mcp_gating(
        allowed_lists={}, excluded={}, cli_allowed=None, servers={"a": user("a")}, approvals=store, root=root
    )
    assert gating == McpGating(excluded=None, allowed=None, pending=None)


def test_recompute_keeps_rejected_servers_pending(store: ApprovalStore, root: Path) -> None:
    servers = {"b": project("b")}
    store.reject(root, "b", servers["b"])
    gating = recompute_mcp_gating(
        allowed_lists={}, excluded={}, cli_allowed=None, servers=servers, approvals=store, root=root
    )
    assert gating.pending == ("b",)


def test_recompute_resolves_several_lists_against_extra_names_too(store: ApprovalStore, root: Path) -> None:
    gating = recompute_mcp_gating(
        allowed_lists={"/s.json": ["a", "ext-*"]},
        excluded={},
        cli_allowed=["a", "ext-tools", "b"],
        servers={"a": user("a"), "b": user("b")},
        approvals=store,
        root=root,
        extra_names=["ext-tools", "ext-other"],
    )
    assert gating.allowed == ("a", "ext-tools")


def test_an_edit_of_an_approved_server_shows_up_as_pending(store: ApprovalStore, root: Path) -> None:
    before = {"b": project("b", "--old")}
    store.approve(root, "b", before["b"])
    after = {"b": project("b", "--new")}
    common: dict[str, Any] = {"allowed_lists": {}, "excluded": {}, "cli_allowed": None, "approvals": store}
    first = recompute_mcp_gating(servers=before, root=root, **common)
    second = recompute_mcp_gating(servers=after, root=root, **common)
    assert first.pending is None
    assert second.pending == ("b",)
    assert not mcp_gating_equal(first, second)


# --- mcp_servers_equal ------------------------------------------------------------------------


def test_server_maps_none_equals_empty() -> None:
    assert mcp_servers_equal(None, None)
    assert mcp_servers_equal(None, {})
    assert mcp_servers_equal({}, None)
    assert not mcp_servers_equal(None, {"a": user("a")})


def test_server_maps_compare_by_content_not_identity() -> None:
    assert mcp_servers_equal({"a": user("a"), "b": project("b", "x")}, {"b": project("b", "x"), "a": user("a")})


@pytest.mark.parametrize(
    "change",
    [
        {"args": ["2", "1"]},
        {"args": ["1"]},
        {"env": {"K": "v2"}},
        {"env": {"K": "v", "L": "w"}},
        {"trust": True},
        {"trust": None},
        {"includeTools": ["t"]},
        {"excludeTools": ["t"]},
        {"description": "now described"},
        {"timeout": 10},
        {"discoveryTimeoutMs": 10},
        {"cwd": "/elsewhere"},
        {"shared": False},
        {"unknownKey": 1},
    ],
)
def test_a_change_of_any_field_makes_server_maps_differ(change: dict[str, Any]) -> None:
    base: dict[str, Any] = {"command": "srv", "args": ["1", "2"], "env": {"K": "v"}}
    before = {"s": McpServerConfig.from_entry(base)}
    after = {"s": McpServerConfig.from_entry({**base, **change})}
    assert not mcp_servers_equal(before, after)


def test_a_scope_change_makes_server_maps_differ() -> None:
    entry = {"command": "srv"}
    assert not mcp_servers_equal(
        {"s": McpServerConfig.from_entry(entry)}, {"s": McpServerConfig.from_entry(entry, scope="project")}
    )


def test_a_literal_change_with_the_same_expansion_makes_server_maps_differ() -> None:
    # The approval hash is taken before ${VAR} expansion: the new literal needs its own approval.
    def expand(entry: Any) -> Any:
        return {**entry, "env": {"TOKEN": "secret"}}

    literal = McpServerConfig.from_entry({"command": "s", "env": {"TOKEN": "${TOKEN}"}}, expand=expand)
    inline = McpServerConfig.from_entry({"command": "s", "env": {"TOKEN": "secret"}})
    assert literal.entry() == inline.entry()
    assert not mcp_servers_equal({"s": literal}, {"s": inline})


_word = st.text(alphabet="abcdefgh-_", min_size=1, max_size=6)
_entry = st.fixed_dictionaries(
    {"command": _word},
    optional={
        "args": st.lists(_word, max_size=4),
        "env": st.dictionaries(_word, _word, max_size=3),
        "trust": st.none() | st.booleans(),
        "includeTools": st.lists(_word, max_size=3),
        "timeout": st.integers(min_value=1, max_value=10_000),
    },
)
_server_maps = st.dictionaries(_word, _entry, max_size=5)


def _build(entries: dict[str, dict[str, Any]], order: Sequence[str]) -> dict[str, McpServerConfig]:
    return {name: McpServerConfig.from_entry(entries[name]) for name in order}


@given(entries=_server_maps, data=st.data())
def test_key_order_never_matters_for_server_maps(entries: dict[str, dict[str, Any]], data: st.DataObject) -> None:
    order = data.draw(st.permutations(list(entries)))
    shuffled_entries = {name: dict(data.draw(st.permutations(list(entry.items())))) for name, entry in entries.items()}
    assert mcp_servers_equal(_build(entries, list(entries)), _build(shuffled_entries, order))


@given(entries=_server_maps.filter(bool), data=st.data())
def test_array_order_matters_for_server_maps(entries: dict[str, dict[str, Any]], data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(entries)))
    args = data.draw(st.lists(_word, min_size=2, max_size=4))
    reordered = data.draw(st.permutations(args))
    assume(list(reordered) != args)
    left = {**entries, name: {**entries[name], "args": args}}
    right = {**entries, name: {**entries[name], "args": list(reordered)}}
    assert not mcp_servers_equal(_build(left, list(left)), _build(right, list(right)))


@given(entries=_server_maps.filter(bool), data=st.data())
def test_a_changed_element_always_makes_server_maps_differ(
    entries: dict[str, dict[str, Any]], data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(entries)))
    entry = entries[name]
    kind = data.draw(st.sampled_from(["command", "arg", "drop", "add"]))
    if kind == "command":
        changed = {**entry, "command": entry["command"] + "x"}
        right = {**entries, name: changed}
    elif kind == "arg":
        changed = {**entry, "args": [*entry.get("args", []), "extra"]}
        right = {**entries, name: changed}
    elif kind == "drop":
        right = {k: v for k, v in entries.items() if k != name}
    else:
        right = {**entries, name + "-new": entry}
    assert not mcp_servers_equal(_build(entries, list(entries)), _build(right, list(right)))


# --- mcp_gating_equal ------------------------------------------------------------------------


def test_gating_none_and_empty_are_equal_for_excluded_and_pending() -> None:
    assert mcp_gating_equal(McpGating(excluded=None, pending=None), McpGating(excluded=(), pending=()))
    assert mcp_gating_equal(McpGating(excluded=(), pending=None), McpGating(excluded=None, pending=()))


def test_gating_allow_all_differs_from_deny_all() -> None:
    assert not mcp_gating_equal(McpGating(allowed=None), McpGating(allowed=()))
    assert not mcp_gating_equal(McpGating(allowed=()), McpGating(allowed=None))
    assert mcp_gating_equal(McpGating(allowed=None), McpGating(allowed=None))
    assert mcp_gating_equal(McpGating(allowed=()), McpGating(allowed=()))
    assert not mcp_gating_equal(McpGating(allowed=None), McpGating(allowed=("a",)))


_names = st.lists(_word, max_size=5)
_optional_names = st.none() | _names.map(tuple)
_gatings = st.builds(McpGating, excluded=_optional_names, allowed=_optional_names, pending=_optional_names)


def _permuted(data: st.DataObject, items: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if items is None:
        return None
    doubled = [*items, *data.draw(st.lists(st.sampled_from(items), max_size=2))] if items else []
    return tuple(data.draw(st.permutations(doubled)))


@given(gating=_gatings, data=st.data())
def test_list_order_and_repeats_never_change_the_gating_verdict(gating: McpGating, data: st.DataObject) -> None:
    shuffled = McpGating(
        excluded=_permuted(data, gating.excluded),
        allowed=_permuted(data, gating.allowed),
        pending=_permuted(data, gating.pending),
    )
    assert mcp_gating_equal(gating, shuffled)
    assert mcp_gating_equal(shuffled, gating)


@given(gating=_gatings, field=st.sampled_from(["excluded", "allowed", "pending"]), extra=_word)
def test_a_new_element_always_changes_the_gating_verdict(gating: McpGating, field: str, extra: str) -> None:
    current: tuple[str, ...] | None = getattr(gating, field)
    assume(extra not in (current or ()))
    changed = McpGating(**{**_fields(gating), field: (*(current or ()), extra)})
    assert not mcp_gating_equal(gating, changed)
    assert not mcp_gating_equal(changed, gating)


@given(gating=_gatings, field=st.sampled_from(["excluded", "allowed", "pending"]))
def test_a_removed_element_always_changes_the_gating_verdict(gating: McpGating, field: str) -> None:
    current: tuple[str, ...] | None = getattr(gating, field)
    assume(bool(current))
    assert current is not None
    dropped = current[0]
    changed = McpGating(**{**_fields(gating), field: tuple(x for x in current if x != dropped)})
    assert not mcp_gating_equal(gating, changed)


@given(gating=_gatings, field=st.sampled_from(["excluded", "pending"]))
def test_none_and_empty_are_interchangeable_for_excluded_and_pending(gating: McpGating, field: str) -> None:
    assume(not getattr(gating, field))
    for replacement in (None, ()):
        assert mcp_gating_equal(gating, McpGating(**{**_fields(gating), field: replacement}))


@given(gating=_gatings)
def test_allow_all_and_deny_all_are_never_interchangeable(gating: McpGating) -> None:
    fields = _fields(gating)
    assert not mcp_gating_equal(McpGating(**{**fields, "allowed": None}), McpGating(**{**fields, "allowed": ()}))


def _fields(gating: McpGating) -> dict[str, Any]:
    return {"excluded": gating.excluded, "allowed": gating.allowed, "pending": gating.pending}


def test_only_mcp_paths_project_and_approvals_events_reach_the_full_gate() -> None:
    from mcpvisor.host.hot_reload import touches_mcp
    from mcpvisor.host.watcher import SettingsChanged

    assert not touches_mcp(SettingsChanged("user", ("ui.theme",)))
    assert not touches_mcp(SettingsChanged("workspace", ("general.debugMode", "ui.theme")))
    assert touches_mcp(SettingsChanged("user", ("ui.theme", "mcpServers.a.args")))
    assert touches_mcp(SettingsChanged("workspace", ("mcp.excluded",)))
    assert touches_mcp(SettingsChanged("user", ("mcp.allowed",)))
    assert touches_mcp(SettingsChanged("project", ()))
    assert touches_mcp(SettingsChanged("approvals", ()))


def test_a_server_named_like_a_glob_never_widens_a_narrowed_allow_list() -> None:
    from mcpvisor.core.gating import McpGating
    from mcpvisor.host.gating import resolve_allowed

    allowed = resolve_allowed([("db?",), ("*",)], None, ["db*", "db1", "dbprod"])
    gating = McpGating(allowed=allowed)
    assert gating.is_allowed("db*")
    assert gating.is_allowed("db1")
    assert not gating.is_allowed("dbprod")
    ceiling = McpGating(allowed=resolve_allowed([("*",)], ["db?"], ["db*", "dbprod"]))
    assert not ceiling.is_allowed("dbprod")
