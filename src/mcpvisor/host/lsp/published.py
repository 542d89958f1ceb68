"""The diagnostics a language server published, and whether they are fresh: computed from the text it was sent of
the file and of every other file since (an edit of ``models.py`` may fix an error a server reports in ``service.py``).

A document's diagnostics are fresh when published after the last change the server was told of, of any of its
source files (by extension): the text of an open document (``didChange``) or a watched file
(``didChangeWatchedFiles``; a log or a README written beside them changes nothing). A change of another file does
not make every server re-check every file (pylsp's pyflakes looks at one file at a time): once the server published
something since the change and then went quiet for :data:`QUIET_S` (or published nothing for :data:`NO_NEWS_S`), a
wait for a file it did not re-check ends, and its diagnostics are the last known ones, not fresh."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import anyio

from mcpvisor.host.lsp.client_side import WATCHED_FILES
from mcpvisor.host.lsp.documents import Document, next_sync_number

__all__ = ["NO_NEWS_S", "QUIET_S", "Published", "PublishedDiagnostics"]

QUIET_S = 0.5
"""A server that published since the last change and then nothing for this long has re-checked what it will."""
NO_NEWS_S = 2.0
"""A server that published nothing for this long since the last change re-checks nothing it would publish."""


@dataclass(frozen=True, slots=True)
class Published:
    """Diagnostics a server published for one file: for which document version (if it said), and when."""

    version: int | None
    sequence: int
    items: list[dict[str, Any]]


class PublishedDiagnostics:
    """What one server process published, by document URI."""

    def __init__(self, extensions: Callable[[], Collection[str]]) -> None:
        """``extensions``: the suffixes of the server's source files (``.py``), as configured now."""
        self._extensions = extensions
        self._by_uri: dict[str, Published] = {}
        self._latest = 0
        """The sync number of the latest publish."""
        self._latest_at = 0.0
        self._changed, self._changed_at = 0, 0.0
        """The sync number (and time) of the last change of a source file the server was told of."""
        self._fresh_after = 0
        """Diagnostics published before this sync number are stale whatever version they name: they came from an
        earlier process (whose document versions started again at 1) or were computed under earlier settings."""
        self._closed: set[str] = set()
        """The URIs of documents closed on the server (and not opened again)."""
        self._event = anyio.Event()

    def restart(self) -> None:
        """A new process: what the earlier one published is not this one's."""
        self._by_uri.clear()
        self.stale_now()

    def stale_now(self) -> None:
        """Everything published so far is stale (e.g. computed under settings that changed)."""
        self._fresh_after = next_sync_number()

    def told(self, method: str, params: Any) -> None:
        """The server was sent ``method``: a change of a source file's text makes what it published before stale."""
        if method == "textDocument/didChange" or (method == WATCHED_FILES and self._of_sources(params)):
            self._changed, self._changed_at = next_sync_number(), anyio.current_time()
        elif method in ("textDocument/didOpen", "textDocument/didClose") and isinstance(params, dict):
            uri = str((params.get("textDocument") or {}).get("uri"))
            if method == "textDocument/didClose":
                self._closed.add(uri)
            else:
                self._closed.discard(uri)

    def _of_sources(self, params: Any) -> bool:
        extensions = self._extensions()
        changes = params.get("changes") if isinstance(params, dict) else None
        uris = (c.get("uri") for c in changes or () if isinstance(c, dict))
        return any(isinstance(uri, str) and PurePosixPath(uri).suffix.lower() in extensions for uri in uris)

    def publish(self, params: dict[str, Any]) -> None:
        uri = params.get("uri")
        if isinstance(uri, str):
            sequence = next_sync_number()
            version = params.get("version")
            items = [d for d in params.get("diagnostics") or () if isinstance(d, dict)]
            if items or uri not in self._closed:  # not a closed file's diagnostics cleared: no sign of a re-check
                self._latest, self._latest_at = sequence, anyio.current_time()
            self._by_uri[uri] = Published(version if isinstance(version, int) else None, sequence, items)
            self._event.set()
            self._event = anyio.Event()

    async def wait(self, doc: Document, wait_s: float) -> tuple[bool, list[dict[str, Any]]]:
        """``(fresh, diagnostics)`` for ``doc`` as last synced: once fresh ones are published (up to ``wait_s``,
        less when the server re-checked others and went quiet), else the last known ones, not fresh."""
        with anyio.move_on_after(wait_s):
            while not self.fresh(doc) and not (self._of_its_text(doc) and self._quiet_since_change()):
                with anyio.move_on_after(QUIET_S):
                    await self._event.wait()
        published = self._by_uri.get(doc.uri)
        return self.fresh(doc), list(published.items) if published is not None else []

    def fresh(self, doc: Document) -> bool:
        """Published for ``doc``'s text as last synced and after every change of another file since."""
        return self._of_its_text(doc) and self._by_uri[doc.uri].sequence > self._changed

    def _of_its_text(self, doc: Document) -> bool:
        """Published for ``doc``'s text as last synced (by this process, under these settings)."""
        published = self._by_uri.get(doc.uri)
        if published is None or published.sequence < self._fresh_after:
            return False
        if published.version is not None:
            return published.version >= doc.version
        return published.sequence > doc.synced

    def _quiet_since_change(self) -> bool:
        now = anyio.current_time()
        if self._latest > self._changed:
            return now - self._latest_at >= QUIET_S
        return now - self._changed_at >= NO_NEWS_S
