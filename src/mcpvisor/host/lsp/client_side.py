"""What mcpvisor is to a language server as its client: the capabilities it declares, and the file watching a server
may ask for (LSP.md §6.4).

A server that registers for ``workspace/didChangeWatchedFiles`` (``client/registerCapability``) is told what is
created, changed or deleted on disk under its folder that matches its patterns, a batch at a time: a file an agent
wrote is then in its answers (references, workspace symbols) without a tool naming it first. The folder is watched
with ``watchfiles`` (its default filter leaves out ``.git``, ``node_modules``, caches and virtual environments), and
only while a registration stands.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from watchfiles import Change, awatch

from mcpvisor.host.lsp.errors import LspConnectionClosed
from mcpvisor.host.lsp.text import path_of, uri_of

__all__ = ["CLIENT_CAPABILITIES", "WATCHED_FILES", "FileWatch", "glob_pattern"]

logger = logging.getLogger(__name__)

WATCHED_FILES = "workspace/didChangeWatchedFiles"

CLIENT_CAPABILITIES: dict[str, Any] = {
    "general": {"positionEncodings": ["utf-16"]},
    "workspace": {
        "configuration": True,
        "workspaceFolders": True,
        "didChangeConfiguration": {},
        "didChangeWatchedFiles": {"dynamicRegistration": True, "relativePatternSupport": True},
        "symbol": {},
    },
    "textDocument": {
        "synchronization": {"didSave": True, "dynamicRegistration": False},
        "hover": {"contentFormat": ["markdown", "plaintext"]},
        "definition": {"linkSupport": True},
        "typeDefinition": {"linkSupport": True},
        "implementation": {"linkSupport": True},
        "references": {},
        "documentSymbol": {"hierarchicalDocumentSymbolSupport": True},
        "callHierarchy": {},
        "rename": {"prepareSupport": True},
        "publishDiagnostics": {"versionSupport": True, "relatedInformation": False},
        "diagnostic": {"dynamicRegistration": False},
    },
    "window": {"workDoneProgress": True},
}
"""What mcpvisor asks of a server: the operations its tools use, UTF-16 positions, pull diagnostics, and it
watches files for a server that registers for them."""

_KIND = {Change.added: (1, 1), Change.modified: (2, 2), Change.deleted: (3, 4)}
"""A change as LSP's ``FileChangeType`` and the ``WatchKind`` bit a watcher must ask for to hear it."""


def glob_pattern(glob: str) -> re.Pattern[str]:
    """An LSP glob (``*``, ``**``, ``?``, ``{a,b}``, ``[...]``) as a pattern over ``/``-separated paths."""
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "{" and (end := glob.find("}", i)) > i:
            out.append("(?:" + "|".join(re.escape(part) for part in glob[i + 1 : end].split(",")) + ")")
            i = end
        elif c == "[" and (end := glob.find("]", i + 1)) > i:
            body = glob[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


class FileWatch:
    """One server process's file-watch registrations, and the task (:meth:`run`) that feeds them."""

    def __init__(self, folder: Path, notify: Callable[[str, Any], Awaitable[None]]) -> None:
        self._folder = folder
        self._notify = notify
        self._watchers: dict[str, list[tuple[re.Pattern[str], Path, int]]] = {}
        self._changed = anyio.Event()

    def register(self, params: Any) -> None:
        """``client/registerCapability``: keep what it registers for watched files (other methods are ignored)."""
        for registration in (params or {}).get("registrations") or ():
            if not isinstance(registration, dict) or registration.get("method") != WATCHED_FILES:
                continue
            options = registration.get("registerOptions") or {}
            watchers = [w for w in options.get("watchers") or () if isinstance(w, dict)]
            self._watchers[str(registration.get("id"))] = [self._watcher(w) for w in watchers]
            self._wake()

    def unregister(self, params: Any) -> None:
        """``client/unregisterCapability`` (its list is spelt ``unregisterations`` in LSP)."""
        for gone in (params or {}).get("unregisterations") or ():
            if isinstance(gone, dict) and self._watchers.pop(str(gone.get("id")), None) is not None:
                self._wake()

    def _watcher(self, watcher: dict[str, Any]) -> tuple[re.Pattern[str], Path, int]:
        pattern, base = watcher.get("globPattern"), self._folder
        if isinstance(pattern, dict):  # a RelativePattern: its base folder (a workspace folder or a URI)
            base_uri = pattern.get("baseUri")
            base_uri = base_uri.get("uri") if isinstance(base_uri, dict) else base_uri
            base = (path_of(base_uri) if isinstance(base_uri, str) else None) or self._folder
            pattern = pattern.get("pattern")
        kind = watcher.get("kind")
        return glob_pattern(pattern if isinstance(pattern, str) else "**/*"), base, kind if isinstance(kind, int) else 7

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _wanted(self, change: Change, path: Path) -> int | None:
        kind, bit = _KIND[change]
        for watchers in self._watchers.values():
            for pattern, base, kinds in watchers:
                relative = path.relative_to(base).as_posix() if path.is_relative_to(base) else None
                if kinds & bit and (pattern.match(path.as_posix()) or (relative and pattern.match(relative))):
                    return kind
        return None

    async def deleted(self, path: Path) -> None:
        """Tell the server at once that ``path`` is gone when it watches for that (an open document found deleted
        before a request): the watcher's batch comes later, and what the server says of the files that import it
        until then is stale."""
        if (kind := self._wanted(Change.deleted, path)) is not None:
            await self._notify(WATCHED_FILES, {"changes": [{"uri": uri_of(path), "type": kind}]})

    async def _until_unregistered(self, stop: anyio.Event) -> None:
        while self._watchers:
            await self._changed.wait()
        stop.set()

    async def run(self) -> None:
        """Feed the registrations while the server runs: the folder is watched only while one stands. Raises
        :class:`LspConnectionClosed` (not wrapped in a group) when the server cannot be told any more."""
        while True:
            if not self._watchers:
                await self._changed.wait()
                continue
            stop = anyio.Event()
            closed: LspConnectionClosed | None = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._until_unregistered, stop)
                try:
                    async for changes in awatch(self._folder, stop_event=stop, recursive=True):
                        events = [
                            {"uri": uri_of(Path(raw)), "type": kind}
                            for change, raw in sorted(changes, key=lambda c: c[1])
                            if (kind := self._wanted(change, Path(raw))) is not None
                        ]
                        if events:
                            try:
                                await self._notify(WATCHED_FILES, {"changes": events})
                            except LspConnectionClosed as exc:  # it ended (or closed its input) under the batch
                                closed = exc
                                stop.set()
                except OSError as exc:  # the folder went away or cannot be watched: the server is not told
                    logger.debug("cannot watch %s for a language server: %s", self._folder, exc)
                    await self._changed.wait()
                tg.cancel_scope.cancel()
            if closed is not None:
                raise closed
