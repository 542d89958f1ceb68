"""The listen bus across replicas: every ``subscriptions/listen`` stream hears every replica's changes.

A 2026-07-28 client keeps one listen stream open on whichever replica took it, while its calls land
anywhere. Each replica's gateway publishes its own list changes (and resource updates) on a
:class:`FleetBus`: local listeners hear them at once, as on the SDK's in-memory bus, and the event also
goes out on the fleet's Redis channel for that workspace; every other replica delivers it to its own
listeners. A notice that arrives before the receiving replica itself changed costs the client one
extra re-list; one that is lost (the channel is pub/sub: a reader that was disconnected misses what
was said meanwhile) is made up for by that replica's own notice when it reconciles.

Events travel as small JSON objects (``{"from": replica, "kind": "tools" | "prompts" | "resources" |
"resource", "uri": ...}``), never as JSON-RPC.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

import anyio
import anyio.abc
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from mcpvisor.fleet.failures import redact
from mcpvisor.fleet.store import FleetStore

if TYPE_CHECKING:
    import redis.asyncio

__all__ = ["FleetBus", "decode_event", "encode_event"]

logger = logging.getLogger(__name__)

OUTBOX: Final = 1000
"""Events waiting to be sent to Redis at most; beyond that the oldest reach only this replica's clients."""
RETRY_S: Final = 1.0

_KINDS: Final[dict[type, str]] = {
    ToolsListChanged: "tools",
    PromptsListChanged: "prompts",
    ResourcesListChanged: "resources",
}


def encode_event(event: ServerEvent, sender: str) -> str:
    if isinstance(event, ResourceUpdated):
        return json.dumps({"from": sender, "kind": "resource", "uri": event.uri})
    return json.dumps({"from": sender, "kind": _KINDS[type(event)]})


def decode_event(data: str) -> tuple[str, ServerEvent] | None:
    """The sender and the event, or ``None`` for a message that is not one."""
    try:
        raw = json.loads(data)
        sender, kind = str(raw["from"]), raw["kind"]
    except (ValueError, KeyError, TypeError):
        return None
    if kind == "resource" and isinstance(raw.get("uri"), str):
        return sender, ResourceUpdated(raw["uri"])
    for cls, name in _KINDS.items():
        if kind == name:
            return sender, cls()
    return None


class FleetBus:
    """A :class:`~mcp.server.subscriptions.SubscriptionBus` for one workspace of one replica. Publishing
    never waits for Redis: the event reaches local listeners, then a queue that :meth:`run` sends from."""

    def __init__(self, store: FleetStore, replica: str, root: Path) -> None:
        self._store = store
        self._replica = replica
        self.channel = store.keys.bus(hashlib.sha256(str(root).encode()).hexdigest()[:16])
        self._local = InMemorySubscriptionBus()
        self._send, self._outbox = anyio.create_memory_object_stream[str](OUTBOX)
        self.received = 0
        """Events heard from other replicas (for tests and ``fleet status``)."""

    async def publish(self, event: ServerEvent) -> None:
        await self._local.publish(event)
        try:
            self._send.send_nowait(encode_event(event, self._replica))
        except anyio.WouldBlock:
            logger.warning("fleet bus %s: Redis is behind; a change notice reaches only this replica", self.channel)

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        return self._local.subscribe(listener)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Send what is published here, and deliver what the other replicas publish, until cancelled.
        Reports started once subscribed (what is published after that is heard)."""
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._sender)
                await tg.start(self._reader)
                task_status.started()
        finally:
            self._send.close()
            self._outbox.close()

    async def _sender(self) -> None:
        import redis

        client = self._store.async_client()
        try:
            async for data in self._outbox:
                try:
                    await client.publish(self.channel, data)
                except (redis.RedisError, OSError) as exc:
                    logger.debug("fleet bus %s: not sent (%s)", self.channel, exc)
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def _reader(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        import redis

        started = False
        while True:
            client = self._store.async_client(decode=False)  # a message that is not UTF-8 is only a bad message
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self.channel)
                    if not started:
                        started = True
                        task_status.started()
                    await self._deliver(pubsub)
            except Exception as exc:  # the store's errors, and anything a message could raise: never the gateway's end
                if not isinstance(exc, redis.RedisError | OSError):
                    logger.exception("fleet bus %s: listening failed; listening again", self.channel)
                else:
                    logger.debug("fleet bus %s: %s (%s); listening again", self.channel, exc, redact(self._store.url))
                if not started:  # the gateway serves anyway: its own notices still reach its clients
                    started = True
                    task_status.started()
                await anyio.sleep(RETRY_S)
            finally:
                with anyio.CancelScope(shield=True):
                    await client.aclose()

    async def _deliver(self, pubsub: redis.asyncio.client.PubSub) -> None:
        async for message in pubsub.listen():
            if message.get("type") != "message":
                continue
            data = message.get("data")
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
            decoded = decode_event(text)
            if decoded is None or decoded[0] == self._replica:
                continue
            self.received += 1
            await self._local.publish(decoded[1])
