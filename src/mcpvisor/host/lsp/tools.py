"""The language servers' operations as MCP tools: the in-process tool provider ``lsp`` (SPEC §10; LSP.md §6.6).

Registered in the session's tool registry like a server's tools, so the gateway serves them as
``mcp__lsp__<operation>``, and the shell, the library and the framework adapters get them too. They are
listed as soon as a language server is configured that is not excluded or not allowed (a pending one
counts, so that a call can say it needs approval), or an entry is invalid (a call says what to fix), and the set
never changes shape.

Inputs: ``file`` is workspace-relative, absolute inside the workspace or its ``file://`` URI; ``line`` and
``character`` are 1-based (characters as a person counts them); every position-taking tool accepts ``symbol``
(a name, optionally ``Class.method``) instead. Outputs are ``structuredContent`` matching each tool's
``outputSchema``, plus a short text. A call that cannot be answered says why, as a tool error.
Every tool is read-only: ``rename_preview`` writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from pydantic import BaseModel

from mcpvisor.core.client_requests import Progress
from mcpvisor.host.lsp import normalize
from mcpvisor.host.lsp.documents import Document, text_on_disk
from mcpvisor.host.lsp.errors import LspDocumentUnreadable
from mcpvisor.host.lsp.jsonrpc import LspError
from mcpvisor.host.lsp.manager import LspManager, Unroutable
from mcpvisor.host.lsp.results import (
    Call,
    CallsResult,
    DiagnosticsResult,
    Direction,
    FileDiagnostics,
    HoverResult,
    LocationsResult,
    ReferencesResult,
    RenameResult,
    StatusResult,
    Sym,
    SymbolsResult,
    WorkspaceSymbolsResult,
    find_symbol,
)
from mcpvisor.host.lsp.server import LanguageServer
from mcpvisor.host.lsp.status import nothing_open
from mcpvisor.host.lsp.status_tool import status_result
from mcpvisor.host.lsp.text import FileOutsideWorkspace, NoSuchFile, relative, resolved, to_wire
from mcpvisor.host.lsp.tool_specs import (
    ARGUMENTS,
    CAPABILITY,
    DIAGNOSTICS_WAIT_MS,
    TOOL_NAMES,
    TOOLS,
    WHAT,
    ToolFailure,
    argument_problem,
    error_result,
    new_name_problem,
    positive,
    render_result,
)

__all__ = ["LSP_PROVIDER", "TOOL_NAMES", "LspTools", "ToolFailure"]

logger = logging.getLogger(__name__)

LSP_PROVIDER = "lsp"
REQUEST_TIMEOUT_S = 60.0
"""Bound on one request to a ready server (a cold server's first answer waits for its startupTimeout first)."""
WORKSPACE_SETTLE_S = 5.0
"""For so long after a server became ready, an empty workspace_symbols answer is asked again every 0.5 s: basedpyright
answers before it has found the workspace's files (a first search read "no symbols" for what is there)."""
_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2, "hint": 3}
_PREVIEW_READ_BYTES = 2 * 1024 * 1024


_NOTES: ContextVar[list[str] | None] = ContextVar("lsp_call_notes", default=None)
"""What the call being answered says besides its answer (a failed server another one answered for)."""
_Target = tuple[LanguageServer, Path]
"""A file (its real path) and a language server that answers for it."""


@dataclass(frozen=True, slots=True)
class _At:
    """Where a position-taking call points: its server, the synced document and the wire position."""

    server: LanguageServer
    path: Path
    doc: Document
    position: dict[str, int]

    @property
    def params(self) -> dict[str, Any]:
        return {"textDocument": {"uri": self.doc.uri}, "position": self.position}


class LspTools:
    """The ``lsp`` tool provider over one session's :class:`LspManager`
    (a :class:`~mcpvisor.core.providers.ToolProvider`)."""

    name = LSP_PROVIDER

    def __init__(self, manager: LspManager) -> None:
        self.manager = manager
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[BaseModel]]] = {
            "status": self.status,
            "go_to_definition": self._locations("textDocument/definition", "go_to_definition"),
            "go_to_type_definition": self._locations("textDocument/typeDefinition", "go_to_type_definition"),
            "go_to_implementation": self._locations("textDocument/implementation", "go_to_implementation"),
            "find_references": self.find_references,
            "hover": self.hover,
            "document_symbols": self.document_symbols,
            "workspace_symbols": self.workspace_symbols,
            "incoming_calls": self._calls("incoming"),
            "outgoing_calls": self._calls("outgoing"),
            "diagnostics": self.diagnostics,
            "rename_preview": self.rename_preview,
        }

    @property
    def root(self) -> Path:
        return self.manager.root

    # -- ToolProvider ------------------------------------------------------------------------------

    def list_tools(self) -> list[types.Tool]:
        return list(TOOLS) if self.manager.configured() else []

    async def call_tool(
        self, tool: str, arguments: dict[str, Any], *, progress: Progress | None = None
    ) -> types.CallToolResult:
        notes: list[str] = []
        token = _NOTES.set(notes)
        try:
            result = await self.run(tool, arguments)
        except ToolFailure as exc:
            return error_result(str(exc))
        finally:
            _NOTES.reset(token)
        if isinstance(result, LocationsResult):
            text = result.render(WHAT[tool])
        elif isinstance(result, CallsResult):
            text = result.render("incoming" if tool == "incoming_calls" else "outgoing")
        else:
            text = render_result(result)
        text = "\n".join([*dict.fromkeys(notes), text])
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=result.model_dump(mode="json")
        )

    async def run(self, tool: str, arguments: dict[str, Any]) -> BaseModel:
        """Answer ``tool`` with its result model; :class:`ToolFailure` says why it cannot be answered."""
        handler = self._handlers.get(tool)
        if handler is None:
            raise ToolFailure(f"no tool {tool!r} among the language server tools: {', '.join(TOOL_NAMES)}")
        # null is "not given" (clients send it for optional fields); 2.0 is the number 2
        arguments = {
            key: int(value) if isinstance(value, float) and value.is_integer() else value
            for key, value in arguments.items()
            if value is not None
        }
        known = ARGUMENTS[tool]
        unknown = sorted(set(arguments) - known)
        if unknown:  # a misspelled name would be left out without a word, and the answer be about something else
            named = f"argument{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
            raise ToolFailure(f"{tool} has no {named}; it takes: {', '.join(sorted(known)) or 'no arguments'}")
        if problem := argument_problem(tool, arguments):  # line: true read as line 1, "bogus" as "warning"
            raise ToolFailure(problem)
        try:
            return await handler(arguments)
        except ToolFailure:
            raise
        except (Unroutable, LspError, ValueError) as exc:
            raise ToolFailure(self.manager.redact(str(exc))) from exc

    # -- shared steps --------------------------------------------------------------------------------

    def _text_of(self, server: LanguageServer | None) -> normalize.TextOf:
        cache: dict[Path, str | None] = {}

        def text_of(path: Path) -> str | None:
            if server is not None and (text := server.documents.text_of(path)) is not None:
                return text
            if path not in cache:
                try:
                    cache[path] = text_on_disk(path, _PREVIEW_READ_BYTES)
                except OSError:
                    cache[path] = None
            return cache[path]

        return text_of

    def _not_configured(self, named: object) -> ToolFailure:
        known = ", ".join(repr(n) for n in sorted(self.manager.state.servers)) or "none"
        return ToolFailure(f"no language server {named!r} is configured here (configured: {known})")

    async def _server_for(
        self, file: Any, *, tool: str | None = None, server: Any = None, sync_open: bool = True
    ) -> tuple[LanguageServer, Path]:
        """The ready server for ``file`` and its path; ``sync_open``: with its open documents in step with the disk.
        Of several servers for the file's extension, the first by name that offers ``tool``'s operation (one that
        does not start is passed over while another can answer); ``server``: that one (the caller's choice)."""
        if not isinstance(file, str) or not file:
            raise ToolFailure("give 'file': a file of the workspace (relative to it, or absolute inside it)")
        path = await resolved(file, self.root)
        candidates = self.manager.candidates(path)
        if server is not None:
            chosen = [c for c in candidates if c.name == server]
            if not chosen:
                ext = path.suffix.lower() or "extensionless"
                configured = self.manager.state.servers.get(server) if isinstance(server, str) else None
                if configured is None:
                    raise self._not_configured(server)
                if ext in configured.extension_to_language:
                    raise ToolFailure(self.manager.why_not(server))  # it does, once let start: how
                names = ", ".join(repr(c.name) for c in candidates)
                verb = "does" if len(candidates) == 1 else "do"
                raise ToolFailure(f"language server {server!r} does not answer for {ext!r} files; {names} {verb}")
            candidates = chosen
        capability = CAPABILITY.get(tool or "")
        unable: list[str] = []
        failed: Unroutable | None = None
        waiting = [c for c in candidates if self.manager.passed_over(c)]  # failed: tried only when no other answers
        for candidate in [*(c for c in candidates if c not in waiting), *waiting]:
            try:
                await self.manager.ready(candidate)
            except Unroutable as exc:
                failed = failed or exc
                unable.append(str(exc))
                waiting += [candidate] if self.manager.passed_over(candidate) and candidate not in waiting else []
                continue
            if capability is not None and not candidate.supports(capability):
                offers = ", ".join(candidate.operations())
                unable.append(f"language server {candidate.name!r} does not offer {tool} (it offers: {offers})")
                continue
            if sync_open:
                await candidate.sync_open()
            notes = _NOTES.get()
            for gone in waiting:  # said once per failure, with the answer the other server gave
                if notes is not None and (note := self.manager.fallback_notice(gone, candidate)) is not None:
                    notes.append(self.manager.redact(note))
            return candidate, path
        if server is None:  # one held back beside them might answer once the user lets it start
            unable += self.manager.held_back(path)
        if len(unable) == 1:
            if failed is not None:
                raise failed
            raise ToolFailure(unable[0])
        raise ToolFailure(
            f"no language server for {path.suffix.lower()!r} files can answer {tool}: {'; '.join(unable)}"
        )

    async def _at(self, arguments: dict[str, Any], tool: str) -> _At:
        server, path = await self._server_for(arguments.get("file"), tool=tool, server=arguments.get("server"))
        doc = await server.sync(path)
        shown = relative(path, self.root)
        symbol = arguments.get("symbol")
        if symbol is not None:  # it wins over a line and a character given too (an answer about what it names)
            target = await self._find(server, doc, path, str(symbol))
            position = to_wire(doc.lines, target.loc.line, target.loc.character, file=shown)
            return _At(server, path, doc, position)
        line, character = arguments.get("line"), arguments.get("character")
        if not isinstance(line, int) or not isinstance(character, int):
            raise ToolFailure(f"give 'line' and 'character' (1-based), or a 'symbol' of {shown} by name")
        return _At(server, path, doc, to_wire(doc.lines, line, character, file=shown))

    async def _find(self, server: LanguageServer, doc: Document, path: Path, symbol: str) -> Sym:
        if not server.supports("documentSymbolProvider"):
            raise ToolFailure(f"language server {server.name!r} cannot list symbols: give 'line' and 'character'")
        raw = await self._request(server, "textDocument/documentSymbol", {"textDocument": {"uri": doc.uri}})
        found = find_symbol(normalize.symbols(raw, path=path, root=self.root, text_of=self._text_of(server)), symbol)
        shown = relative(path, self.root)
        if not found:
            raise ToolFailure(f"no symbol {symbol!r} in {shown}; list them with document_symbols")
        if len(found) > 1:
            where = ", ".join(f"{s.title} at {s.loc.line}:{s.loc.character}" for s in found[:5])
            raise ToolFailure(
                f"symbol {symbol!r} is ambiguous in {shown}: {where}; name it fully, or give line and character"
            )
        return found[0]

    async def _request(self, server: LanguageServer, method: str, params: Any) -> Any:
        return await server.request(method, params, timeout_s=REQUEST_TIMEOUT_S)

    # -- the tools ----------------------------------------------------------------------------------------

    async def status(self, arguments: dict[str, Any]) -> StatusResult:
        return status_result(self.manager)

    def _locations(self, method: str, tool: str) -> Callable[[dict[str, Any]], Awaitable[BaseModel]]:
        async def run(arguments: dict[str, Any]) -> LocationsResult:
            at = await self._at(arguments, tool)
            raw = await self._request(at.server, method, at.params)
            found = normalize.locations(raw, root=self.root, text_of=self._text_of(at.server))
            limit = positive(arguments.get("limit"), 20)
            return LocationsResult(server=at.server.name, locations=found[:limit], truncated=len(found) > limit)

        return run

    async def find_references(self, arguments: dict[str, Any]) -> ReferencesResult:
        at = await self._at(arguments, "find_references")
        params = {**at.params, "context": {"includeDeclaration": bool(arguments.get("include_declaration", False))}}
        raw = await self._request(at.server, "textDocument/references", params)
        found = normalize.locations(raw, root=self.root, text_of=self._text_of(at.server))
        limit = positive(arguments.get("limit"), 100)
        return ReferencesResult(
            server=at.server.name,
            references=found[:limit],
            file_count=len({loc.file for loc in found[:limit]}),
            truncated=len(found) > limit,
        )

    async def hover(self, arguments: dict[str, Any]) -> HoverResult:
        at = await self._at(arguments, "hover")
        raw = await self._request(at.server, "textDocument/hover", at.params)
        text_of = self._text_of(at.server)
        return HoverResult(
            server=at.server.name,
            contents=normalize.hover_text(raw),
            range=normalize.hover_range(raw, path=at.path, root=self.root, text_of=text_of),
        )

    async def document_symbols(self, arguments: dict[str, Any]) -> SymbolsResult:
        server, path = await self._server_for(
            arguments.get("file"), tool="document_symbols", server=arguments.get("server")
        )
        doc = await server.sync(path)
        raw = await self._request(server, "textDocument/documentSymbol", {"textDocument": {"uri": doc.uri}})
        found = normalize.symbols(raw, path=path, root=self.root, text_of=self._text_of(server))
        depth = arguments.get("depth", -1)
        if isinstance(depth, int) and depth >= 0:
            found = [sym.pruned(depth) for sym in found]
        limit = positive(arguments.get("limit"), 200)
        return SymbolsResult(server=server.name, symbols=found[:limit], truncated=len(found) > limit)

    async def workspace_symbols(self, arguments: dict[str, Any]) -> WorkspaceSymbolsResult:
        query = arguments.get("query")
        if not isinstance(query, str):
            raise ToolFailure("give 'query': a symbol name, or part of one")
        language, kind = arguments.get("language"), arguments.get("kind")
        candidates = [
            s
            for s in self.manager.servers().values()
            if language is None or str(language).lower() in (lang.lower() for lang in s.config.languages())
        ]
        held = self.manager.held_back(None, language=None if language is None else str(language))
        if not candidates:  # one held back might answer, once the user lets it start: how
            known = ", ".join(sorted({lang for s in self.manager.servers().values() for lang in s.config.languages()}))
            none = "no language server can run here"  # or none for that language: which they are for
            none = f"no language server for {language!r} (configured for: {known})" if known else none
            raise ToolFailure(none + "".join(f"; {reason}" for reason in held))
        found: list[Any] = []
        asked: list[str] = []
        not_asked: dict[str, str] = {}

        async def ask(server: LanguageServer) -> None:  # all at once: one slow to start delays no other
            if self.manager.passed_over(server) and len(candidates) > 1:  # failed: waits for its save or /reload
                not_asked[server.name] = f"language server {server.name!r} failed — {server.last_error}"
                return
            try:
                await self.manager.ready(server)
            except Unroutable as exc:
                not_asked[server.name] = str(exc)
                return
            if not server.supports("workspaceSymbolProvider"):
                return
            try:
                await server.sync_open()
                raw = await self._request(server, "workspace/symbol", {"query": query})
                while not raw and anyio.current_time() - server.ready_since < WORKSPACE_SETTLE_S:
                    await anyio.sleep(0.5)  # just started: it may answer before it has even found the files
                    raw = await self._request(server, "workspace/symbol", {"query": query})
            except LspError as exc:
                not_asked[server.name] = str(exc)
                return
            asked.append(server.name)
            found.extend(
                normalize.workspace_symbols(raw, server=server.name, root=self.root, text_of=self._text_of(server))
            )

        async with anyio.create_task_group() as tg:
            for server in candidates:
                tg.start_soon(ask, server)
        if not asked:
            why = "".join(f"; {reason}" for reason in [*not_asked.values(), *held])
            raise ToolFailure(f"no running language server here searches the workspace (workspace/symbol){why}")
        order = {server.name: i for i, server in enumerate(candidates)}
        found.sort(key=lambda sym: order.get(sym.server, 0))  # as the servers are configured, not as they answered
        if isinstance(kind, str):
            found = [s for s in found if s.kind.lower() == kind.lower()]
        limit = positive(arguments.get("limit"), 50)
        skipped = [f"{name}: {why}" for name, why in sorted(not_asked.items())]
        return WorkspaceSymbolsResult(symbols=found[:limit], truncated=len(found) > limit, not_asked=skipped)

    def _calls(self, direction: Direction) -> Callable[[dict[str, Any]], Awaitable[BaseModel]]:
        tool = f"{direction}_calls"

        async def run(arguments: dict[str, Any]) -> CallsResult:
            at = await self._at(arguments, tool)
            items = await self._request(at.server, "textDocument/prepareCallHierarchy", at.params)
            if not items:
                raise ToolFailure("nothing callable at that position (a function or method name is)")
            item = items[0]
            raw = await self._request(at.server, f"callHierarchy/{direction}Calls", {"item": item})
            text_of = self._text_of(at.server)
            found: list[Call] = normalize.calls(raw, direction, root=self.root, text_of=text_of, item=item)
            limit = positive(arguments.get("limit"), 50)
            return CallsResult(
                server=at.server.name,
                item=normalize.call_item(item, root=self.root, text_of=text_of),
                calls=found[:limit],
                truncated=len(found) > limit,
            )

        return run

    async def diagnostics(self, arguments: dict[str, Any]) -> DiagnosticsResult:
        files = arguments.get("files")
        threshold = _SEVERITY_RANK.get(str(arguments.get("severity", "warning")), 1)
        wait_s = max(0, int(arguments.get("wait_ms", DIAGNOSTICS_WAIT_MS))) / 1000
        named = arguments.get("server")
        out: list[FileDiagnostics] = []
        if files is None:
            if named is not None and named not in self.manager.servers():
                if named in self.manager.state.servers:  # configured, not admitted: why, and the fix
                    raise ToolFailure(self.manager.why_not(str(named)))
                raise self._not_configured(named)
            ready = [s for s in self.manager.servers().values() if s.state == "ready" and named in (None, s.name)]
            targets = [(s, p) for s in ready for p in s.documents.paths()]
            if not targets:  # (one stopped as idle has none open: it starts again once a file is named)
                raise ToolFailure(nothing_open([n for n in self.manager.servers() if self.manager.is_idle(n)], named))
        elif isinstance(files, list) and all(isinstance(f, str) for f in files):
            targets, out = await self._diagnosed(files, named)  # and what cannot be checked
        else:
            raise ToolFailure("'files' must be a list of files of the workspace")
        synced: set[LanguageServer] = set()
        for server, path in dict.fromkeys(targets):  # a file named twice (as a.py and ./a.py too) is checked once
            if server not in synced:
                synced.add(server)
                await server.sync_open()
            if files is None and server.documents.get(path) is None:
                continue  # an open document closed by sync_open (deleted, grown too large, unreadable): not reported
            try:
                doc = await server.sync(path)
            except (NoSuchFile, LspDocumentUnreadable) as exc:
                if files is not None:  # deleted since it was routed, or too large (or unreadable) to send
                    shown = relative(path, self.root)
                    out.append(FileDiagnostics(file=shown, server=server.name, fresh=False, problem=str(exc)))
                continue  # an open document deleted on disk: closed, not reported
            fresh, raw = await server.diagnostics(doc, wait_s, timeout_s=REQUEST_TIMEOUT_S)
            found = normalize.diagnostics(raw, path=path, root=self.root, text_of=self._text_of(server))
            kept = [d for d in found if _SEVERITY_RANK[d.severity] <= threshold]
            shown = relative(path, self.root)
            out.append(FileDiagnostics(file=shown, server=server.name, fresh=fresh, diagnostics=kept))
        if files and all(f.problem is not None for f in out):  # not one could be checked: the call fails, saying why
            raise ToolFailure("; ".join(f"{f.file}: {f.problem}" for f in out) if len(out) > 1 else str(out[0].problem))
        return DiagnosticsResult(files=out)

    async def _diagnosed(self, files: list[str], server: Any) -> tuple[list[_Target], list[FileDiagnostics]]:
        """The servers of each named file (``server``, or every one running for it: the first that can answer is
        started when none runs), and a file none can check with the reason (the others are still checked)."""
        targets: list[_Target] = []
        problems: list[FileDiagnostics] = []
        for file in dict.fromkeys(files):
            try:
                running = [] if server is not None else await self._running_for(file)
                targets.extend(
                    running or [await self._server_for(file, tool="diagnostics", server=server, sync_open=False)]
                )
            except (ToolFailure, Unroutable, NoSuchFile, FileOutsideWorkspace) as exc:
                problems.append(FileDiagnostics(file=file, fresh=False, problem=str(exc)))
        return targets, problems

    async def _running_for(self, file: str) -> list[_Target]:
        """The servers running for ``file``'s extension (none: its first is to be started)."""
        path = await resolved(file, self.root) if file else None
        return [(c, path) for c in self.manager.candidates(path) if c.state == "ready"] if path else []

    async def rename_preview(self, arguments: dict[str, Any]) -> RenameResult:
        new_name = arguments.get("new_name")
        if not isinstance(new_name, str) or not new_name:
            raise ToolFailure("give 'new_name': the name to rename to")
        at = await self._at(arguments, "rename_preview")
        if problem := new_name_problem(at.doc.language_id, new_name):
            raise ToolFailure(problem)
        prepare = at.server.capabilities.get("renameProvider")
        if isinstance(prepare, Mapping) and prepare.get("prepareProvider"):
            if not await self._request(at.server, "textDocument/prepareRename", at.params):
                raise ToolFailure("nothing to rename at that position")
        raw = await self._request(at.server, "textDocument/rename", {**at.params, "newName": new_name})
        changes = normalize.workspace_edit(raw, root=self.root, text_of=self._text_of(at.server))
        return RenameResult(server=at.server.name, changes=changes, file_count=len(changes))
