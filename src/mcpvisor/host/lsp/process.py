"""Spawning a language server: its own process group, the small safe environment, on Linux the reaper
(:mod:`mcpvisor.host.lsp.reaper`) in front of it, and the tail of its stderr to say why it ended.

Stopping it is :func:`mcpvisor.core.processes.stop_process`'s (close stdin, SIGTERM the group, SIGKILL).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from mcpvisor.core.processes import child_environment, how_it_exited, on_host_path
from mcpvisor.host.lsp import reaper
from mcpvisor.host.lsp.errors import LspConnectionClosed, LspError

__all__ = [
    "STDERR_TAIL_BYTES",
    "USE_REAPER",
    "LspProcess",
    "StderrTail",
    "connect_language_server",
    "connect_unix",
    "connection_target",
    "end_group_after_its_leader",
    "launch_argv",
    "spawn_language_server",
]

USE_REAPER = sys.platform == "linux"
"""Whether servers start behind the reaper (it needs ``PR_SET_PDEATHSIG``)."""
STDERR_TAIL_BYTES = 4 * 1024
"""How much of a server's latest stderr is kept to explain why it ended before it said anything."""
EXIT_POLL_S = 0.01
CONNECT_RETRY_S = 0.05
"""How often a server that does not listen yet is tried again."""


@dataclass(eq=False)
class LspProcess:
    """The running server as the host sees it. On Linux ``pid`` is the reaper's: it leads the process
    group the server runs in, and exits with the server's exit code."""

    pid: int | None
    """``None``: a server mcpvisor only connects to."""
    ended: anyio.Event = field(default_factory=anyio.Event)
    """Set when the server closed its stdout (it exited, crashed or was killed), or when its output could
    not be read any more (``failure`` says why)."""
    failure: LspError | None = None
    """Why reading stopped while the server still ran: it broke the protocol's bounds."""
    _process: anyio.abc.Process | None = field(default=None, repr=False)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    async def wait_exit(self, timeout_s: float) -> bool:
        """Whether the process exited within ``timeout_s`` (polls ``returncode``, as ``core.processes`` does:
        ``wait()`` would also wait for pipes a grandchild holds); at once ``False`` for a server mcpvisor only
        connects to."""
        if self._process is None:
            return False
        with anyio.move_on_after(timeout_s):
            while self.returncode is None:  # noqa: ASYNC110 - the exit code has no event to wait on
                await anyio.sleep(EXIT_POLL_S)
            return True
        return False


class StderrTail(anyio.abc.ByteReceiveStream):
    """A server's stderr on its way to the log, keeping the last :data:`STDERR_TAIL_BYTES`."""

    def __init__(self, stream: anyio.abc.ByteReceiveStream) -> None:
        self._stream = stream
        self.tail = bytearray()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        chunk = await self._stream.receive(max_bytes)
        self.tail += chunk
        del self.tail[:-STDERR_TAIL_BYTES]
        return chunk

    async def aclose(self) -> None:
        await self._stream.aclose()

    def last_line(self) -> str:
        lines = self.tail.decode(errors="replace").strip().splitlines()
        return lines[-1].strip()[:300] if lines else ""


async def end_group_after_its_leader(process: anyio.abc.Process) -> None:
    """Once the reaper ``process`` (the pid status shows) has exited, SIGKILL what is left of its process group.
    It stops the group itself, unless it was killed with SIGKILL: then the server would run on unseen, without
    its parent-death signal, its output still open, so that the host would go on reading it as ready."""
    await process.wait()  # (the connection's end cancels it)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def launch_argv(command: str, args: Sequence[str]) -> list[str]:
    """The command line that starts ``command``: behind the reaper on Linux, as is elsewhere."""
    if USE_REAPER:
        return [sys.executable, "-I", "-S", str(Path(reaper.__file__)), command, *args]
    return [command, *args]


async def spawn_language_server(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: str | None,
    name: str,
    host_path: bool = False,
    command_field: str | None = None,
    output_only: bool = False,
) -> anyio.abc.Process:
    """Start the server ``name`` in a new session with pipes on stdin, stdout and stderr (``output_only``: a
    server spoken to over a socket, its stdout and stderr in one pipe, ``process.stdout``). ``host_path``: a
    bare ``command`` is looked up on the host's PATH, never on ``env.PATH`` (a server a repository defines).
    ``command_field`` names where the entry writes its command (default ``lspServers.NAME.command``).

    Raises :class:`LspConnectionClosed` when it cannot be spawned; behind the reaper a missing ``command``
    shows later, as an exit with code 127 and the reaper's ``cannot start COMMAND: REASON``."""
    if host_path:
        try:
            command = on_host_path(command)
        except FileNotFoundError as exc:
            reason = (
                f"could not be started: executable {command!r} not found on the host's PATH (a repository's "
                f"server never runs what its own env.PATH finds); check {command_field or f'lspServers.{name}.command'}"
            )
            raise LspConnectionClosed(server=name, reason=reason) from exc
    environment = child_environment(env)
    if USE_REAPER:
        environment[reaper.PARENT_PID_ENV] = str(os.getpid())
    try:
        return await anyio.open_process(
            launch_argv(command, args),
            env=environment,
            cwd=cwd,
            start_new_session=True,
            stderr=subprocess.STDOUT if output_only else subprocess.PIPE,
        )
    except OSError as exc:
        raise LspConnectionClosed(server=name, reason=f"could not be started: {exc}") from exc


async def connect_language_server(
    address: tuple[str, int] | str,
    *,
    folder: str,
    timeout_s: float,
    name: str,
    field: str,
    process: LspProcess | None,
    output: StderrTail | None = None,
) -> anyio.abc.ByteStream:
    """Connect to a language server listening on ``address`` (``(host, port)`` or a Unix socket's path,
    relative to ``folder``), trying again every :data:`CONNECT_RETRY_S` while nothing listens yet, for at
    most ``timeout_s`` or until the server ``process`` mcpvisor started for it has exited (``output``: its
    output, whose last line says why). Raises :class:`LspConnectionClosed` saying where it tried and what
    to fix (``field``: where ``socket`` is written)."""
    path = _socket_path(folder, address) if isinstance(address, str) else ""
    where = connection_target(address if isinstance(address, tuple) else path)
    problem: OSError | None = None
    with anyio.move_on_after(timeout_s):
        while process is None or process.returncode is None:
            try:
                if isinstance(address, tuple):
                    return await anyio.connect_tcp(*address)
                return await connect_unix(path)
            except socket.gaierror as exc:  # a name that does not resolve will not 50 ms later (unless "try again")
                problem = exc
                if exc.errno != socket.EAI_AGAIN:
                    break
            except OSError as exc:  # anyio's connect_tcp wraps each address's failure: the first says why
                cause = exc.__cause__
                found = cause.exceptions[0] if isinstance(cause, BaseExceptionGroup) else cause
                problem = found if isinstance(found, OSError) else exc
            await anyio.sleep(CONNECT_RETRY_S)
    if process is not None and process.returncode is not None:
        await anyio.sleep(CONNECT_RETRY_S)  # its last words reach the pipe's reader
        last_line = output.last_line() if output is not None else ""
        reason = f"{how_it_exited(process.returncode)} before it listened on {where}"
        said = f"{reason}: {last_line}" if last_line else reason
        raise LspConnectionClosed(server=name, reason=said, crashed=True)
    if isinstance(problem, socket.gaierror):
        reason = f"could not connect to {where}: its host name does not resolve ({problem.strerror or problem})"
        raise LspConnectionClosed(server=name, reason=f"{reason}; fix {field}")
    if problem is None:
        reason = "no answer"
    else:
        reason = os.strerror(problem.errno) if problem.errno else str(problem)
    fix = "check that it listens there" if process is not None else "start it, or give it a command to run"
    raise LspConnectionClosed(
        server=name,
        reason=f"could not connect to {where} within {timeout_s:g} s ({reason[:1].lower()}{reason[1:]}); "
        f"{fix} (see {field})",
    )


async def connect_unix(path: str) -> anyio.abc.SocketStream:
    """A stream to the Unix socket at ``path``, over the event loop's transport: anyio's own Unix stream (asyncio
    backend) registers its socket's readiness to complete a future, and a read cancelled in the loop pass where the
    socket became readable (a session ending as the server closes) raised ``InvalidStateError`` in the loop's
    callback. A Unix socket connects at once or fails (``EAGAIN``: its backlog is full, tried again as a refusal)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.connect(path)
        return await anyio.abc.SocketStream.from_socket(sock)
    except BaseException:
        sock.close()
        raise


def connection_target(address: tuple[str, int] | str | None) -> str:
    """``host:port`` or a socket's path, for people."""
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)


def _socket_path(folder: str, path: str) -> str:
    return os.path.join(folder, os.path.expanduser(path))
