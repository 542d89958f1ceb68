"""Tool and prompt pins kept in the fleet store, so that every replica holds the same definitions.

:class:`FleetPinStore` is a :class:`~mcpvisor.host.pins.PinStore` whose records live in one Redis hash
(``pins``: scope -> JSON of that scope's servers), changed in optimistic transactions
(:mod:`mcpvisor.fleet.records`): the first pin of a configuration is create-only, so with several
replicas connecting a new server at once exactly one pin wins, and the others compare what their copy
of the server offers with it, holding what differs (a server that tells each process something else is
caught). An unreachable store makes the gate hold every definition of a pinned server (fail closed);
other replicas hear a change through the log and check their servers' definitions again.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcpvisor.fleet.records import FleetRecords
from mcpvisor.fleet.store import FleetStore
from mcpvisor.host.pins import PinStore

__all__ = ["FleetPinStore"]


class FleetPinStore(FleetRecords, PinStore):
    """The pins of one fleet (see the module)."""

    what = "the fleet's tool pin store"
    log_kind = "pins"

    def __init__(self, store: FleetStore) -> None:
        PinStore.__init__(self, Path(os.devnull))
        self._fleet_init(store, store.keys.pins)
