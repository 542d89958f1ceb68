"""A stdio server's stderr, kept in its own log file: capped, rotated and rate-limited.

A server may print anything, secrets it was given included, so the log is created 0600. A server that
floods its stderr can neither fill the disk nor eat the host's CPU: the log rotates to ``NAME.log.1``
(one old file is kept) once it reaches :data:`LOG_MAX_BYTES`, and the host copies at most
:data:`LOG_RATE_BYTES_PER_S` a second — beyond that, the server's own writes wait for the pipe.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import anyio
import anyio.abc

__all__ = [
    "LOG_BACKUPS",
    "LOG_MAX_BYTES",
    "LOG_RATE_BYTES_PER_S",
    "ServerLog",
    "default_log_dir",
    "log_problem",
    "pump_stderr",
]

LOG_MAX_BYTES: Final = 5 * 1024 * 1024
LOG_BACKUPS: Final = 1
LOG_RATE_BYTES_PER_S: Final = 1024 * 1024
_READ_CHUNK: Final = 64 * 1024


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_LOG_NAME_MAX = 100


def log_file(log_dir: Path | None, name: str) -> Path:
    """Where the server ``name`` logs in ``log_dir`` (None: :func:`default_log_dir` of this process's environment):
    ``NAME.log``; a name with anything but letters, digits, ``_.-`` (each as ``_``), longer than a file's name may
    be, or starting with a dot, gets a hash of itself after its first 100 characters (``a/b`` and ``a_b`` are two
    servers: two logs)."""
    safe = _UNSAFE.sub("_", name)
    if safe != name or len(name) > _LOG_NAME_MAX or not name or name.startswith("."):
        head = "_" + safe[1:_LOG_NAME_MAX] if name.startswith(".") else safe[:_LOG_NAME_MAX]
        safe = f"{head}-{hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()[:8]}"
    return (log_dir or default_log_dir(os.environ)) / f"{safe}.log"


def default_log_dir(env: Mapping[str, str]) -> Path:
    """Per-server stderr logs: ``$MCPVISOR_LOG_DIR``; else ``logs`` in ``$MCPVISOR_HOME`` when that is set;
    else the user's XDG state folder (``~/.local/state/mcpvisor/logs``) — never a folder other users share."""
    override = env.get("MCPVISOR_LOG_DIR")
    if override:
        return Path(override).expanduser()
    home = env.get("MCPVISOR_HOME")
    if home:
        return Path(home).expanduser() / "logs"
    state = env.get("XDG_STATE_HOME")
    base = Path(state) if state else Path(env.get("HOME") or Path.home()) / ".local" / "state"
    return base / "mcpvisor" / "logs"


class ServerLog:
    """Appends to ``path`` (0600), rotating ``path`` -> ``path.1`` when it would pass ``max_bytes``.

    The log is the user's alone: its folder is made 0700, and a folder or file that belongs to another user,
    or a log that is a symbolic link or not a regular file, is refused with :class:`OSError` (someone who
    could plant them would read what the server prints, or aim its writes at another file); a log file
    readable by others is made 0600."""

    def __init__(self, path: Path, *, max_bytes: int = LOG_MAX_BYTES, backups: int = LOG_BACKUPS) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # made here: the user's alone, as the logs
        _check_owner(path.parent, os.stat(path.parent), "log folder")
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def _open(self) -> int:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if os.path.islink(self.path):
                raise OSError(f"log file {self.path} is a symbolic link; remove it") from exc
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(f"log file {self.path} is not a regular file; remove it")
            _check_owner(self.path, info, "log file")
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o600)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write(self, data: bytes) -> None:
        if self._size and self._size + len(data) > self.max_bytes:
            self.rotate()
        os.write(self._fd, data)
        self._size += len(data)

    def rotate(self) -> None:
        os.close(self._fd)
        for n in range(self.backups, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            newer = self.path.with_name(f"{self.path.name}.{n - 1}") if n > 1 else self.path
            if newer.exists():
                os.replace(newer, older)
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
        self._fd = self._open()
        self._size = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


LOG_DIR_FIX = "set MCPVISOR_LOG_DIR (a program of your own: ConnectionOptions(log_dir=...)) to a folder of your own"


def log_problem(path: Path, exc: OSError) -> str:
    """Why a server's log at ``path`` cannot be written, and the fix, from what :class:`ServerLog` raised."""
    if exc.strerror is None:  # one of ServerLog's own refusals: it names the file and the fix
        return str(exc)
    where = exc.filename if exc.filename is not None else path
    why = (
        f"{where} is a file, not a folder" if exc.errno in (errno.EEXIST, errno.ENOTDIR) else f"{exc.strerror}: {where}"
    )
    return f"cannot write its log {path} ({why}); {LOG_DIR_FIX}"


def _check_owner(path: Path, info: os.stat_result, what: str) -> None:
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise OSError(f"{what} {path} belongs to another user; {LOG_DIR_FIX}")


async def pump_stderr(
    stream: anyio.abc.ByteReceiveStream, log: ServerLog, *, rate_bytes_per_s: int = LOG_RATE_BYTES_PER_S
) -> None:
    """Copy ``stream`` into ``log`` until it ends, at most ``rate_bytes_per_s`` on average (the caller
    closes the log)."""
    started = anyio.current_time()
    copied = 0
    while True:
        try:
            chunk = await stream.receive(_READ_CHUNK)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            return
        log.write(chunk)
        copied += len(chunk)
        ahead = copied / rate_bytes_per_s - (anyio.current_time() - started)
        if ahead > 0:
            await anyio.sleep(ahead)
