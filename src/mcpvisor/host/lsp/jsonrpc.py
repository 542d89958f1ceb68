"""One language server process and the JSON-RPC 2.0 channel to it (the LSP base protocol:
``Content-Length: N`` headers, a blank line, then N bytes of UTF-8 JSON).

The process is spawned like a stdio MCP server (:mod:`mcpvisor.host.lsp.process`): its own process group,
the small safe environment, stderr into its capped log, a bounded and shielded stop; on Linux behind the
reaper, so that the server's own children die with it even when the host is killed with SIGKILL.

Reading is linear and bounded (:class:`~mcpvisor.host.lsp.framing.FrameReader`): a frame over the limit,
or a header that is not LSP, ends reading with :class:`LspMessageTooLarge` and fails every pending request.
Requests the server makes are answered by ``on_request`` in their own tasks; notifications go to
``on_notification``. Params and results are never logged above DEBUG: they may hold file contents.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from mcpvisor.core.lines import without_lone_surrogates
from mcpvisor.core.processes import how_it_exited, stop_process
from mcpvisor.core.server_config import DEFAULT_MAX_MESSAGE_BYTES
from mcpvisor.core.server_log import ServerLog, pump_stderr
from mcpvisor.host.lsp.errors import LspConnectionClosed, LspError, LspMessageTooLarge, LspRequestError
from mcpvisor.host.lsp.framing import FrameReader
from mcpvisor.host.lsp.process import (
    USE_REAPER,
    LspProcess,
    StderrTail,
    connect_language_server,
    connection_target,
    end_group_after_its_leader,
    spawn_language_server,
)

__all__ = [
    "CONTENT_MODIFIED",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "INTERNAL_ERROR",
    "METHOD_NOT_FOUND",
    "REQUEST_CANCELLED",
    "LspConnection",
    "LspConnectionClosed",
    "LspError",
    "LspMessageTooLarge",
    "LspProcess",
    "LspRequestError",
    "Notification",
    "RequestHandler",
    "open_lsp_connection",
]

logger = logging.getLogger(__name__)

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

CONTENT_MODIFIED = -32801
REQUEST_CANCELLED = -32800
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
READ_CHUNK_BYTES = 1024 * 1024
EXIT_REPORT_S = 1.0
"""How long a server that closed its output may take to exit and flush its stderr before it is reported."""
CANCEL_SEND_S = 1.0
"""How long telling the server that a request was given up (``$/cancelRequest``) may take."""
STDERR_DRAIN_S = 1.0
"""How long what a stopped server left in its stderr pipe may take to reach its log."""
EXIT_GRACE_S = 0.5
"""How long a server may take to exit after the polite part of a stop (``shutdown``, ``exit`` and the wait its
``shutdownTimeout`` allows) before its process group is signalled; a server spoken to over a socket that
closed the connection after ``exit`` but serves other clients runs on until then."""

Notification = Callable[[str, Any], None]
"""``(method, params)`` of a notification from the server; called on the reader task, so it must not block."""
RequestHandler = Callable[[str, Any], Awaitable[Any]]
"""Answers a request from the server; raises :class:`LspRequestError` (``METHOD_NOT_FOUND`` for an unknown one)."""


@dataclass(eq=False)
class _Pending:
    method: str
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: LspError | None = None


class LspConnection:
    """Requests and notifications to one language server, made by :func:`open_lsp_connection`."""

    def __init__(
        self,
        process: LspProcess,
        stdin: anyio.abc.ByteSendStream,
        *,
        name: str,
        on_notification: Notification,
        on_request: RequestHandler,
    ) -> None:
        self.process = process
        self.name = name
        self.initialized = False
        """Whether the server answered ``initialize``: only then is it asked to ``shutdown`` when it stops."""
        self._stdin = stdin
        self._on_notification = on_notification
        self._on_request = on_request
        self._write_lock = anyio.Lock()
        self._last_id = 0
        self._pending: dict[int, _Pending] = {}
        self._ended_reason = "was stopped"
        self._task_group: anyio.abc.TaskGroup | None = None
        self._over_socket = False
        self.stopping = False
        """Set when the host stops the server: what is still unanswered then was stopped, whatever the exit."""
        self.stopped_because: str | None = None
        """Why the host stops the server, when it says (an edit): what it cuts short says so, and to retry."""

    def closed(self) -> bool:
        return self.process.ended.is_set()

    def busy(self) -> bool:
        """Whether a request to the server waits for its answer."""
        return bool(self._pending)

    @property
    def over_socket(self) -> bool:
        return self._over_socket

    @property
    def ended_reason(self) -> str:
        """How the server ended (``closed the connection``, ``exited with code 1: LAST LINE``...)."""
        return self._ended_reason

    async def request(self, method: str, params: Any = None, *, timeout_s: float | None = None) -> Any:
        """Send a request and wait for its result; ``TimeoutError`` after ``timeout_s`` (the server is told
        with ``$/cancelRequest``, as it is when the caller is cancelled). Raises :class:`LspRequestError`,
        :class:`LspConnectionClosed` or :class:`LspMessageTooLarge`."""
        self._check_open(method)
        self._last_id += 1
        request_id = self._last_id
        data = _encode({"jsonrpc": "2.0", "id": request_id, "method": method, **_params(params)})
        pending = self._pending[request_id] = _Pending(method)
        logger.debug("-> %s #%d to language server %r", method, request_id, self.name)
        try:
            with anyio.move_on_after(timeout_s):
                await self._send(data, method)
                await pending.done.wait()
        except anyio.get_cancelled_exc_class():
            await self._cancel(request_id)
            raise
        finally:
            del self._pending[request_id]
        if not pending.done.is_set():
            await self._cancel(request_id)
            raise TimeoutError(f"{method} to language server {self.name!r} timed out after {timeout_s:g} s")
        if pending.error is not None:
            raise pending.error
        if method == "initialize":
            self.initialized = True
        return pending.result

    async def notify(self, method: str, params: Any = None) -> None:
        self._check_open(method)
        logger.debug("-> %s to language server %r", method, self.name)
        await self._send(_encode({"jsonrpc": "2.0", "method": method, **_params(params)}), method)

    def _check_open(self, method: str) -> None:
        if self.closed():
            error = LspConnectionClosed(
                server=self.name, reason=self._ended_reason, method=method, crashed=not self.stopping
            )
            raise error from self.process.failure

    async def _send(self, data: bytes, method: str) -> None:
        frame = b"Content-Length: %d\r\n\r\n%b" % (len(data), data)
        async with self._write_lock:
            try:
                await self._stdin.send(frame)  # one send: a cancelled caller never leaves half a frame
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                with anyio.move_on_after(2 * EXIT_REPORT_S):
                    await self.process.ended.wait()  # the reader learns why: an exit code, its last words
                reason = self._ended_reason if self.closed() else "closed its input"
                crashed = not self.stopping  # it ended (or stopped reading) on its own, as when the reader sees it
                raise LspConnectionClosed(server=self.name, reason=reason, method=method, crashed=crashed) from exc

    async def _cancel(self, request_id: int) -> None:
        """Best effort: tell the server a request was given up (a late answer is dropped anyway)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_SEND_S):
            try:
                await self.notify("$/cancelRequest", {"id": request_id})
            except LspError:
                pass

    def _dispatch(self, body: bytes) -> None:
        try:
            message = json.loads(body.decode(errors="replace"))  # bytes that are not UTF-8 read as U+FFFD
        except (ValueError, RecursionError):
            logger.warning("language server %r sent a message that is not JSON (%d bytes)", self.name, len(body))
            return
        if _SURROGATE_ESCAPE.search(body):  # a lone one cannot be sent on (only checked for where one may be)
            message = without_lone_surrogates(message)
        if not isinstance(message, dict):
            logger.warning("language server %r sent a JSON-RPC message that is not an object", self.name)
            return
        method = message.get("method")
        if isinstance(method, str) and "id" in message:
            assert self._task_group is not None
            self._task_group.start_soon(self._answer, message["id"], method, message.get("params"))
        elif isinstance(method, str):
            logger.debug("<- %s from language server %r", method, self.name)
            try:
                self._on_notification(method, message.get("params"))
            except Exception:
                logger.exception("handling %s from language server %r failed", method, self.name)
        elif isinstance(request_id := message.get("id"), int) and (pending := self._pending.get(request_id)):
            error = message.get("error")
            if isinstance(error, dict):
                code = error.get("code")
                pending.error = LspRequestError(
                    code if isinstance(code, int) else INTERNAL_ERROR,
                    str(error.get("message", "")),
                    error.get("data"),
                    method=pending.method,
                    server=self.name,
                )
            else:
                pending.result = message.get("result")
            pending.done.set()
        else:  # an answer to a request given up, or nothing we understand
            logger.debug("language server %r answered a request that is not pending: %r", self.name, message.get("id"))

    async def _answer(self, request_id: Any, method: str, params: Any) -> None:
        logger.debug("<- %s request from language server %r", method, self.name)
        try:
            data = _encode({"jsonrpc": "2.0", "id": request_id, "result": await self._on_request(method, params)})
        except LspRequestError as exc:
            error = {"code": exc.code, "message": exc.message} | ({} if exc.data is None else {"data": exc.data})
            data = _encode({"jsonrpc": "2.0", "id": request_id, "error": error})
        except Exception:
            logger.exception("answering %s from language server %r failed", method, self.name)
            error = {"code": INTERNAL_ERROR, "message": f"the client failed to answer {method}"}
            data = _encode({"jsonrpc": "2.0", "id": request_id, "error": error})
        try:
            await self._send(data, method)
        except LspConnectionClosed:
            pass

    def _end(self, reason: str) -> None:
        """Reading stopped: every pending request fails, as will every later one."""
        why = f" ({self.stopped_because}); retry the call" if self.stopping and self.stopped_because else ""
        self._ended_reason = reason + why
        failure = self.process.failure
        for pending in self._pending.values():
            if not pending.done.is_set():
                if isinstance(failure, LspMessageTooLarge):
                    pending.error = LspMessageTooLarge(
                        server=failure.server, limit=failure.limit, reason=failure.reason
                    )
                else:
                    cut_short = f"{reason} before it answered{why}" if self.stopping else reason
                    pending.error = LspConnectionClosed(
                        server=self.name, reason=cut_short, method=pending.method, crashed=not self.stopping
                    )
                pending.done.set()
        self.process.ended.set()

    async def _read(
        self,
        stdout: anyio.abc.ByteReceiveStream,
        frames: FrameReader,
        stderr: StderrTail | None,
        stderr_done: anyio.Event,
    ) -> None:
        """The reader task: frames in, dispatched, until the output ends or breaks the bounds."""
        reason = "was stopped"
        received = False
        try:
            while True:
                try:
                    chunk = await stdout.receive(READ_CHUNK_BYTES)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    if self.stopping:
                        reason = "was stopped"
                    else:
                        reason = await self._exit_reason(stderr_done, stderr if not received else None)
                    return
                try:
                    bodies = frames.feed(chunk)
                except LspMessageTooLarge as exc:
                    self.process.failure = exc
                    reason = exc.explanation
                    logger.warning("%s", exc)
                    return
                for body in bodies:
                    received = True
                    self._dispatch(body)
        finally:
            self._end(reason)

    async def _exit_reason(self, stderr_done: anyio.Event, stderr: StderrTail | None) -> str:
        """How the server ended, with its last stderr line when it ended before it said anything."""
        with anyio.move_on_after(EXIT_REPORT_S):
            await self.process.wait_exit(EXIT_REPORT_S)
            await stderr_done.wait()
        code = self.process.returncode
        if code is not None:
            reason = how_it_exited(code)
        else:
            reason = "closed the connection" if self._over_socket else "closed its output"
        last_line = stderr.last_line() if stderr is not None else ""
        return f"{reason}: {last_line}" if last_line else reason


def _params(params: Any) -> dict[str, Any]:
    return {} if params is None else {"params": params}


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


@asynccontextmanager
async def open_lsp_connection(
    command: str | None,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: str | None,
    log: ServerLog,
    name: str,
    on_notification: Notification,
    on_request: RequestHandler,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    shutdown_timeout_s: float = 5.0,
    host_path: bool = False,
    command_field: str | None = None,
    address: tuple[str, int] | str | None = None,
    connect_timeout_s: float = 30.0,
    socket_field: str = "socket",
) -> AsyncIterator[LspConnection]:
    """Spawn the language server ``name`` in its own process group and talk JSON-RPC to it; its stderr goes
    to ``log`` (closed when the connection ends). Leaving the context asks the server to ``shutdown`` and
    ``exit`` (each bounded by ``shutdown_timeout_s``), then stops its whole process group; a server that
    never answered ``initialize`` has its process group killed at once. An exception
    from the body leaves the context as it is, not wrapped in an exception group. ``host_path``: a bare
    ``command`` is looked up on the host's PATH, never on ``env.PATH`` (a server a repository defines);
    ``command_field`` names where the entry writes it, for the fix when it is not found.

    With an ``address`` (``(host, port)`` or a Unix socket's path) the server is spoken to over a socket,
    tried for up to ``connect_timeout_s`` while it does not listen yet (``socket_field``: where the entry
    writes it); ``command``, when given, is started first (its stdout and stderr both go to ``log``) and
    stopped with the connection; without one the server is someone else's and only the connection ends.

    Raises :class:`LspConnectionClosed` when the process cannot be spawned or the socket not reached
    (behind the reaper, a missing ``command`` fails the first request instead: ``exited with code 127:
    cannot start COMMAND: ...``).
    """
    process: anyio.abc.Process | None = None
    if address is None or command:
        try:
            process = await spawn_language_server(
                command or "",
                args,
                env=env,
                cwd=cwd,
                name=name,
                host_path=host_path,
                command_field=command_field,
                output_only=address is not None,
            )
        except BaseException:
            log.close()
            raise
    # No awaits until the task group is entered, or a cancellation here would leak the process.
    handle = LspProcess(pid=process.pid if process is not None else None, _process=process)
    output_stream = None if process is None else process.stderr if address is None else process.stdout
    output = StderrTail(output_stream) if output_stream is not None else None
    output_done = anyio.Event()

    async def copy_output() -> None:
        try:
            if output is not None:
                await pump_stderr(output, log)
        finally:
            log.close()
            output_done.set()

    connection: LspConnection | None = None
    socket: anyio.abc.ByteStream | None = None
    lone: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(copy_output)
            if process is not None and USE_REAPER:
                tg.start_soon(end_group_after_its_leader, process)
            try:
                if address is None:
                    assert process is not None
                    assert process.stdin is not None
                    assert process.stdout is not None
                    send: anyio.abc.ByteSendStream = process.stdin
                    receive: anyio.abc.ByteReceiveStream = process.stdout
                else:
                    folder = cwd or "."
                    socket = await connect_language_server(
                        address,
                        folder=folder,
                        timeout_s=connect_timeout_s,
                        name=name,
                        field=socket_field,
                        process=handle if process is not None else None,
                        output=output,
                    )
                    send = receive = socket
                connection = LspConnection(
                    handle, send, name=name, on_notification=on_notification, on_request=on_request
                )
                connection._task_group = tg
                connection._over_socket = socket is not None
                frames = FrameReader(max_message_bytes, server=name)
                tg.start_soon(connection._read, receive, frames, output, output_done)
                if process is not None:
                    logger.info("language server %r started (pid %d)", name, process.pid)
                else:
                    logger.info("language server %r connected (%s)", name, connection_target(address))
                yield connection
            finally:
                with anyio.CancelScope(shield=True):
                    initialized = connection is not None and connection.initialized
                    if connection is not None:
                        connection.stopping = True  # a request it has not answered was cut short, not crashed
                    if connection is not None and initialized and process is not None:  # not someone else's
                        await _shut_down(connection, handle, shutdown_timeout_s)
                    if socket is not None:
                        await socket.aclose()
                    if process is not None:  # a server that never answered initialize has nothing to finish
                        await stop_process(process, at_once=not initialized, exit_grace_s=EXIT_GRACE_S)
                    with anyio.move_on_after(STDERR_DRAIN_S):
                        await output_done.wait()  # its last words reach the log before anyone reads it
                    if connection is not None:
                        with anyio.move_on_after(EXIT_REPORT_S):
                            await handle.ended.wait()
                tg.cancel_scope.cancel()
                if process is not None:
                    code = process.returncode
                    logger.info(
                        "language server %r stopped (%s)", name, "running" if code is None else how_it_exited(code)
                    )
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        lone = group.exceptions[0]
    if lone is not None:
        raise lone  # the body's own exception (the reader and the output copier raise none)


async def _shut_down(connection: LspConnection, process: LspProcess, timeout_s: float) -> None:
    """The polite part of a stop: ``shutdown``, ``exit``, and a bounded wait for the process to exit."""
    if connection.closed() or process.returncode is not None:
        return
    try:
        with anyio.move_on_after(timeout_s):  # one budget for all of it, as shutdownTimeout says
            try:
                await connection.request("shutdown")
            except LspRequestError as exc:
                logger.debug("language server %r refused to shut down: %s", connection.name, exc)
            await connection.notify("exit")
            if connection.over_socket:
                await process.ended.wait()  # it closed the connection (one that serves others may run on)
            else:
                await process.wait_exit(timeout_s)
    except LspError as exc:
        logger.debug("language server %r did not shut down cleanly: %s", connection.name, exc)
