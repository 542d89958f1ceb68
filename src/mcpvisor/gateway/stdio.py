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
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.stdio import stdio_server

__all__ = ["stdio_streams"]

_LINE_LIMIT = 1 << 31
"""The longest line kept whole (the SDK's own reader has no bound either; the client is the one the user runs)."""


class _Lines:
    """The lines of a stream reader as text, as the SDK's ``stdio_server`` iterates its stdin."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")

    def end(self) -> None:
        """End the lines here, as if stdin had ended: the SDK's reader task then ends."""
        self._reader.feed_eof()


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
            try:
                yield streams
            finally:
                if lines is not None:
                    lines.end()  # the SDK waits for its reader task when it leaves, which waited for the client
