"""The tools' result models: their JSON shape, the text an agent reads (empty, one, several, cut), and
name paths resolved against nested and flat symbol lists."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mcpvisor.host.lsp.results import (
    Call,
    CallsResult,
    Diag,
    DiagnosticsResult,
    Direction,
    FileDiagnostics,
    FileEdits,
    HoverResult,
    Loc,
    LocationsResult,
    ReferencesResult,
    RenameResult,
    ServerStatus,
    Severity,
    StatusResult,
    Sym,
    SymbolsResult,
    TextEdit,
    ToolResult,
    WorkspaceSymbol,
    WorkspaceSymbolsResult,
    find_symbol,
)


def loc(file: str, line: int, character: int, preview: str | None = None, *, length: int = 4) -> Loc:
    return Loc(
        file=file, line=line, character=character, end_line=line, end_character=character + length, preview=preview
    )


def sym(name: str, kind: str, at: Loc, *children: Sym, container: str | None = None, detail: str | None = None) -> Sym:
    return Sym(name=name, kind=kind, detail=detail, container=container, loc=at, children=list(children))


USER = loc("models.py", 3, 7, "class User:")
GREET = loc("models.py", 5, 9, "def greet(self) -> str:", length=5)
MAKE = loc("models.py", 8, 5, "def make() -> User:")


def test_models_are_frozen_and_refuse_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        Loc(file="a.py", line=1, character=1, end_line=1, end_character=1, column=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        USER.line = 4  # type: ignore[misc]


def test_every_tool_result_renders_text() -> None:
    results: list[ToolResult] = [
        LocationsResult(server="python", locations=[], truncated=False),
        HoverResult(server="python", contents="x", range=None),
        StatusResult(servers=[]),
    ]
    assert [result.render() for result in results] == ["no location found", "x", "no language servers configured"]
    with pytest.raises(NotImplementedError):
        ToolResult().render()


def test_the_json_shape_uses_the_tools_field_names() -> None:
    result = CallsResult(
        server="python",
        item=sym("greet", "Method", GREET),
        calls=[Call(symbol=sym("main", "Function", MAKE), at=[MAKE])],
        truncated=False,
    )
    data = result.model_dump(mode="json")
    assert set(data) == {"server", "item", "calls", "truncated"}
    assert set(data["item"]) == {"name", "kind", "detail", "container", "loc", "children"}
    assert set(data["item"]["loc"]) == {"file", "line", "character", "end_line", "end_character", "preview"}
    assert set(data["calls"][0]) == {"symbol", "at"}
    assert set(WorkspaceSymbol(name="x", kind="Class", loc=USER, server="ts").model_dump()) == {
        "name", "kind", "detail", "container", "loc", "children", "server"
    }  # fmt: skip
    status = ServerStatus(name="python", languages=["python"], extensions=[".py"], state="ready")
    assert status.model_dump() == {
        "name": "python", "languages": ["python"], "extensions": [".py"], "state": "ready", "pid": None,
        "open_documents": 0, "operations": [], "last_error": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("result", "what", "text"),
    [
        (LocationsResult(server="python", locations=[], truncated=False), "definition", "no definition found"),
        (
            LocationsResult(server="python", locations=[USER], truncated=False),
            "definition",
            "1 definition:\n  models.py:3:7  class User:",
        ),
        (
            LocationsResult(server="python", locations=[USER, loc("/usr/lib/x.pyi", 9, 1)], truncated=False),
            "implementation",
            "2 implementations:\n  models.py:3:7  class User:\n  /usr/lib/x.pyi:9:1",
        ),
        (
            LocationsResult(server="python", locations=[USER, MAKE], truncated=True),
            "location",
            "2 locations:\n  models.py:3:7  class User:\n  models.py:8:5  def make() -> User:\n"
            "(cut at 2; raise 'limit' for more)",
        ),
    ],
)
def test_locations_render_one_line_each(result: LocationsResult, what: str, text: str) -> None:
    assert result.render(what) == text


def test_locations_render_neutral_words_by_default() -> None:
    assert LocationsResult(server="python", locations=[], truncated=False).render() == "no location found"


def test_references_render_with_their_file_count_and_the_cut() -> None:
    empty = ReferencesResult(server="python", references=[], file_count=0, truncated=False)
    assert empty.render() == "no references found"
    refs = [USER, loc("app.py", 4, 22, 'u = make("😀"); u.greet()')]
    assert ReferencesResult(server="python", references=refs, file_count=2, truncated=True).render() == (
        "2 references in 2 files:\n"
        "  models.py:3:7  class User:\n"
        '  app.py:4:22  u = make("😀"); u.greet()\n'
        "(cut at 2; raise 'limit' for more)"
    )
    one = ReferencesResult(server="python", references=[USER], file_count=1, truncated=False)
    assert one.render() == "1 reference in 1 file:\n  models.py:3:7  class User:"


@pytest.mark.parametrize(
    ("contents", "text"),
    [
        ("", "no hover information"),
        ("  \n", "no hover information"),
        ("```python\nclass User\n```", "```python\nclass User\n```"),
    ],
)
def test_hover_renders_its_markdown(contents: str, text: str) -> None:
    assert HoverResult(server="python", contents=contents, range=None).render() == text


def test_document_symbols_render_as_an_indented_tree() -> None:
    tree = [
        sym("User", "Class", USER, sym("greet", "Method", GREET, detail="(self) -> str")),
        sym("make", "Function", MAKE),
    ]
    assert SymbolsResult(server="python", symbols=tree, truncated=False).render() == (
        "3 symbols in models.py:\n  Class User  3:7\n    Method greet  (self) -> str  5:9\n  Function make  8:5"
    )
    flat = [sym("greet", "Method", GREET, container="User")]
    assert SymbolsResult(server="python", symbols=flat, truncated=True).render() == (
        "1 symbol in models.py:\n  Method User.greet  5:9\n(cut at 1; raise 'limit' for more)"
    )
    assert SymbolsResult(server="python", symbols=[], truncated=False).render() == "no symbols found"


def test_workspace_symbols_render_their_file_and_the_server_when_there_are_several() -> None:
    py = WorkspaceSymbol(name="User", kind="Class", loc=USER, server="python")
    ts = WorkspaceSymbol(name="User", kind="Interface", loc=loc("web/user.ts", 1, 18), container="api", server="ts")
    assert WorkspaceSymbolsResult(symbols=[], truncated=False).render() == "no symbols found"
    assert WorkspaceSymbolsResult(symbols=[py], truncated=False).render() == "1 symbol:\n  Class User  models.py:3:7"
    assert WorkspaceSymbolsResult(symbols=[py, ts], truncated=True).render() == (
        "2 symbols:\n"
        "  Class User  models.py:3:7  [python]\n"
        "  Interface api.User  web/user.ts:1:18  [ts]\n"
        "(cut at 2; raise 'limit' for more)"
    )


MAIN = sym("main", "Function", loc("app.py", 3, 5, "def main() -> None:"))
CALLS = [
    Call(symbol=MAIN, at=[loc("app.py", 4, 22), loc("app.py", 5, 13)]),
    Call(symbol=sym("test_greet", "Function", loc("tests/t.py", 7, 5)), at=[loc("tests/t.py", 8, 11)]),
]


def test_incoming_calls_render_callers_and_their_call_sites() -> None:
    result = CallsResult(server="python", item=sym("greet", "Method", GREET), calls=CALLS, truncated=True)
    assert result.render("incoming") == (
        "2 callers of Method greet (models.py:5:9):\n"
        "  Function main  app.py:3:5  at 4:22, 5:13\n"
        "  Function test_greet  tests/t.py:7:5  at 8:11\n"
        "(cut at 2; raise 'limit' for more)"
    )
    assert result.render().startswith("2 calls for Method greet (models.py:5:9):\n")


def test_outgoing_calls_render_call_sites_in_the_callers_file() -> None:
    item = sym("main", "Function", loc("app.py", 3, 5))
    out = [
        Call(symbol=sym("greet", "Method", GREET, container="User"), at=[loc("app.py", 4, 22), loc("other.py", 1, 1)])
    ]
    result = CallsResult(server="python", item=item, calls=out, truncated=False)
    assert result.render("outgoing") == (
        "1 callee from Function main (app.py:3:5):\n  Method User.greet  models.py:5:9  at 4:22, other.py:1:1"
    )


@pytest.mark.parametrize(
    ("direction", "text"),
    [
        ("incoming", "no callers found of Method greet (models.py:5:9)"),
        ("outgoing", "no callees found from Method greet (models.py:5:9)"),
        (None, "no calls found for Method greet (models.py:5:9)"),
    ],
)
def test_no_calls_render_one_line(direction: Direction | None, text: str) -> None:
    result = CallsResult(server="python", item=sym("greet", "Method", GREET), calls=[], truncated=False)
    assert result.render(direction) == text


def diag(
    file: str,
    line: int,
    character: int,
    message: str,
    *,
    severity: Severity = "error",
    source: str | None = None,
    code: str | None = None,
) -> Diag:
    return Diag(severity=severity, message=message, source=source, code=code, loc=loc(file, line, character))


def test_diagnostics_render_one_line_each_and_say_when_they_may_be_stale() -> None:
    result = DiagnosticsResult(
        files=[
            FileDiagnostics(
                file="bad.py",
                fresh=True,
                diagnostics=[
                    diag("bad.py", 2, 5, "undefined name 'x'", source="pyflakes"),
                    diag(
                        "bad.py",
                        3,
                        1,
                        'Argument of type\n  "int" is not str',
                        source="Pyright",
                        code="reportArgumentType",
                    ),
                    diag("bad.py", 9, 1, "unused import", severity="hint"),
                ],
            ),
            FileDiagnostics(file="good.py", fresh=True, diagnostics=[]),
            FileDiagnostics(file="old.py", fresh=False, diagnostics=[diag("old.py", 1, 1, "E303", severity="warning")]),
        ]
    )
    assert result.render() == (
        "bad.py:2:5 error: undefined name 'x' (pyflakes)\n"
        'bad.py:3:1 error: Argument of type "int" is not str (Pyright reportArgumentType)\n'
        "bad.py:9:1 hint: unused import\n"
        "good.py: no diagnostics\n"
        "old.py: not re-checked yet; these may be stale\n"
        "old.py:1:1 warning: E303"
    )
    assert DiagnosticsResult(files=[]).render() == "no files to check"


def test_a_rename_preview_renders_each_edit_with_its_range_and_new_text() -> None:
    changes = [
        FileEdits(
            file="models.py", edits=[TextEdit(loc=USER, new_text="Person"), TextEdit(loc=MAKE, new_text="Person")]
        ),
        FileEdits(file="app.py", edits=[TextEdit(loc=loc("app.py", 1, 20), new_text="Person")]),
    ]
    assert RenameResult(server="python", changes=changes, file_count=2).render() == (
        "3 edits in 2 files:\n"
        "  models.py:3:7-3:11  -> 'Person'\n"
        "  models.py:8:5-8:9  -> 'Person'\n"
        "  app.py:1:20-1:24  -> 'Person'"
    )
    assert RenameResult(server="python", changes=[], file_count=0).render() == "no changes"


def test_status_renders_one_line_per_server() -> None:
    servers = [
        ServerStatus(
            name="python", languages=["python"], extensions=[".py", ".pyi"], state="ready", pid=4242, open_documents=3
        ),
        ServerStatus(
            name="ts", languages=["typescript"], extensions=[".ts"], state="failed", last_error="exit 1\nboom"
        ),
        ServerStatus(name="rust", languages=["rust"], extensions=[], state="needs approval"),
    ]
    assert StatusResult(servers=servers).render() == (
        "python  ready  pid 4242, 3 open documents  .py .pyi\nts  failed  .ts — exit 1 boom\nrust  needs approval"
    )
    assert StatusResult(servers=[]).render() == "no language servers configured"


OTHER_GREET = loc("models.py", 20, 9, length=5)
NESTED = [
    sym("User", "Class", USER, sym("greet", "Method", GREET), sym("name", "Property", loc("models.py", 4, 5))),
    sym("Admin", "Class", loc("models.py", 18, 7), sym("greet", "Method", OTHER_GREET)),
    sym("make", "Function", MAKE),
]
FLAT = [
    sym("User", "Class", USER),
    sym("greet", "Method", GREET, container="User"),
    sym("Admin", "Class", loc("models.py", 18, 7)),
    sym("greet", "Method", OTHER_GREET, container="pkg.models.Admin"),
    sym("make", "Function", MAKE),
]
JAVA = [sym("User", "Class", USER, sym("greet(String)", "Method", GREET), sym("User()", "Constructor", MAKE))]


@pytest.mark.parametrize(
    ("symbols", "name", "found"),
    [
        (NESTED, "User", [USER]),
        (NESTED, "User.greet", [GREET]),
        (NESTED, "greet", [GREET, OTHER_GREET]),  # ambiguous: both, in list order
        (NESTED, "Admin.greet", [OTHER_GREET]),
        (NESTED, "models.User.greet", [GREET]),  # a module prefix the tree does not have
        (NESTED, "Nobody.greet", []),  # a part the tree has in that place must match
        (NESTED, "pkg.models.make", [MAKE]),
        (NESTED, "User.nothing", []),
        (NESTED, "", []),
        (FLAT, "User.greet", [GREET]),
        (FLAT, "greet", [GREET, OTHER_GREET]),
        (FLAT, "models.Admin.greet", [OTHER_GREET]),  # a dotted container
        (FLAT, "make", [MAKE]),
        (JAVA, "User.greet", [GREET]),  # a parameter list in the name
        (JAVA, "User", [USER]),  # the exact class, not the constructor 'User()'
        (JAVA, "User.User", [MAKE]),  # the constructor matches both parts, the class only one
    ],
)
def test_a_name_path_finds_symbols_from_its_end(symbols: list[Sym], name: str, found: list[Loc]) -> None:
    assert [s.loc for s in find_symbol(symbols, name)] == found


def test_exact_matches_win_over_loose_ones() -> None:
    both = [sym("greet(String)", "Method", OTHER_GREET), sym("greet", "Function", GREET)]
    assert [s.loc for s in find_symbol(both, "greet")] == [GREET]
