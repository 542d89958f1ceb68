"""What the ``lsp`` tools return (LSP.md §6.6): small frozen models with workspace-relative paths and
1-based positions, each result with a compact text rendering for the tool's text content. Pure.

The models are filled from the servers' raw answers by :mod:`mcpvisor.host.lsp.normalize`; a name
path is looked up in a symbol list by :func:`find_symbol`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Call",
    "CallsResult",
    "Diag",
    "DiagnosticsResult",
    "Direction",
    "FileDiagnostics",
    "FileEdits",
    "HoverResult",
    "Loc",
    "LocationsResult",
    "ReferencesResult",
    "RenameResult",
    "ServerStatus",
    "Severity",
    "StatusResult",
    "Sym",
    "SymbolsResult",
    "TextEdit",
    "ToolResult",
    "WorkspaceSymbol",
    "WorkspaceSymbolsResult",
    "find_symbol",
]

Severity = Literal["error", "warning", "info", "hint"]
Direction = Literal["incoming", "outgoing"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolResult(_Model):
    """What one tool returns: its JSON is the structured content, :meth:`render` the text content."""

    def render(self) -> str:
        raise NotImplementedError


def _truncation(truncated: bool, shown: int) -> list[str]:
    return [f"(cut at {shown}; raise 'limit' for more)"] if truncated else []


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


class Loc(_Model):
    """A range in a file: ``file`` is workspace-relative (POSIX) or absolute outside the workspace;
    lines and characters are 1-based, characters in code points; ``preview`` is the stripped first line (at most
    200 characters of it, around the start of the range on a longer line)."""

    file: str
    line: int
    character: int
    end_line: int
    end_character: int
    preview: str | None = None

    @property
    def position(self) -> str:
        """``file:line:character``."""
        return f"{self.file}:{self.line}:{self.character}"

    def render(self) -> str:
        return f"{self.position}  {self.preview}" if self.preview else self.position


class Sym(_Model):
    """A symbol: ``kind`` is the SymbolKind name (``"Class"``); ``loc`` is where its name is."""

    name: str
    kind: str
    detail: str | None = None
    container: str | None = None
    loc: Loc
    children: list[Sym] = []

    @property
    def title(self) -> str:
        """``Kind container.name``."""
        return f"{self.kind} {self.container}.{self.name}" if self.container else f"{self.kind} {self.name}"

    def pruned(self, depth: int) -> Sym:
        """This symbol with ``depth`` levels of its descendants (0: none)."""
        return self.model_copy(update={"children": [] if depth == 0 else [c.pruned(depth - 1) for c in self.children]})

    def walk(self, depth: int = 0) -> Iterator[tuple[int, Sym]]:
        """This symbol and its descendants, depth first, with their depth below this one."""
        yield depth, self
        for child in self.children:
            yield from child.walk(depth + 1)


class Diag(_Model):
    severity: Severity
    message: str
    source: str | None = None
    code: str | None = None
    loc: Loc

    def render(self) -> str:
        origin = " ".join(part for part in (self.source, self.code) if part)
        suffix = f" ({origin})" if origin else ""
        return f"{self.loc.position} {self.severity}: {_one_line(self.message)}{suffix}"


class LocationsResult(ToolResult):
    """``go_to_definition``, ``go_to_type_definition``, ``go_to_implementation``."""

    server: str
    locations: list[Loc]
    truncated: bool

    def render(self, what: str = "location") -> str:
        """``what`` names one location (``"definition"``, ``"implementation"``)."""
        if not self.locations:
            return f"no {what} found"
        lines = [f"{_plural(len(self.locations), what)}:", *(f"  {loc.render()}" for loc in self.locations)]
        return "\n".join([*lines, *_truncation(self.truncated, len(self.locations))])


class ReferencesResult(ToolResult):
    server: str
    references: list[Loc]
    file_count: int
    truncated: bool

    def render(self) -> str:
        if not self.references:
            return "no references found"
        head = f"{_plural(len(self.references), 'reference')} in {_plural(self.file_count, 'file')}:"
        lines = [head, *(f"  {loc.render()}" for loc in self.references)]
        return "\n".join([*lines, *_truncation(self.truncated, len(self.references))])


class HoverResult(ToolResult):
    server: str
    contents: str
    range: Loc | None

    def render(self) -> str:
        return self.contents if self.contents.strip() else "no hover information"


def _symbol_lines(symbols: list[Sym], *, with_file: bool) -> list[str]:
    lines = []
    for top in symbols:
        for depth, sym in top.walk():
            at = sym.loc.position if with_file else f"{sym.loc.line}:{sym.loc.character}"
            detail = f"  {_one_line(sym.detail)}" if sym.detail else ""
            lines.append(f"{'  ' * (depth + 1)}{sym.title}{detail}  {at}")
    return lines


class SymbolsResult(ToolResult):
    """``document_symbols``: nested as the server gave them (flat when it gave ``SymbolInformation``)."""

    server: str
    symbols: list[Sym]
    truncated: bool

    def render(self) -> str:
        if not self.symbols:
            return "no symbols found"
        count = sum(1 for top in self.symbols for _ in top.walk())
        head = f"{_plural(count, 'symbol')} in {self.symbols[0].loc.file}:"
        lines = [head, *_symbol_lines(self.symbols, with_file=False)]
        return "\n".join([*lines, *_truncation(self.truncated, count)])


class WorkspaceSymbol(Sym):
    server: str


class WorkspaceSymbolsResult(ToolResult):
    symbols: list[WorkspaceSymbol]
    truncated: bool
    not_asked: list[str] = []
    """The servers that could not be asked, each with why (``"go: failed — …"``): their symbols are missing."""

    def render(self) -> str:
        skipped = [f"(not asked: {why})" for why in self.not_asked]
        if not self.symbols:
            return "\n".join(["no symbols found", *skipped])
        several = len({sym.server for sym in self.symbols}) > 1
        lines = [f"{_plural(len(self.symbols), 'symbol')}:"]
        for sym in self.symbols:
            line = _symbol_lines([sym.model_copy(update={"children": []})], with_file=True)[0]
            lines.append(f"{line}  [{sym.server}]" if several else line)
        return "\n".join([*lines, *_truncation(self.truncated, len(self.symbols)), *skipped])


class Call(_Model):
    """One call edge: ``symbol`` is the caller (incoming) or the callee (outgoing); ``at`` are the call
    sites, which are in the caller's file either way."""

    symbol: Sym
    at: list[Loc]


class CallsResult(ToolResult):
    """``incoming_calls`` and ``outgoing_calls`` of ``item``, the symbol at the position asked about."""

    server: str
    item: Sym
    calls: list[Call]
    truncated: bool

    def render(self, direction: Direction | None = None) -> str:
        """``direction`` words the heading (``callers of`` / ``calls from``); without it, neutral."""
        subject = f"{self.item.title} ({self.item.loc.position})"
        noun, head = {
            "incoming": ("caller", "of"),
            "outgoing": ("callee", "from"),
            None: ("call", "for"),
        }[direction]
        if not self.calls:
            return f"no {noun}s found {head} {subject}"
        lines = [f"{_plural(len(self.calls), noun)} {head} {subject}:"]
        for call in self.calls:
            home = self.item.loc.file if direction == "outgoing" else call.symbol.loc.file
            sites = ", ".join(f"{loc.line}:{loc.character}" if loc.file == home else loc.position for loc in call.at)
            lines.append(f"  {call.symbol.title}  {call.symbol.loc.position}" + (f"  at {sites}" if sites else ""))
        return "\n".join([*lines, *_truncation(self.truncated, len(self.calls))])


class FileDiagnostics(_Model):
    """A file's diagnostics from one language server (``server``; a file several servers check is listed once for
    each); ``fresh`` is false when the server had not re-checked the current text. ``problem``: why the file could
    not be checked (the other files named with it were)."""

    file: str
    server: str | None = None
    fresh: bool
    diagnostics: list[Diag] = []
    problem: str | None = None


class DiagnosticsResult(ToolResult):
    files: list[FileDiagnostics]

    def render(self) -> str:
        if not self.files:
            return "no files to check"
        lines = []
        servers = {entry.server for entry in self.files if entry.server is not None}
        for entry in self.files:
            file = f"{entry.file} ({entry.server})" if len(servers) > 1 and entry.server else entry.file
            if entry.problem is not None:
                lines.append(f"{file}: not checked: {entry.problem}")
                continue
            if not entry.fresh:
                lines.append(f"{file}: not re-checked yet; these may be stale")
            if not entry.diagnostics:
                lines.append(f"{file}: no diagnostics")
            lines.extend(diag.render() for diag in entry.diagnostics)
        return "\n".join(lines)


class TextEdit(_Model):
    loc: Loc
    new_text: str


class FileEdits(_Model):
    file: str
    edits: list[TextEdit]


class RenameResult(ToolResult):
    """``rename_preview``: the edits a rename would make; nothing is written."""

    server: str
    changes: list[FileEdits]
    file_count: int

    def render(self) -> str:
        count = sum(len(entry.edits) for entry in self.changes)
        if not count:
            return "no changes"
        lines = [f"{_plural(count, 'edit')} in {_plural(self.file_count, 'file')}:"]
        for entry in self.changes:
            for edit in entry.edits:
                loc = edit.loc
                lines.append(f"  {loc.position}-{loc.end_line}:{loc.end_character}  -> {edit.new_text!r}")
        return "\n".join(lines)


class ServerStatus(_Model):
    name: str
    languages: list[str]
    extensions: list[str]
    state: str
    pid: int | None = None
    open_documents: int = 0
    operations: list[str] = []
    last_error: str | None = None

    def render(self) -> str:
        facts = [f"pid {self.pid}"] if self.pid is not None else []
        if self.open_documents:
            facts.append(_plural(self.open_documents, "open document"))
        name = self.name if self.name.strip() else repr(self.name)  # (an invalid entry with a blank name)
        parts = [name, self.state, *([", ".join(facts)] if facts else [])]
        if self.extensions:
            parts.append(" ".join(self.extensions))
        line = "  ".join(parts)
        return f"{line} — {_one_line(self.last_error)}" if self.last_error else line


class StatusResult(ToolResult):
    servers: list[ServerStatus]
    problems: list[str] = []
    """A configuration file that does not parse (where, why, and what stays in force)."""

    def render(self) -> str:
        problems = [f"! {problem}" for problem in self.problems]
        if not self.servers:
            return "\n".join([*problems, "no language servers configured"])
        return "\n".join([*problems, *(server.render() for server in self.servers)])


_SUFFIX = re.compile(r"\s*[(<].*$")


def _bare(name: str) -> str:
    """A name without a parameter list or type arguments (``greet(String)`` → ``greet``)."""
    return _SUFFIX.sub("", name) or name


def _chains(symbols: list[Sym], parents: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Sym]]:
    """Each symbol with its name path: its ancestors in a nested list, else its dotted ``container``."""
    for sym in symbols:
        outer = parents or (tuple(sym.container.split(".")) if sym.container else ())
        chain = (*outer, sym.name)
        yield chain, sym
        yield from _chains(sym.children, chain)


def _ends_with(chain: tuple[str, ...], query: tuple[str, ...]) -> bool:
    return len(query) <= len(chain) and chain[len(chain) - len(query) :] == query


def find_symbol(symbols: list[Sym], name: str) -> list[Sym]:
    """Every symbol a name path (``"User"``, ``"User.greet"``, ``"models.User.greet"``) names, matched
    from the end against a nested list (ancestors) or a flat one (``container``), in list order.

    Exact matches win: the whole path ends the symbol's path. Only when there are none, looser ones are
    returned: names compared without parameter lists or type arguments (``greet(String)``), and leading
    parts of the path the symbols do not have (a module name) ignored; of those, the ones that matched
    the most parts. Several results: ambiguous.
    """
    query = tuple(part for part in name.split(".") if part)
    if not query:
        return []
    chains = list(_chains(symbols))
    exact = [sym for chain, sym in chains if _ends_with(chain, query)]
    if exact:
        return exact
    loose: list[tuple[int, Sym]] = []
    for chain, sym in chains:
        bare = tuple(_bare(part) for part in chain)
        tail = tuple(_bare(part) for part in query[-len(bare) :])
        if _ends_with(bare, tail):
            loose.append((len(tail), sym))
    best = max((matched for matched, _ in loose), default=0)
    return [sym for matched, sym in loose if matched == best]
