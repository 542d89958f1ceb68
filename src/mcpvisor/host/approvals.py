"""The hash-bound approval store for project and workspace servers (SPEC §7).

A server defined by a repository (``.mcp.json``, scope ``project``) or by its workspace settings
(scope ``workspace``) is *gated*: it never starts before its user approved that exact
configuration. A decision is bound to the server's :attr:`~McpServerConfig.approval_hash`, so any
change to the configuration makes it ``pending`` again, while an identical re-add keeps its
decision. Removing a server never deletes its record.

The store is one JSON file in the user directory (``paths.approvals_path(env)``)::

    { "<project root>": { "<server>": { "hash": "<sha256>", "status": "approved" | "rejected" } },
      "lsp:<project root>": { "<language server>": { ... } } }

Language servers (``.lsp.json``, SPEC §10) are decided in the same store under their own kind
(``kind="lsp"``: the root key is prefixed ``lsp:``), so an MCP server and a language server may share a
name; their records follow every rule below.

- **One project root.** Every read and write keys on ``Path(root).resolve()``.
- **Atomic, locked writes.** ``approve``/``reject`` take a cross-process lock (``<store>.lock``),
  re-read the file *inside* the lock, change one record and replace the file atomically (a
  temporary file in the same directory, then :func:`os.replace`), mode 0600. Two processes deciding
  at once never lose each other's decisions.
- **Fail closed.** A corrupt or unreadable file at start-up leaves every gated server pending,
  keeps the file untouched and reports :attr:`ApprovalStore.error`. If a reload fails while running,
  the last good decisions stay in force and the error is reported. ``approve``/``reject`` refuse to
  write over a corrupt file.
- **External edits are seen.** Reads check the file's inode, size and mtime and re-read it when it
  changed; the settings watcher also calls :meth:`ApprovalStore.reload` when the file changes.
  A missing file holds no decisions (deleting it resets every approval).
- **A repository can never approve itself.** A store file that lies inside the project root being
  decided on is never trusted for that root: its servers read as pending and ``approve``/``reject``
  raise :class:`~mcpvisor.core.errors.ConfigError`.

The decisions themselves (:func:`state_from_records`, :func:`pending_gated_names`,
:func:`promptable_names`, :func:`parse_store`) are pure functions; :class:`ApprovalStore` is the thin
I/O shell around them. Nothing here imports the ``mcp`` SDK, so management commands start fast.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from mcpvisor.core.errors import ConfigError
from mcpvisor.host.private_files import (
    DIR_MODE,
    LOCK_TIMEOUT_S,
    STORE_MODE,
    Signature,
    describe_read_error,
    load_json,
    lock_path_of,
    not_saved,
    read_private,
    signature_of,
    write_private,
)

__all__ = [
    "GATED_SCOPES",
    "Decidable",
    "Kind",
    "LOCK_TIMEOUT_S",
    "ApprovalRecord",
    "ApprovalState",
    "ApprovalStore",
    "Decision",
    "DecidedSinceShown",
    "StoreRecords",
    "is_gated",
    "parse_store",
    "pending_gated_names",
    "promptable_names",
    "root_key",
    "state_from_records",
]

logger = logging.getLogger(__name__)

ApprovalState = Literal["pending", "approved", "rejected"]
Decision = Literal["approved", "rejected"]
Kind = Literal["mcp", "lsp"]
"""What is decided on: an MCP server, or a language server."""


class Decidable(Protocol):
    """What a decision is bound to: a server configuration with a scope and an approval hash."""

    @property
    def scope(self) -> str | None: ...

    @property
    def approval_hash(self) -> str: ...


GATED_SCOPES: Final = frozenset({"project", "workspace"})
_DECISIONS: Final = frozenset({"approved", "rejected"})


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One decision: the approval hash it was made for, and what was decided."""

    hash: str
    status: Decision


StoreRecords = Mapping[str, Mapping[str, ApprovalRecord]]
"""Project root -> server name -> record."""


# --- pure decisions -------------------------------------------------------------------------


def is_gated(cfg: Decidable) -> bool:
    """Whether a server needs its user's approval before it may start (scope project or workspace)."""
    return cfg.scope in GATED_SCOPES


def root_key(root: str | os.PathLike[str], kind: Kind = "mcp") -> str:
    """The one key a project root is stored under: its resolved real path (``lsp:`` + it for language servers)."""
    key = str(Path(root).expanduser().resolve())
    return key if kind == "mcp" else f"{kind}:{key}"


def state_from_records(records: Mapping[str, ApprovalRecord], name: str, cfg: Decidable) -> ApprovalState:
    """The state of one server given its project's records: no record or another hash -> pending."""
    record = records.get(name)
    if record is None or record.hash != cfg.approval_hash:
        return "pending"
    return record.status


def pending_gated_names(servers: Mapping[str, Decidable], records: Mapping[str, ApprovalRecord]) -> tuple[str, ...]:
    """Gated servers that are not approved (rejected included): discovery skips them."""
    return tuple(
        name for name, cfg in servers.items() if is_gated(cfg) and state_from_records(records, name, cfg) != "approved"
    )


def promptable_names(servers: Mapping[str, Decidable], records: Mapping[str, ApprovalRecord]) -> tuple[str, ...]:
    """Gated servers with no decision for their current configuration: these drive the dialog."""
    return tuple(
        name for name, cfg in servers.items() if is_gated(cfg) and state_from_records(records, name, cfg) == "pending"
    )


def parse_store(text: str) -> dict[str, dict[str, ApprovalRecord]]:
    """Parse the store file's text. Whitespace only means an empty store.

    Raises :class:`ValueError` naming what is wrong; the whole file is rejected (fail closed).
    """
    if not text.strip():
        return {}
    data = load_json(text)
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object at the top level, got {type(data).__name__}")
    out: dict[str, dict[str, ApprovalRecord]] = {}
    for root, servers in data.items():
        if not isinstance(servers, dict):
            raise ValueError(f"entry {root!r} must be an object of servers")
        parsed: dict[str, ApprovalRecord] = {}
        for name, record in servers.items():
            where = f"{root!r} -> {name!r}"
            if not isinstance(record, dict):
                raise ValueError(f"record {where} must be an object")
            digest = record.get("hash")
            status = record.get("status")
            if not isinstance(digest, str) or not digest:
                raise ValueError(f"record {where} has no string 'hash'")
            if status not in _DECISIONS:
                raise ValueError(f"record {where} has status {status!r}; expected 'approved' or 'rejected'")
            parsed[name] = ApprovalRecord(hash=digest, status=status)
        out[root] = parsed
    return out


class DecidedSinceShown(ConfigError):
    """Another decision on the server was recorded after the question was shown: nothing was written."""

    def __init__(self, name: str, verb: str) -> None:
        super().__init__(
            f"could not record {verb} of server {name!r}: another decision on it was made since it was shown; "
            "look at its state again and decide again"
        )
        self.name = name


def _stamp(record: ApprovalRecord | None) -> str:
    return "none" if record is None else f"{record.status}:{record.hash}"


def _is_inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


# --- the I/O shell ----------------------------------------------------------------------------


class ApprovalStore:
    """The approval store file at ``path``. The constructor does no I/O; the first read loads it.

    Thread-safe within a process; safe across processes through the lock file. Reads never take
    the lock (writes replace the file atomically).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path).expanduser()
        self._mutex = threading.RLock()
        self._records: dict[str, dict[str, ApprovalRecord]] = {}
        self._loaded = False
        self._had_good_load = False
        self._signature: Signature | None = None
        self._error: str | None = None
        self._warned_inside: set[str] = set()

    decided_with: str = ""
    """What a command that decides in this store needs besides the server's name and workspace (a fleet's
    ``--fleet URL``): approve hints add it, or the decision would go where nothing reads it."""

    @property
    def path(self) -> Path:
        return self._path

    @property
    def lock_path(self) -> Path:
        return lock_path_of(self._path)

    def on_external_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """``listener()`` hears decisions that reach this store other than through its file (a fleet's
        store: :mod:`mcpvisor.fleet`); returns the function that removes it. The file store has none:
        the settings watcher sees its file change."""
        return lambda: None

    @property
    def error(self) -> str | None:
        """Why the store could not be read (file, reason and fix), or ``None``. Loads on first use."""
        with self._mutex:
            self._refresh()
            return self._error

    # -- loading ------------------------------------------------------------------------------

    def load(self) -> None:
        """Read the file now (the first time, or again). Never raises for a bad file: see :attr:`error`."""
        with self._mutex:
            self._load()

    def reload(self) -> None:
        """Re-read the file after an external change (the settings watcher calls this)."""
        self.load()

    def _refresh(self) -> None:
        """Load on first use; afterwards re-read only if the file changed since it was read."""
        if not self._loaded:
            self._load()
            return
        try:
            signature = signature_of(self._path)
        except OSError:
            self._load()  # surfaces the error
            return
        if signature != self._signature:
            self._load()

    def _load(self) -> None:
        self._loaded = True
        try:
            signature, data = read_private(self._path)
        except OSError as exc:
            self._signature = None  # retried on every read until it can be read (e.g. after a chmod)
            self._set_error(self._read_error(exc))
            return
        try:
            records = parse_store(data.decode("utf-8")) if data is not None else {}
        except (UnicodeDecodeError, ValueError) as exc:
            self._signature = signature  # not re-read until it changes again
            self._set_error(self._read_error(exc))
            return
        self._records = records
        self._signature = signature
        self._had_good_load = True
        if self._error is not None:
            logger.info("MCP approvals store %s is readable again", self._path)
        self._error = None

    def _set_error(self, message: str) -> None:
        if message != self._error:
            logger.warning("%s", message)
        self._error = message

    def _read_error(self, exc: BaseException) -> str:
        why = describe_read_error(exc)
        if self._had_good_load:
            consequence = "the last good decisions stay in force"
        else:
            consequence = "every project and workspace server stays pending approval"
        return (
            f"could not read MCP approvals store {str(self._path)!r}: {why}; "
            f"fix or delete the file ({consequence} until then)"
        )

    # -- reads --------------------------------------------------------------------------------

    def _records_for(self, root: str | os.PathLike[str], kind: Kind = "mcp") -> Mapping[str, ApprovalRecord]:
        key = root_key(root)
        if (inside := self.inside_project(key)) is not None:
            if key not in self._warned_inside:
                self._warned_inside.add(key)
                logger.warning("%s", inside)
            return {}
        self._refresh()
        return self._records.get(root_key(root, kind), {})

    def get_state(self, root: str | os.PathLike[str], name: str, cfg: Decidable, kind: Kind = "mcp") -> ApprovalState:
        """``pending`` (no record, or one for another hash), ``approved`` or ``rejected``."""
        with self._mutex:
            return state_from_records(self._records_for(root, kind), name, cfg)

    def get_pending_gated_mcp_servers(
        self, servers: Mapping[str, Decidable], root: str | os.PathLike[str], kind: Kind = "mcp"
    ) -> tuple[str, ...]:
        """Gated servers that are not approved (rejected included), in ``servers`` order."""
        with self._mutex:
            return pending_gated_names(servers, self._records_for(root, kind))

    def get_promptable_mcp_servers(
        self, servers: Mapping[str, Decidable], root: str | os.PathLike[str], kind: Kind = "mcp"
    ) -> tuple[str, ...]:
        """Gated servers with no decision for their current configuration, in ``servers`` order."""
        with self._mutex:
            return promptable_names(servers, self._records_for(root, kind))

    def snapshot(self) -> dict[str, dict[str, ApprovalRecord]]:
        """A copy of every record as last read."""
        with self._mutex:
            self._refresh()
            return {root: dict(servers) for root, servers in self._records.items()}

    # -- writes -------------------------------------------------------------------------------

    def stamp(self, root: str | os.PathLike[str], name: str, kind: Kind = "mcp") -> str:
        """What ``name``'s record is now, as an opaque text that changes with every decision on it: taken when a
        question is shown, and given to :meth:`approve` / :meth:`reject` as ``shown``."""
        with self._mutex:
            self._refresh()
            return _stamp(self._records.get(root_key(root, kind), {}).get(name))

    def approve(
        self, root: str | os.PathLike[str], name: str, cfg: Decidable, kind: Kind = "mcp", *, shown: str | None = None
    ) -> None:
        """Record that the user approved this exact configuration of ``name`` for ``root``. With ``shown`` (a
        :meth:`stamp`), only if no other decision on it was made since: else :class:`DecidedSinceShown`."""
        self._decide(root, name, cfg, "approved", kind, shown)

    def reject(
        self, root: str | os.PathLike[str], name: str, cfg: Decidable, kind: Kind = "mcp", *, shown: str | None = None
    ) -> None:
        """Record that the user rejected this exact configuration of ``name`` for ``root`` (``shown``: see
        :meth:`approve`)."""
        self._decide(root, name, cfg, "rejected", kind, shown)

    def _decide(
        self,
        root: str | os.PathLike[str],
        name: str,
        cfg: Decidable,
        status: Decision,
        kind: Kind,
        shown: str | None = None,
    ) -> None:
        key = root_key(root)
        verb = "approval" if status == "approved" else "rejection"
        if self._inside(Path(key)):
            raise ConfigError(
                f"could not record {verb} of server {name!r}: the approvals store {str(self._path)!r} lies "
                f"inside the project {key!r}, and a repository can never approve its own servers; "
                "point MCPVISOR_MCP_APPROVALS_PATH outside the project"
            )
        record = ApprovalRecord(hash=cfg.approval_hash, status=status)
        from filelock import FileLock, Timeout  # only writers lock: a session that only reads never loads it

        try:
            self._path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            # The file lock first: while another process holds it (up to LOCK_TIMEOUT_S), readers of this
            # store in this process (the host's gating, on its event loop) must not wait on the mutex too.
            with FileLock(self.lock_path, timeout=LOCK_TIMEOUT_S, mode=STORE_MODE), self._mutex:
                self._write_locked(root_key(root, kind), name, record, verb, shown)
        except Timeout as exc:
            raise ConfigError(
                f"could not record {verb} of server {name!r}: another process holds the lock "
                f"{str(self.lock_path)!r}; try again"
            ) from exc
        except OSError as exc:  # the folder or the lock file could not be made
            raise not_saved(self._path, exc) from exc
        what = "MCP server" if kind == "mcp" else "language server"
        logger.info("%s %r %s for project %s", what, name, status, key)

    def _write_locked(self, key: str, name: str, record: ApprovalRecord, verb: str, shown: str | None) -> None:
        # Read-modify-write from the file itself, never from memory: another process may have
        # decided since we last read it.
        try:
            _, data = read_private(self._path)
            text = data.decode("utf-8") if data is not None else ""
            parse_store(text)  # the whole file must be valid before we touch it
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self._set_error(self._read_error(exc))
            raise ConfigError(
                f"could not record {verb} of server {name!r}: the approvals store {str(self._path)!r} "
                f"cannot be read ({describe_read_error(exc)}); fix or delete the file, then decide again"
            ) from exc
        if shown is not None and _stamp(parse_store(text).get(key, {}).get(name)) != shown:
            raise DecidedSinceShown(name, verb)  # beside the write, under the lock: nothing decided unseen
        # Keep whatever else the file holds (e.g. extra keys in records) as it is.
        raw: dict[str, Any] = load_json(text) if text.strip() else {}
        servers = raw.setdefault(key, {})
        servers[name] = {"hash": record.hash, "status": record.status}
        text = json.dumps(raw, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        signature = write_private(self._path, text)
        self._records = parse_store(text)
        self._signature = signature
        self._loaded = True
        self._had_good_load = True
        self._error = None

    def inside_project(self, root: str | os.PathLike[str]) -> str | None:
        """What to say (file, project and fix) when this store lies inside project ``root``, where it then decides
        nothing; None: it does not."""
        key = root_key(root)
        if not self._inside(Path(key)):
            return None
        return (
            f"MCP approvals store {str(self._path)!r} lies inside project {key!r}, so none of the project's servers "
            "can be approved (a repository can never approve its own servers): point MCPVISOR_MCP_APPROVALS_PATH "
            "outside the project"
        )

    def _inside(self, root: Path) -> bool:
        """Whether this store file lies inside ``root`` (then it can decide nothing for ``root``)."""
        store = self._path.resolve()
        return _is_inside(store, root)
