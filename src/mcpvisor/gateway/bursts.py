"""A warning a client can repeat as fast as it likes, said once per burst: the first at once, the rest as a count.

A client opening connections in a loop past ``--max-connections`` got one WARNING line per connection refused
on the gateway's stderr, as many as it cared to make. :class:`Burst` says the first, then, every
:data:`BURST_S` while more come, how many more there were.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

__all__ = ["BURST_S", "REBINDING_LOGGER", "Burst", "RebindingRefusals", "quiet_rebinding_refusals"]

BURST_S = 5.0
"""How long a burst's repeats are counted before their number is said."""


class Burst:
    """``first % args`` said at once; repeats within :data:`BURST_S` as one ``more % (count, *args)`` line."""

    def __init__(self, logger: logging.Logger, first: str, more: str) -> None:
        self._logger = logger
        self._first = first
        self._more = more
        self._count = 0
        self._args: tuple[Any, ...] = ()
        self._timer: asyncio.TimerHandle | None = None

    def said(self, loop: asyncio.AbstractEventLoop, *args: Any) -> None:
        """One more occurrence (``args`` for its message), on ``loop``."""
        self._args = args
        if self._timer is not None:
            self._count += 1
            return
        self._logger.warning(self._first, *args)
        self._timer = loop.call_later(BURST_S, self._end, loop)

    def _end(self, loop: asyncio.AbstractEventLoop) -> None:
        count, self._count = self._count, 0
        if not count:
            self._timer = None
            return
        self._logger.warning(self._more, count, *self._args)
        self._timer = loop.call_later(BURST_S, self._end, loop)  # it goes on, or ends in silence


REBINDING_LOGGER = "mcp.server.transport_security"
"""The SDK's logger that says each request its DNS-rebinding protection refuses."""
_REFUSED = ("Invalid Host header", "Invalid Origin header", "Missing Host header")


class RebindingRefusals(logging.Filter):
    """A filter for :data:`REBINDING_LOGGER`: the SDK says every request it refuses for its ``Host`` or ``Origin`` (a
    web page rebinding its name to this machine may send as many as it likes), each kind once per burst, then how
    many more every :data:`BURST_S` while they come."""

    def __init__(self) -> None:
        super().__init__()
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        kind = next((k for k in _REFUSED if message.startswith(k)), None)
        if kind is None:
            return True  # (another line: this filter's own count, say)
        with self._lock:
            if kind in self._counts:
                self._counts[kind] += 1
                return False
            self._counts[kind] = 0
        self._later(record.name, kind)
        record.msg, record.args = f"{message} (a request refused; the others of this burst are counted)", ()
        return True

    def _later(self, name: str, kind: str) -> None:
        timer = threading.Timer(BURST_S, self._end, (name, kind))  # (the SDK logs from its task: no loop at hand)
        timer.daemon = True
        timer.start()

    def _end(self, name: str, kind: str) -> None:
        with self._lock:
            count = self._counts.pop(kind)
            if count:
                self._counts[kind] = 0  # the burst goes on while more come
        if count:
            logging.getLogger(name).warning("%d more requests refused: %s", count, kind)
            self._later(name, kind)


def quiet_rebinding_refusals() -> None:
    """Put a :class:`RebindingRefusals` on :data:`REBINDING_LOGGER`, once."""
    logger = logging.getLogger(REBINDING_LOGGER)
    if not any(isinstance(f, RebindingRefusals) for f in logger.filters):
        logger.addFilter(RebindingRefusals())
