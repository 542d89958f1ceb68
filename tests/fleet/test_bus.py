"""The listen bus across replicas, against a real redis-server: what one replica publishes reaches the
others' listeners once, its own listeners at once (never twice), and another workspace's never."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.server.subscriptions import PromptsListChanged, ResourceUpdated, ServerEvent, ToolsListChanged

from mcpvisor.fleet.bus import FleetBus, decode_event, encode_event
from mcpvisor.fleet.store import FleetStore
from tests.fleet.conftest import RedisServer
from tests.helpers import wait_until

pytestmark = pytest.mark.fleet


async def test_what_one_replica_publishes_reaches_the_others_listen_streams(redis_server: RedisServer) -> None:
    store = FleetStore(redis_server.url)
    here, there, elsewhere = (
        FleetBus(store, "r1", Path("/srv/ws")),
        FleetBus(store, "r2", Path("/srv/ws")),
        FleetBus(store, "r3", Path("/srv/other")),
    )
    heard: dict[str, list[ServerEvent]] = {"r1": [], "r2": [], "r3": []}
    for name, bus in (("r1", here), ("r2", there), ("r3", elsewhere)):
        bus.subscribe(heard[name].append)
    async with anyio.create_task_group() as tg:
        for bus in (here, there, elsewhere):
            await tg.start(bus.run)
        await here.publish(ToolsListChanged())
        await here.publish(ResourceUpdated("file:///a"))
        assert heard["r1"] == [ToolsListChanged(), ResourceUpdated("file:///a")]  # at once, before Redis
        await wait_until(lambda: len(heard["r2"]) == 2, what="r2 hears r1's two events")
        assert heard["r2"] == [ToolsListChanged(), ResourceUpdated("file:///a")]
        await there.publish(PromptsListChanged())
        await wait_until(lambda: len(heard["r1"]) == 3, what="r1 hears r2's event")
        await anyio.sleep(0.2)  # proving an absence: nothing else arrives (no echo, no other workspace)
        assert heard["r1"][2:] == [PromptsListChanged()]
        assert heard["r2"] == [ToolsListChanged(), ResourceUpdated("file:///a"), PromptsListChanged()]
        assert heard["r3"] == []
        assert there.received == 2
        tg.cancel_scope.cancel()


def test_events_survive_their_encoding_and_junk_is_ignored() -> None:
    for event in (ToolsListChanged(), PromptsListChanged(), ResourceUpdated("file:///x")):
        assert decode_event(encode_event(event, "r1")) == ("r1", event)
    for junk in ("", "{", '{"from": "r1"}', '{"from": "r1", "kind": "resource"}', '{"from": "r1", "kind": "x"}'):
        assert decode_event(junk) is None
