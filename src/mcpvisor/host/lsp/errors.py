"""The errors talking to a language server raises (re-exported by :mod:`mcpvisor.host.lsp.jsonrpc`).

::

    McpvisorError
    └── LspError                  talking to a language server failed
        ├── LspRequestError       it answered a request with a JSON-RPC error (``code``, ``method``)
        ├── LspRequestTimedOut    it did not answer a request in time (``method``, ``timeout_s``)
        ├── LspDocumentUnreadable a file could not be read to be sent to it (``path``, ``method``)
        ├── LspConnectionClosed   its process ended or its output closed before an answer (``reason``)
        └── LspMessageTooLarge    it sent a frame over the limit or a header that is not LSP (``limit``)
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from mcpvisor.core.errors import McpvisorError, format_bytes

__all__ = [
    "LspConnectionClosed",
    "LspDocumentUnreadable",
    "LspError",
    "LspMessageTooLarge",
    "LspRequestError",
    "LspRequestTimedOut",
]


class LspError(McpvisorError):
    """Root of the errors talking to a language server raises."""


class LspRequestError(LspError):
    """The server answered a request with a JSON-RPC error (or an ``on_request`` handler refuses one)."""

    def __init__(self, code: int, message: str, data: Any = None, *, method: str = "", server: str = "") -> None:
        who = f"server {server!r}" if server else "server"
        super().__init__(f"{method or 'request'} failed: {who} answered error {code}: {message}")
        self.code = code
        self.message = message
        self.data = data
        self.method = method
        self.server = server


class LspRequestTimedOut(LspError):
    """The server did not answer a request within ``timeout_s`` (it was told to give it up); ``log`` is its log."""

    def __init__(self, *, server: str, method: str, timeout_s: float, log: Path, hung: bool = False) -> None:
        what = f"{method} failed: language server {server!r} did not answer within {timeout_s:g} s"
        if hung:  # ``hung``: nor the request before, so it is stopped as hung
            super().__init__(
                f"{what}, nor the request before: it was stopped as hung and the next call starts it again"
            )
        else:
            super().__init__(
                f"{what}; retry in a moment (it may still be indexing the workspace), and if it never answers, see its "
                f"log {log}"
            )
        self.server = server
        self.method = method
        self.timeout_s = timeout_s
        self.log = log


class LspDocumentUnreadable(LspError):
    """A file could not be read to be sent to the server (``method``: ``textDocument/didOpen`` or
    ``didChange``); ``file`` is how the caller named it, ``error`` the :class:`OSError` read raised."""

    def __init__(self, *, server: str, method: str, file: str, error: OSError) -> None:
        if error.errno == errno.EFBIG:
            fix = "language servers are not sent files that large (generated code, data): ask about another file"
        elif error.errno in (errno.EACCES, errno.EPERM):
            fix = "make it readable to mcpvisor"
        else:
            fix = "check that it is a readable regular file"
        super().__init__(
            f"{method} failed: {file} cannot be sent to language server {server!r}: {error.strerror or error}; {fix}"
        )
        self.server = server
        self.method = method
        self.file = file
        self.error = error


class LspConnectionClosed(LspError):
    """The server's process ended or its output closed (or could not be read on) before an answer;
    ``crashed``: it ended on its own (the host did not stop it)."""

    def __init__(self, *, server: str, reason: str, method: str | None = None, crashed: bool = False) -> None:
        subject = f"language server {server!r}"
        super().__init__(f"{method} failed: {subject} {reason}" if method else f"{subject} {reason}")
        self.server = server
        self.reason = reason
        self.method = method
        self.crashed = crashed


class LspMessageTooLarge(LspError):
    """The server sent a frame over the limit, or a header that is not LSP: the connection is unusable.
    ``reason`` says what it did (``announced a message of 1 GiB``)."""

    def __init__(self, *, server: str, limit: int, reason: str, about_size: bool = True) -> None:
        self.server = server
        self.limit = limit
        self.reason = reason
        self.about_size = about_size
        super().__init__(f"reading from language server {server!r} failed: it {self.explanation}")

    @property
    def explanation(self) -> str:
        """What the server did and what follows, to end a sentence about it."""
        limit = f" (the limit is {format_bytes(self.limit)})" if self.about_size else ""
        return f"{self.reason}{limit}, so its connection is dropped"
