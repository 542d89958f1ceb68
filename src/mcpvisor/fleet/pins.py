"""Tool and prompt pins kept in the fleet store, so that every replica holds the same definitions.

:class:`FleetPinStore` is a :class:`~mcpvisor.host.pins.PinStore` whose records live in one Redis hash
(``pins``: scope -> JSON of that scope's servers). A change is one optimistic transaction (``WATCH``,
read, change, ``MULTI``: write, bump the revision, append ``pins`` to the change log), tried again when
another process changed the pins meanwhile, so nothing is lost and the first pin of a configuration is
create-only: with several replicas connecting a new server at once exactly one pin wins, and the
others compare what their copy of the server offers with it, holding what differs (a server that
tells each process something else is caught).

Reads go to Redis (a connection's listing, a view), as the file store reads its file; an unreachable
store raises :class:`~mcpvisor.core.errors.ConfigError`, and the gate then holds every definition of
a pinned server (fail closed). Other replicas hear a change through the log and check their servers'
definitions again.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.events import Listeners
from mcpvisor.fleet.store import LOG_MAXLEN, FleetStore, redact
from mcpvisor.host.pins import PinStore
from mcpvisor.host.private_files import LOCK_TIMEOUT_S

__all__ = ["FleetPinStore"]

logger = logging.getLogger(__name__)

ATTEMPTS: Final = 20
"""Tries of one change while others keep changing the pins meanwhile."""


class FleetPinStore(PinStore):
    """The pins of one fleet (see the module)."""

    what = "the fleet's tool pin store"

    def __init__(self, store: FleetStore) -> None:
        super().__init__(Path(os.devnull))
        self.store = store
        self.where = f"in {redact(store.url)} (fleet {store.keys.fleet})"
        self._changes: Listeners[Callable[[], None]] = Listeners("fleet pins listener")

    def on_external_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        return self._changes.add(listener)

    def changed(self) -> None:
        self._changes.tell()

    def read(self) -> dict[str, Any]:
        import redis

        try:
            fields = self.store.sync_client().hgetall(self.store.keys.pins)
        except (redis.RedisError, OSError) as exc:
            raise ConfigError(f"cannot read {self.what} {self.where}: {exc}; {self.consequence}") from exc
        return _records(fields, self)

    def mutate(self, change: Callable[[dict[str, Any]], object], *, timeout_s: float = LOCK_TIMEOUT_S) -> None:
        import redis

        keys = self.store.keys
        try:
            with self.store.sync_client().pipeline(transaction=True) as pipe:
                for _ in range(ATTEMPTS):
                    try:
                        pipe.watch(keys.pins)  # type: ignore[no-untyped-call]
                        before = _records(pipe.hgetall(keys.pins), self)
                        after = json.loads(json.dumps(before))
                        change(after)
                        pipe.multi()
                        for scope in before.keys() - after.keys():
                            pipe.hdel(keys.pins, scope)
                        for scope, servers in after.items():
                            if before.get(scope) != servers:
                                pipe.hset(keys.pins, scope, json.dumps(servers, sort_keys=True))
                        if before != after:
                            pipe.incr(keys.rev)
                            pipe.xadd(keys.log, {"kind": "pins"}, maxlen=LOG_MAXLEN, approximate=True)
                        pipe.execute()
                        return
                    except redis.WatchError:
                        continue  # changed meanwhile: read it again
        except (redis.RedisError, OSError) as exc:
            raise ConfigError(f"could not save {self.what} {self.where}: {exc} — nothing was changed") from exc
        raise ConfigError(f"{self.what} {self.where} kept changing under {ATTEMPTS} tries; try again")


def _records(fields: Any, store: FleetPinStore) -> dict[str, Any]:
    records: dict[str, Any] = {}
    for scope, text in dict(fields).items():
        try:
            servers = json.loads(text)
        except ValueError:
            servers = None
        if not isinstance(servers, dict):
            raise ConfigError(
                f"cannot read {store.what} {store.where}: scope {scope!r} is not an object; {store.consequence}"
            )
        records[str(scope)] = servers
    return records
