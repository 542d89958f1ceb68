"""Servers' raw answers (JSON, in whichever of the shapes LSP allows the server chose) as the models of
:mod:`mcpvisor.host.lsp.results`. Pure: a file's text comes from ``text_of`` (the open document, or
``None`` when it is unknown).

Wire positions are 0-based with UTF-16 columns; they become 1-based code-point positions through the
file's text. Without the text a UTF-16 column is taken as a code-point column (right for ASCII), and
the location has no preview. Entries that are not objects or lack a usable range are skipped, as are
locations in files that are not ``file://`` URIs (``jdt://`` class files, ``untitled:`` buffers) —
except call hierarchy items, which keep such a URI as their ``file``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from mcpvisor.host.lsp.results import Call, Diag, FileEdits, Loc, Severity, Sym, TextEdit, WorkspaceSymbol
from mcpvisor.host.lsp.text import Lines, from_wire, path_of, relative, uri_of

__all__ = [
    "PREVIEW_CHARS",
    "SYMBOL_KINDS",
    "TextOf",
    "call_item",
    "calls",
    "diagnostics",
    "hover_range",
    "hover_text",
    "locations",
    "symbols",
    "workspace_edit",
    "workspace_symbols",
]

TextOf = Callable[[Path], str | None]
"""A file's current text, or ``None`` when it is not known."""

PREVIEW_CHARS = 200
PREVIEW_LEAD_CHARS = 40
"""How much of a long line a preview shows before the location it is about, when the location lies past its start."""

SYMBOL_KINDS: dict[int, str] = dict(
    enumerate(
        (
            "File", "Module", "Namespace", "Package", "Class", "Method", "Property", "Field", "Constructor",
            "Enum", "Interface", "Function", "Variable", "Constant", "String", "Number", "Boolean", "Array",
            "Object", "Key", "Null", "EnumMember", "Struct", "Event", "Operator", "TypeParameter",
        ),
        start=1,
    )
)  # fmt: skip
"""LSP ``SymbolKind`` numbers and their names; other numbers are ``"Unknown"``."""

_SEVERITIES: dict[int, Severity] = {1: "error", 2: "warning", 3: "info", 4: "hint"}
_FILE_OPERATIONS = frozenset({"create", "rename", "delete"})


def _preview(line_text: str, character: int) -> str:
    """The source line of a location at the 1-based ``character``, stripped and cut to :data:`PREVIEW_CHARS`; on a
    longer line (minified or generated code) the cut keeps the location in view, ``…`` marking what is left out."""
    stripped = line_text.strip()
    at = max(0, character - 1 - (len(line_text) - len(line_text.lstrip())))  # where it is in the stripped line
    if len(stripped) <= PREVIEW_CHARS or at + PREVIEW_LEAD_CHARS <= PREVIEW_CHARS:
        return stripped[:PREVIEW_CHARS]
    start = at - PREVIEW_LEAD_CHARS
    end = start + PREVIEW_CHARS - 2
    return "…" + stripped[start:end] + ("…" if end < len(stripped) else "")


class _Files:
    """``text_of`` asked once per file within one answer, and the location factory built on it."""

    def __init__(self, root: Path, text_of: TextOf) -> None:
        self._root = root
        self._text_of = text_of
        self._lines: dict[Path, Lines | None] = {}
        self._shown: dict[Path, str] = {}

    def shown(self, path: Path) -> str:
        """How a file is named: relative to the workspace, by its real place when that is inside it (a folder
        linked inside the workspace would name each file twice, once under the link)."""
        if path not in self._shown:
            try:
                real, root = path.resolve(), self._root.resolve()
            except (OSError, RuntimeError):
                real, root = path, self._root
            self._shown[path] = relative(real, root) if real.is_relative_to(root) else relative(path, self._root)
        return self._shown[path]

    def lines(self, path: Path) -> Lines | None:
        if path not in self._lines:
            text = self._text_of(path)
            self._lines[path] = Lines(text) if text is not None else None
        return self._lines[path]

    def at_name(self, uri: Any, loc: Loc, name: str) -> Loc:
        """``loc`` of a flat symbol, the range of its whole definition (``class User:`` starts at ``class``), moved
        to its name on its first line: where a request finds the symbol, as a ``DocumentSymbol``'s name is."""
        path = path_of(uri) if isinstance(uri, str) else None
        lines = self.lines(path) if path is not None else None
        bare = name.split("(", 1)[0].split("<", 1)[0].strip()
        pattern = re.compile(rf"(?<!\w){re.escape(bare)}(?!\w)")  # the name, not the f of "def" (a whole word)
        found = pattern.search(lines.line(loc.line - 1), loc.character - 1) if lines is not None and bare else None
        if found is None:
            return loc
        start = found.start() + 1
        return loc.model_copy(update={"character": start, "end_line": loc.line, "end_character": start + len(bare)})

    def loc(self, uri: Any, range_: Any, *, foreign: bool = False) -> Loc | None:
        """The :class:`Loc` of ``range_`` in the file ``uri``. A URI that is not a local file gives
        ``None``, or with ``foreign`` a ``Loc`` naming the URI with the wire numbers plus one."""
        if not isinstance(uri, str) or not _is_range(range_):
            return None
        path = path_of(uri)
        if path is None and not foreign:
            return None
        lines = self.lines(path) if path is not None else None
        if path is not None and lines is None and path.is_relative_to(self._root) and not path.exists():
            return None  # deleted since the server looked (its watched-file news may not have reached it yet)
        start, end = range_["start"], range_["end"]
        line, character = _position(lines, start)
        end_line, end_character = _position(lines, end)
        preview = _preview(lines.line(line - 1), character) if lines is not None else None
        return Loc(
            file=self.shown(path) if path is not None else uri,
            line=line,
            character=character,
            end_line=end_line,
            end_character=end_character,
            preview=preview or None,
        )

    def top_of(self, uri: Any) -> Loc | None:
        """The start of the file ``uri`` (a ``WorkspaceSymbol`` whose location has no range)."""
        path = path_of(uri) if isinstance(uri, str) else None
        if path is None:
            return None
        return Loc(file=self.shown(path), line=1, character=1, end_line=1, end_character=1)


def _is_position(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("line"), int) and isinstance(value.get("character"), int)


def _is_range(value: Any) -> bool:
    return isinstance(value, Mapping) and _is_position(value.get("start")) and _is_position(value.get("end"))


def _position(lines: Lines | None, position: Mapping[str, Any]) -> tuple[int, int]:
    if lines is not None:
        return from_wire(lines, position)
    return max(0, position["line"]) + 1, max(0, position["character"]) + 1


def _objects(raw: Any) -> list[Mapping[str, Any]]:
    """``raw`` as a list of objects: ``None`` is empty, one object is a list of one, non-objects dropped."""
    items: Iterable[Any] = [raw] if isinstance(raw, Mapping) else raw if isinstance(raw, list) else []
    return [item for item in items if isinstance(item, Mapping)]


def _text(value: Any) -> str | None:
    """A non-empty string field, else ``None``."""
    return value if isinstance(value, str) and value else None


def _severity(value: Any) -> Severity:
    return _SEVERITIES.get(value, "error") if isinstance(value, int) else "error"


def _kind(value: Any) -> str:
    return SYMBOL_KINDS.get(value, "Unknown") if isinstance(value, int) else "Unknown"


def locations(raw: Any, *, root: Path, text_of: TextOf) -> list[Loc]:
    """``Location | Location[] | LocationLink[] | null`` (definition, type definition, implementation,
    references) as locations, in the server's order without repeats. A ``LocationLink`` points at its
    ``targetSelectionRange`` (the name), else its ``targetRange``."""
    files = _Files(root, text_of)
    found: list[Loc] = []
    for item in _objects(raw):
        if "targetUri" in item:
            range_ = item.get("targetSelectionRange") or item.get("targetRange")
            loc = files.loc(item["targetUri"], range_)
        else:
            loc = files.loc(item.get("uri"), item.get("range"))
        if loc is not None and loc not in found:
            found.append(loc)
    return found


def _document_symbol(item: Mapping[str, Any], uri: str, files: _Files) -> Sym | None:
    loc = files.loc(uri, item.get("selectionRange")) or files.loc(uri, item.get("range"))
    name = item.get("name")
    if loc is None or not isinstance(name, str):
        return None
    children = [
        sym for child in _objects(item.get("children")) if (sym := _document_symbol(child, uri, files)) is not None
    ]
    return Sym(name=name, kind=_kind(item.get("kind")), detail=_text(item.get("detail")), loc=loc, children=children)


def _symbol_information(item: Mapping[str, Any], files: _Files) -> Sym | None:
    """A ``SymbolInformation``, or a ``WorkspaceSymbol`` (whose location may be only a ``uri``)."""
    location = item.get("location")
    name = item.get("name")
    if not isinstance(location, Mapping) or not isinstance(name, str):
        return None
    if "range" in location:
        loc = files.loc(location.get("uri"), location.get("range"))
        loc = files.at_name(location.get("uri"), loc, name) if loc is not None else None
    else:
        loc = files.top_of(location.get("uri"))
    if loc is None:
        return None
    container = _text(item.get("containerName"))
    return Sym(name=name, kind=_kind(item.get("kind")), detail=_text(item.get("detail")), container=container, loc=loc)


def symbols(raw: Any, *, path: Path, root: Path, text_of: TextOf) -> list[Sym]:
    """``DocumentSymbol[]`` (nested; ``loc`` is the name's ``selectionRange``) or ``SymbolInformation[]`` (nested
    by the ranges of their definitions; ``loc`` is the name; ``container`` is ``containerName``) of the file
    ``path`` as symbols."""
    files = _Files(root, text_of)
    uri = uri_of(path)
    items = _objects(raw)
    if items and all("location" in item for item in items):
        return _nested([(item, sym) for item in items if (sym := _symbol_information(item, files)) is not None])
    return [sym for item in items if (sym := _document_symbol(item, uri, files)) is not None]


def _nested(flat: list[tuple[Mapping[str, Any], Sym]]) -> list[Sym]:
    """Flat symbols nested by the ranges of their definitions (a method inside its class), as ``DocumentSymbol``s
    come: ``depth`` then means the same for every server."""

    def span(item: Mapping[str, Any]) -> tuple[tuple[int, int], tuple[int, int]]:
        start, end = item["location"]["range"]["start"], item["location"]["range"]["end"]
        return (start["line"], start["character"]), (end["line"], end["character"])

    roots: list[tuple[Sym, list[Any]]] = []
    open_: list[tuple[tuple[int, int], list[Any]]] = []  # the end of each enclosing symbol, and its children
    for item, sym in sorted(flat, key=lambda pair: (span(pair[0])[0], [-n for n in span(pair[0])[1]])):
        start, end = span(item)
        while open_ and not end <= open_[-1][0]:
            open_.pop()
        node: tuple[Sym, list[Any]] = (sym, [])
        (open_[-1][1] if open_ else roots).append(node)
        open_.append((end, node[1]))

    def built(node: tuple[Sym, list[Any]]) -> Sym:
        return node[0].model_copy(update={"children": [built(child) for child in node[1]]}) if node[1] else node[0]

    return [built(node) for node in roots]


def workspace_symbols(raw: Any, *, server: str, root: Path, text_of: TextOf) -> list[WorkspaceSymbol]:
    """``SymbolInformation[] | WorkspaceSymbol[] | null`` of ``server``; a location with only a ``uri``
    is the start of the file."""
    files = _Files(root, text_of)
    return [
        WorkspaceSymbol(**sym.model_dump(), server=server)
        for item in _objects(raw)
        if (sym := _symbol_information(item, files)) is not None
    ]


def _marked(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    text = _text(value.get("value")) if isinstance(value, Mapping) else None
    if isinstance(value, Mapping) and text is not None:
        text = text.strip()
        if "kind" in value or not text:  # MarkupContent: markdown or plain text, as is
            return text
        return f"```{value.get('language') or ''}\n{text}\n```"  # MarkedString {language, value}
    return ""


def hover_text(raw: Any) -> str:
    """A hover's contents as markdown: ``MarkupContent``, a ``MarkedString`` (a string, or ``{language,
    value}`` as a fenced block) or a list of them (joined by blank lines). A whole ``Hover`` is accepted."""
    if isinstance(raw, Mapping) and "contents" in raw:
        raw = raw["contents"]
    parts = raw if isinstance(raw, list) else [raw]
    return "\n\n".join(text for part in parts if (text := _marked(part)))


def hover_range(raw: Any, *, path: Path, root: Path, text_of: TextOf) -> Loc | None:
    """The ``range`` of a ``Hover`` in the file ``path``, if it has one."""
    if not isinstance(raw, Mapping):
        return None
    return _Files(root, text_of).loc(uri_of(path), raw.get("range"))


def diagnostics(raw_list: Any, *, path: Path, root: Path, text_of: TextOf) -> list[Diag]:
    """``Diagnostic[]`` of the file ``path`` (also the ``publishDiagnostics`` params or a pull report,
    whose ``diagnostics`` / ``items`` are taken). No severity means error; an int ``code`` becomes a str."""
    if isinstance(raw_list, Mapping):
        raw_list = raw_list.get("diagnostics", raw_list.get("items"))
    files = _Files(root, text_of)
    uri = uri_of(path)
    found = []
    for item in _objects(raw_list):
        loc = files.loc(uri, item.get("range"))
        message = item.get("message")
        if loc is None or not isinstance(message, str):
            continue
        code = item.get("code")
        found.append(
            Diag(
                severity=_severity(item.get("severity")),
                message=message,
                source=_text(item.get("source")),
                code=str(code) if isinstance(code, str | int) and not isinstance(code, bool) and code != "" else None,
                loc=loc,
            )
        )
    return found


def _call_item(raw_item: Any, files: _Files) -> Sym | None:
    if not isinstance(raw_item, Mapping) or not isinstance(raw_item.get("name"), str):
        return None
    uri = raw_item.get("uri")
    loc = files.loc(uri, raw_item.get("selectionRange"), foreign=True) or files.loc(
        uri, raw_item.get("range"), foreign=True
    )
    if loc is None:
        return None
    return Sym(name=raw_item["name"], kind=_kind(raw_item.get("kind")), detail=_text(raw_item.get("detail")), loc=loc)


def call_item(raw_item: Any, *, root: Path, text_of: TextOf) -> Sym:
    """A ``CallHierarchyItem`` as a symbol at its ``selectionRange``; ``ValueError`` when it is not one."""
    sym = _call_item(raw_item, _Files(root, text_of))
    if sym is None:
        raise ValueError(f"not a call hierarchy item: {raw_item!r:.200}")
    return sym


def calls(
    raw: Any,
    direction: Literal["incoming", "outgoing"],
    *,
    root: Path,
    text_of: TextOf,
    item: Any = None,
) -> list[Call]:
    """``CallHierarchyIncomingCall[]`` (``from`` is the caller) or ``CallHierarchyOutgoingCall[]``
    (``to`` is the callee) as calls. ``fromRanges`` are always in the caller's file: the ``from`` item's
    for incoming calls, and for outgoing calls the file of ``item``, the raw ``CallHierarchyItem`` the
    calls were asked for (required then)."""
    if direction == "outgoing" and not (isinstance(item, Mapping) and isinstance(item.get("uri"), str)):
        raise ValueError("outgoing calls need the item they were asked for: their ranges are in its file")
    files = _Files(root, text_of)
    key = "from" if direction == "incoming" else "to"
    found = []
    for entry in _objects(raw):
        sym = _call_item(entry.get(key), files)
        if sym is None:
            continue
        uri = entry[key]["uri"] if direction == "incoming" else item["uri"]
        sites = [loc for range_ in _objects(entry.get("fromRanges")) if (loc := files.loc(uri, range_, foreign=True))]
        found.append(Call(symbol=sym, at=sites))
    return found


def _text_edits(raw: Any, uri: str, files: _Files) -> list[TextEdit]:
    edits = []
    for edit in _objects(raw):
        new_text = edit.get("newText")
        if not isinstance(new_text, str):  # SnippetTextEdit: {snippet: {value}}
            snippet = edit.get("snippet")
            new_text = snippet.get("value") if isinstance(snippet, Mapping) else None
        loc = files.loc(uri, edit.get("range"))
        if loc is not None and isinstance(new_text, str):
            edits.append(TextEdit(loc=loc, new_text=new_text))
    return edits


def workspace_edit(raw: Any, *, root: Path, text_of: TextOf) -> list[FileEdits]:
    """A ``WorkspaceEdit`` as edits per file, files in first-seen order, edits in text order.
    ``documentChanges`` wins over ``changes`` when both are there (as the spec asks of clients); file
    operations (create, rename, delete) are skipped."""
    if not isinstance(raw, Mapping):
        return []
    files = _Files(root, text_of)
    per_uri: list[tuple[Any, Any]] = []
    if isinstance(raw.get("documentChanges"), list):
        for change in _objects(raw["documentChanges"]):
            document = change.get("textDocument")
            if change.get("kind") in _FILE_OPERATIONS or not isinstance(document, Mapping):
                continue
            per_uri.append((document.get("uri"), change.get("edits")))
    elif isinstance(raw.get("changes"), Mapping):
        per_uri.extend(raw["changes"].items())
    grouped: dict[str, list[TextEdit]] = {}
    for uri, edits in per_uri:
        if isinstance(uri, str):
            for edit in _text_edits(edits, uri, files):
                grouped.setdefault(edit.loc.file, []).append(edit)
    return [
        FileEdits(file=file, edits=sorted(edits, key=lambda e: (e.loc.line, e.loc.character)))
        for file, edits in grouped.items()
    ]
