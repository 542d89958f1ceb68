"""Approvals kept in the fleet store, read from an in-memory mirror.

:class:`FleetApprovalStore` is an :class:`~mcpvisor.host.approvals.ApprovalStore` whose records come
from Redis: the pure decisions (``state_from_records`` and the rest) are the file store's, so a
replica reads a server approved only when the fleet's record carries the hash of *its own*
configuration. The hot path (every gating decision, every status view) reads the mirror; nothing
there touches the network. The mirror is fed by :class:`~mcpvisor.fleet.follower.Follower`.

It fails closed:

- a mirror that has not heard from the store for ``freshness_s`` holds every gated server (reads as
  pending) until the store answers again and the mirror was read whole;
- a store whose revision went *below* one this replica applied (lost writes after a failover, a
  wiped or restored store) is distrusted (every gated server pending) until an operator runs
  ``mcpvisor fleet ack-reset``;
- a record that does not parse, or has an unknown status, is no record (pending).

Decisions are compare-and-set against the record's revision as this store last read it: a decision
made over one the person was not shown is refused ("changed meanwhile, look again").
"""

from __future__ import annotations

import getpass
import logging
import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.events import Listeners
from mcpvisor.fleet.failures import redact, sign_in_refused, store_failure
from mcpvisor.fleet.store import FleetRecord, FleetStore, parse_record
from mcpvisor.host.approvals import (
    ApprovalRecord,
    ApprovalStore,
    Decidable,
    DecidedSinceShown,
    Decision,
    Kind,
    root_key,
)

__all__ = ["DEFAULT_FRESHNESS_S", "FleetApprovalStore"]

logger = logging.getLogger(__name__)

DEFAULT_FRESHNESS_S = 15.0
"""How long a mirror may go without hearing from the store before gated servers are held."""
NOT_RECORDED = "nothing was recorded (try again when it answers)"


def read_approvals(store: FleetStore) -> tuple[int, dict[str, dict[str, FleetRecord]], int]:
    """The revision, every approval record and the acknowledgement epoch, read in one transaction."""
    client, keys = store.sync_client(), store.keys
    roots = sorted(str(key) for key in client.smembers(keys.roots))
    pipe = client.pipeline(transaction=True)
    pipe.get(keys.rev)
    pipe.get(keys.epoch)
    for key in roots:
        pipe.hgetall(keys.approvals(key))
    rev, epoch, *hashes = pipe.execute()
    out: dict[str, dict[str, FleetRecord]] = {}
    for key, fields in zip(roots, hashes, strict=True):
        out[key] = {name: rec for name, raw in fields.items() if (rec := parse_record(raw)) is not None}
    return int(rev or 0), out, int(epoch or 0)


class FleetApprovalStore(ApprovalStore):
    """The approvals of one fleet. :meth:`load` reads every record (blocking: for commands and start-up);
    a running replica's :class:`~mcpvisor.fleet.follower.Follower` keeps the mirror current."""

    def __init__(self, store: FleetStore, *, freshness_s: float = DEFAULT_FRESHNESS_S) -> None:
        super().__init__(Path(os.devnull))
        self.store = store
        named = "" if store.keys.fleet == "default" else f" --fleet-name {store.keys.fleet}"
        # The URL as it is, for a command that works pasted; one with a password in it is not shown.
        self.decided_with = f" --fleet {shlex.quote(store.url) if redact(store.url) == store.url else 'URL'}{named}"
        self.freshness_s = freshness_s
        self._fleet: dict[str, dict[str, FleetRecord]] = {}
        self._max_rev = 0
        self._epoch = 0
        self._witnessed = False
        """The rewind was seen in the other replicas' registry entries, not by this process."""
        self._rewound_at: int | None = None
        self._unreachable_since: float | None = None
        self._unanswered: str | None = None
        """Why the last whole read failed (the store did not answer), until one succeeds."""
        self.refused = ""
        """While the store refuses the follower's sign-in: what to say, with the fix (:meth:`note_failure`)."""
        self._followed = False
        self._last_heard = time.monotonic()
        self._changes: Listeners[Callable[[], None]] = Listeners("fleet approvals listener")
        self._lock = threading.RLock()

    # -- health ---------------------------------------------------------------------------------

    @property
    def error(self) -> str | None:
        with self._lock:
            if self._rewound_at is not None:
                return (
                    f"the fleet store {redact(self.store.url)} went back to revision {self._rewound_at} after "
                    f"{'other replicas' if self._witnessed else 'this replica'} applied {self._max_rev} (decisions "
                    "were lost); every project and workspace server is held until an operator checks the decisions "
                    "and runs 'mcpvisor fleet ack-reset'"
                )
            if self._unreachable_since is not None:
                since = time.strftime("%H:%M:%S", time.localtime(self._unreachable_since))
                refused = f" (it {self.refused})" if self.refused else ""
                return (
                    f"the fleet store {redact(self.store.url)} has not answered since {since}{refused}; project and "
                    "workspace servers are held until it answers again (user servers keep running)"
                )
            return self._error

    @property
    def usable(self) -> bool:
        """Whether the mirror may be trusted now: read, fresh and not rewound."""
        with self._lock:
            return self._loaded and self._error is None and self._unreachable_since is None and self._rewound_at is None

    @property
    def revision(self) -> int:
        """The highest store revision this mirror has seen."""
        return self._max_rev

    def registry_fields(self) -> dict[Any, Any]:  # a hash mapping for redis-py
        """What the replica's registry entry says of its decisions: the revision applied, under which
        acknowledgement (``epoch``), and the error."""
        with self._lock:
            epoch, rev = self._epoch, self._max_rev
        return {"rev": rev, "epoch": epoch, "error": self.error or ""}

    async def check_witnesses(self, client: Any, replica_prefix: str, me: str) -> None:
        """After a whole read: the revision the other live replicas applied under the store's current
        acknowledgement or a later one (their registry entries). A store below it, or older than an
        acknowledgement one of them follows, went back, though this process (started since, or away) never
        saw it: the rewind guard holds, as on the replicas that saw it."""
        with self._lock:
            epoch, witnessed, later_ack = self._epoch, 0, False
        async for key in client.scan_iter(match=replica_prefix + "*", count=200):
            if str(key).removeprefix(replica_prefix) != me:
                rev, their_epoch = await client.hmget(key, "rev", "epoch")
                if rev is not None and their_epoch is not None and int(their_epoch) >= epoch:
                    witnessed = max(witnessed, int(rev))
                    # One follows a later acknowledgement than the store's: the store is a copy from before it.
                    later_ack = later_ack or int(their_epoch) > epoch
        with self._lock:
            if witnessed > self._max_rev or later_ack:
                current, self._witnessed = self._max_rev, True
                self._max_rev = max(witnessed, current + 1 if later_ack else current)
                self._rewind(current)

    def on_external_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        return self._changes.add(listener)

    def changed(self) -> None:
        """Tell the listeners (the hosts) that what the mirror says changed."""
        self._changes.tell()

    # -- the mirror, fed by the follower --------------------------------------------------------
    #
    # Rewinds are told only by the store's own revision, read in order by one reader (the follower, or a
    # command's single whole read): records arrive out of order (a decision applies its own record at once,
    # a whole read overlaps the log), and a record is kept only when it is newer than the one held.

    def replace_all(self, rev: int, records: dict[str, dict[str, FleetRecord]], epoch: int = 0) -> None:
        """A whole read of the store (its revision, records and acknowledgement epoch, read together).
        A revision below one seen before is a rewind, unless an operator acknowledged since (``epoch``)."""
        with self._lock:
            self._loaded = True
            self._error, self.refused, self._unanswered = None, "", None
            self._heard()
            if epoch > self._epoch:
                if self._rewound_at is not None:
                    logger.warning("fleet store acknowledged at revision %d: decisions are read from it again", rev)
                self._epoch, self._rewound_at, self._max_rev, self._witnessed = epoch, None, rev, False
            if rev < self._max_rev:
                self._rewind(rev)
                return
            self._fleet = records
            self._max_rev = rev

    def apply(self, key: str, name: str, record: FleetRecord | None) -> None:
        """One changed record, as read from the store after its log entry (or as this process wrote it)."""
        with self._lock:
            self._heard()
            servers = self._fleet.setdefault(key, {})
            held = servers.get(name)
            if record is None:
                servers.pop(name, None)
            elif held is None or record.rev >= held.rev:
                servers[name] = record

    def note_revision(self, rev: int) -> bool:
        """The store's current revision, read by the follower after each read of the log: a value below
        one seen before is a rewind. The log being read again also ends a stale spell. Whether it found a
        rewind just now (the hosts must reconcile then: what was approved is held)."""
        with self._lock:
            self._heard()
            if rev < self._max_rev:
                return self._rewind(rev)
            self._max_rev = rev
            return False

    def note_failure(self, exc: BaseException, *, first: bool = False) -> None:
        """The follower could not read the store (``exc``): a refused sign-in is said once, and in :attr:`error`
        until the store is read again (else a store restarted with another password only "has not answered");
        another failure of the store is said when it is the ``first`` in a row."""
        import redis

        refused = sign_in_refused(exc, self.store.url)
        if refused and refused != self.refused:
            logger.warning("fleet store %s %s", redact(self.store.url), refused)
        elif first and not refused and isinstance(exc, redis.RedisError | OSError):
            logger.warning(
                "cannot follow the fleet's decisions: %s; reconnecting (project and workspace servers are held if it "
                "stays silent for %g s)", store_failure(self.store.url, exc, self.store.keys.fleet), self.freshness_s,
            )  # fmt: skip
        self.refused = refused

    def check_fresh(self) -> bool:
        """Mark the mirror stale when it has not heard from the store for ``freshness_s``; whether that
        changed its state (the hosts must reconcile then)."""
        with self._lock:
            if self._unreachable_since is not None or time.monotonic() - self._last_heard < self.freshness_s:
                return False
            self._unreachable_since = time.time() - self.freshness_s
        logger.warning("%s", self.error)
        return True

    def recovered(self) -> bool:
        """Whether the mirror was stale and is fresh again (after a whole read)."""
        with self._lock:
            if self._unreachable_since is None:
                return False
            self._unreachable_since = None
        logger.info("fleet store %s answers again: gated servers follow its decisions", redact(self.store.url))
        return True

    def _heard(self) -> None:
        self._last_heard = time.monotonic()

    def _rewind(self, rev: int) -> bool:
        if self._rewound_at is not None:
            return False
        self._rewound_at = rev
        logger.error("%s", self.error)
        return True

    # -- ApprovalStore ------------------------------------------------------------------------

    def _refresh(self) -> None:
        if not self._loaded:
            self._load()

    def _load(self) -> None:
        """Read every record now (blocking). An unreachable store leaves every gated server pending."""
        import redis

        try:
            rev, records, epoch = read_approvals(self.store)
        except (redis.RedisError, OSError) as exc:
            failure = store_failure(self.store.url, exc, self.store.keys.fleet)
            with self._lock:
                self._loaded, self._unanswered = True, failure
                self._set_error(
                    f"cannot read the fleet's decisions: {failure}; every project and workspace server stays pending "
                    "until it answers"
                )
            return
        self.replace_all(rev, records, epoch)

    def load(self) -> None:
        """Read every record now, unless a follower already keeps the mirror current."""
        if not (self._followed and self._loaded):
            self._load()

    def reload(self) -> None:
        """Nothing to re-read while a follower keeps the mirror current; a whole read otherwise."""
        if not self._followed:
            self.load()

    def follow(self) -> None:
        """A follower keeps the mirror current from now on (:meth:`reload` no longer reads)."""
        self._followed = True

    def _records_for(self, root: str | os.PathLike[str], kind: Kind = "mcp") -> Mapping[str, ApprovalRecord]:
        self._refresh()
        with self._lock:
            if not self.usable:
                return {}
            return _decisions(self._fleet.get(root_key(root, kind), {}))

    def snapshot(self) -> dict[str, dict[str, ApprovalRecord]]:
        self._refresh()
        with self._lock:
            return {key: dict(_decisions(servers)) for key, servers in self._fleet.items()} if self.usable else {}

    def _reread(self, key: str, name: str) -> None:
        """Read one record again after a refused decision (what the person is to look at now)."""
        import redis

        try:
            raw = self.store.sync_client().hget(self.store.keys.approvals(key), name)
        except (redis.RedisError, OSError):
            return
        self.apply(key, name, parse_record(raw))

    def revision_of(self, root: str | os.PathLike[str], name: str, kind: Kind = "mcp") -> int:
        """The revision of ``name``'s record as last read (0: none): what a decision is compared against."""
        with self._lock:
            record = self._fleet.get(root_key(root, kind), {}).get(name)
            return record.rev if record is not None else 0

    def stamp(self, root: str | os.PathLike[str], name: str, kind: Kind = "mcp") -> str:
        return f"rev:{self.revision_of(root, name, kind)}"

    def _decide(
        self,
        root: str | os.PathLike[str],
        name: str,
        cfg: Decidable,
        status: Decision,
        kind: Kind,
        shown: str | None = None,
    ) -> None:
        import redis

        key = root_key(root, kind)
        verb = "approval" if status == "approved" else "rejection"
        with self._lock:
            if self._rewound_at is None and self._unanswered is not None:  # (its decisions were never read)
                raise ConfigError(f"could not record {verb} of server {name!r}: {self._unanswered}; {NOT_RECORDED}")
            if self._rewound_at is not None or self._error is not None:
                raise ConfigError(f"could not record {verb} of server {name!r}: {self.error}")
            expected = self.revision_of(root, name, kind)
            if shown is not None:
                try:
                    expected = int(shown.removeprefix("rev:"))
                except ValueError:
                    raise DecidedSinceShown(name, verb) from None
        try:
            rev = self.store.decide(key, name, cfg.approval_hash, status, expected_rev=expected, by=_who())
        except (redis.RedisError, OSError) as exc:
            failure = store_failure(self.store.url, exc, self.store.keys.fleet)
            raise ConfigError(f"could not record {verb} of server {name!r}: {failure}; {NOT_RECORDED}") from exc
        if rev is None:
            self._reread(key, name)
            raise DecidedSinceShown(name, verb)
        self.apply(key, name, FleetRecord(cfg.approval_hash, status, rev, _who(), time.time()))
        what = "MCP server" if kind == "mcp" else "language server"
        logger.info("%s %r %s for project %s in fleet %s", what, name, status, key, self.store.keys.fleet)


def _decisions(records: Mapping[str, FleetRecord]) -> dict[str, ApprovalRecord]:
    out: dict[str, ApprovalRecord] = {}
    for name, record in records.items():
        if record.status == "approved":
            out[name] = ApprovalRecord(hash=record.hash, status="approved")
        elif record.status == "rejected":
            out[name] = ApprovalRecord(hash=record.hash, status="rejected")
    return out


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{os.uname().nodename}:{os.getpid()}"
