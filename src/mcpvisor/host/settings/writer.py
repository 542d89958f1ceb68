"""Writing one key of one scope's settings file (``mcpvisor mcp add/remove``, the shell).

:func:`set_setting` and :func:`delete_setting` update the in-memory :class:`Settings` *first*, then
write the file atomically (a temporary file in the same folder, then ``os.replace``), so the
watcher, re-reading the file, finds nothing new and emits no event for the app's own write.

Comments and formatting are kept: the edit is made on the text itself (the value's span is
replaced, a member inserted or removed) and the result is re-parsed and checked against the
intended content. Only when that check fails (an unusual layout the text edit cannot handle) is
the file rewritten as formatted JSON, which drops its comments; that fallback is logged.

A file that does not parse is never overwritten: :class:`SettingsFileError` is raised instead.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpvisor.core.errors import ConfigError
from mcpvisor.host.private_files import write_atomically
from mcpvisor.host.settings.files import only_comments, read_settings_text
from mcpvisor.host.settings.loader import (
    FileScope,
    Settings,
    SettingsFileError,
    parse_settings_text,
    values_equal,
)

__all__ = [
    "delete_key",
    "delete_setting",
    "edit_settings_text",
    "set_key",
    "set_setting",
    "split_key",
]

logger = logging.getLogger(__name__)

EDIT_LOCK_TIMEOUT_S = 10.0
"""How long an edit waits for another mcpvisor command editing the same settings folder."""

_PRIVATE_SCOPES: frozenset[FileScope] = frozenset({"user"})


def split_key(key: str | Sequence[str]) -> tuple[str, ...]:
    """A dotted key as path segments; pass a sequence for names containing dots."""
    parts = tuple(key.split(".")) if isinstance(key, str) else tuple(key)
    if not parts or any(not p for p in parts):
        raise ValueError(f"invalid settings key {key!r}")
    return parts


# --------------------------------------------------------------------------- pure edits of data


class NotAnObject(ValueError):
    """A parent of the key to set holds a value that is not an object: setting the key would drop it."""

    def __init__(self, key: Sequence[str], value: Any) -> None:
        super().__init__(f"{'.'.join(key)} is {_kind(value)}, not an object")
        self.key = tuple(key)


def set_key(data: Mapping[str, Any], path: Sequence[str], value: Any, *, _at: Sequence[str] = ()) -> dict[str, Any]:
    """A copy of ``data`` with ``path`` set to ``value``; missing (or null) parents become objects. Raises
    :class:`NotAnObject` when a parent holds anything else: nothing a person wrote is dropped silently."""
    out = dict(data)
    head, rest = path[0], path[1:]
    if not rest:
        out[head] = value
    else:
        child = out.get(head)
        if child is not None and not isinstance(child, Mapping):
            raise NotAnObject((*_at, head), child)
        out[head] = set_key(child or {}, rest, value, _at=(*_at, head))
    return out


def _kind(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def delete_key(data: Mapping[str, Any], path: Sequence[str]) -> tuple[dict[str, Any], bool]:
    """A copy of ``data`` without ``path``, and whether it was there."""
    out = dict(data)
    head, rest = path[0], path[1:]
    if head not in out:
        return out, False
    if not rest:
        del out[head]
        return out, True
    child = out[head]
    if not isinstance(child, Mapping):
        return out, False
    out[head], found = delete_key(child, rest)
    return out, found


# --------------------------------------------------------------------------- text edits (comments kept)


class _EditError(Exception):
    pass


@dataclass
class _Member:
    key: str
    start: int
    value_start: int
    value_end: int
    node: _Object | None


@dataclass
class _Object:
    open: int
    close: int = -1
    members: list[_Member] = field(default_factory=list)

    def find(self, key: str) -> _Member | None:
        found = [m for m in self.members if m.key == key]
        return found[-1] if found else None


class _Scanner:
    """Finds the spans of objects and members in a JSON-with-comments document already known to parse."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def skip(self) -> None:
        text, n = self.text, len(self.text)
        while self.i < n:
            if text[self.i].isspace():
                self.i += 1
            elif text.startswith("//", self.i):
                end = text.find("\n", self.i)
                self.i = n if end < 0 else end + 1
            elif text.startswith("/*", self.i):
                end = text.find("*/", self.i + 2)
                if end < 0:
                    raise _EditError("unterminated comment")
                self.i = end + 2
            else:
                return

    def peek(self) -> str:
        self.skip()
        if self.i >= len(self.text):
            raise _EditError("unexpected end")
        return self.text[self.i]

    def string(self) -> str:
        quote, start = self.text[self.i], self.i
        self.i += 1
        while self.i < len(self.text):
            c = self.text[self.i]
            if c == "\\":
                self.i += 2
                continue
            self.i += 1
            if c == quote:
                import json5  # what an edit needs is not kept in memory by a host that never edits

                decoded: str = json5.loads(self.text[start : self.i])
                return decoded
        raise _EditError("unterminated string")

    def scalar(self) -> None:
        start = self.i
        while self.i < len(self.text) and self.text[self.i] not in ",]}:/" and not self.text[self.i].isspace():
            self.i += 1
        if self.i == start:
            raise _EditError(f"unexpected {self.text[self.i]!r}")

    def value(self) -> tuple[int, int, _Object | None]:
        c = self.peek()
        start = self.i
        node = None
        if c == "{":
            node = self.obj()
        elif c == "[":
            self.i += 1
            while self.peek() != "]":
                self.value()
                if self.peek() == ",":
                    self.i += 1
            self.i += 1
        elif c in "\"'":
            self.string()
        else:
            self.scalar()
        return start, self.i, node

    def obj(self) -> _Object:
        node = _Object(open=self.i)
        self.i += 1
        while self.peek() != "}":
            start = self.i
            if self.text[self.i] in "\"'":
                key = self.string()
            else:
                self.scalar()
                key = self.text[start : self.i]
            if self.peek() != ":":
                raise _EditError("expected ':'")
            self.i += 1
            value_start, value_end, child = self.value()
            node.members.append(_Member(key, start, value_start, value_end, child))
            if self.peek() == ",":
                self.i += 1
        node.close = self.i
        self.i += 1
        return node


def _line_indent(text: str, pos: int) -> str:
    line_start = text.rfind("\n", 0, pos) + 1
    prefix = text[line_start:pos]
    return prefix if not prefix.strip() else prefix[: len(prefix) - len(prefix.lstrip())]


def _dump(value: Any, indent: str, unit: str) -> str:
    return json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", "\n" + indent)


def _nest(path: Sequence[str], value: Any) -> Any:
    for part in reversed(path):
        value = {part: value}
    return value


def _next_token(text: str, pos: int) -> int:
    scanner = _Scanner(text)
    scanner.i = pos
    scanner.skip()
    return scanner.i


def _insert(text: str, node: _Object, key: str, value: Any, unit: str) -> str:
    inner = text[node.open + 1 : node.close]
    if not node.members and not inner.strip():
        close_indent = _line_indent(text, node.open)
        indent = close_indent + unit
        member = f"{json.dumps(key)}: {_dump(value, indent, unit)}"
        return f"{text[: node.open + 1]}\n{indent}{member}\n{close_indent}{text[node.close :]}"
    if "\n" not in inner:
        member = f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}"
        if not node.members:
            return f"{text[: node.close]}{member}{text[node.close :]}"
        return _after_last(text, node, member, " ")
    anchor = node.members[0].start if node.members else node.open
    indent = _line_indent(text, anchor) if node.members else _line_indent(text, node.open) + unit
    member = f"{json.dumps(key, ensure_ascii=False)}: {_dump(value, indent, unit)}"
    if not node.members:
        return f"{text[: node.open + 1]}\n{indent}{member},{text[node.open + 1 :]}"
    return _after_last(text, node, member, f"\n{indent}")


def _after_last(text: str, node: _Object, member: str, space: str) -> str:
    """``text`` with ``member`` after ``node``'s last, ``space`` before it (a trailing comma stays trailing)."""
    last = node.members[-1]
    after = _next_token(text, last.value_end)
    if text[after] == ",":
        return f"{text[: after + 1]}{space}{member},{text[after + 1 :]}"
    return f"{text[: last.value_end]},{space}{member}{text[last.value_end :]}"


def _remove(text: str, node: _Object, member: _Member) -> str:
    start, end = member.start, member.value_end
    after = _next_token(text, end)
    if text[after] == ",":
        end = after + 1
    else:
        index = node.members.index(member)
        if index > 0:
            before = _next_token(text, node.members[index - 1].value_end)
            if text[before] == ",":
                start = before
    line_start = text.rfind("\n", 0, start) + 1
    if not text[line_start:start].strip():
        rest = len(text[end:]) - len(text[end:].lstrip(" \t"))
        if text[end + rest : end + rest + 1] == "\n":
            start, end = line_start, end + rest + 1
    return text[:start] + text[end:]


def _indent_unit(text: str, root: _Object) -> str:
    if root.members:
        indent = _line_indent(text, root.members[0].start)
        if indent and text.rfind("\n", 0, root.members[0].start) > root.open:
            return indent
    return "  "


def edit_settings_text(text: str, path: Sequence[str], value: Any = None, *, delete: bool = False) -> str:
    """Set (or delete) ``path`` in a settings file's text, keeping comments and layout.

    Raises ``ValueError`` when the text cannot be edited in place (the caller rewrites the file).
    """
    scanner = _Scanner(text.removeprefix("\ufeff"))
    offset = len(text) - len(scanner.text)
    try:
        if scanner.peek() != "{":
            raise _EditError("not an object")
        root = scanner.obj()
        unit = _indent_unit(scanner.text, root)
        node = root
        doc = scanner.text
        for depth, part in enumerate(path):
            member = node.find(part)
            last = depth == len(path) - 1
            if member is None:
                if delete:
                    return text
                doc = _insert(doc, node, part, _nest(path[depth + 1 :], value), unit)
                break
            if last and delete:
                doc = _remove(doc, node, member)
                break
            if last or member.node is None:
                indent = _line_indent(doc, member.start)
                new = _dump(_nest(path[depth + 1 :], value), indent, unit)
                doc = doc[: member.value_start] + new + doc[member.value_end :]
                break
            node = member.node
    except (_EditError, IndexError, ValueError) as exc:
        raise ValueError(f"cannot edit the text in place: {exc}") from exc
    return text[:offset] + doc


# --------------------------------------------------------------------------- files


def _render(path: Path, text: str | None, parts: Sequence[str], value: Any, delete: bool, expected: Any) -> str:
    if text is not None:
        try:
            edited = edit_settings_text(text, parts, value, delete=delete)
            if values_equal(parse_settings_text(edited, path), expected):
                return edited
        except (ValueError, SettingsFileError):
            pass
        logger.warning("rewrote %s as formatted JSON (its comments could not be kept)", path)
    return json.dumps(expected, indent=2, ensure_ascii=False) + "\n"


@contextmanager
def _editing(path: Path) -> Iterator[None]:
    """Hold the edit lock of settings file ``path``: an exclusive lock on its folder (where it really is; the nearest
    folder that exists), so that two mcpvisor commands editing the file at once each keep the other's edit (six
    concurrent ``mcp add`` kept three to five of them). An advisory lock on the folder itself leaves no lock file
    beside the user's; an editor's save is not held off. Where the OS has no such locks (Windows), none is held."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    folder = Path(os.path.realpath(path)).parent
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    fd = os.open(folder, os.O_RDONLY)
    try:
        deadline = time.monotonic() + EDIT_LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(f"{path} is being edited by another mcpvisor command; try again") from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # and with it the lock


def _apply(settings: Settings, scope: FileScope, key: str | Sequence[str], value: Any, *, delete: bool) -> bool:
    with _editing(settings.paths.of(scope)):
        return _apply_locked(settings, scope, key, value, delete=delete)


def _apply_locked(settings: Settings, scope: FileScope, key: str | Sequence[str], value: Any, *, delete: bool) -> bool:
    parts = split_key(key)
    path = settings.paths.of(scope)
    text = read_settings_text(path)
    kept = ""
    if text is not None and only_comments(text):  # empty (made with touch, say), or commented out whole
        kept, text = text.removeprefix("\ufeff").rstrip(), None  # a new document, below the comments
    on_disk = parse_settings_text(text, path) if text is not None else {}
    if delete:
        new_disk, found_on_disk = delete_key(on_disk, parts)
        new_memory, found_in_memory = delete_key(settings.data(scope), parts)
        if not found_on_disk:
            settings.replace_scope_data(scope, new_memory)
            return found_in_memory
    else:
        try:
            new_disk = set_key(on_disk, parts, value)
            new_memory = set_key(settings.data(scope), parts, value)
        except NotAnObject as exc:
            raise ConfigError(
                f"cannot set {'.'.join(parts)} in {path}: {exc}; fix or remove {'.'.join(exc.key)} there first "
                "(the file is left as it is)"
            ) from exc
    rendered = (kept and kept + "\n") + _render(path, text, parts, value, delete, new_disk)
    previous = dict(settings.data(scope))
    settings.replace_scope_data(scope, new_memory)
    try:
        write_atomically(path, rendered, new_mode=0o600 if scope in _PRIVATE_SCOPES else 0o644)
    except BaseException:
        settings.replace_scope_data(scope, previous)
        raise
    logger.info("%s %s in %s", "removed" if delete else "set", ".".join(parts), path)
    return True


def set_setting(settings: Settings, scope: FileScope, key: str | Sequence[str], value: Any) -> None:
    """Set ``key`` (dotted, or a sequence of segments) to a JSON value in ``scope``'s file.

    E.g. ``set_setting(settings, "user", ("mcpServers", "github"), {"command": "gh-mcp"})``.
    Memory first, then an atomic write; the file's other content and comments are kept.
    Raises :class:`SettingsFileError` if the file does not parse (it is left untouched) and
    ``OSError`` if it cannot be written (memory is then restored).
    """
    _apply(settings, scope, key, value, delete=False)


def delete_setting(settings: Settings, scope: FileScope, key: str | Sequence[str]) -> bool:
    """Remove ``key`` from ``scope``'s file; returns whether it was there (on disk or in memory)."""
    return _apply(settings, scope, key, None, delete=True)
