"""The gateway's stdio transport: the SDK's, with stdin and stdout on the event loop.

The SDK reads stdin in a worker thread, blocked in ``read()`` until a line or the end comes; a stop cannot
interrupt it, so ``mcpvisor serve`` in a terminal ignored Ctrl-C until Enter was pressed, and under a client that
sends SIGTERM before it closes its end the gateway waited for that end. Here a pipe, a socket (a Node client's
stdio is a socketpair) or a terminal on fd 0 is read by the event loop (on a duplicate of fd 0, put back in
blocking mode afterwards: a terminal's mode is shared with the shell that started us), and the wait ends with
the task. Anything else on fd 0 (a regular file, /dev/null) keeps the SDK's reader.

stdout, when it is a pipe or a socket, is written on the event loop too (:class:`_Output`, on a duplicate of
fd 1 while fd 1 points at stderr, as the SDK's does): the SDK writes it in a worker thread that a client no
longer reading blocks for good, and the gateway waited for that thread as it stopped, whatever the signals. A
client gone (its end closed) ends the gateway as its stdin's end does, not with a BrokenPipeError. And every
request read is answered before the input ends (:class:`Unanswered`): the SDK cancels what is in flight when its input
ends, and an answer it had begun to write was then lost without a word.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import stat
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, NamedTuple, cast

import anyio
import mcp_types as types
import pydantic_core
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcpvisor.gateway.limits import WRITE_STALL_S
from mcpvisor.gateway.protocol import failed_answer, invalid_message, is_request_id, shape_problem
from mcpvisor.gateway.unanswered import ANSWER_S, MAX_UNANSWERED, Answering, Settling, Unanswered

__all__ = ["ANSWER_S", "MAX_LINE_BYTES", "stdio_streams"]

logger = logging.getLogger(__name__)

_HELD = 1 << 20
"""How many bytes of complete lines may wait to be read before reading stdin pauses (a client writing faster than
the gateway takes its requests then fills its pipe, not the gateway's memory)."""
MAX_LINE_BYTES = 64 << 20
"""The longest line read from the client (as one message from a server may be): past it the line is answered with an
error at once and its bytes dropped up to its end (a client writing without a newline grew the gateway without end)."""
_MAX_DEPTH = 200
"""How deep the JSON of a line may nest (pydantic-core's parser goes a little deeper, then refuses)."""
_UNREAD_S = 2.0
"""Once the gateway stops, how long output the client does not take may hold it up before it is dropped."""


class _Lines:
    """The lines of a stream reader as text, as the SDK's ``stdio_server`` iterates its stdin; a line that is no
    JSON-RPC message is answered here (:meth:`refuse`) and not passed on: the SDK's reader drops it unanswered,
    and a client whose request could not be read waited for its answer for ever."""

    def __init__(self, reader: _LineReader) -> None:
        self._reader = reader
        self.refuse: Callable[[types.JSONRPCError], Awaitable[None]] | None = None
        self.unanswered = Unanswered()
        self._ended = False

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = b"" if self._ended else await self._reader.readline()  # (ended: what is held is not read)
            if isinstance(line, _TooLong):
                if self.refuse is not None:
                    await self.refuse(_refusal(line.request_id, types.INVALID_REQUEST, _TOO_LONG))
                continue
            if not line:
                if not self._ended:  # the client closed stdin: answer what it asked first (the SDK cuts it)
                    await self.unanswered.settle()
                raise StopAsyncIteration
            # Decoded with replacements, an id was answered as another and arguments changed unsaid. A byte order
            # mark before the JSON is ignored (RFC 8259 allows it; a .NET StreamWriter with Encoding.UTF8 writes
            # one first).
            try:
                passed, refusal, data = _verdict(line.decode("utf-8").removeprefix("\ufeff"))
            except UnicodeDecodeError as error:
                passed, refusal, data = None, _refusal(_id_of(line), types.PARSE_ERROR, _not_utf8(error)), None
            full = passed and self.unanswered.count >= MAX_UNANSWERED and self.unanswered.counts(data)
            if full and not await self.unanswered.wait_room():
                passed, refusal = None, _refusal(data["id"], types.INTERNAL_ERROR, _BUSY)
            elif passed and self.unanswered.counts(data) and self.unanswered.in_flight(data["id"]):
                # The SDK let the second one take the first one's place: a cancel of that id reached the second
                # only, and the first ran on, answered after its client had cancelled it.
                passed, refusal = None, _refusal(data["id"], types.INVALID_REQUEST, _reused(data["id"]))
            if passed:
                self.unanswered.read(data)
                return passed
            if refusal is not None and self.refuse is not None:
                await self.refuse(refusal)

    def end(self) -> None:
        """End the lines here, as if stdin had ended: the SDK's reader task then ends."""
        self._ended = True
        self._reader.end()


class _TooLong(NamedTuple):
    """A line dropped for its length, and the id it began with, if any."""

    request_id: Any


_HEAD = 4096
"""How much of a line too long is looked at for its id."""
_STRING = rb'"(?:[^"\\]|\\.)*"'
_LEADING_ID = re.compile(
    rb'\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*' + _STRING + rb"\s*,)*"
    rb'\s*"id"\s*:\s*(-?\d+|' + _STRING + rb")\s*,"
    rb'(?:(?:\s*"jsonrpc"\s*:\s*' + _STRING + rb'\s*,)*\s*"method"\s*:)?'
)
"""A request's id among its first members (before ``params``, where the SDKs put it): only ``jsonrpc`` and
``method`` may come before it, so that an ``id`` nested in the params is never taken for it; and its ``method``
before the params too (a client's answer to a request of the gateway's has the gateway's id: not its to fail)."""


def _leading_id(head: bytes) -> Any:
    """The id a line too long begins with (its refusal then fails that request, which waited for ever), or None."""
    found = _LEADING_ID.match(head)
    if found is None or b'"method"' not in found.group(0):
        return None
    try:
        request_id = pydantic_core.from_json(found.group(1))
    except ValueError:
        return None
    return request_id if is_request_id(request_id) else None


def _id_of(line: bytes) -> Any:
    """The id of a request refused for its line (not UTF-8, nested too deep), for its caller waiting on it; None when
    it cannot be told surely, or for a client's answer to a request of the gateway's (that id is not its to fail)."""
    if (request_id := _leading_id(line[:_HEAD].removeprefix(b"\xef\xbb\xbf"))) is not None:
        return request_id
    with contextlib.suppress(ValueError):
        data = pydantic_core.from_json(line.decode("utf-8", "replace"))
        request_id = data.get("id") if isinstance(data, dict) and "method" in data else None
        return request_id if is_request_id(request_id) and "\ufffd" not in str(request_id) else None
    return None


def _dropped(head: bytes) -> _TooLong:
    logger.warning("dropping a line of the client longer than %d MiB (answered with an error)", MAX_LINE_BYTES >> 20)
    return _TooLong(_leading_id(head))


class _LineReader(asyncio.Protocol):
    """fd 0's bytes as lines of up to :data:`MAX_LINE_BYTES` (a longer one is dropped as it comes, and told as
    :class:`_TooLong`); reading pauses while more than :data:`_HELD` bytes of complete lines wait to be taken (asyncio's
    stream reader pauses only past twice its line limit)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._too_long: deque[_TooLong] = deque()  # (lines dropped and not told yet)
        self._skipping = False  # (dropping the rest of a line too long, up to its newline)
        self._searched = 0  # (the buffer holds no newline before this)
        self._ended = False
        self._more = asyncio.Event()
        self._transport: asyncio.ReadTransport | None = None
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast("asyncio.ReadTransport", transport)

    def data_received(self, data: bytes) -> None:
        if self._ended:
            return
        if self._skipping:
            end = data.find(b"\n")
            if end < 0:
                return
            self._skipping = False
            data = data[end + 1 :]
        self._buffer += data
        self._more.set()
        if len(self._buffer) > _HELD and self._newline() >= 0:
            self._pause(True)
        elif len(self._buffer) > MAX_LINE_BYTES and self._newline() < 0:  # (the lines before it were all taken)
            self._too_long.append(_dropped(bytes(self._buffer[:_HEAD])))
            self._buffer.clear()
            self._searched = 0
            self._skipping = True

    def eof_received(self) -> bool:
        self.end()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.end()

    def end(self) -> None:
        """No more lines once what is held is taken; the pipe is no longer read."""
        self._ended = True
        self._more.set()
        self._pause(True)

    async def readline(self) -> bytes | _TooLong:
        """The next line with its newline, the last one without, :class:`_TooLong` for one too long (dropped), or
        ``b""`` once stdin ended."""
        while True:
            if self._too_long:
                return self._too_long.popleft()
            end = self._newline()
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]  # (amortised O(1) from the front)
                self._searched = 0
                if len(self._buffer) <= _HELD // 2 or self._newline() < 0:
                    self._pause(False)
                if len(line) > MAX_LINE_BYTES + 1:  # (its end came with the read that took it past the bound)
                    return _dropped(line[:_HEAD])
                return line
            if self._ended:
                line = bytes(self._buffer)
                self._buffer.clear()
                self._searched = 0
                return line
            self._pause(False)  # (a line longer than what may be held: read on until it ends)
            self._more.clear()
            await self._more.wait()

    def _newline(self) -> int:
        end = self._buffer.find(b"\n", self._searched)
        self._searched = len(self._buffer) if end < 0 else end
        return end

    def _pause(self, paused: bool) -> None:
        if paused is self._paused or self._transport is None or self._transport.is_closing():
            return
        self._paused = paused
        if paused:
            self._transport.pause_reading()
        elif not self._ended:
            self._transport.resume_reading()


class _Output(asyncio.BaseProtocol):
    """fd 1's pipe written by the event loop, as the SDK's ``stdio_server`` writes its stdout (``write``, then
    ``flush``): a write returns once the pipe took it, and its wait can be cancelled (the SDK's thread could not
    be); once the client's end is closed, or :meth:`drop` gave up on a client that stopped reading, writes do
    nothing and ``gone`` is told (the first case only). A client that takes nothing of a waiting write for
    :data:`~mcpvisor.gateway.limits.WRITE_STALL_S` is cut off, ``gone`` told: the answers finishing meanwhile
    waited in memory behind that write, without bound (as the HTTP transport closes such a connection)."""

    def __init__(self, gone: Callable[[], None]) -> None:
        self._gone = gone
        self._taken = asyncio.Event()
        self._taken.set()
        self._transport: asyncio.WriteTransport | None = None
        self._stall_timer: asyncio.TimerHandle | None = None
        self._unsent = 0
        self.lost = False
        self.letting_go = False
        """Set when the gateway ends the transport itself (:meth:`drop`, the end of serving): not the client gone."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast("asyncio.WriteTransport", transport)  # (uvloop's is none by class, but is one)
        self._transport.set_write_buffer_limits(high=0, low=0)  # paused until all of a write is in the pipe

    def pause_writing(self) -> None:
        self._taken.clear()
        if self._stall_timer is None:
            self._arm_stall_timer()

    def resume_writing(self) -> None:
        self._taken.set()
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _arm_stall_timer(self) -> None:
        assert self._transport is not None
        self._unsent = self._transport.get_write_buffer_size()
        self._stall_timer = asyncio.get_running_loop().call_later(WRITE_STALL_S, self._stalled)

    def _stalled(self) -> None:
        self._stall_timer = None
        if self.lost or self._transport is None or self.letting_go:
            return
        if self._transport.get_write_buffer_size() < self._unsent:  # it reads, slowly: it gets another while
            self._arm_stall_timer()
            return
        logger.error(  # (the gateway ends: said whatever the log level, as `serve` narrates only errors)
            "cutting off the client: it read nothing of stdout for %g s while answers waited to reach it; "
            "the gateway stops as if it had closed its end",
            WRITE_STALL_S,
        )
        self.letting_go = True
        self._transport.abort()
        self._gone()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.resume_writing()  # (its stall timer)
        if exc is not None or not self.letting_go:  # (a pipe closed while nothing was buffered: no exception)
            logger.info("the client closed its end of stdout (%s): nothing more can reach it", exc or "EOF")
            self._gone()

    async def write(self, text: str) -> None:
        if self.lost or self._transport is None:
            return
        self._transport.write(text.encode())
        await self._taken.wait()

    async def flush(self) -> None:
        return None

    def drop(self) -> None:
        """Give up on what the client has not taken (it stopped reading): writes return at once from now on."""
        self.letting_go = True
        if not self.lost and self._transport is not None:
            logger.info("the client stopped reading stdout: what it did not take is dropped")
            self._transport.abort()


def _verdict(line: str) -> tuple[str | None, types.JSONRPCError | None, Any]:
    """The line passed on (a JSON-RPC message), and else the error answering it: none for a blank line, a malformed
    notification (it has no id to answer) or response (its id is the gateway's: an error with it would reach the
    client as its own; the gateway's request it names is failed instead, or it waited for ever); and the JSON value
    passed on, else the line's when it has one."""
    if not line.strip():
        return None, None, None
    try:
        data = pydantic_core.from_json(line)
    except ValueError as error:  # (JSON nested deeper than the parser goes was said to be no JSON)
        said = _not_json(str(error))
        request_id = _id_of(line.encode()) if said == _TOO_DEEP else None  # (a line of no JSON has no id to tell)
        return None, _refusal(request_id, types.PARSE_ERROR, said), None
    problem = shape_problem(data, unit="line")
    if problem is None:
        try:
            types.jsonrpc_message_adapter.validate_python(data, by_name=False)
        except ValidationError:
            problem = invalid_message(data)
        else:
            return line, None, data
    if isinstance(data, dict) and "method" not in data and ("id" in data or "result" in data or "error" in data):
        logger.debug("a response that is no JSON-RPC response: %s", problem)
        failed = failed_answer(data, problem)
        if failed is None:
            return None, None, data
        return failed.model_dump_json(by_alias=True, exclude_none=True), None, failed.model_dump(by_alias=True)
    if isinstance(data, dict) and "id" not in data and "method" in data:
        return None, None, data  # a notification: no answer, whatever is wrong with it
    request_id = data.get("id") if isinstance(data, dict) else None
    return None, _refusal(request_id if is_request_id(request_id) else None, types.INVALID_REQUEST, problem), data


_BUSY = f"the gateway has {MAX_UNANSWERED:,} requests of this client in flight: wait for answers before sending more"


_TOO_LONG = (
    f"Request too large: the gateway reads lines of at most {MAX_LINE_BYTES >> 20} MiB from its client; this one was "
    "dropped up to its end: send less at once"
)


_TOO_DEEP = f"Parse error: the line's JSON is nested too deeply; the gateway reads JSON up to {_MAX_DEPTH} levels deep"


def _not_json(reason: str) -> str:
    """What is said of a line the parser refused, with where it stopped (two messages on one line were refused with
    no word of the second one)."""
    if reason.startswith("recursion limit exceeded"):
        return _TOO_DEEP
    return f"Parse error: the line is not JSON ({reason.removesuffix('.')})"


def _not_utf8(error: UnicodeDecodeError) -> str:
    return (
        f"Parse error: the line is not UTF-8 (byte 0x{error.object[error.start]:02x} at offset {error.start}); "
        "send JSON-RPC messages as UTF-8"
    )


def _reused(request_id: Any) -> str:
    return f"Invalid Request: a request with id {request_id!r} is in flight; use a new id"


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
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(0))):
        yield None  # (another character device, /dev/null: uvloop aborts the process when asked to poll it)
        return
    fd = os.dup(0)
    blocking = os.get_blocking(fd)
    pipe = os.fdopen(fd, "rb", buffering=0)
    loop = asyncio.get_running_loop()
    reader = _LineReader()
    try:
        transport, _ = await loop.connect_read_pipe(lambda: reader, pipe)
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
async def _stdout_on_the_loop(gone: Callable[[], None]) -> AsyncIterator[_Output | None]:
    """fd 1's pipe or socket written by the event loop on a duplicate, fd 1 pointing at stderr meanwhile (stray
    output of a library must not reach the client), or None when fd 1 is neither (the SDK's writer then claims it)."""
    try:
        mode = os.fstat(1).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):  # (a Node client's stdio is a socketpair)
            yield None
            return
        fd = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        yield None
        return
    blocking = os.get_blocking(fd)
    pipe = os.fdopen(fd, "wb", buffering=0)
    output = _Output(gone)
    try:
        transport, _ = await asyncio.get_running_loop().connect_write_pipe(lambda: output, pipe)
    except (OSError, ValueError):
        pipe.close()
        yield None
        return
    try:
        os.dup2(2, 1)
    except OSError:
        transport.close()
        yield None
        return
    try:
        yield output
    finally:
        output.letting_go = True
        if not output.lost:  # (once lost, the transport closed the duplicate: its number may be another file's now)
            with contextlib.suppress(OSError):
                os.dup2(fd, 1)  # fd 1 is the wire again (the duplicate closes with the transport)
                os.set_blocking(1, blocking)
        transport.close()


async def _drain(read: Any) -> None:
    """Take what the SDK's reader still hands over once the session is gone, until it ends (the input ended or was
    cut), then close: a reader blocked handing a line to a closed stream fails, and with it the whole transport (a
    flooding client's unread lines at a stop ended the gateway with exit code 1 and a traceback)."""
    with anyio.CancelScope(shield=True):  # (a stop cancels what it runs in)
        with anyio.move_on_after(ANSWER_S):
            async for _ in read:
                pass
        read.close()


@asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[Any, Any]]:
    """``(read, write)`` of the SDK's :func:`~mcp.server.stdio.stdio_server` over this process's stdin and stdout,
    both on the event loop where they can be (see the module). ``await write.settle()`` waits (for up to
    :data:`ANSWER_S`) until every request read is answered: before the reading is cut (a stop), so that no answer
    is lost on its way."""
    async with _stdin_on_the_loop() as lines:
        async with _stdout_on_the_loop(lines.end if lines is not None else lambda: None) as output:
            dropping: asyncio.TimerHandle | None = None
            try:
                async with stdio_server(stdin=lines, stdout=output) as (read, sent):  # type: ignore[arg-type]
                    unanswered = lines.unanswered if lines is not None else Unanswered()
                    write = Answering(sent, unanswered)
                    if lines is not None:
                        lines.refuse = lambda refusal: sent.send(SessionMessage(refusal))
                    try:  # (the session closing its end leaves this one open: see below)
                        yield Settling(read.clone(), unanswered), write
                    finally:
                        if lines is not None:
                            lines.end()  # the SDK waits for its reader task when it leaves, which waited for the client
                        if output is not None:  # ... and for its writer, which waits for a client that may not read
                            dropping = asyncio.get_running_loop().call_later(_UNREAD_S, output.drop)
                        await _drain(read)
            finally:
                if dropping is not None:
                    dropping.cancel()
