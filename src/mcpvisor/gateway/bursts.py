"""A warning a client can repeat as fast as it likes, said once per burst: the first at once, the rest as a count.

A client opening connections in a loop past ``--max-connections`` got one WARNING line per connection refused
on the gateway's stderr, as many as it cared to make. :class:`Burst` says the first, then, every
:data:`BURST_S` while more come, how many more there were.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from mcpvisor.core.log_bursts import BurstCount

__all__ = ["BURST_S", "REBINDING_LOGGER", "Burst", "RebindingRefusals", "quiet_rebinding_refusals"]

BURST_S = 5.0
"""How long a burst's repeats are counted before their number is said."""


class Burst(BurstCount[None]):
    """``first % args`` said at once; repeats within :data:`BURST_S` as one ``more % (count, *args)`` line."""

    def __init__(self, logger: logging.Logger, first: str, more: str) -> None:
        super().__init__()
        self._logger = logger
        self._first = first
        self._more = more
        self._args: tuple[Any, ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None

    def said(self, loop: asyncio.AbstractEventLoop, *args: Any) -> None:
        """One more occurrence (``args`` for its message), on ``loop``."""
        self._args = args
        self._loop = loop
        if self.starts_burst(self._logger.name, None):
            self._logger.warning(self._first, *args)

    def burst_s(self) -> float:
        return BURST_S

    def later(self, delay_s: float, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None  # (set by the first said)
        self._loop.call_later(delay_s, callback, *args)  # it goes on, or ends in silence

    def say_more(self, name: str, key: None, count: int) -> None:
        self._logger.warning(self._more, count, *self._args)


REBINDING_LOGGER = "mcp.server.transport_security"
"""The SDK's logger that says each request its DNS-rebinding protection refuses."""
_REFUSED = ("Invalid Host header", "Invalid Origin header", "Missing Host header")


class RebindingRefusals(BurstCount[str], logging.Filter):
    """A filter for :data:`REBINDING_LOGGER`: the SDK says every request it refuses for its ``Host`` or ``Origin`` (a
    web page rebinding its name to this machine may send as many as it likes), each kind once per burst, then how
    many more every :data:`BURST_S` while they come."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        kind = next((k for k in _REFUSED if message.startswith(k)), None)
        if kind is None:
            return True  # (another line: this filter's own count, say)
        if not self.starts_burst(record.name, kind):
            return False
        record.msg, record.args = f"{message} (a request refused; the others of this burst are counted)", ()
        return True

    def burst_s(self) -> float:
        return BURST_S

    def say_more(self, name: str, key: str, count: int) -> None:
        logging.getLogger(name).warning("%d more requests refused: %s", count, key)


def quiet_rebinding_refusals() -> None:
    """Put a :class:`RebindingRefusals` on :data:`REBINDING_LOGGER`, once."""
    logger = logging.getLogger(REBINDING_LOGGER)
    if not any(isinstance(f, RebindingRefusals) for f in logger.filters):
        logger.addFilter(RebindingRefusals())
