"""A warning a client can repeat as fast as it likes, said once per burst: the first at once, the rest as a count.

A client opening connections in a loop past ``--max-connections`` got one WARNING line per connection refused
on the gateway's stderr, as many as it cared to make. :class:`Burst` says the first, then, every
:data:`BURST_S` while more come, how many more there were.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

__all__ = ["BURST_S", "Burst"]

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
