"""Positions between the tools (1-based, code points) and the wire (0-based, UTF-16), lines split the LSP
way, file URIs, and a tool's ``file`` argument kept inside the workspace."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mcpvisor.core.errors import McpvisorError
from mcpvisor.host.lsp import text as lsp_text
from mcpvisor.host.lsp.text import (
    FileOutsideWorkspace,
    FolderNotFile,
    Lines,
    NoSuchFile,
    character_of,
    document_text,
    from_wire,
    path_of,
    relative,
    resolve_file,
    to_wire,
    uri_of,
    utf16_column,
)

EMOJI = 'x = "😀😀"; y = 1'
"""Two characters outside the BMP: each is one code point but two UTF-16 code units."""


@pytest.mark.parametrize(
    ("line_text", "character", "utf16"),
    [
        ("abc", 1, 0),
        ("abc", 3, 2),
        ("abc", 4, 3),  # just past the last character: the end of the line
        ("abc", 99, 3),  # beyond the end: clamped to the end
        ("", 1, 0),
        (EMOJI, 5, 4),  # the opening quote: before any emoji
        (EMOJI, 6, 5),  # the first emoji
        (EMOJI, 7, 7),  # the second emoji: the first took two units
        (EMOJI, 8, 9),  # the closing quote
        (EMOJI, 11, 12),  # the 'y'
        ("é = 1", 2, 1),  # U+00E9 is one unit
        ("中文 x", 4, 3),  # BMP ideographs are one unit each
    ],
)
def test_a_code_point_column_becomes_a_utf16_column(line_text: str, character: int, utf16: int) -> None:
    assert utf16_column(line_text, character) == utf16


@pytest.mark.parametrize("character", [0, -3])
def test_a_character_below_one_is_refused_with_the_reason(character: int) -> None:
    with pytest.raises(ValueError, match=rf"character {character} is not a column: characters count from 1"):
        utf16_column("abc", character)


@pytest.mark.parametrize(
    ("line_text", "utf16", "character"),
    [
        ("abc", 0, 1),
        ("abc", 3, 4),
        ("abc", 10, 4),  # beyond the end: just past the end
        (EMOJI, 5, 6),
        (EMOJI, 6, 6),  # inside the first emoji's surrogate pair: rounds down to it
        (EMOJI, 7, 7),
        (EMOJI, 8, 7),  # inside the second pair
        (EMOJI, 12, 11),  # the 'y'
        ("", 0, 1),
    ],
)
def test_a_utf16_column_becomes_a_code_point_column(line_text: str, utf16: int, character: int) -> None:
    assert character_of(line_text, utf16) == character


@pytest.mark.parametrize("line_text", ["", "plain ascii", EMOJI, "😀", "a😀b😀😀c", "中文😀é"])
def test_every_column_of_a_line_survives_a_round_trip(line_text: str) -> None:
    for character in range(1, len(line_text) + 2):
        assert character_of(line_text, utf16_column(line_text, character)) == character


@pytest.mark.parametrize(
    ("text", "lines", "count"),
    [
        ("a\nb\nc", ["a", "b", "c"], 3),
        ("a\r\nb\r\nc\r\n", ["a", "b", "c", ""], 3),
        ("a\rb\rc", ["a", "b", "c"], 3),
        ("a\n\r\nb\r\rc", ["a", "", "b", "", "c"], 5),  # mixed endings; \n\r is two breaks
        ("a\fb\u2028c", ["a\fb\u2028c"], 1),  # form feed and U+2028 do not end a line on the wire
        ("one line", ["one line"], 1),
        ("", [""], 0),
        ("\n", ["", ""], 1),
    ],
)
def test_lines_end_the_lsp_way(text: str, lines: list[str], count: int) -> None:
    doc = Lines(text)
    assert [doc.line(n) for n in range(len(lines))] == lines
    assert (doc.count, doc.wire_count) == (count, len(lines))
    assert doc.line(len(lines)) == doc.line(-1) == ""


def test_a_tool_position_goes_to_the_wire_and_back() -> None:
    doc = Lines(f"import os\n{EMOJI}\n")
    assert to_wire(doc, 2, 11, file="a.py") == {"line": 1, "character": 12}
    assert from_wire(doc, {"line": 1, "character": 12}) == (2, 11)
    assert to_wire(doc, 1, 10, file="a.py") == {"line": 0, "character": 9}  # one past the last: the line's end
    assert to_wire(doc, 3, 1, file="a.py") == {"line": 2, "character": 0}  # the empty line after the last break
    assert from_wire(doc, {"line": 7, "character": 4}) == (8, 1)  # past the end: no text, column 1


@pytest.mark.parametrize(
    ("line", "character", "message"),
    [
        (120, 1, "line 120 is past the end of pkg/a.py (2 lines)"),
        (0, 1, "line 0 is not a line of pkg/a.py: lines count from 1"),
        (1, 0, "character 0 is not a column of pkg/a.py:1: characters count from 1"),
        (1, 7, "character 7 is past the end of pkg/a.py:1 (5 characters)"),
    ],
)
def test_a_position_outside_the_file_is_refused_with_the_file_named(line: int, character: int, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        to_wire(Lines("a = 1\nb = 2\n"), line, character, file="pkg/a.py")


def test_a_position_past_a_one_line_file_or_a_one_character_line_counts_in_the_singular() -> None:
    """It read "(1 lines)" and "(1 characters)"."""
    with pytest.raises(ValueError, match=re.escape("line 3 is past the end of a.py (1 line)")):
        to_wire(Lines("x = 1\n"), 3, 1, file="a.py")
    with pytest.raises(ValueError, match=re.escape("character 3 is past the end of a.py:1 (1 character)")):
        to_wire(Lines("x\n"), 1, 3, file="a.py")


@pytest.mark.parametrize(
    ("path", "uri"),
    [
        (Path("/work/a.py"), "file:///work/a.py"),
        (Path("/work/My Project/a b.py"), "file:///work/My%20Project/a%20b.py"),
        (Path("/work/données/café.py"), "file:///work/donn%C3%A9es/caf%C3%A9.py"),
        (Path("/work/50%/#1.py"), "file:///work/50%25/%231.py"),
    ],
)
def test_a_path_and_its_file_uri_convert_both_ways(path: Path, uri: str) -> None:
    assert uri_of(path) == uri
    assert path_of(uri) == path


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("file:///work/My Project/a.py", Path("/work/My Project/a.py")),  # a server that does not encode
        ("file://localhost/work/a.py", Path("/work/a.py")),
        ("FILE:///work/a.py", Path("/work/a.py")),
        ("jdt://contents/rt.jar/java.lang/String.class", None),
        ("untitled:Untitled-1", None),
        ("file://otherhost/share/a.py", None),
        ("https://example.com/a.py", None),
    ],
)
def test_only_local_file_uris_have_a_path(uri: str, path: Path | None) -> None:
    assert path_of(uri) == path


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        (Path("/work/repo/pkg/a.py"), "pkg/a.py"),
        (Path("/work/repo"), "."),
        (Path("/usr/lib/python3.11/os.py"), "/usr/lib/python3.11/os.py"),
        (Path("/work/repository/a.py"), "/work/repository/a.py"),  # a sibling with the root as a prefix
    ],
)
def test_a_path_is_shown_relative_to_the_workspace_when_inside_it(path: Path, shown: str) -> None:
    assert relative(path, Path("/work/repo")) == shown


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("a = 1\n")
    (root / "top.py").write_text("")
    (tmp_path / "secret.py").write_text("token = 1\n")
    (root / "out.py").symlink_to(tmp_path / "secret.py")
    (root / "outdir").symlink_to(tmp_path, target_is_directory=True)
    (root / "in.py").symlink_to(root / "pkg" / "a.py")
    return root


@pytest.mark.parametrize(
    ("file", "real"),
    [
        ("pkg/a.py", "pkg/a.py"),
        ("./pkg/../top.py", "top.py"),
        ("in.py", "pkg/a.py"),  # a symlink that stays inside: followed
    ],
)
def test_a_file_inside_the_workspace_resolves_to_its_real_path(workspace: Path, file: str, real: str) -> None:
    assert resolve_file(file, workspace) == (workspace / real).resolve()


def test_an_absolute_path_inside_the_workspace_is_accepted(workspace: Path) -> None:
    assert resolve_file(str(workspace / "pkg" / "a.py"), workspace) == (workspace / "pkg" / "a.py").resolve()


@pytest.mark.parametrize("file", ["../secret.py", "pkg/../../secret.py", "out.py", "outdir/secret.py", "ABSOLUTE"])
def test_a_file_outside_the_workspace_is_refused(workspace: Path, file: str) -> None:
    if file == "ABSOLUTE":
        file = str(workspace.parent / "secret.py")
    with pytest.raises(FileOutsideWorkspace) as caught:
        resolve_file(file, workspace)
    root = workspace.resolve()
    assert str(caught.value) == f"file {file!r} is outside the workspace {root}; name a file inside it"
    assert (caught.value.file, caught.value.root) == (file, root)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, McpvisorError)


def test_a_file_outside_is_refused_even_when_it_does_not_exist(workspace: Path) -> None:
    with pytest.raises(FileOutsideWorkspace):
        resolve_file("../nothing.py", workspace)


@pytest.mark.parametrize("file", ["missing.py", "pkg/missing/b.py", ""])
def test_a_missing_file_is_no_such_file(workspace: Path, file: str) -> None:
    with pytest.raises(NoSuchFile, match=re.escape(f"no such file {file!r} in the workspace")) as caught:
        resolve_file(file, workspace)
    assert caught.value.file == file
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("file", ["pkg", "pkg/", ".", "ABSOLUTE"])
def test_a_folder_is_said_to_be_a_folder_where_a_file_is_needed(workspace: Path, file: str) -> None:
    """Before, "no such file 'pkg' in the workspace": the folder is there, and the agent looked for a typo."""
    if file == "ABSOLUTE":
        file = str(workspace / "pkg")
    with pytest.raises(FolderNotFile) as caught:
        resolve_file(file, workspace)
    assert str(caught.value) == f"{file!r} is a folder, not a file; name a file in it"
    assert isinstance(caught.value, NoSuchFile)  # what cannot be read as a file, wherever that is caught


def test_a_file_uri_of_a_file_inside_the_workspace_names_that_file(workspace: Path) -> None:
    """Before, "no such file 'file:///…/pkg/a.py'": the URI a language server or an editor gives was no file."""
    assert resolve_file((workspace / "pkg" / "a.py").as_uri(), workspace) == (workspace / "pkg" / "a.py").resolve()
    (workspace / "with space é.py").write_text("")
    spaced = (workspace / "with space é.py").as_uri()
    assert "%20" in spaced
    assert resolve_file(spaced, workspace) == (workspace / "with space é.py").resolve()
    assert resolve_file("FILE://" + str(workspace / "top.py"), workspace) == (workspace / "top.py").resolve()


@pytest.mark.parametrize("uri", ["SECRET", "file://other-host/etc/passwd", "LINK"])
def test_a_file_uri_outside_the_workspace_is_refused_as_an_outside_path_is(workspace: Path, uri: str) -> None:
    uri = {"SECRET": (workspace.parent / "secret.py").as_uri(), "LINK": (workspace / "out.py").as_uri()}.get(uri, uri)
    with pytest.raises(FileOutsideWorkspace) as caught:
        resolve_file(uri, workspace)
    assert str(caught.value) == f"file {uri!r} is outside the workspace {workspace.resolve()}; name a file inside it"


def test_a_missing_file_is_said_with_the_folder_a_relative_path_starts_at(workspace: Path) -> None:
    """Before, only "no such file 'missing.py' in the workspace": neither which folder, nor what to give instead."""
    with pytest.raises(NoSuchFile) as caught:
        resolve_file("missing.py", workspace)
    root = workspace.resolve()
    assert str(caught.value) == (
        f"no such file 'missing.py' in the workspace {root}; name it relative to that folder, or by its absolute path"
    )


@pytest.mark.parametrize("file", ["repo/pkg/a.py", "src/repo/pkg/a.py", "x/pkg/a.py"])
def test_a_path_written_from_another_folder_says_which_file_of_the_workspace_it_names(
    workspace: Path, file: str
) -> None:
    with pytest.raises(NoSuchFile) as caught:
        resolve_file(file, workspace)
    assert str(caught.value) == (
        f"no such file {file!r} in the workspace {workspace.resolve()}; did you mean 'pkg/a.py'? (a relative path "
        "starts at the workspace folder)"
    )


@pytest.mark.parametrize("file", ["a.py", "ABSOLUTE"])
def test_a_path_missing_its_first_folders_says_the_one_file_of_the_workspace_it_names(
    workspace: Path, file: str
) -> None:
    """Before, "no such file 'a.py'", though pkg/a.py is the only a.py of the workspace."""
    if file == "ABSOLUTE":
        file = str(workspace / "a.py")
    with pytest.raises(NoSuchFile) as caught:
        resolve_file(file, workspace)
    assert str(caught.value) == (
        f"no such file {file!r} in the workspace {workspace.resolve()}; did you mean 'pkg/a.py'? (a relative path "
        "starts at the workspace folder)"
    )


@pytest.mark.parametrize("planted", ["other/a.py", ".venv/lib/b.py", "node_modules/m/b.py", ".git/b.py"])
def test_no_file_is_guessed_among_several_nor_in_installed_or_hidden_folders(workspace: Path, planted: str) -> None:
    (workspace / planted).parent.mkdir(parents=True)
    (workspace / planted).write_text("")
    file = Path(planted).name
    with pytest.raises(NoSuchFile) as caught:
        resolve_file(file, workspace)
    assert "did you mean" not in str(caught.value)


def test_the_search_for_a_file_meant_gives_up_beyond_its_bound(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lsp_text, "SEARCH_MAX_ENTRIES", 3)
    for n in range(5):
        (workspace / f"f{n}.txt").write_text("")
    with pytest.raises(NoSuchFile) as caught:
        resolve_file("a.py", workspace)
    assert "did you mean" not in str(caught.value)


def test_a_workspace_reached_through_a_symlink_still_contains_its_files(workspace: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(workspace, target_is_directory=True)
    assert resolve_file("pkg/a.py", alias) == (workspace / "pkg" / "a.py").resolve()
    assert resolve_file(os.fspath(alias / "top.py"), alias) == (workspace / "top.py").resolve()


def test_a_documents_text_is_utf_8_without_a_leading_byte_order_mark() -> None:
    assert document_text(b"\xef\xbb\xbfx = 1\n") == "x = 1\n"
    assert document_text(b"x = '\xef\xbb\xbf'\n") == "x = '\ufeff'\n"  # one inside the text is text
    assert document_text("# café\n".encode("latin-1")) == "# caf\ufffd\n"
