"""The gateway's stdio transport: the SDK's, with stdin read on the event loop.

The SDK reads stdin in a worker thread, blocked in ``read()`` until a line or the end comes; a stop cannot
interrupt it, so ``mcpvisor serve`` in a terminal ignored Ctrl-C until Enter was pressed, and under a client that
sends SIGTERM before it closes its end the gateway waited for that end. Here a pipe or a terminal on fd 0 is
read by the event loop (on a duplicate of fd 0, put back in blocking mode afterwards: a terminal's mode is
shared with the shell that started us), and the wait ends with the task. Anything else on fd 0 (a regular
file, a socket, /dev/null) keeps the SDK's reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
import pydantic_core
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcpvisor.gateway.protocol import invalid_message, is_request_id, shape_problem

__all__ = ["stdio_streams"]

logger = logging.getLogger(__name__)

_LINE_LIMIT = 1 << 31
"""The longest line kept whole (the SDK's own reader has no bound either; the client is the one the user runs)."""


class _Lines:
    """The lines of a stream reader as text, as the SDK's ``stdio_server`` iterates its stdin; a line that is no
    JSON-RPC message is answered here (:meth:`refuse`) and not passed on: the SDK's reader drops it unanswered,
    and a client whose request could not be read waited for its answer for ever."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self.refuse: Callable[[types.JSONRPCError], Awaitable[None]] | None = None

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await self._reader.readline()
            if not line:
                raise StopAsyncIteration
            text = line.decode("utf-8", errors="replace")
            passed, refusal = verdict(text)
            if passed:
                return text
            if refusal is not None and self.refuse is not None:
                await self.refuse(refusal)

    def end(self) -> None:
        """End the lines here, as if stdin had ended: the SDK's reader task then ends."""
        self._reader.feed_eof()


def verdict(line: str) -> tuple[bool, types.JSONRPCError | None]:
    """Whether ``line`` is passed on (a JSON-RPC message), and else the error answering it: none for a blank
    line, a malformed notification (it has no id to answer) or response (its id is the gateway's)."""
    if not line.strip():
        return False, None
    try:
        data = pydantic_core.from_json(line)
    except ValueError:
        return False, _refusal(None, types.PARSE_ERROR, "Parse error: the line is not JSON")
    problem = shape_problem(data, unit="line")
    if problem is None:
        try:
            types.jsonrpc_message_adapter.validate_python(data, by_name=False)
        except ValidationError:
            problem = invalid_message(data)
        else:
            return True, None
    if isinstance(data, dict) and "method" not in data and ("id" in data or "result" in data or "error" in data):
        logger.debug("dropped a response that is no JSON-RPC response: %s", problem)
        return False, None  # (to a request of the gateway's: an error with its id would reach the client as its own)
    if isinstance(data, dict) and "id" not in data and "method" in data:
        return False, None  # a notification: no answer, whatever is wrong with it
    request_id = data.get("id") if isinstance(data, dict) else None
    return False, _refusal(request_id if is_request_id(request_id) else None, types.INVALID_REQUEST, problem)


def _refusal(request_id: Any, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


@asynccontextmanager
async def _stdin_on_the_loop() -> AsyncIterator[_Lines | None]:
    """fd 0's lines read by the event loop, or None when fd 0 is not a pipe or a terminal."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        yield None
        return
    if not (stat.S_ISFIFO(mode) or (stat.S_ISCHR(mode) and os.isatty(0))):
        yield None  # (another character device, /dev/null: uvloop aborts the process when asked to poll it)
        return
    fd = os.dup(0)
    blocking = os.get_blocking(fd)
    pipe = os.fdopen(fd, "rb", buffering=0)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    except (OSError, ValueError):  # e.g. a character device the loop cannot poll
        pipe.close()
        yield None
        return
    try:
        yield _Lines(reader)
    finally:
        transport.close()
        with contextlib.suppress(OSError):
            os.set_blocking(0, blocking)  # the duplicate shared fd 0's mode; the terminal's shell needs it back


@asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[Any, Any]]:
    """``(read, write)`` of the SDK's :func:`~mcp.server.stdio.stdio_server` over this process's stdin and stdout,
    stdin read on the event loop where it can be (see the module)."""
    async with _stdin_on_the_loop() as lines:
        async with stdio_server(stdin=lines) as streams:  # type: ignore[arg-type]  # iterates it, as an AsyncFile
            if lines is not None:
                write = streams[1]
                lines.refuse = lambda refusal: write.send(SessionMessage(refusal))
            try:
                yield streams
            finally:
                if lines is not None:
                    lines.end()  # the SDK waits for its reader task when it leaves, which waited for the client
