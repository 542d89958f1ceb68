"""Files only the user may read (the approvals, OAuth token and tool pin stores): reads that return the
bytes with a signature from the same open file, atomic 0600 writes (temporary file, fsync, rename,
fsync of the folder), the lock file beside the store, and how to tell the store's own files apart.

:class:`PrivateJsonStore` is the small store both the token store and the pin store are: one JSON
object of records, read whole, changed one record at a time under the cross-process lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Final

from mcpvisor.core.errors import ConfigError
from mcpvisor.host.file_reads import read_regular

__all__ = [
    "DIR_MODE",
    "LOCK_TIMEOUT_S",
    "STORE_MODE",
    "PrivateJsonStore",
    "TMP_SUFFIX",
    "Signature",
    "describe_read_error",
    "fsync_dir",
    "load_json",
    "lock_path_of",
    "not_saved",
    "read_private",
    "signature_of",
    "write_atomically",
    "write_private",
]

logger = logging.getLogger(__name__)

STORE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
TMP_SUFFIX: Final = ".tmp"
LOCK_TIMEOUT_S: Final = 10.0
MAX_STORE_BYTES: Final = 10 * 1024 * 1024

Signature = tuple[int, int, int]
"""A file's inode, size and mtime in ns: equal signatures, same content (no re-read)."""


def lock_path_of(store_path: Path) -> Path:
    """The cross-process lock file that guards ``store_path``."""
    return store_path.with_name(store_path.name + ".lock")


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
        st, data = read_regular(path, MAX_STORE_BYTES, what="a store")
    except FileNotFoundError:
        return None, None
    if st.st_mode & 0o077 and st.st_uid == os.geteuid():  # made readable by hand (chmod, a copy, a restore)
        mode = st.st_mode & 0o777
        try:
            os.chmod(path, STORE_MODE)
        except OSError as exc:
            logger.warning("%s can be read by other users (mode %o) and could not be made private: %s", path, mode, exc)
        else:
            logger.warning("%s could be read by other users (mode %o): made private again (600)", path, mode)
    return (st.st_ino, st.st_size, st.st_mtime_ns), data


def not_saved(path: Path, exc: OSError) -> ConfigError:
    """The one-line error for a file that could not be written: the old one is still in place."""
    return ConfigError(f"could not save {path}: {describe_read_error(exc)} — nothing was changed")


def write_atomically(
    path: Path, text: str, *, mode: int | None = None, new_mode: int = 0o644, private: bool = False
) -> Signature:
    """Write ``text`` to a temporary file next to ``path``, flush it to disk and move it into place.

    The file gets ``mode`` when given; else it keeps its permission bits and owner — one that may not be
    written (read-only, or not this user's to write) is refused, as an editor refuses it — and a new file
    gets ``new_mode``.
    A symlinked file is written at its target, so the link stays — except a ``private`` store's, which
    is replaced by the file itself (a store follows no link), written without creating folders (its
    owner makes them private first). Raises :class:`ConfigError` (:func:`not_saved`) when it cannot be
    written, e.g. on a full disk: ``path`` is then exactly as it was."""
    target = path if private else Path(os.path.realpath(path))
    try:
        if not private:
            target.parent.mkdir(parents=True, exist_ok=True)
        owner = None
        if mode is None:
            try:
                kept = target.stat()
            except FileNotFoundError:
                mode = new_mode
            else:
                mode, owner = kept.st_mode & 0o7777, (kept.st_uid, kept.st_gid)
                if not mode & 0o222 or not os.access(target, os.W_OK):
                    raise ConfigError(
                        f"could not save {path}: the file is read-only (its permissions let nobody, or not you, "
                        f"write it); make it writable (chmod u+w {shlex.quote(str(target))}) if the change is "
                        "meant — nothing was changed"
                    )
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=tmp_prefix(target), suffix=TMP_SUFFIX)
    except OSError as exc:
        raise not_saved(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            if owner is not None and owner != (os.geteuid(), os.getegid()) and os.geteuid() == 0:
                os.fchown(fh.fileno(), *owner)  # root editing someone's file (sudo): it stays theirs
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
            st = os.fstat(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise not_saved(path, exc) from exc
        raise
    fsync_dir(target.parent)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def write_private(path: Path, text: str) -> Signature:
    """A store's atomic write: mode 0600, the store's own file (see :func:`write_atomically`)."""
    return write_atomically(path, text, mode=STORE_MODE, private=True)


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


def load_json(text: str) -> Any:
    """``json.loads`` whose every failure is a :class:`ValueError` (a document nested thousands deep too)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def describe_read_error(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return str(exc)


class PrivateJsonStore:
    """``{ "<key>": {record}, ... }`` in a private file. A missing file is empty; an unreadable or corrupt
    one raises :class:`ConfigError` naming the file, and is never written over."""

    what: ClassVar[str] = "store"
    """How the error names the store, e.g. ``the OAuth token store``."""
    consequence: ClassVar[str] = "fix or delete it"
    """What holds until it is fixed, said after the reason."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def place(self) -> str:
        """Where the records are kept, as people read it."""
        return str(self.path)

    def read(self) -> dict[str, Any]:
        """Every record; :class:`ConfigError` naming the file when it is unreadable or corrupt."""
        try:
            _, data = read_private(self.path)
            records = load_json(data.decode("utf-8")) if data is not None else {}
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot read {self.what} {self.path}: {describe_read_error(exc)}; {self.consequence}"
            ) from exc
        if not isinstance(records, dict) or not all(isinstance(v, dict) for v in records.values()):
            raise ConfigError(f"cannot read {self.what} {self.path}: expected an object of records; {self.consequence}")
        return records

    def read_error(self) -> str | None:
        """Why :meth:`read` fails (the file, the reason, the fix), or None when it does not."""
        try:
            self.read()
        except ConfigError as exc:
            return str(exc)
        return None

    def mutate(self, change: Callable[[dict[str, Any]], object], *, timeout_s: float = LOCK_TIMEOUT_S) -> None:
        """Re-read the records under the lock, let ``change`` edit them in place, write them atomically."""
        with self._locked(timeout_s):
            records = self.read()
            change(records)
            write_private(self.path, json.dumps(records, indent=2, sort_keys=True) + "\n")

    def check_lockable(self, *, timeout_s: float = LOCK_TIMEOUT_S) -> None:
        """:class:`ConfigError` when a write could not even begin (its folder or lock file cannot be made, another
        process holds the lock), said as :meth:`mutate` says it; nothing is written."""
        with self._locked(timeout_s):
            pass

    @contextlib.contextmanager
    def _locked(self, timeout_s: float) -> Iterator[None]:
        from filelock import FileLock, Timeout  # only writers lock: a session that only reads never loads it

        try:
            self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            with FileLock(lock_path_of(self.path), timeout=timeout_s, mode=STORE_MODE):
                yield
        except Timeout as exc:
            raise ConfigError(f"{self.what} {self.path} is locked by another process; try again") from exc
        except OSError as exc:  # the folder or the lock file could not be made: named, not the store
            where = Path(exc.filename) if isinstance(exc.filename, str) else self.path
            if where == self.path:
                raise not_saved(self.path, exc) from exc
            fix = "remove it (it must be a file)" if isinstance(exc, IsADirectoryError) else "make it writable"
            raise ConfigError(
                f"could not save {self.path}: {where}: {describe_read_error(exc)}; {fix} — nothing was changed"
            ) from exc
