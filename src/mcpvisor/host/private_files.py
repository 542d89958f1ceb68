"""Files only the user may read (the approvals store, and later the token store): reads that return the
bytes with a signature from the same open file, atomic 0600 writes (temporary file, fsync, rename,
fsync of the folder), the lock file beside the store, and how to tell the store's own files apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Final

__all__ = [
    "DIR_MODE",
    "STORE_MODE",
    "TMP_SUFFIX",
    "Signature",
    "describe_read_error",
    "fsync_dir",
    "is_store_file",
    "lock_path_of",
    "read_private",
    "signature_of",
    "write_private",
]

STORE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
TMP_SUFFIX: Final = ".tmp"

Signature = tuple[int, int, int]
"""A file's inode, size and mtime in ns: equal signatures, same content (no re-read)."""


def lock_path_of(store_path: Path) -> Path:
    """The cross-process lock file that guards ``store_path``."""
    return store_path.with_name(store_path.name + ".lock")


def is_store_file(store_path: Path, candidate: str | os.PathLike[str]) -> bool:
    """Whether ``candidate`` is the store, its lock or one of its temporary files.

    The settings watcher uses this to tell a change of the approvals store (re-read approvals)
    from a change of the user's settings in the same directory.
    """
    cand = Path(candidate)
    if cand.parent != store_path.parent and resolve_parent(cand) != resolve_parent(store_path):
        return False
    name = cand.name
    return (
        name == store_path.name
        or name == lock_path_of(store_path).name
        or (name.startswith(tmp_prefix(store_path)) and name.endswith(TMP_SUFFIX))
    )


def resolve_parent(path: Path) -> Path:
    return path.parent.resolve()


def tmp_prefix(store_path: Path) -> str:
    return f".{store_path.name}."


def signature_of(path: Path) -> Signature | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def read_private(path: Path) -> tuple[Signature | None, bytes | None]:
    """The file's signature and bytes, both from one open file; ``(None, None)`` if it is missing."""
    try:
        with path.open("rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{path} is not a regular file")
            data = fh.read()
    except FileNotFoundError:
        return None, None
    return (st.st_ino, st.st_size, st.st_mtime_ns), data


def write_private(path: Path, text: str) -> Signature:
    """Write ``text`` to a temporary file next to ``path`` and move it into place. Mode 0600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=tmp_prefix(path), suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), STORE_MODE)
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
            st = os.fstat(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def describe_read_error(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)
