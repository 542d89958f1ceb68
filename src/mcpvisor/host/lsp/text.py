"""Positions and documents between the tools and the wire (LSP.md §6.4, §6.6). Pure, except
:func:`resolve_file`, which asks the file system where a path really leads.

The tools speak the way a person reads a file: 1-based lines, and 1-based columns counted in Unicode
code points. The wire speaks LSP's default: 0-based lines, and 0-based columns counted in UTF-16 code
units, so a character outside the Basic Multilingual Plane (an emoji) is one column for the tool and
two for the wire::

    x = "😀😀"; y = 1      'y' is character 11 (1-based) for the tool, {"character": 12} on the wire

Lines end the LSP way: at ``\\n``, ``\\r\\n`` or ``\\r`` (not at the other separators
``str.splitlines`` knows, such as form feed or U+2028).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

import anyio

from mcpvisor.core.errors import McpvisorError

__all__ = [
    "FileOutsideWorkspace",
    "FolderNotFile",
    "Lines",
    "NoSuchFile",
    "character_of",
    "document_text",
    "from_wire",
    "path_of",
    "relative",
    "resolved",
    "resolve_file",
    "to_wire",
    "uri_of",
    "utf16_column",
]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
UTF8_BOM = b"\xef\xbb\xbf"
SEARCH_MAX_ENTRIES = 20_000
"""How many entries of the workspace the search for a file a missing path may have meant looks at, at most."""
SEARCH_SKIPPED = frozenset({"node_modules", "__pycache__", "site-packages", "venv"})
"""Folders that search never enters (nor hidden ones: ``.git``, ``.venv``): installed and generated files."""


def _units(char: str) -> int:
    """How many UTF-16 code units one code point takes."""
    return 2 if ord(char) > 0xFFFF else 1


def utf16_column(line_text: str, character: int) -> int:
    """The 0-based UTF-16 column of the 1-based code-point ``character`` of ``line_text``; a character
    beyond the end of the line is the end of the line."""
    if character < 1:
        raise ValueError(f"character {character} is not a column: characters count from 1")
    return sum(_units(c) for c in line_text[: character - 1])


def character_of(line_text: str, utf16: int) -> int:
    """The 1-based code-point column of the 0-based UTF-16 column ``utf16`` of ``line_text``. A column in
    the middle of a surrogate pair is the character it splits; one beyond the end is just past the end."""
    units = 0
    for index, char in enumerate(line_text):
        units += _units(char)
        if units > utf16:
            return index + 1
    return len(line_text) + 1


class Lines:
    """A document's text split into lines the LSP way. ``line(n)`` is 0-based and ``""`` past the end.

    :attr:`count` is the number of lines a person sees: a final line break does not start another line,
    and empty text has none. The wire still has a position on that empty last line, and
    :func:`to_wire` accepts it.
    """

    __slots__ = ("_lines", "count")

    def __init__(self, text: str) -> None:
        self._lines = _LINE_BREAK.split(text)
        self.count = len(self._lines) - 1 if self._lines[-1] == "" else len(self._lines)

    def line(self, n0: int) -> str:
        return self._lines[n0] if 0 <= n0 < len(self._lines) else ""

    @property
    def wire_count(self) -> int:
        """The number of lines on the wire (one more than :attr:`count` after a final line break)."""
        return len(self._lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def to_wire(lines: Lines, line: int, character: int, *, file: str) -> dict[str, int]:
    """A tool's 1-based ``line`` and code-point ``character`` in ``file`` (its name as shown) as an LSP
    ``Position``; ``ValueError`` when the line is not in the file or the character not in the line."""
    if line < 1:
        raise ValueError(f"line {line} is not a line of {file}: lines count from 1")
    if line > lines.wire_count:
        raise ValueError(f"line {line} is past the end of {file} ({_count(lines.count, 'line')})")
    if character < 1:
        raise ValueError(f"character {character} is not a column of {file}:{line}: characters count from 1")
    text = lines.line(line - 1).rstrip("\r\n")
    if character > len(text) + 1:  # one past the last character is the end of the line
        raise ValueError(f"character {character} is past the end of {file}:{line} ({_count(len(text), 'character')})")
    return {"line": line - 1, "character": utf16_column(text, character)}


def from_wire(lines: Lines, position: Mapping[str, Any]) -> tuple[int, int]:
    """An LSP ``Position`` as a 1-based (line, code-point character); negative numbers count as 0."""
    line0 = max(0, int(position["line"]))
    return line0 + 1, character_of(lines.line(line0), max(0, int(position["character"])))


def document_text(data: bytes) -> str:
    """A file's bytes as the text a language server is sent and positions are counted in: UTF-8 (bytes that are
    not read as U+FFFD), without a leading byte order mark, which editors neither show nor send (with it, line 1's
    characters were one off: the server counted the mark, a person does not)."""
    return data.removeprefix(UTF8_BOM).decode("utf-8", errors="replace")


def uri_of(path: Path) -> str:
    """The ``file://`` URI of an absolute path, percent-encoded (spaces, non-ASCII)."""
    return path.as_uri()


def path_of(uri: str) -> Path | None:
    """The local path of a ``file://`` URI (percent-decoded), or ``None`` for any other URI (``jdt://``,
    ``untitled:``) or a file on another host."""
    parts = urlsplit(uri)
    if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost") or not parts.path:
        return None
    return Path(url2pathname(parts.path))  # percent-decoded; on Windows also /C:/x -> C:\\x


def relative(path: Path, root: Path) -> str:
    """``path`` relative to the workspace ``root`` in POSIX form when it is inside, else ``path`` as is."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


class FileOutsideWorkspace(McpvisorError, ValueError):
    """A tool named a file that is not inside the workspace (``..``, an absolute path elsewhere, or a
    symlink that leads out)."""

    def __init__(self, file: str, root: Path) -> None:
        super().__init__(f"file {file!r} is outside the workspace {root}; name a file inside it")
        self.file = file
        self.root = root


class NoSuchFile(McpvisorError, ValueError):
    """A tool named a file inside the workspace that does not exist (or is not a regular file); with the workspace
    ``root``, the message says where a relative path starts, and ``meant``: the file the path names from there."""

    def __init__(self, file: str, root: Path | None = None, *, meant: str | None = None) -> None:
        message = f"no such file {file!r} in the workspace"
        if meant is not None:
            message += f" {root}; did you mean {meant!r}? (a relative path starts at the workspace folder)"
        elif root is not None:
            message += f" {root}; name it relative to that folder, or by its absolute path"
        super().__init__(message)
        self.file = file
        self.root = root


class FolderNotFile(NoSuchFile):
    """A tool named a folder of the workspace where a file is needed."""

    def __init__(self, file: str, root: Path) -> None:
        super(NoSuchFile, self).__init__(f"{file!r} is a folder, not a file; name a file in it")
        self.file = file
        self.root = root


async def resolved(file: str, root: Path) -> Path:
    """:func:`resolve_file` on the event loop (a few system calls); a ``file`` that names no file is resolved again in
    a worker thread, where the workspace is searched for the file it likely meant."""
    try:
        return resolve_file(file, root, search=False)
    except NoSuchFile:
        return await anyio.to_thread.run_sync(resolve_file, file, root)


def resolve_file(file: str, root: Path, *, search: bool = True) -> Path:
    """A tool's ``file`` argument (workspace-relative, absolute, or a ``file://`` URI) as the real path of a file
    inside ``root``, symlinks followed. Reads the file system (``resolve``, ``is_file``; with ``search``, a file
    that is not there is looked for under ``root``: see :func:`_meant`), nothing else."""
    real_root = root.resolve()
    if file[:7].lower() == "file://":  # what a language server or an editor calls a file
        local = path_of(file)
        if local is None or not local.is_absolute():  # a file on another host
            raise FileOutsideWorkspace(file, real_root)
        candidate = local
    else:
        candidate = Path(file)
    real = (candidate if candidate.is_absolute() else real_root / candidate).resolve()
    if not real.is_relative_to(real_root):
        raise FileOutsideWorkspace(file, real_root)
    if file and real.is_dir():
        raise FolderNotFile(file, real_root)
    if not real.is_file():
        raise NoSuchFile(file, real_root, meant=_meant(candidate, real_root) if search else None)
    return real


def _meant(candidate: Path, root: Path) -> str | None:
    """The file of ``root`` a relative ``candidate`` names when its first folders are dropped (a path written from
    the workspace's parent, ``proj/src/a.py`` for ``src/a.py``), if one does; else the one file of ``root`` whose
    path ends as ``candidate`` does (``mod.py`` for ``pkg/mod.py``), if there is exactly one."""
    if candidate.is_absolute():
        if not candidate.is_relative_to(root):
            return None
        candidate = candidate.relative_to(root)
    parts = candidate.parts
    for start in range(1, len(parts)):
        shorter = Path(*parts[start:])
        if ".." not in shorter.parts and (root / shorter).resolve().is_relative_to(root) and (root / shorter).is_file():
            return shorter.as_posix()
    if not parts or ".." in parts or "." in parts:
        return None
    return _the_one_ending_as(parts, root)


def _the_one_ending_as(parts: tuple[str, ...], root: Path) -> str | None:
    """The one regular file under ``root`` whose relative path ends with ``parts``, looking at no more than
    :data:`SEARCH_MAX_ENTRIES` entries and never inside :data:`SEARCH_SKIPPED` folders, hidden ones or symlinks;
    ``None`` when there is none, more than one, or the search was cut short."""
    found: str | None = None
    seen = 0
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    seen += 1
                    if seen > SEARCH_MAX_ENTRIES:
                        return None
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in SEARCH_SKIPPED and not entry.name.startswith("."):
                            folders.append(Path(entry.path))
                    elif entry.name == parts[-1] and entry.is_file(follow_symlinks=False):
                        rel = Path(entry.path).relative_to(root)
                        if rel.parts[-len(parts) :] == parts:
                            if found is not None:
                                return None  # two of them: no guess
                            found = rel.as_posix()
        except OSError:
            continue
    return found
