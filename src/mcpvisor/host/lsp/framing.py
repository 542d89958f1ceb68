"""The LSP base protocol's frames (``Content-Length: N``, a blank line, N bytes) out of a byte stream.

Pure and linear: each byte is scanned once, consumed bytes leave the front of one ``bytearray``, and no
frame may announce more than the connection's limit, so a server cannot make the host buffer without
bound or rescan what it already read (a 20 MiB body in 64 KiB chunks costs one pass).
"""

from __future__ import annotations

from mcpvisor.core.errors import format_bytes
from mcpvisor.host.lsp.errors import LspMessageTooLarge

__all__ = ["MAX_HEADER_BYTES", "FrameReader"]

MAX_HEADER_BYTES = 8 * 1024
"""A header block longer than this is not LSP (real ones are under 100 bytes)."""


class FrameReader:
    """Frame bodies out of a byte stream, none over ``limit`` bytes.

    ``feed(chunk)`` returns the bodies the chunk completed. It raises :class:`LspMessageTooLarge` (naming
    ``server``) for a ``Content-Length`` over ``limit``, a missing or invalid one, or a header block over
    :data:`MAX_HEADER_BYTES`: the stream cannot be read on from there. Header names are matched without
    case; every header but ``Content-Length`` (``Content-Type``) is ignored."""

    def __init__(self, limit: int, *, server: str = "") -> None:
        self.limit = limit
        self.server = server
        self._buffer = bytearray()
        self._scanned = 0  # where the search for the end of the header resumes
        self._body_bytes: int | None = None  # the current frame's length, once its header is read

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer
        buffer += chunk
        bodies: list[bytes] = []
        start = 0
        while True:
            if self._body_bytes is None:
                end = buffer.find(b"\r\n\r\n", max(start, self._scanned - 3))  # the blank line may straddle chunks
                if end < 0:
                    self._refuse_stray_line(buffer, start)
                    self._scanned = len(buffer)
                    if self._scanned - start > MAX_HEADER_BYTES:
                        raise self._broken(f"sent a header over {format_bytes(MAX_HEADER_BYTES)}")
                    break
                if end - start > MAX_HEADER_BYTES:
                    raise self._broken(f"sent a header over {format_bytes(MAX_HEADER_BYTES)}")
                self._body_bytes = self._content_length(bytes(buffer[start:end]))
                start = self._scanned = end + 4
            if len(buffer) - start < self._body_bytes:
                break
            with memoryview(buffer) as view:
                bodies.append(bytes(view[start : start + self._body_bytes]))
            start = self._scanned = start + self._body_bytes
            self._body_bytes = None
        if start:
            del buffer[:start]  # O(1) at the front of a bytearray
            self._scanned -= start
        return bodies

    def _refuse_stray_line(self, buffer: bytearray, start: int) -> None:
        """A whole line where a header begins that is no ``Name: value`` line is not LSP (a banner, a log line
        written to stdout): said at once, quoting it, rather than waited on as a slow start."""
        newline = buffer.find(b"\n", start, start + MAX_HEADER_BYTES)
        if newline < 0:
            return
        line = bytes(buffer[start:newline]).rstrip(b"\r")
        if b":" not in line:
            shown = line[:80].decode("utf-8", errors="replace")
            raise self._broken(f"wrote {shown!r} to its stdout, which is not LSP (a log belongs on stderr)", size=False)

    def _content_length(self, header: bytes) -> int:
        length: int | None = None
        for line in header.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                value = value.strip()
                length = int(value) if value.isdigit() else None
        if length is None:
            raise self._broken("sent a header without a valid Content-Length")
        if length > self.limit:
            raise self._broken(f"announced a message of {format_bytes(length)}")
        return length

    def _broken(self, reason: str, *, size: bool = True) -> LspMessageTooLarge:
        return LspMessageTooLarge(server=self.server, limit=self.limit, reason=reason, about_size=size)
