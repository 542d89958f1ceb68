"""Input rounds name the replica they run on, tagged with the fleet key: another replica forwards a retry
only to the replica a round of the fleet named (no Redis needed: names are made and read locally)."""

from __future__ import annotations

import pytest

from mcpvisor.fleet.replica import Replica
from mcpvisor.fleet.sealing import FleetKey
from mcpvisor.fleet.store import FleetStore

KEY = FleetKey(["a fleet key of at least thirty-two characters"])


def test_a_round_names_its_replica_and_a_changed_name_is_refused() -> None:
    r1 = Replica(FleetStore("redis://db"), replica_id="r1", key=KEY)
    r2 = Replica(FleetStore("redis://db"), replica_id="r2", key=KEY)
    state = r1.round_state("tok3n")
    assert state.startswith("mcpvisor-round-r1.tok3n.")
    assert r2.round_owner(state) == "r1"
    for forged in (state.replace("r1.", "r2.", 1), state[:-2] + "xx", "mcpvisor-round-r1.tok3n"):
        with pytest.raises(ValueError, match="not made by this fleet"):
            r2.round_owner(forged)
    stranger = Replica(FleetStore("redis://db"), replica_id="r1", key=FleetKey(["another key, also thirty-two chars"]))
    with pytest.raises(ValueError, match="not made by this fleet"):
        stranger.round_owner(state)
    assert r2.round_owner("mcpvisor-round-plain") is None  # not a fleet's round: served where it lands
    assert r2.round_owner("something else") is None


def test_without_a_fleet_key_a_round_names_its_replica_untagged() -> None:
    r1 = Replica(FleetStore("redis://db"), replica_id="r1")
    state = r1.round_state("tok3n")
    assert state == "mcpvisor-round-r1.tok3n"
    assert Replica(FleetStore("redis://db"), replica_id="r2").round_owner(state) == "r1"
