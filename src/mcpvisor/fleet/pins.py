"""Tool and prompt pins kept in the fleet store, so that every replica holds the same definitions.

:class:`FleetPinStore` is a :class:`~mcpvisor.host.pins.PinStore` whose records live in one Redis hash
(``pins``: scope -> JSON of that scope's servers), changed in optimistic transactions
(:mod:`mcpvisor.fleet.records`): the first pin of a configuration is create-only, so with several
replicas connecting a new server at once exactly one pin wins, and the others compare what their copy
of the server offers with it, holding what differs (a server that tells each process something else is
caught). An unreachable store makes the gate hold every definition of a pinned server (fail closed);
other replicas hear a change through the log and check their servers' definitions again.

A running replica reads the pins from an in-memory mirror its follower keeps (:meth:`FleetPinStore.mirror`,
fed on start and on every ``pins`` log entry), so checking a server's definitions never waits on Redis;
while that mirror is stale (the approvals' freshness rule) every pinned definition is held. Writes go
to Redis, and the mirror takes what this process wrote at once.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mcpvisor.core.errors import ConfigError
from mcpvisor.fleet.records import FleetRecords
from mcpvisor.fleet.store import FleetStore
from mcpvisor.host.pins import PinStore

__all__ = ["FleetPinStore"]

logger = logging.getLogger(__name__)


class FleetPinStore(FleetRecords, PinStore):
    """The pins of one fleet (see the module)."""

    what = "the fleet's tool pins"
    unanswered = "every tool and prompt of a pinned server is held until it answers"
    log_kind = "pins"

    def __init__(self, store: FleetStore, *, fresh: Callable[[], bool] | None = None) -> None:
        """``fresh``: whether the follower's view of the store may be trusted now (with it, reads come from
        the mirror once :meth:`mirror` was fed)."""
        PinStore.__init__(self, Path(os.devnull))
        self._fleet_init(store, store.keys.pins)
        self._fresh = fresh
        self._mirror: dict[str, Any] | None = None
        self._mirror_lock = threading.Lock()

    def mirror(self, fields: Mapping[Any, Any]) -> None:
        """The whole ``pins`` hash as the follower just read it."""
        try:
            records = self._records(fields)
        except ConfigError as exc:
            logger.warning("%s", exc)
            records = None  # unreadable: reads go to Redis (and fail closed there)
        with self._mirror_lock:
            self._mirror = records

    def read(self) -> dict[str, Any]:
        with self._mirror_lock:
            mirrored = self._mirror
        if mirrored is None or self._fresh is None:
            return super().read()
        if not self._fresh():
            raise ConfigError(f"cannot read {self.what}: {self.place} has not answered lately; {self.unanswered}")
        return copy.deepcopy(mirrored)

    def _written(self, records: dict[str, Any]) -> None:
        with self._mirror_lock:
            if self._mirror is not None:
                self._mirror = copy.deepcopy(records)
