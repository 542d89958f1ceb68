"""A key given twice in one object of a settings file: the parser keeps the later one, and a warning says so, naming
the file, the key and both lines (a server pasted twice under one name would otherwise vanish without a word)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mcpvisor.host.host import Host, HostEvent, HostOptions, SettingsWarning
from mcpvisor.host.settings.files import JSON5_FALLBACK_MAX_CHARS, duplicate_keys, loads
from tests.helpers import LIGHT, wait_until
from tests.layout import make_layout, replace_text

DOCUMENT = """{
  // "mcpServers": {} in a comment is no key
  "mcpServers": {
    "notes": {"command": "a", "args": ["{", "}", "x: y", "\\"quoted\\""]},
    /* "notes": */
    'other': {command: "b", env: {"K": "1"}},
    "notes": {"command": "c", "env": {"K": "1", "K": "2"}},
  },
  "list": [{"a": 1, "a": 2}, {"a": 3}],
  "x\\u0041": 1, "xA": 2,
  "url": "http://h/a//b",
}"""


def test_each_key_given_twice_in_one_object_is_found_with_its_path_and_both_lines() -> None:
    loads(DOCUMENT)  # (a document that parses)
    assert duplicate_keys(DOCUMENT) == [
        (("mcpServers", "notes"), 4, 7),
        (("mcpServers", "notes", "env", "K"), 7, 7),
        (("list", "a"), 9, 9),
        (("xA",), 10, 10),
    ]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"aA": 1, "a\\u0041": 2}', "aA"),  # the same key spelt with an escape
        ('{\'a\\"b\': 1, "a\\"b": 2}', 'a"b'),  # in single and double quotes
        ("{'\\u0061': 1, a: 2}", "a"),  # quoted and bare
        ('{"a\\x41": 1, "aA": 2}', "aA"),  # JSON5's \x escape
        ("{'a\\\nb': 1, 'ab': 2}", "ab"),  # a line continuation
    ],
)
def test_a_key_spelt_two_ways_is_the_same_key(text: str, key: str) -> None:
    loads(text)
    assert [found[0] for found in duplicate_keys(text)] == [(key,)]


def test_two_keys_that_only_look_alike_are_two() -> None:
    assert duplicate_keys('{"a\\\\x41": 1, "aA": 2}') == []  # an escaped backslash, then "x41"


def test_the_lines_said_are_those_of_the_keys_not_of_their_colons() -> None:
    assert duplicate_keys('{"a": 1,\n"a"\n:\n2}') == [(("a",), 1, 2)]


@pytest.mark.parametrize(
    "text",
    [
        '{"a": {"command": "x"}, "b": {"command": "y"}}',  # the same key in sibling objects
        '{"a": 1, "b": [{"a": 1}, {"a": 2}]}',  # in separate objects of an array
        '{"a": "a: 1, a: 2", // a: 3\n "b": 1}',  # inside strings and comments
        "{}",
    ],
)
def test_keys_given_once_per_object_are_no_duplicates(text: str) -> None:
    assert duplicate_keys(text) == []


def test_a_document_too_large_to_scan_cheaply_is_not_scanned() -> None:
    text = '{"a": 1, "a": 2, "pad": "' + "x" * JSON5_FALLBACK_MAX_CHARS + '"}'
    assert duplicate_keys(text) == []


async def test_a_server_pasted_twice_alike_changes_nothing_and_is_still_said(tmp_path: Path) -> None:
    """The same entry twice changes no server: before, the watcher stopped at "no change" and the warning only
    reached the log, never the session's events (the shell, run's output)."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    path = layout.paths.user
    entry = f'{{"command": "{sys.executable}", "args": ["-m", "{LIGHT}", "--name", "n"]}}'
    replace_text(path, f'{{"mcpServers": {{"n": {entry}}}}}')
    events: list[HostEvent] = []
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        host.subscribe(events.append)
        replace_text(path, f'{{\n  "mcpServers": {{\n    "n": {entry},\n    "n": {entry}\n  }}\n}}\n')
        said = f"'mcpServers.n' is given twice in {path} (lines 3 and 4)"
        await wait_until(lambda: any(isinstance(e, SettingsWarning) and said in e.message for e in events))


async def test_a_save_that_gives_a_server_twice_warns_with_file_and_lines_and_runs_the_later_one(
    tmp_path: Path,
) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    path = layout.paths.user

    def entry(tools: str) -> str:
        return f'{{"command": "{sys.executable}", "args": ["-m", "{LIGHT}", "--name", "n", "--tools", "{tools}"]}}'

    replace_text(path, f'{{"mcpServers": {{"n": {entry("echo")}}}}}')
    events: list[HostEvent] = []
    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        host.subscribe(events.append)
        tools = host.config.tool_registry.names
        await wait_until(lambda: "mcp__n__echo" in tools(), what="the first server's tool")
        assert not host.settings.warnings
        replace_text(path, f'{{\n  "mcpServers": {{\n    "n": {entry("echo")},\n    "n": {entry("other")}\n  }}\n}}\n')
        await wait_until(lambda: "mcp__n__other" in tools(), what="the later entry's tool")
        said = f"'mcpServers.n' is given twice in {path} (lines 3 and 4): only the later one is used"
        await wait_until(lambda: any(isinstance(e, SettingsWarning) and said in e.message for e in events))
        assert any(said in warning for warning in host.settings.warnings)
        replace_text(path, f'{{"mcpServers": {{"n": {entry("other")}}}}}')  # fixed: the warning is gone
        await wait_until(lambda: not host.settings.warnings, what="the warning to go")


async def test_a_server_given_twice_in_a_file_named_on_the_command_line_is_said_too(tmp_path: Path) -> None:
    """``--mcp-config FILE`` and ``--lsp-config FILE`` are read by a loader of their own: it kept the later entry
    without a word, where the same file as ``.mcp.json`` or ``.lsp.json`` was warned about."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))

    def entry(name: str) -> str:
        return f'{{"command": "{sys.executable}", "args": ["-m", "{LIGHT}", "--name", "{name}"]}}'

    servers = tmp_path / "servers.json"
    servers.write_text(f'{{\n  "mcpServers": {{\n    "n": {entry("first")},\n    "n": {entry("later")}\n  }}\n}}\n')
    lsp = tmp_path / "lsp.json"
    lsp.write_text('{\n "py": {"command": "pylsp", "extensionToLanguage": {".py": "python"}},\n "py": {}\n}\n')
    options = HostOptions(env=layout.env, workspace=layout.root, mcp_config=[servers], lsp_config=[lsp], watch=False)
    async with Host(options) as host:
        await wait_until(lambda: "mcp__n__echo" in host.config.tool_registry.names(), what="the server's tool")
        said = f"'mcpServers.n' is given twice in {servers} (lines 3 and 4): only the later one is used"
        assert any(said in warning for warning in host.state.assembled.warnings)
        said = f"'py' is given twice in {lsp} (lines 2 and 3): only the later one is used"
        assert any(said in warning for warning in host.lsp.warnings())
