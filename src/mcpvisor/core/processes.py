"""A stdio server's process: the environment it gets, where its command is found, spawning and stopping it —
and spawning it *ahead*, while the SDK still loads.

Nothing here imports the MCP SDK. The first connections of a process import it (about a second of CPU here,
MCP-SDK-2.md), and a server spawned before that import boots on another core meanwhile: its connection then
adopts the process (:class:`SpawnedAhead`) instead of spawning one after the import. One that is not adopted
(its start was superseded or stopped while the SDK loaded) is stopped, never left running.
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread

from mcpvisor.core.server_config import REPOSITORY_SCOPES, McpServerConfig
from mcpvisor.core.server_log import ServerLog, log_file
from mcpvisor.core.start_slots import StartSlots

__all__ = [
    "INHERITED_ENV_VARS",
    "STDIN_CLOSE_GRACE_S",
    "TERMINATE_GRACE_S",
    "SpawnedAhead",
    "child_environment",
    "how_it_exited",
    "loading_sdk",
    "on_host_path",
    "spawn",
    "spawn_ahead",
    "stop_process",
]

logger = logging.getLogger(__name__)

STDIN_CLOSE_GRACE_S = 2.0
"""How long a server may take to exit by itself once its stdin is closed."""
TERMINATE_GRACE_S = 2.0
"""How long after SIGTERM to the process group before SIGKILL."""
REAP_WAIT_S = 2.0
"""How long to wait for the event loop to observe a kill."""
EXIT_POLL_S = 0.01

INHERITED_ENV_VARS = (
    (
        "APPDATA",
        "HOMEDRIVE",
        "HOMEPATH",
        "LOCALAPPDATA",
        "PATH",
        "PATHEXT",
        "PROCESSOR_ARCHITECTURE",
        "SYSTEMDRIVE",
        "SYSTEMROOT",
        "TEMP",
        "USERNAME",
        "USERPROFILE",
    )
    if sys.platform == "win32"
    else ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
)
"""What a server inherits of the host's environment: the SDK's ``DEFAULT_INHERITED_ENV_VARS`` (``tests/core``
pins that the two agree), read here without importing the SDK."""


def _inherited_environment() -> dict[str, str]:
    """The host's values of :data:`INHERITED_ENV_VARS`, without shell functions (``() { …``), as the SDK's
    ``get_default_environment``."""
    values = {key: os.environ.get(key) for key in INHERITED_ENV_VARS}
    return {key: value for key, value in values.items() if value is not None and not value.startswith("()")}


def child_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """The small safe set (HOME, LOGNAME, PATH, SHELL, TERM, USER) plus the config's ``env``.

    Never the host's whole environment: secrets in the user's shell do not leak into every server.
    """
    return _inherited_environment() | dict(env or {})


def on_host_path(command: str) -> str:
    """``command`` as the host's own PATH finds it (an absolute path) when it is a bare name; any other
    command (one with a folder in it) as it is.

    For the servers a repository defines: spawned under the config's ``env``, a bare name would be looked
    up on the config's ``env.PATH``, which the repository may point at its own folders (``tools/pylsp``)
    so that the name the user approved runs a program of the repository's choice.
    Raises :class:`FileNotFoundError` when the host's PATH has no such executable."""
    if os.sep in command or (os.altsep is not None and os.altsep in command):
        return command
    host_path = _inherited_environment().get("PATH", os.defpath)
    found = shutil.which(command, path=host_path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "not found on the host's PATH", command)
    return os.path.abspath(found)


def uses_host_path(cfg: McpServerConfig) -> bool:
    """Whether ``cfg``'s bare command is looked up on the host's PATH (a server a repository defines)."""
    return cfg.scope in REPOSITORY_SCOPES


async def spawn(
    command: str, args: Sequence[str], *, env: Mapping[str, str] | None, cwd: str | None, host_path: bool
) -> anyio.abc.Process:
    """Start a stdio server in its own process group (stopped as a group), pipes on stdin, stdout and stderr.
    ``host_path``: see :func:`on_host_path`. Raises ``OSError`` (e.g. ``FileNotFoundError``), or ``ValueError`` for
    what no process can be given (an ``=`` in an environment variable's name, a NUL byte)."""
    return await anyio.open_process(
        [on_host_path(command) if host_path else command, *args],
        env=child_environment(env),
        cwd=cwd,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


@dataclass(eq=False)
class SpawnedAhead:
    """A server's process spawned before its connection could speak to it (the SDK was loading), with its log."""

    config: McpServerConfig
    """What it was spawned for: only a connection made for an equal configuration adopts it."""
    _process: anyio.abc.Process | None = field(repr=False)
    _log: ServerLog = field(repr=False)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def take(self, cfg: McpServerConfig) -> tuple[anyio.abc.Process, ServerLog] | None:
        """The process and its open log, once, for a connection to ``cfg`` (None: another configuration, or
        already taken)."""
        if self._process is None or cfg != self.config:
            return None
        process, self._process = self._process, None
        return process, self._log

    async def discard(self) -> None:
        """Stop the process unless a connection took it (it never got going: killed at once)."""
        process, self._process = self._process, None
        if process is not None:
            with anyio.CancelScope(shield=True):
                await stop_process(process, at_once=True)
            self._log.close()


async def spawn_ahead(cfg: McpServerConfig, log_path: Path) -> SpawnedAhead | None:
    """Spawn ``cfg``'s server now, its log opened at ``log_path`` first, for its connection to adopt later; None
    when it has no command, or when its log or its process cannot be had (its connection then tries and says
    why: nothing starts that its connection would refuse to start)."""
    if cfg.command is None:
        return None
    try:
        log = ServerLog(log_path)
    except OSError:
        return None
    try:
        process = await spawn(cfg.command, cfg.args, env=cfg.env, cwd=cfg.cwd, host_path=uses_host_path(cfg))
    except Exception:  # OSError, or ValueError (an "=" in an env name, a NUL byte): its connection says which
        log.close()
        return None
    return SpawnedAhead(cfg, process, log)


def _loaded(module: str) -> bool:
    """Whether ``module``'s import is over: a module is in ``sys.modules`` from the start of its import, and
    importing it then (on the loop) would wait for the import's end. Python's import system tells the two apart
    the same way (``importlib._bootstrap._find_and_load``)."""
    spec = getattr(sys.modules.get(module), "__spec__", None)
    return module in sys.modules and not getattr(spec, "_initializing", False)


@asynccontextmanager
async def loading_sdk(
    module: str,
    slots: StartSlots,
    name: str,
    cfg: McpServerConfig,
    may_spawn: Callable[[], bool],
    log_dir: Path | None,
) -> AsyncIterator[SpawnedAhead | None]:
    """Import ``module`` (one that loads the SDK) unless it is imported, off the loop, which may serve others
    meanwhile, in one of the start ``slots`` (a start that waited for its slot while another imported it has nothing
    left to do). The server ``name`` (``cfg``; its log in ``log_dir``, default: the host's) is spawned first if
    ``may_spawn()`` (asked in the slot: the gating may have changed while it waited), so that it starts while the
    import runs. Yields that process for its connection to adopt (None: nothing spawned ahead), and stops it on
    the way out unless it was adopted."""
    ahead = None
    if not _loaded(module):
        async with slots.hold() as slot:
            if not _loaded(module):  # (else it was loaded while this start waited for its slot)
                ahead = await spawn_ahead(cfg, log_file(log_dir, name)) if may_spawn() else None
                if ahead is not None:
                    slot.watch(ahead)
                try:
                    await anyio.to_thread.run_sync(importlib.import_module, module)
                except BaseException:
                    if ahead is not None:
                        await ahead.discard()
                    raise
    try:
        yield ahead
    finally:
        if ahead is not None:
            await ahead.discard()


def how_it_exited(returncode: int) -> str:
    """A process's end as people read it: ``exited with code 1``, or for a death by a signal (a negative return
    code) ``was killed by SIGKILL (signal 9)``, ``was ended by SIGTERM (signal 15)``. A code of 128 + N (N a signal)
    keeps its code and says what it likely means, without claiming it: ``exited with code 137 (as a shell reports a
    program killed by SIGKILL, signal 9)``. A shell in front of the server exits so when the server dies by signal N
    (a language server's reaper does not: it dies by the server's signal), but a process may exit with it by itself."""
    if returncode < 0:
        number = -returncode
        name = _signal_name(number)
        if name is None:
            return f"was ended by signal {number}"
        return f"was {_ended(number)} by {name} (signal {number})"
    said = f"exited with code {returncode}"
    number = returncode - SHELL_SIGNAL_BASE
    if not 0 < number < signal.NSIG:
        return said
    name = _signal_name(number)
    if name is None:
        return f"{said} (as a shell reports a program ended by signal {number})"
    return f"{said} (as a shell reports a program {_ended(number)} by {name}, signal {number})"


SHELL_SIGNAL_BASE = 128
"""A shell's exit code for a program it ran that died by signal N is 128 + N."""


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def _ended(number: int) -> str:
    return "killed" if number == signal.SIGKILL else "ended"


async def _wait_exit(process: anyio.abc.Process, timeout_s: float) -> bool:
    """Whether the process exited within ``timeout_s`` (polls ``returncode``: ``wait()`` also
    waits for pipes a grandchild may hold)."""
    with anyio.move_on_after(timeout_s):
        while process.returncode is None:  # noqa: ASYNC110 - the exit code has no event to wait on
            await anyio.sleep(EXIT_POLL_S)
        return True
    return False


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` runs on. A zombie does not: one whose parent left it to an init that
    never reaps (as in some containers) would otherwise count for ever."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # (no /proc: any member counts)
    group = str(pgid)
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                state, _parent, member_of = stat.read().rsplit(")", 1)[1].split(maxsplit=3)[:3]
        except (OSError, ValueError):
            continue  # (gone meanwhile)
        if member_of == group and state != "Z":
            return True
    return False


async def stop_process(
    process: anyio.abc.Process, *, at_once: bool = False, exit_grace_s: float = STDIN_CLOSE_GRACE_S
) -> None:
    """Close stdin, wait (``exit_grace_s``), SIGTERM the group, wait, SIGKILL. Every step bounded. ``at_once``:
    SIGKILL the group without the graces (a server that never got going has nothing to finish)."""
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    exited = await _wait_exit(process, 0 if at_once else exit_grace_s)
    pgid = process.pid
    if exited and not _group_alive(pgid):
        pass
    else:
        if not at_once:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
            with anyio.move_on_after(TERMINATE_GRACE_S):
                while _group_alive(pgid):
                    _ = process.returncode
                    await anyio.sleep(EXIT_POLL_S)
        if _group_alive(pgid):
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        if not await _wait_exit(process, REAP_WAIT_S):
            logger.warning("server process %d is still alive after SIGKILL; abandoning it", process.pid)
        with anyio.move_on_after(REAP_WAIT_S):  # and its group's other processes (a port or lock they hold is free)
            while _group_alive(pgid):  # noqa: ASYNC110 - a group's end has no event to wait on
                await anyio.sleep(EXIT_POLL_S)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await pipe.aclose()
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with suppress(PermissionError):
            close()
