"""Newline-delimited JSON-RPC messages out of a stdio server's output: split (each byte scanned once, none over a
bound), then parsed, strictly first and leniently when that fails."""

from __future__ import annotations

import json
import logging
import re

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcpvisor.core.errors import describe_invalid

__all__ = ["LineSplitter", "parse_line", "without_lone_surrogates"]

logger = logging.getLogger(__name__)


class LineSplitter:
    """Newline-delimited messages out of a byte stream, each byte scanned once, none over ``limit`` bytes.

    ``feed(chunk)`` returns the complete lines the chunk finished (without their newline), or ``None``
    once a line has grown past ``limit``: the stream cannot be read on from there."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._scanned = 0

    def feed(self, chunk: bytes) -> list[bytes] | None:
        buffer = self._buffer
        buffer += chunk
        lines: list[bytes] = []
        start = 0
        while (end := buffer.find(b"\n", max(start, self._scanned))) >= 0:
            if end - start > self.limit:
                return None
            lines.append(bytes(buffer[start:end]))
            start = end + 1
        if start:
            del buffer[:start]  # O(1) at the front of a bytearray
        self._scanned = len(buffer)
        return None if self._scanned > self.limit else lines


def parse_line(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        try:
            text = line.decode()
        except UnicodeDecodeError:  # not UTF-8: read it as the old text decoder did, bad bytes replaced
            return parse_line(line.decode(errors="replace").encode())
        return _parse_leniently(text, exc)


def _parse_leniently(text: str, exc: ValueError) -> SessionMessage | Exception:
    """A line the strict parser refused: read by the standard library, which takes a lone surrogate escape
    (``json.dumps`` of a file name that is not UTF-8 writes one); such a character reads as U+FFFD. An answer
    that still does not validate fails its request at once instead of leaving it to its timeout."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        logger.debug("unparsable line from a server: %.200r", text[:200])
        return exc
    try:
        return SessionMessage(
            types.jsonrpc_message_adapter.validate_python(without_lone_surrogates(data), by_name=False)
        )
    except (ValueError, RecursionError) as invalid:
        logger.debug("invalid message from a server: %.200r", text[:200])
        request_id = data.get("id") if isinstance(data, dict) else None
        if not isinstance(request_id, str | int) or isinstance(request_id, bool) or "method" in data:
            return invalid
        why = describe_invalid(invalid) if isinstance(invalid, ValidationError) else type(invalid).__name__
        error = types.ErrorData(code=types.INTERNAL_ERROR, message=f"its answer is not valid JSON-RPC ({why})")
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def without_lone_surrogates(value: object) -> object:
    """``value`` (parsed JSON) with every lone surrogate in its strings as U+FFFD: the standard library's
    parser keeps one from a ``\\udce9`` escape, and nothing can encode it to send it on."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {without_lone_surrogates(key): without_lone_surrogates(item) for key, item in value.items()}
    return value


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
