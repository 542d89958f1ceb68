"""Servers' raw answers as the tools' models: each normaliser on payloads shaped as pyright, pylsp and
typescript-language-server send them, positions converted through the file's text (UTF-16 to code
points) and paths made workspace-relative."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcpvisor.host.lsp.normalize import (
    SYMBOL_KINDS,
    call_item,
    calls,
    diagnostics,
    hover_range,
    hover_text,
    locations,
    symbols,
    workspace_edit,
    workspace_symbols,
)
from mcpvisor.host.lsp.results import Diag, Loc, Severity, Sym

ROOT = Path("/work/repo")
MODELS = ROOT / "models.py"
APP = ROOT / "app.py"
BUILTINS = Path("/usr/lib/python3.11/builtins.pyi")
MODELS_URI = "file:///work/repo/models.py"
APP_URI = "file:///work/repo/app.py"

TEXTS = {
    MODELS: (
        "from dataclasses import dataclass\n"  # 0
        "\n"
        "\n"
        "@dataclass\n"  # 3
        "class User:\n"  # 4
        "    name: str\n"  # 5
        "\n"
        "    def greet(self) -> str:\n"  # 7
        '        return "😀 " + self.name\n'  # 8: 'self' is character 23 (1-based), UTF-16 column 23 (0-based)
        "\n"
        "\n"
        "def make(name: str) -> User:\n"  # 11
        "    return User(name)\n"  # 12
    ),
    APP: (
        "from models import User, make\n"  # 0
        "\n"
        "\n"
        "def main() -> None:\n"  # 3
        '    u = make("😀"); u.greet()\n'  # 4: 'greet' is character 22 (1-based), UTF-16 column 22 (0-based)
        "    print(u.greet())\n"  # 5
    ),
}


def text_of(path: Path) -> str | None:
    return TEXTS.get(path)


def rng(line: int, start: int, end_line: int | None = None, end: int | None = None) -> dict[str, Any]:
    """An LSP range (0-based, UTF-16) on one line, or across lines."""
    return {
        "start": {"line": line, "character": start},
        "end": {"line": line if end_line is None else end_line, "character": start if end is None else end},
    }


def loc(file: str, line: int, character: int, end_line: int, end_character: int, preview: str | None) -> Loc:
    return Loc(
        file=file, line=line, character=character, end_line=end_line, end_character=end_character, preview=preview
    )


MAKE_DEF = loc("models.py", 12, 5, 12, 9, "def make(name: str) -> User:")
USER_DEF = loc("models.py", 5, 7, 5, 11, "class User:")
GREET_DEF = loc("models.py", 8, 9, 8, 14, "def greet(self) -> str:")
GREET_CALL = loc("app.py", 5, 22, 5, 27, 'u = make("😀"); u.greet()')
GREET_CALL_2 = loc("app.py", 6, 13, 6, 18, "print(u.greet())")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(None, [], id="null"),
        pytest.param([], [], id="empty"),
        pytest.param({"uri": MODELS_URI, "range": rng(11, 4, 11, 8)}, [MAKE_DEF], id="one Location (pylsp)"),
        pytest.param(
            [{"uri": MODELS_URI, "range": rng(11, 4, 11, 8)}, {"uri": MODELS_URI, "range": rng(4, 6, 4, 10)}],
            [MAKE_DEF, USER_DEF],
            id="Location[]",
        ),
        pytest.param(
            [
                {
                    "originSelectionRange": rng(4, 8, 4, 12),
                    "targetUri": MODELS_URI,
                    "targetRange": rng(11, 0, 12, 21),
                    "targetSelectionRange": rng(11, 4, 11, 8),
                }
            ],
            [MAKE_DEF],
            id="LocationLink[] (pyright): the selection range",
        ),
        pytest.param(
            [{"targetUri": MODELS_URI, "targetRange": rng(11, 4, 11, 8)}],
            [MAKE_DEF],
            id="LocationLink without a selection range: the target range",
        ),
        pytest.param(
            [
                {"uri": "jdt://contents/rt.jar/java.lang/String.class", "range": rng(0, 0)},
                {"uri": "untitled:Untitled-1", "range": rng(0, 0)},
                {"uri": MODELS_URI, "range": rng(11, 4, 11, 8)},
                {"uri": MODELS_URI, "range": rng(11, 4, 11, 8)},  # a repeat
                {"uri": MODELS_URI},  # no range
                "garbage",
            ],
            [MAKE_DEF],
            id="non-file URIs, repeats and broken entries skipped",
        ),
        pytest.param(
            [{"uri": APP_URI, "range": rng(4, 22, 4, 27)}, {"uri": APP_URI, "range": rng(5, 12, 5, 17)}],
            [GREET_CALL, GREET_CALL_2],
            id="UTF-16 columns after an emoji",
        ),
        pytest.param(
            [{"uri": BUILTINS.as_uri(), "range": rng(89, 6, 89, 11)}],
            [loc(str(BUILTINS), 90, 7, 90, 12, None)],
            id="outside the workspace, text unknown: absolute path, columns as they are, no preview",
        ),
    ],
)
def test_locations_in_every_shape_become_locs(raw: Any, expected: list[Loc]) -> None:
    assert locations(raw, root=ROOT, text_of=text_of) == expected


def test_a_preview_is_the_stripped_line_cut_at_200_characters() -> None:
    path = ROOT / "long.py"
    texts = {path: "\t  x = '" + "a" * 300 + "'  \n"}
    [found] = locations({"uri": path.as_uri(), "range": rng(0, 3)}, root=ROOT, text_of=texts.get)
    assert found.preview == ("x = '" + "a" * 300)[:200]


def test_a_preview_of_a_location_far_along_a_long_line_shows_the_location() -> None:
    """Before, the line's first 200 characters: on minified or generated code every location of the line had
    the same preview, and none showed what it was about."""
    path = ROOT / "minified.js"
    line = "var a=1;" * 100 + "function target(){return 1}" + ";b=2" * 100
    texts = {path: "  " + line + "\n"}
    at = line.index("target")
    [found] = locations({"uri": path.as_uri(), "range": rng(0, 2 + at, 0, 2 + at + 6)}, root=ROOT, text_of=texts.get)
    assert found.preview == "…" + line[at - 40 : at + 158] + "…"
    assert len(found.preview) == 200
    assert (found.line, found.character) == (1, 3 + at)
    [first] = locations({"uri": path.as_uri(), "range": rng(0, 2)}, root=ROOT, text_of=texts.get)
    assert first.preview == line[:200]  # near the start: the line's start, as for any line
    end = len(line) - 4
    [last] = locations({"uri": path.as_uri(), "range": rng(0, 2 + end)}, root=ROOT, text_of=texts.get)
    assert last.preview == "…" + line[end - 40 :]


def test_text_of_is_asked_once_per_file_within_one_answer() -> None:
    asked: list[Path] = []

    def counting(path: Path) -> str | None:
        asked.append(path)
        return text_of(path)

    raw = [{"uri": APP_URI, "range": rng(4, 22, 4, 27)}, {"uri": APP_URI, "range": rng(5, 12, 5, 17)}]
    locations(raw, root=ROOT, text_of=counting)
    assert asked == [APP]


PYRIGHT_DOCUMENT_SYMBOLS = [
    {"name": "dataclass", "kind": 13, "range": rng(0, 24, 0, 33), "selectionRange": rng(0, 24, 0, 33)},
    {
        "name": "User",
        "kind": 5,
        "range": rng(3, 0, 8, 32),
        "selectionRange": rng(4, 6, 4, 10),
        "children": [
            {"name": "name", "kind": 13, "range": rng(5, 4, 5, 13), "selectionRange": rng(5, 4, 5, 8)},
            {
                "name": "greet",
                "kind": 6,
                "detail": "(self) -> str",
                "range": rng(7, 4, 8, 32),
                "selectionRange": rng(7, 8, 7, 13),
                "children": [],
            },
        ],
    },
    {"name": "make", "kind": 12, "detail": "", "range": rng(11, 0, 12, 21), "selectionRange": rng(11, 4, 11, 8)},
    {"name": "mystery", "kind": 99, "range": rng(12, 4, 12, 10), "selectionRange": rng(12, 4, 12, 10)},
]

PYLSP_SYMBOL_INFORMATION = [
    {"name": "User", "kind": 5, "location": {"uri": MODELS_URI, "range": rng(4, 0, 8, 32)}},
    {
        "name": "greet",
        "kind": 6,
        "containerName": "User",
        "location": {"uri": MODELS_URI, "range": rng(7, 4, 8, 32)},
    },
    {"name": "make", "kind": 12, "containerName": "", "location": {"uri": MODELS_URI, "range": rng(11, 0, 12, 21)}},
]


def test_hierarchical_document_symbols_stay_nested_at_their_names() -> None:
    found = symbols(PYRIGHT_DOCUMENT_SYMBOLS, path=MODELS, root=ROOT, text_of=text_of)
    assert [(s.name, s.kind, s.detail) for s in found] == [
        ("dataclass", "Variable", None),
        ("User", "Class", None),
        ("make", "Function", None),
        ("mystery", "Unknown", None),
    ]
    user = found[1]
    assert user.loc == USER_DEF
    assert [(c.name, c.kind, c.detail, c.loc.line, c.loc.character) for c in user.children] == [
        ("name", "Variable", None, 6, 5),
        ("greet", "Method", "(self) -> str", 8, 9),
    ]
    assert user.children[1].loc == GREET_DEF


def test_flat_symbol_information_is_nested_by_its_ranges_and_points_at_the_names() -> None:
    """pylsp sends the range of each whole definition (``class User:`` from ``class``): before, the symbols stayed
    flat (``depth`` did nothing) and pointed at the keywords, where a request about them finds nothing."""
    found = symbols(PYLSP_SYMBOL_INFORMATION, path=MODELS, root=ROOT, text_of=text_of)
    shape = [(s.name, s.kind, s.container, s.loc.line, s.loc.character, s.loc.end_character) for _, s in walk(found)]
    assert shape == [
        ("User", "Class", None, 5, 7, 11),
        ("greet", "Method", "User", 8, 9, 14),
        ("make", "Function", None, 12, 5, 9),
    ]
    assert [(s.name, [c.name for c in s.children]) for s in found] == [("User", ["greet"]), ("make", [])]
    assert [s.pruned(0).children for s in found] == [[], []]


def test_a_flat_symbols_name_is_found_as_a_whole_word_not_inside_a_keyword() -> None:
    """Before: ``def f():`` put ``f`` at column 3 (the f of ``def``), ``async def sync():`` inside ``async``."""
    text = "def f():\n    pass\nasync def sync():\n    pass\n"
    raw = [
        {"name": "f", "kind": 12, "location": {"uri": MODELS_URI, "range": rng(0, 0, 1, 8)}},
        {"name": "sync", "kind": 12, "location": {"uri": MODELS_URI, "range": rng(2, 0, 3, 8)}},
    ]
    found = symbols(raw, path=MODELS, root=ROOT, text_of=lambda path: text)
    assert [(s.name, s.loc.line, s.loc.character, s.loc.end_character) for s in found] == [
        ("f", 1, 5, 6),
        ("sync", 3, 11, 15),
    ]


def walk(found: list[Sym]) -> list[tuple[int, Sym]]:
    return [pair for sym in found for pair in sym.walk()]


def test_no_document_symbols_is_an_empty_list() -> None:
    assert symbols(None, path=MODELS, root=ROOT, text_of=text_of) == []


def test_document_symbols_without_a_name_or_a_range_are_skipped() -> None:
    raw = [
        {"kind": 5, "range": rng(4, 0, 8, 32), "selectionRange": rng(4, 6, 4, 10)},
        {"name": "User", "kind": 5, "range": rng(4, 6, 4, 10), "children": [{"name": "broken", "kind": 6}]},
        {"name": "flat", "kind": 12, "location": {"uri": MODELS_URI, "range": {"start": {"line": 0}}}},
    ]
    assert symbols(raw, path=MODELS, root=ROOT, text_of=text_of) == [Sym(name="User", kind="Class", loc=USER_DEF)]


def test_workspace_symbols_carry_their_server_and_may_point_at_a_whole_file() -> None:
    raw = [
        {"name": "User", "kind": 5, "location": {"uri": MODELS_URI, "range": rng(4, 6, 4, 10)}},
        {
            "name": "greet",
            "kind": 6,
            "containerName": "User",
            "location": {"uri": MODELS_URI, "range": rng(7, 8, 7, 13)},
        },
        {"name": "main", "kind": 12, "location": {"uri": APP_URI}},  # WorkspaceSymbol, range to be resolved
        {"name": "String", "kind": 5, "location": {"uri": "jdt://contents/String.class", "range": rng(0, 0)}},
        {"name": "Object", "kind": 5, "location": {"uri": "jdt://contents/Object.class"}},
        {"name": "nowhere", "kind": 5},
        {"kind": 5, "location": {"uri": MODELS_URI}},
    ]
    found = workspace_symbols(raw, server="python", root=ROOT, text_of=text_of)
    assert [(s.name, s.kind, s.container, s.server, s.loc) for s in found] == [
        ("User", "Class", None, "python", USER_DEF),
        ("greet", "Method", "User", "python", GREET_DEF),
        ("main", "Function", None, "python", loc("app.py", 1, 1, 1, 1, None)),
    ]
    assert workspace_symbols(None, server="python", root=ROOT, text_of=text_of) == []


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        pytest.param(None, "", id="null"),
        pytest.param(
            {"contents": {"kind": "markdown", "value": "```python\n(class) User\n```\n---\nA user.\n"}},
            "```python\n(class) User\n```\n---\nA user.",
            id="MarkupContent markdown (pyright)",
        ),
        pytest.param({"kind": "plaintext", "value": "greet(self) -> str"}, "greet(self) -> str", id="plaintext"),
        pytest.param(
            {"contents": [{"language": "python", "value": "greet(self) -> str"}, "Say hi."]},
            "```python\ngreet(self) -> str\n```\n\nSay hi.",
            id="MarkedString[] (pylsp)",
        ),
        pytest.param(
            {"contents": [{"language": "typescript", "value": "class User"}, ""], "range": rng(0, 0, 0, 4)},
            "```typescript\nclass User\n```",
            id="MarkedString[] with empty documentation (typescript-language-server)",
        ),
        pytest.param({"contents": "plain *markdown*"}, "plain *markdown*", id="one MarkedString"),
        pytest.param({"contents": []}, "", id="nothing to show"),
    ],
)
def test_hover_contents_become_markdown(raw: Any, text: str) -> None:
    assert hover_text(raw) == text


def test_a_hover_range_is_a_loc_in_the_file_asked_about() -> None:
    raw = {"contents": "x", "range": rng(4, 22, 4, 27)}
    assert hover_range(raw, path=APP, root=ROOT, text_of=text_of) == GREET_CALL
    assert hover_range({"contents": "x"}, path=APP, root=ROOT, text_of=text_of) is None
    assert hover_range(None, path=APP, root=ROOT, text_of=text_of) is None


def diag(severity: Severity, message: str, source: str | None, code: str | None, at: Loc) -> Diag:
    return Diag(severity=severity, message=message, source=source, code=code, loc=at)


UNDEFINED_AT = loc("models.py", 9, 23, 9, 27, 'return "😀 " + self.name')


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(None, [], id="null"),
        pytest.param(
            [{"source": "pyflakes", "range": rng(8, 23, 8, 27), "message": "undefined name 'self'", "severity": 1}],
            [diag("error", "undefined name 'self'", "pyflakes", None, UNDEFINED_AT)],
            id="pyflakes via pylsp, after an emoji",
        ),
        pytest.param(
            {
                "uri": MODELS_URI,
                "version": 3,
                "diagnostics": [
                    {"source": "pycodestyle", "code": "E303", "severity": 2, "range": rng(3, 0, 3, 10), "message": "x"},
                    {"range": rng(0, 0, 0, 4), "message": "no severity"},
                ],
            },
            [
                diag("warning", "x", "pycodestyle", "E303", loc("models.py", 4, 1, 4, 11, "@dataclass")),
                diag(
                    "error",
                    "no severity",
                    None,
                    None,
                    loc("models.py", 1, 1, 1, 5, "from dataclasses import dataclass"),
                ),
            ],
            id="publishDiagnostics params",
        ),
        pytest.param(
            {
                "kind": "full",
                "items": [
                    {
                        "severity": 3,
                        "code": 2304,
                        "source": "typescript",
                        "message": "Cannot find name 'x'.",
                        "range": rng(0, 0, 0, 4),
                    },
                    {"severity": 4, "tags": [1], "code": "", "message": "unused", "range": rng(0, 0, 0, 4)},
                    {"severity": 1, "message": "no range"},
                ],
            },
            [
                diag(
                    "info",
                    "Cannot find name 'x'.",
                    "typescript",
                    "2304",
                    loc("models.py", 1, 1, 1, 5, "from dataclasses import dataclass"),
                ),
                diag("hint", "unused", None, None, loc("models.py", 1, 1, 1, 5, "from dataclasses import dataclass")),
            ],
            id="pull report with an int code (typescript)",
        ),
    ],
)
def test_diagnostics_get_a_severity_name_and_a_string_code(raw: Any, expected: list[Diag]) -> None:
    assert diagnostics(raw, path=MODELS, root=ROOT, text_of=text_of) == expected


def test_pyright_diagnostics_keep_their_rule_name_as_the_code() -> None:
    raw = [
        {
            "severity": 1,
            "message": '"nme" is not defined',
            "source": "Pyright",
            "code": "reportUndefinedVariable",
            "codeDescription": {"href": "https://github.com/microsoft/pyright/blob/main/docs/configuration.md"},
            "range": rng(8, 23, 8, 27),
        }
    ]
    [found] = diagnostics(raw, path=MODELS, root=ROOT, text_of=text_of)
    assert (found.code, found.source, found.loc) == ("reportUndefinedVariable", "Pyright", UNDEFINED_AT)


GREET_ITEM = {
    "name": "greet",
    "kind": 6,
    "detail": "User",
    "uri": MODELS_URI,
    "range": rng(7, 4, 8, 32),
    "selectionRange": rng(7, 8, 7, 13),
}
MAIN_ITEM = {"name": "main", "kind": 12, "uri": APP_URI, "range": rng(3, 0, 5, 20), "selectionRange": rng(3, 4, 3, 8)}
MAKE_ITEM = {
    "name": "make",
    "kind": 12,
    "uri": MODELS_URI,
    "range": rng(11, 0, 12, 21),
    "selectionRange": rng(11, 4, 11, 8),
}
PRINT_ITEM = {
    "name": "print",
    "kind": 12,
    "uri": BUILTINS.as_uri(),
    "range": rng(9, 4, 9, 9),
    "selectionRange": rng(9, 4, 9, 9),
}
MAIN_SYM = Sym(name="main", kind="Function", loc=loc("app.py", 4, 5, 4, 9, "def main() -> None:"))


def test_a_call_hierarchy_item_is_a_symbol_at_its_name() -> None:
    assert call_item(GREET_ITEM, root=ROOT, text_of=text_of) == Sym(
        name="greet", kind="Method", detail="User", loc=GREET_DEF
    )


def test_a_call_hierarchy_item_from_a_non_file_uri_keeps_the_uri_as_its_file() -> None:
    raw = {**MAKE_ITEM, "uri": "jdt://contents/rt.jar/String.class"}
    found = call_item(raw, root=ROOT, text_of=text_of)
    assert found.loc == loc("jdt://contents/rt.jar/String.class", 12, 5, 12, 9, None)


@pytest.mark.parametrize("raw", [None, {"name": "x"}, {"kind": 6, "uri": MODELS_URI, "range": rng(0, 0)}])
def test_anything_else_is_not_a_call_hierarchy_item(raw: Any) -> None:
    with pytest.raises(ValueError, match="not a call hierarchy item"):
        call_item(raw, root=ROOT, text_of=text_of)


def test_incoming_calls_name_the_caller_and_the_call_sites_in_its_file() -> None:
    raw = [{"from": MAIN_ITEM, "fromRanges": [rng(4, 22, 4, 27), rng(5, 12, 5, 17)]}, {"from": None, "fromRanges": []}]
    [call] = calls(raw, "incoming", root=ROOT, text_of=text_of)
    assert call.symbol == MAIN_SYM
    assert call.at == [GREET_CALL, GREET_CALL_2]
    assert calls(None, "incoming", root=ROOT, text_of=text_of) == []


def test_outgoing_call_sites_are_in_the_callers_file_not_the_callees() -> None:
    raw = [
        {"to": MAKE_ITEM, "fromRanges": [rng(4, 8, 4, 12)]},
        {"to": GREET_ITEM, "fromRanges": [rng(4, 22, 4, 27), rng(5, 12, 5, 17)]},
        {"to": PRINT_ITEM, "fromRanges": [rng(5, 4, 5, 9)]},
    ]
    found = calls(raw, "outgoing", root=ROOT, text_of=text_of, item=MAIN_ITEM)
    assert [(c.symbol.name, c.symbol.loc.file) for c in found] == [
        ("make", "models.py"),
        ("greet", "models.py"),
        ("print", str(BUILTINS)),
    ]
    assert found[0].at == [loc("app.py", 5, 9, 5, 13, 'u = make("😀"); u.greet()')]
    assert found[1].at == [GREET_CALL, GREET_CALL_2]
    assert found[2].at == [loc("app.py", 6, 5, 6, 10, "print(u.greet())")]


def test_outgoing_calls_need_the_item_they_were_asked_for() -> None:
    with pytest.raises(ValueError, match="outgoing calls need the item"):
        calls([], "outgoing", root=ROOT, text_of=text_of)


RENAME_EDITS_MODELS = [
    {"range": rng(11, 23, 11, 27), "newText": "Person"},
    {"range": rng(4, 6, 4, 10), "newText": "Person"},  # out of order: sorted by position
    {"range": rng(12, 11, 12, 15), "newText": "Person"},
]
RENAME_EDITS_APP = [{"range": rng(0, 19, 0, 23), "newText": "Person"}]


def test_a_rename_in_changes_form_is_grouped_per_file_in_text_order() -> None:
    raw = {"changes": {MODELS_URI: RENAME_EDITS_MODELS, APP_URI: RENAME_EDITS_APP}}
    found = workspace_edit(raw, root=ROOT, text_of=text_of)
    assert [entry.file for entry in found] == ["models.py", "app.py"]
    assert [(e.loc.line, e.loc.character, e.loc.end_character, e.new_text) for e in found[0].edits] == [
        (5, 7, 11, "Person"),
        (12, 24, 28, "Person"),
        (13, 12, 16, "Person"),
    ]
    assert found[1].edits[0].loc == loc("app.py", 1, 20, 1, 24, "from models import User, make")


def test_a_rename_in_document_changes_form_skips_file_operations_and_wins_over_changes() -> None:
    raw = {
        "changes": {"file:///work/repo/ignored.py": RENAME_EDITS_APP},
        "documentChanges": [
            {"textDocument": {"uri": MODELS_URI, "version": 4}, "edits": RENAME_EDITS_MODELS},
            {"kind": "rename", "oldUri": MODELS_URI, "newUri": "file:///work/repo/people.py"},
            {"kind": "create", "uri": "file:///work/repo/new.py"},
            {"textDocument": {"uri": APP_URI, "version": None}, "edits": RENAME_EDITS_APP},
            {
                "textDocument": {"uri": APP_URI, "version": None},
                "edits": [{"range": rng(4, 8, 4, 12), "snippet": {"value": "mk"}}, {"range": rng(5, 0, 5, 1)}],
            },
        ],
    }
    found = workspace_edit(raw, root=ROOT, text_of=text_of)
    assert [(entry.file, len(entry.edits)) for entry in found] == [("models.py", 3), ("app.py", 2)]
    assert [e.new_text for e in found[1].edits] == ["Person", "mk"]


@pytest.mark.parametrize("raw", [None, {}, {"changes": {}}, {"documentChanges": []}])
def test_an_empty_workspace_edit_has_no_files(raw: Any) -> None:
    assert workspace_edit(raw, root=ROOT, text_of=text_of) == []


def test_symbol_kinds_are_named_from_file_to_type_parameter() -> None:
    assert (len(SYMBOL_KINDS), SYMBOL_KINDS[1], SYMBOL_KINDS[5], SYMBOL_KINDS[6], SYMBOL_KINDS[26]) == (
        26,
        "File",
        "Class",
        "Method",
        "TypeParameter",
    )
