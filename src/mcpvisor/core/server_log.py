"""A stdio server's stderr, kept in its own log file: capped, rotated and rate-limited.

A server may print anything, secrets it was given included, so the log is created 0600. A server that
floods its stderr can neither fill the disk nor eat the host's CPU: the log rotates to ``NAME.log.1``
(one old file is kept) once it reaches :data:`LOG_MAX_BYTES`, and the host copies at most
:data:`LOG_RATE_BYTES_PER_S` a second — beyond that, the server's own writes wait for the pipe.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import anyio
import anyio.abc

__all__ = ["LOG_BACKUPS", "LOG_MAX_BYTES", "LOG_RATE_BYTES_PER_S", "ServerLog", "pump_stderr"]

LOG_MAX_BYTES: Final = 5 * 1024 * 1024
LOG_BACKUPS: Final = 1
LOG_RATE_BYTES_PER_S: Final = 1024 * 1024
_READ_CHUNK: Final = 64 * 1024


class ServerLog:
    """Appends to ``path`` (0600), rotating ``path`` -> ``path.1`` when it would pass ``max_bytes``."""

    def __init__(self, path: Path, *, max_bytes: int = LOG_MAX_BYTES, backups: int = LOG_BACKUPS) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # made here: the user's alone, as the logs
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

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
