"""Which files the settings watcher watches and what an event in a folder concerns (pure helpers, and the
store files' states the watcher compares)."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal

from mcpvisor.host.file_reads import read_regular
from mcpvisor.host.settings.loader import Settings, SettingsPaths

__all__ = [
    "STORE_SCOPES",
    "FileState",
    "FolderIdentity",
    "WatchScope",
    "classify_batch",
    "classify_change",
    "folder_identities",
    "is_approvals_file",
    "linked_targets",
    "nearest_existing_dir",
    "read_file_state",
    "read_store_states",
    "store_files",
    "watch_folders",
]

logger = logging.getLogger(__name__)

WatchScope = Literal[
    "system_defaults", "user", "workspace", "system", "project", "lsp_project", "approvals", "tokens", "pins"
]

STORE_SCOPES: tuple[WatchScope, ...] = ("approvals", "tokens", "pins")
"""Stores in the user folder that are not settings: a change is their own event, never a settings diff."""

FileState = tuple[int, int, int, bytes]
"""A file as read: its inode, size, modification time (ns) and a hash of its bytes. A store's file written
back byte for byte is a new state too (an atomic write is a new inode): the app may have acted on what was
there in between, so it is told."""


FolderIdentity = tuple[int, int]
"""A folder's device and inode: what an OS watch on it follows, whatever its path says later."""


def folder_identities(folders: Iterable[Path]) -> dict[Path, FolderIdentity | None]:
    """Each folder's identity now (None: it is gone)."""
    identities: dict[Path, FolderIdentity | None] = {}
    for folder in folders:
        try:
            st = folder.stat()
        except OSError:
            identities[folder] = None
        else:
            identities[folder] = (st.st_dev, st.st_ino)
    return identities


def store_files(paths: SettingsPaths) -> dict[WatchScope, Path]:
    """The file of each store."""
    return {"approvals": paths.approvals, "tokens": paths.oauth_tokens, "pins": paths.pins}


MAX_WATCHED_BYTES = 64 * 1024 * 1024
"""The most of a watched file read to tell its state (settings and stores refuse far less)."""

_unreadable: dict[Path, str] = {}
"""Files whose read failed, with the reason last logged: said once, not on every event in their folder."""


def read_file_state(path: Path) -> FileState | None:
    """``path``'s state (None: no file, or it cannot be read, which is logged once per reason)."""
    try:
        st, data = read_regular(path, MAX_WATCHED_BYTES)
    except FileNotFoundError:
        _unreadable.pop(path, None)
        return None
    except OSError as exc:
        reason = str(exc.strerror or exc)
        if _unreadable.get(path) != reason:
            _unreadable[path] = reason
            logger.warning("cannot read %s: %s", path, reason)
        return None
    _unreadable.pop(path, None)
    return (st.st_ino, st.st_size, st.st_mtime_ns, hashlib.sha256(data).digest())


def read_store_states(settings: Settings) -> dict[WatchScope, FileState | None]:
    """What the stores' files are now (blocking file I/O). Read before the app loads its stores and handed to
    the watcher it starts later, a store written in between is announced once the watcher runs."""
    return {scope: read_file_state(path.absolute()) for scope, path in store_files(settings.paths).items()}


def is_approvals_file(name: str, store_name: str) -> bool:
    """Whether a file name belongs to the approvals store: the store, its lock, its temporary files."""
    return name == store_name or name.startswith((f"{store_name}.", f".{store_name}"))


def nearest_existing_dir(folder: Path, is_dir: Callable[[Path], bool] = Path.is_dir) -> Path:
    """``folder`` itself if it exists, else its nearest existing ancestor."""
    for candidate in (folder, *folder.parents):
        if is_dir(candidate):
            return candidate
    return Path(folder.anchor or "/")


def linked_targets(targets: Mapping[WatchScope, Path]) -> dict[WatchScope, Path]:
    """The targets that are symbolic links into another folder (a dotfiles manager links settings in), each
    as what it links to: an edit there is an edit of the scope, though its own folder hears nothing."""
    linked: dict[WatchScope, Path] = {}
    for scope, target in targets.items():
        try:
            if not target.is_symlink():
                continue
            resolved = target.resolve()
        except (OSError, RuntimeError):  # gone meanwhile, or a loop of links (RuntimeError before Python 3.13)
            continue
        # A folder this process cannot list cannot be watched (and would stop the whole watch): left out.
        if resolved.parent != target.parent and os.access(nearest_existing_dir(resolved.parent), os.R_OK | os.X_OK):
            linked[scope] = resolved
    return linked


def watch_folders(targets: Mapping[WatchScope, Path]) -> dict[WatchScope, tuple[Path, ...]]:
    """The folders watched for each scope: its file's, the folder of what it links to (if it does), and the folder
    of each link on the way there (a dotfiles manager swaps ``dot/current`` from ``v1`` to ``v2``, keeping ``v1``:
    only ``dot`` hears it); the nearest existing ones."""
    links = linked_targets(targets)
    return {
        scope: tuple(
            dict.fromkeys(
                [
                    *(nearest_existing_dir(t.parent) for t in (target, links.get(scope)) if t),
                    *(folder for folder in _link_folders(target) if os.access(folder, os.R_OK | os.X_OK)),
                ]
            )
        )
        for scope, target in targets.items()
    }


def _link_folders(target: Path, *, most: int = 40) -> list[Path]:
    """The folders holding a symbolic link that ``target``'s link leads through (``dot`` for ``dot/current``), up
    to ``most`` links: a change of any of them sends the file elsewhere."""
    folders: list[Path] = []
    path = target
    for _ in range(most):
        try:
            if not path.is_symlink():
                break
            path = path.parent / os.readlink(path)
        except OSError:
            break
        for above in reversed(path.parents[:-1]):  # each folder on the way to what it links to, from the root down
            try:
                if above.is_symlink():
                    folders.append(above.parent)
            except OSError:
                break
    return folders


def classify_change(path: Path, targets: Mapping[WatchScope, Path]) -> tuple[set[WatchScope], bool]:
    """Which scopes a file event concerns, and whether it touches a folder on the way to a target.

    An event in a target's folder concerns that scope — except a store's own files (the store, its lock,
    its temporary files), which concern only that store. An event on a target's folder or one of its
    ancestors (a folder created or removed) asks for the watch to be re-armed.
    """
    owner = next(
        (
            store
            for store in STORE_SCOPES
            if (target := targets.get(store)) is not None
            and path.parent == target.parent
            and is_approvals_file(path.name, target.name)
        ),
        None,
    )
    scopes: set[WatchScope] = set()
    rearm = False
    for scope, target in targets.items():
        folder = target.parent
        # A store hears unowned events too: a ConfigMap-style mount swaps its `..data` link, not the file.
        if path.parent == folder and (owner is None or owner == scope):
            scopes.add(scope)
        if path == folder or path in folder.parents:
            rearm = True
    return scopes, rearm


def classify_batch(paths: Iterable[str], targets: Mapping[WatchScope, Path]) -> tuple[set[WatchScope], bool]:
    """:func:`classify_change` for a batch of event paths, against the targets and the files they link to:
    the scopes concerned, and whether any event touches a folder on the way to a target."""
    scopes: set[WatchScope] = set()
    touches = False
    links = linked_targets(targets)
    for raw in paths:
        for each in (targets, links):
            concerned, touches_folder = classify_change(Path(raw), each)
            scopes |= concerned
            touches = touches or touches_folder
    return scopes, touches
