"""Record stores kept in the fleet store: the pins' and the OAuth tokens' (``{key: {record}}`` as the
file stores hold them, one Redis hash field per key).

A change is one optimistic transaction: ``WATCH`` the hash, read it, let the caller change the records,
then ``MULTI``: write what changed, bump the revision and append one entry to the change log — tried
again when another process changed the hash meanwhile, so nothing is lost and a create-only write
(the first pin of a configuration) has exactly one winner. Other replicas hear the change through
the log (:meth:`FleetRecords.changed`). Reads go to Redis; an unreachable store raises
:class:`~mcpvisor.core.errors.ConfigError`, and each store's callers fail closed on it.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from typing import Any, ClassVar, Final

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.events import Listeners
from mcpvisor.fleet.failures import redact, store_failure
from mcpvisor.fleet.store import LOG_MAXLEN, FleetStore
from mcpvisor.host.private_files import LOCK_TIMEOUT_S

__all__ = ["ATTEMPTS", "FleetRecords"]

logger = logging.getLogger(__name__)

ATTEMPTS: Final = 50
"""Tries of one change while others keep changing the same hash meanwhile."""
RETRY_PAUSE_S: Final = 0.01
"""The longest random pause before a try that follows a conflict (writers that collided spread out)."""


class FleetRecords:
    """The ``read``/``mutate`` of a :class:`~mcpvisor.host.private_files.PrivateJsonStore`, over one Redis
    hash. Mixed in before the file store's class, whose record logic it keeps."""

    what: ClassVar[str]
    consequence: ClassVar[str]
    log_kind: ClassVar[str]
    """The change log entry's ``kind``: how the other replicas know what to re-read."""
    unanswered: ClassVar[str]
    """What holds while the store does not answer, said after the reason."""
    skip_unreadable: ClassVar[bool] = False
    """Leave a record that cannot be read out (and say so once) instead of refusing the whole store."""

    def _fleet_init(self, store: FleetStore, hash_key: str) -> None:
        self.store = store
        self.hash_key = hash_key
        self.where = f"in {redact(store.url)} (fleet {store.keys.fleet})"
        self._changes: Listeners[Callable[[], None]] = Listeners(f"fleet {self.log_kind} listener")

    @property
    def place(self) -> str:
        return f"the fleet store {redact(self.store.url)} (fleet {self.store.keys.fleet})"

    def failure(self, exc: BaseException) -> str:
        """The store (its URL without its password) and what it did (``exc``: the Redis client's error)."""
        return store_failure(self.store.url, exc, self.store.keys.fleet)

    def _warn_once(self, message: str) -> None:
        warned: set[str] = self.__dict__.setdefault("_warned", set())
        if message not in warned:
            warned.add(message)
            logger.warning("%s", message)

    def encode(self, key: str, record: Any) -> str:
        return json.dumps(record, sort_keys=True)

    def decode(self, key: str, text: str) -> Any:
        return json.loads(text)

    def on_external_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        return self._changes.add(listener)

    def changed(self) -> None:
        """Another process changed the records (the log said so): tell the listeners."""
        self._changes.tell()

    def read(self) -> dict[str, Any]:
        import redis

        try:
            fields = self.store.sync_client().hgetall(self.hash_key)
        except (redis.RedisError, OSError) as exc:
            raise ConfigError(f"cannot read {self.what}: {self.failure(exc)}; {self.unanswered}") from exc
        return self._records(fields)

    def mutate(self, change: Callable[[dict[str, Any]], object], *, timeout_s: float = LOCK_TIMEOUT_S) -> None:
        import redis

        keys = self.store.keys
        try:
            with self.store.sync_client().pipeline(transaction=True) as pipe:
                for _ in range(ATTEMPTS):
                    try:
                        pipe.watch(self.hash_key)  # type: ignore[no-untyped-call]
                        before = self._records(pipe.hgetall(self.hash_key))
                        after = json.loads(json.dumps(before))
                        change(after)
                        written = {key: record for key, record in after.items() if before.get(key) != record}
                        if written:
                            self._before_writing(pipe)
                        pipe.multi()
                        for key in before.keys() - after.keys():
                            pipe.hdel(self.hash_key, key)
                        for key, record in written.items():
                            pipe.hset(self.hash_key, key, self.encode(key, record))
                        if before != after:
                            pipe.incr(keys.rev)
                            pipe.xadd(keys.log, {"kind": self.log_kind}, maxlen=LOG_MAXLEN, approximate=True)
                        pipe.execute()
                        self._written(after)
                        return
                    except redis.WatchError:
                        time.sleep(random.uniform(0, RETRY_PAUSE_S))  # changed meanwhile: read it again, a moment later
                        continue
        except (redis.RedisError, OSError) as exc:
            raise ConfigError(f"could not save {self.what}: {self.failure(exc)}; nothing was changed") from exc
        raise ConfigError(f"{self.what} {self.where} kept changing under {ATTEMPTS} tries; try again")

    def _before_writing(self, pipe: Any) -> None:
        """About to write records in the transaction ``pipe`` (watching the hash, not yet ``MULTI``): raise
        :class:`ConfigError` to write nothing; a key watched here that changes before it runs makes it try again."""

    def _written(self, records: dict[str, Any]) -> None:
        """This process just wrote ``records`` (a store with a mirror takes them at once)."""

    def _records(self, fields: Any) -> dict[str, Any]:
        records: dict[str, Any] = {}
        for key, text in dict(fields).items():
            try:
                record = self.decode(str(key), str(text))
            except ValueError:
                record = None
            if not isinstance(record, dict):
                why = f"the record of {str(key)!r} is unreadable"
                if self.skip_unreadable:
                    self._warn_once(f"{self.what} {self.where}: {why}; it is left out ({self.consequence})")
                    continue
                raise ConfigError(f"cannot read {self.what} {self.where}: {why}; {self.consequence}")
            records[str(key)] = record
        return records
