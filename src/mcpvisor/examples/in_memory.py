"""The light example server inside this process, over memory streams instead of a child's pipes.

For protocol-level tests and embedding (the SDK's ``InMemoryTransport`` is the model): pass
:func:`light_servers_in_memory` as ``in_memory`` in :class:`~mcpvisor.host.options.HostOptions` (or
:class:`~mcpvisor.core.server_config.ConnectionOptions`), and every entry that runs
``python -m mcpvisor.examples.light_server ARGS`` is served by a :class:`LightServer` in this process, with the
same tools, prompts, resources and answers; other entries are reached as configured. Nothing is spawned, so a
connection opens in well under a millisecond instead of the tens a process takes. It runs on asyncio (as
mcpvisor does): the server's own threads hand their answers to the event loop with ``call_soon_threadsafe``.

What is about a process needs the real one, and such an entry is refused with its option named rather than
quietly served otherwise: a crash or an exit timer, a marker file with the PID, stderr output, a server that
ignores SIGTERM, an unterminated message written to test the transport's size bound, the ``pid`` tool.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import IO, Any, NoReturn, cast

import anyio
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from mcpvisor.examples._options import Options, build_parser
from mcpvisor.examples.light_server import INVALID_PARAMS, LightServer, RequestError

__all__ = ["LIGHT_MODULE", "NEEDS_A_PROCESS", "NeedsAProcess", "light_servers_in_memory", "serve_in_memory"]

LIGHT_MODULE = "mcpvisor.examples.light_server"
NEEDS_A_PROCESS = {
    "crash_on_call": "--crash-on-call",
    "exit_after_s": "--exit-after",
    "marker": "--marker",
    "stderr": "--stderr",
    "stubborn": "--stubborn",
    "flood_stderr": "--flood-stderr",
    "big": "--big",
}
"""Options (attribute -> flag) whose subject is the process or its pipes: refused in memory."""


class NeedsAProcess(ValueError):
    """A light server entry whose options are about its process (:data:`NEEDS_A_PROCESS`)."""


def light_servers_in_memory(name: str, cfg: Any) -> AbstractAsyncContextManager[TransportStreams] | None:
    """An :data:`~mcpvisor.core.server_config.InMemoryServers` for the light example server: its streams
    when ``cfg`` runs ``python -m mcpvisor.examples.light_server ...``, else ``None``. Raises
    :class:`NeedsAProcess` naming the option when the entry needs a process (:data:`NEEDS_A_PROCESS`)."""
    args = list(cfg.args or ()) if cfg.command is not None else []
    if args[:2] != ["-m", LIGHT_MODULE]:
        return None
    options = _options(name, args[2:])
    needing = [flag for attribute, flag in NEEDS_A_PROCESS.items() if getattr(options, attribute)]
    if needing:
        raise NeedsAProcess(f"server {name!r} cannot be served in memory: {', '.join(needing)} needs a process")
    return serve_in_memory(options)


def _options(name: str, argv: list[str]) -> Options:
    """The entry's options; a usage error (an option of another example server, ``--help``) is a ``ValueError``
    that fails this one server, where the process's parser would have ended the host (``sys.exit``)."""
    parser = build_parser(f"python -m {LIGHT_MODULE}", network=False)

    def refuse(message: str | None = None, *_: object) -> NoReturn:
        raise ValueError(f"server {name!r} cannot be served in memory: {parser.prog}: {message or 'it would exit'}")

    parser.error = refuse  # type: ignore[method-assign]
    parser.exit = lambda status=0, message=None: refuse(message)  # type: ignore[method-assign]
    parser.print_help = lambda file=None: None  # type: ignore[method-assign]
    return Options(parser.parse_args(argv))


@asynccontextmanager
async def serve_in_memory(options: Options) -> AsyncIterator[TransportStreams]:
    """Serve one connection of a light server with ``options`` until the context exits; yields the client's
    ``(read stream, write stream)``. The server answers on the event loop; its delayed answers (``sleep``,
    ``--slow-call``, a withdrawn ``ask_client``) come from its own threads, as in the process."""
    to_client, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](math.inf)
    write_stream, from_client = anyio.create_memory_object_stream[SessionMessage](0)

    def deliver(line: bytes) -> None:
        try:
            message: SessionMessage | Exception = SessionMessage(
                types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            )
        except ValueError as exc:  # as the stdio transport passes on a line that is not a message
            message = exc
        try:
            to_client.send_nowait(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the connection is gone; a late answer from one of the server's threads is dropped

    out = _Lines(deliver, asyncio.get_running_loop().call_soon_threadsafe)
    server = _InMemoryLightServer(options, cast("IO[bytes]", out))

    async def pump() -> None:
        async with from_client:
            async for session_message in from_client:
                data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                server.handle_line(data.encode())

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        try:
            yield read_stream, write_stream
        finally:
            tg.cancel_scope.cancel()
            for stream in (to_client, read_stream, write_stream, from_client):
                stream.close()


class _Lines:
    """The server's stdout: each complete line is handed to ``deliver`` on the event loop, from any thread,
    never blocking (the server writes under its own lock, one writer at a time, so lines keep their order)."""

    def __init__(self, deliver: Callable[[bytes], None], call_soon_threadsafe: Callable[..., object]) -> None:
        self._deliver = deliver
        self._call_soon_threadsafe = call_soon_threadsafe
        self._buffer = bytearray()

    def write(self, data: bytes) -> int:
        self._buffer += data
        *lines, rest = self._buffer.split(b"\n")
        self._buffer = bytearray(rest)
        for line in lines:
            if line.strip():
                try:
                    self._call_soon_threadsafe(self._deliver, bytes(line))
                except RuntimeError:  # the event loop has closed: nobody is left to read
                    return len(data)
        return len(data)

    def flush(self) -> None:
        return None


class _InMemoryLightServer(LightServer):
    """A light server without a process: ``pid`` has nothing to tell."""

    def _call_control_tool(
        self, request_id: object, tool: str, arguments: dict[str, Any], progress_token: object = None
    ) -> None:
        if tool == "pid":
            raise RequestError(INVALID_PARAMS, "tool 'pid': this server is served in memory, without a process")
        super()._call_control_tool(request_id, tool, arguments, progress_token)
