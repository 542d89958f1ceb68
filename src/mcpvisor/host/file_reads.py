"""Reading a file someone else may have put there: a regular file, of bounded size, without blocking.

A project folder comes from anywhere, and git keeps symbolic links: ``.mcp.json -> /dev/zero`` would
have a plain ``open().read()`` fill the memory, and a named pipe would block its ``open`` until a writer
came. :func:`read_regular` opens without blocking, refuses what is not a regular file, and never reads
more than its limit, even from a file that grows while it is read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["read_regular"]

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def read_regular(path: Path, limit: int, *, what: str = "such a file") -> tuple[os.stat_result, bytes]:
    """``path``'s status and bytes, both from one open file.

    Raises :class:`FileNotFoundError` when it is missing, :class:`IsADirectoryError` for a folder, and
    :class:`OSError` (``strerror`` says why, in words for a person) for a pipe, socket or device, or for
    more than ``limit`` bytes (``what`` names the kind of file in that message)."""
    fd = os.open(path, _OPEN_FLAGS)  # O_NONBLOCK: a FIFO's open returns at once (reads of a regular file ignore it)
    with os.fdopen(fd, "rb", buffering=0) as file:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "It is not a regular file (a pipe, socket or device)", str(path))
        if st.st_size > limit:
            raise _too_large(st.st_size, limit, path, what)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = file.read(min(limit + 1 - size, 1 << 20) or 1)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew while being read
            raise _too_large(size, limit, path, what)
    return st, b"".join(chunks)


def _too_large(size: int, limit: int, path: Path, what: str) -> OSError:
    return OSError(
        errno.EFBIG,
        f"It is {'at least ' if size == limit + 1 else ''}{size / 1024 / 1024:.1f} MB; "
        f"{what} may be at most {limit // 1024 // 1024} MB",
        str(path),
    )
