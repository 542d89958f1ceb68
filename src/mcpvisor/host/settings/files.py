"""Reading and parsing settings files: JSON with comments and trailing commas, errors with file, line and column."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyjson5

from mcpvisor.core.errors import ConfigError
from mcpvisor.host.file_reads import read_regular

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class SettingsError:
    """A settings file that could not be read or parsed. ``line``/``column`` are 1-based when known."""

    path: Path
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = str(self.path)
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"invalid settings file {where}: {self.message}"


class SettingsFileError(ConfigError):
    """Raised by :func:`parse_settings_text`; ``report`` carries file, line, column and message."""

    def __init__(self, report: SettingsError) -> None:
        super().__init__(str(report))
        self.report = report
        self.path = report.path


# --------------------------------------------------------------------------- parsing

_JSON5_POSITION = re.compile(r"^<string>:(?P<line>\d+) (?P<msg>.*?)(?: at column (?P<col>\d+))?$", re.DOTALL)
_PYJSON5_NEAR = re.compile(r"^(?P<msg>.*?) near (?P<pos>\d+)(?P<rest>.*)$", re.DOTALL)

MAX_SETTINGS_BYTES = 10 * 1024 * 1024
"""A settings file larger than this is refused unread (no settings file is anywhere near it)."""
JSON5_FALLBACK_MAX_CHARS = 256 * 1024
"""Only a document this small is parsed again by the pure-Python ``json5`` for its error's position."""


def loads(text: str) -> Any:
    """Parse JSON with comments and trailing commas (JSON5).

    The compiled parser (``pyjson5``) reads a 400 KB file in about 2 ms, where the pure-Python
    ``json5`` takes seconds; ``json5`` only runs for a small document that does not parse, because its
    error names the line and column. Any failure is a :class:`ValueError` (never a ``RecursionError``,
    whatever the nesting)."""
    try:
        return pyjson5.loads(text)
    except pyjson5.Json5Exception as exc:
        if len(text) > JSON5_FALLBACK_MAX_CHARS:
            raise _positioned(exc, text) from None
        import json5  # only for a document that does not parse: it is not kept in memory otherwise

        try:
            return json5.loads(text)
        except RecursionError:
            raise _positioned(exc, text) from None


def _positioned(exc: Exception, text: str) -> ValueError:
    """``pyjson5``'s error in ``json5``'s shape (``<string>:LINE message at column COL``)."""
    message = str(exc.args[0]) if exc.args else str(exc)
    match = _PYJSON5_NEAR.match(message)
    if match is None:
        return ValueError(message)
    offset = max(min(int(match["pos"]) - 1, len(text)), 0)  # pyjson5 counts one past the character it names
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    if isinstance(exc, pyjson5.Json5NestingTooDeep):
        detail = "nested too deeply"
    else:
        detail = re.sub(r"b'([^']*)'", r"\1", match["msg"] + match["rest"]).replace(" starting", " that starts here")
    return ValueError(f"<string>:{line} {detail} at column {column}")


def parse_settings_text(text: str, path: Path) -> dict[str, Any]:
    """Parse a settings file's text (JSON with comments and trailing commas) into an object.

    Raises :class:`SettingsFileError` naming the file (and line and column where known) for a
    syntax error, an empty file (a non-atomic save in progress is never "no settings"), or a
    document that is not a JSON object.
    """
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise SettingsFileError(SettingsError(path, "the file is empty; expected a JSON object", 1, 1))
    try:
        value = loads(text)
    except ValueError as exc:
        if only_comments(text):
            problem = "the file holds only comments; expected a JSON object (write {} for no settings)"
            raise SettingsFileError(SettingsError(path, problem, 1, 1)) from exc
        match = _JSON5_POSITION.match(str(exc))
        if match is None:
            raise SettingsFileError(SettingsError(path, str(exc))) from exc
        column = int(match["col"]) if match["col"] else None
        raise SettingsFileError(SettingsError(path, _readable(match["msg"]), int(match["line"]), column)) from exc
    if not isinstance(value, dict):
        kind = _JSON_KINDS.get(type(value), "a value")
        raise SettingsFileError(SettingsError(path, f"expected a JSON object at the top level, found {kind}", 1, 1))
    return value


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def only_comments(text: str) -> bool:
    """Whether ``text`` holds nothing but comments and white space (a settings file commented out whole)."""
    return not _COMMENT.sub("", text.removeprefix("\ufeff")).strip()


_JSON_KINDS: dict[type, str] = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}

_UNEXPECTED = re.compile(r'^Unexpected "(?P<char>.)"$', re.DOTALL)
_CHARACTER_NAMES = {" ": "space", "\t": "tab", "\n": "line break", "\r": "carriage return"}


def _readable(message: str) -> str:
    """json5's ``Unexpected "X"`` as people read it, ``unexpected 'X'`` (a double quote shown as ``'"'``);
    whitespace by name."""
    match = _UNEXPECTED.match(message)
    if match is None:
        return message[:1].lower() + message[1:] if message.startswith("Unexpected") else message
    char = match["char"]
    shown = _CHARACTER_NAMES.get(char) or (f'"{char}"' if char == "'" else f"'{char}'")
    return f"unexpected {shown}"


def read_settings_text(path: Path) -> str | None:
    """A settings file's text; ``None`` when it does not exist. Raises :class:`SettingsFileError` for what
    cannot be read (a folder, a pipe or device, no permission, over the size limit, not UTF-8)."""
    try:
        return read_regular(path, MAX_SETTINGS_BYTES, what="a settings file")[1].decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsFileError(SettingsError(path, f"cannot read the file: {_reason(exc)}")) from exc


def _reason(exc: OSError | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        if exc.object[:2] in (b"\xff\xfe", b"\xfe\xff"):  # Notepad's "Unicode", PowerShell 5's `>`
            return "it is UTF-16 text (it starts with a UTF-16 byte order mark): save it as UTF-8"
        return f"it is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}): save it as UTF-8"
    return exc.strerror[:1].lower() + exc.strerror[1:] if exc.strerror else str(exc)


def read_settings_file(path: Path) -> dict[str, Any] | None:
    """Read and parse one settings file; ``None`` when it does not exist. Raises :class:`SettingsFileError`."""
    text = read_settings_text(path)
    return None if text is None else parse_settings_text(text, path)


def read_settings_document(path: Path) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """:func:`read_settings_file`, and a warning for each key given twice in one object (the parser keeps the
    last silently: a server pasted twice under one name would vanish without a word)."""
    text = read_settings_text(path)
    if text is None:
        return None, ()
    data = parse_settings_text(text, path)
    return data, tuple(
        f"{'.'.join(where)!r} is given twice in {path} "
        f"({f'lines {first} and {second}' if first != second else f'both on line {second}'}): only the later one "
        f"is used; remove or rename one"
        for where, first, second in duplicate_keys(text)
    )


_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<comment>//[^\n]*|/\*.*?\*/)|(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
    r"""|(?P<mark>[{}\[\]:,])|(?P<word>[^\s{}\[\]:,"'/]+)""",
    re.DOTALL,
)


def duplicate_keys(text: str) -> list[tuple[tuple[str, ...], int, int]]:
    """``(path of keys, first line, second line)`` of each key given twice in one object of ``text``, a document
    that parses (JSON with comments and trailing commas); none for one over :data:`JSON5_FALLBACK_MAX_CHARS`."""
    if len(text) > JSON5_FALLBACK_MAX_CHARS:
        return []
    found: list[tuple[tuple[str, ...], int, int]] = []
    objects: list[tuple[tuple[str, ...], dict[str, int] | None]] = []  # (path, keys seen: None in an array)
    last, last_line, line, counted = "", 1, 1, 0
    for token in _TOKEN.finditer(text):
        kind, value = token.lastgroup, token.group()
        if kind in ("space", "comment"):
            continue
        if value == ":" and objects and (keys := objects[-1][1]) is not None:
            if last in keys:
                found.append(((*objects[-1][0], last), keys[last], last_line))
            keys[last] = last_line
        elif value in "{[" and kind == "mark":
            path = objects[-1][0] if objects else ()
            if objects and objects[-1][1] is not None:
                path = (*path, last)
            objects.append((path, {} if value == "{" else None))
        elif value in "}]" and kind == "mark":
            objects.pop()
        elif kind in ("string", "word"):
            line, counted = line + text.count("\n", counted, token.start()), token.start()
            last, last_line = (_unquote(value) if kind == "string" else value), line
    return found


_ESCAPE = re.compile(r"\\x[0-9a-fA-F]{2}|\\\n|\\.|\"", re.DOTALL)


def _unquote(token: str) -> str:
    """A quoted key as JSON5 reads it, either quote, its escapes (``\\x41``, ``\\'``) and line continuations."""
    escapes = {"\\'": "'", '"': '\\"', "\\\n": ""}
    body = _ESCAPE.sub(lambda m: escapes.get(m[0], "\\u00" + m[0][2:] if m[0][1] == "x" else m[0]), token[1:-1])
    try:
        return str(json.loads(f'"{body}"'))
    except ValueError:
        return token[1:-1]


def read_json_any(path: Path) -> Any:
    """Any JSON value from a file (``None`` when it does not exist). Raises :class:`SettingsFileError`."""
    text = read_settings_text(path)
    if text is None:
        return None
    try:
        return loads(text)
    except ValueError as exc:
        raise SettingsFileError(SettingsError(path, str(exc))) from exc
