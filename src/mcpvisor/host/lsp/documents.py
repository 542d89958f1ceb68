"""What a language server has been told of the files it answers for, kept in step with the disk (LSP.md §6.4).

Agents edit files behind the server's back. Before any request, :meth:`Documents.refresh` looks at every
open file on disk and :meth:`Documents.sync` at the file the request names: a file the server has not seen
is opened (``didOpen``); one whose size or modification time moved since it was sent is read again and, when
its text really changed, sent whole (``didChange``, then ``didSave``); a file gone from disk is closed
(``didClose``), and a server that watches files told at once that it was deleted. Open files are capped (least
recently used closed first). After a restart the server is told of the open set again (:meth:`replay`).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import stat
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mcpvisor.host.file_reads import read_regular
from mcpvisor.host.lsp.text import Lines, NoSuchFile, document_text, uri_of

__all__ = ["MAX_OPEN_DOCUMENTS", "Document", "Documents", "next_sync_number", "text_on_disk"]

logger = logging.getLogger(__name__)

MAX_OPEN_DOCUMENTS = 200
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""A file larger than this is not sent to a language server (generated code, data)."""
_THREAD_READ_BYTES = 256 * 1024

Notify = Callable[[str, Any], Awaitable[None]]

_sequence = itertools.count(1)


def next_sync_number() -> int:
    """A number that grows with every sync and every publish of diagnostics, across servers: a publish
    numbered after a document's sync is newer than the text the server was sent."""
    return next(_sequence)


@dataclass(eq=False)
class Document:
    """One file as the server knows it: the text it was sent, at which version and when."""

    path: Path
    uri: str
    language_id: str
    version: int
    mtime_ns: int
    size: int
    digest: bytes
    text: str
    lines: Lines
    synced: int
    """A number that grows with every sync of any document: diagnostics published after it are fresh."""


def _regular_file_stat(path: Path) -> os.stat_result | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _read(path: Path) -> tuple[os.stat_result, bytes]:
    return read_regular(path, MAX_DOCUMENT_BYTES, what="a document sent to a language server")


def text_on_disk(path: Path, max_bytes: int) -> str:
    """The text of ``path`` (its first ``max_bytes``) as a server that opened it would have been sent it: what
    results about a file no server has open are converted against. Raises :class:`OSError`."""
    return document_text(read_regular(path, max_bytes)[1])


class Documents:
    """The open documents of one language server."""

    def __init__(
        self,
        notify: Notify,
        *,
        deleted: Callable[[Path], Awaitable[None]] | None = None,
        max_open: int = MAX_OPEN_DOCUMENTS,
    ) -> None:
        """``deleted``: called after an open document found deleted on disk was closed."""
        self._notify = notify
        self._deleted = deleted
        self._max_open = max_open
        self._open: OrderedDict[Path, Document] = OrderedDict()
        self._lock = anyio.Lock()

    def __len__(self) -> int:
        return len(self._open)

    def get(self, path: Path) -> Document | None:
        return self._open.get(path)

    def paths(self) -> list[Path]:
        return list(self._open)

    def text_of(self, path: Path) -> str | None:
        """The text the server was sent for ``path``, if it is open (results are converted against it)."""
        doc = self._open.get(path)
        return doc.text if doc is not None else None

    async def sync(self, path: Path, language_id: str) -> Document:
        """Make the server's view of ``path`` match the disk (see the module); returns the document.
        Raises :class:`NoSuchFile` when it is not a regular file any more (after closing it)."""
        async with self._lock:
            return await self._sync(path, language_id)

    async def refresh(self) -> None:
        """Bring every open document in step with the disk, one ``stat`` each: the server answers about one file
        from what it was told of the others. A changed file is sent again, a deleted one closed, and one that
        can no longer be read (grown too large, unreadable) closed too, rather than left stale on the server."""
        async with self._lock:
            for doc in list(self._open.values()):
                st = _regular_file_stat(doc.path)
                if st is not None and (st.st_mtime_ns, st.st_size) == (doc.mtime_ns, doc.size):
                    continue
                try:
                    await self._sync(doc.path, doc.language_id, touch=False)
                except NoSuchFile:
                    continue
                except OSError as exc:
                    logger.debug("closing %s: it can no longer be sent: %s", doc.path, exc)
                    await self._close(doc)

    async def _sync(self, path: Path, language_id: str, *, touch: bool = True) -> Document:
        doc = self._open.get(path)
        st = _regular_file_stat(path)
        if st is None:
            if doc is not None:
                await self._close(doc)
                if self._deleted is not None:
                    await self._deleted(path)
            raise NoSuchFile(str(path))
        if doc is not None:
            if touch:
                self._open.move_to_end(path)
            if (st.st_mtime_ns, st.st_size) == (doc.mtime_ns, doc.size):
                return doc
        if st.st_size > _THREAD_READ_BYTES:
            now, data = await anyio.to_thread.run_sync(_read, path)
        else:
            now, data = _read(path)
        digest = hashlib.sha1(data, usedforsecurity=False).digest()
        text = document_text(data)
        if doc is None:
            doc = Document(
                path, uri_of(path), language_id, 1, now.st_mtime_ns, now.st_size, digest, text, Lines(text), 0
            )
            doc.synced = next_sync_number()
            self._open[path] = doc
            await self._notify(
                "textDocument/didOpen",
                {"textDocument": {"uri": doc.uri, "languageId": language_id, "version": 1, "text": text}},
            )
            while len(self._open) > self._max_open:
                await self._close(next(iter(self._open.values())))
            return doc
        doc.mtime_ns, doc.size = now.st_mtime_ns, now.st_size
        if digest == doc.digest:
            return doc  # touched, not changed
        doc.version += 1
        doc.digest, doc.text, doc.lines = digest, text, Lines(text)
        doc.synced = next_sync_number()
        identifier = {"uri": doc.uri, "version": doc.version}
        await self._notify("textDocument/didChange", {"textDocument": identifier, "contentChanges": [{"text": text}]})
        await self._notify("textDocument/didSave", {"textDocument": {"uri": doc.uri}, "text": text})
        return doc

    async def _close(self, doc: Document) -> None:
        self._open.pop(doc.path, None)
        await self._notify("textDocument/didClose", {"textDocument": {"uri": doc.uri}})

    async def close_where(self, drop: Callable[[Document], bool]) -> None:
        """Close the open documents ``drop`` says no longer belong to this server (a re-route)."""
        async with self._lock:
            for doc in [d for d in self._open.values() if drop(d)]:
                await self._close(doc)

    async def replay(self, notify: Notify) -> None:
        """Tell a restarted server (through its new ``notify``) of every document that was open, as it is on
        disk now; files gone meanwhile are forgotten."""
        async with self._lock:
            self._notify = notify
            previous = list(self._open.values())
            self._open.clear()
            for doc in previous:
                try:
                    await self._sync(doc.path, doc.language_id)
                except (NoSuchFile, OSError):
                    continue

    def forget(self) -> None:
        """The server is gone: nothing is open on it any more (a restart replays from :meth:`paths`)."""
        self._open.clear()
