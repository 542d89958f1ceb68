"""What the gateway keeps of its SSE streams so that a client whose stream dropped can resume it (SEP-1699).

With an event store, every SSE stream the gateway opens starts with a priming event (an event id and
empty data) carrying a ``retry`` field, and every message gets an event id; a client that lost the
stream reconnects with ``Last-Event-ID`` and is sent what came after. :class:`ReplayBuffer` keeps that
in memory, bounded so that no client can make the gateway hoard: at most ``max_streams`` streams (the
least recently written go first), at most ``max_events`` events per stream, and about ``max_bytes`` of
memory in all. A message's size is the memory its objects take (``sys.getsizeof`` over its values: a
kept message is the objects, which take several times their JSON's length), not serialised again.

A stream that lost events to those bounds cannot be resumed from before the loss: the replay says
so (the SDK answers the reconnect with an error) rather than skipping what it no longer has.
"""

from __future__ import annotations

import itertools
import sys
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCResponse

__all__ = ["ReplayBuffer", "SessionEvents"]

MAX_STREAMS = 1024
MAX_EVENTS = 64
MAX_BYTES = 64 * 1024 * 1024
_SIZE_WALK_NODES = 10_000
"""How many values of one message are looked at to estimate its size; more counts as 'too big to keep'."""


@dataclass(eq=False)
class _Stream:
    events: deque[tuple[int, JSONRPCMessage | None, int]] = field(default_factory=deque)
    dropped_through: int = 0
    """The highest sequence number no longer kept (0: nothing dropped)."""
    size: int = 0


class ReplayBuffer(EventStore):
    """A bounded in-memory event store (see the module)."""

    def __init__(self, *, max_streams: int = MAX_STREAMS, max_events: int = MAX_EVENTS, max_bytes: int = MAX_BYTES):
        self._max_streams = max_streams
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._streams: OrderedDict[StreamId, _Stream] = OrderedDict()
        self._size = 0
        self._sequence = itertools.count(1)

    @property
    def size(self) -> int:
        """The estimated bytes kept."""
        return self._size

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        sequence = next(self._sequence)
        stream = self._streams.get(stream_id)
        if stream is None:
            stream = self._streams[stream_id] = _Stream()
        self._streams.move_to_end(stream_id)
        size = _estimate(message)
        if size > self._max_bytes // 4:
            stream.dropped_through = sequence  # too big to keep: resuming from before it is impossible
        else:
            stream.events.append((sequence, message, size))
            stream.size += size
            self._size += size
        while len(stream.events) > self._max_events:
            self._drop_oldest(stream)
        while self._size > self._max_bytes or len(self._streams) > self._max_streams:
            oldest_id, oldest = next(iter(self._streams.items()))
            if oldest is stream and len(self._streams) == 1:
                while self._size > self._max_bytes and stream.events:
                    self._drop_oldest(stream)
                break
            del self._streams[oldest_id]
            self._size -= oldest.size
        return f"{stream_id}/{sequence}"

    def _drop_oldest(self, stream: _Stream) -> None:
        sequence, _, size = stream.events.popleft()
        stream.dropped_through = max(stream.dropped_through, sequence)
        stream.size -= size
        self._size -= size

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        """Send what the stream of ``last_event_id`` kept after it; its stream id, for the rest to follow, or
        ``None`` when there is nothing to resume (an id never issued, events lost to the bounds) or nothing more
        will come (the request's answer was stored: the resumed stream ends once it is sent)."""
        stream_id, _, number = last_event_id.rpartition("/")
        stream = self._streams.get(stream_id)
        if stream is None or not (number.isascii() and number.isdigit()) or len(number) > 20:
            return None
        after = int(number)
        issued = stream.events[-1][0] if stream.events else stream.dropped_through  # the stream's last event id
        if stream.dropped_through > after or after > issued:
            return None  # some of what followed is gone, or an event id this stream never issued
        answered = False
        for sequence, message, _ in list(stream.events):
            answered = answered or isinstance(message, JSONRPCResponse | JSONRPCError)
            if sequence > after and message is not None:
                await send_callback(EventMessage(message, f"{stream_id}/{sequence}"))
        return None if answered else stream_id


class SessionEvents(EventStore):
    """One session's view of a shared :class:`ReplayBuffer`: its streams are kept under its session id, and a
    ``Last-Event-ID`` of another session's resumes nothing. Stream ids are the JSON-RPC request ids, which every
    client numbers from 0: without the session in them, one client could replay another's answers."""

    def __init__(self, buffer: ReplayBuffer, session_id: str) -> None:
        self._buffer = buffer
        self._prefix = f"{session_id}:"

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        return await self._buffer.store_event(self._prefix + stream_id, message)

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        if not last_event_id.startswith(self._prefix):
            return None  # another session's event, or none of this gateway's
        stream_id = await self._buffer.replay_events_after(last_event_id, send_callback)
        return stream_id.removeprefix(self._prefix) if stream_id is not None else None


def _estimate(message: JSONRPCMessage | None) -> int:
    """About how much memory ``message`` holds: the sizes of its objects, each counted once."""
    if message is None:
        return 0
    budget = [_SIZE_WALK_NODES]
    return _walk(message, budget, set())


def _walk(value: Any, budget: list[int], seen: set[int]) -> int:
    budget[0] -= 1
    if budget[0] < 0:
        return MAX_BYTES  # too many values to look at: treat it as too big to keep
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value, 64)
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return size
    if isinstance(value, dict):
        return size + sum(_walk(k, budget, seen) + _walk(v, budget, seen) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return size + sum(_walk(v, budget, seen) for v in value)
    if hasattr(value, "__dict__"):
        extra = getattr(value, "__pydantic_fields_set__", None)  # a model's bookkeeping, kept with it
        return size + _walk(vars(value), budget, seen) + (_walk(extra, budget, seen) if extra else 0)
    return size
