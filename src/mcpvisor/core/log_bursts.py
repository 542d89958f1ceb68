"""A line that can come as fast as something else likes, said once per burst: the first at once, the rest as a count.

:class:`BurstCount` keeps the count of each burst by a key (a server, a kind of refusal): the first of a burst
goes through, the others are counted, and every :meth:`~BurstCount.burst_s` while they come their number is
said (:meth:`~BurstCount.say_more`, the wording); a time with none ends the burst in silence. Its count is
kept under a lock and its time by a :class:`threading.Timer` (a daemon: a count pending when the process ends
is not said), so it serves a logging filter, which runs on whatever thread logs; a subclass on an event loop
times it there instead (:meth:`~BurstCount.later`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["BurstCount"]

K = TypeVar("K", bound=Hashable)


class BurstCount(Generic[K]):
    """The bursts of a line, by key: :meth:`starts_burst` for each, :meth:`say_more` for the count of the rest."""

    def __init__(self) -> None:
        super().__init__()
        self._counts: dict[K, int] = {}
        self._lock = threading.Lock()

    def burst_s(self) -> float:
        """How long a burst's repeats are counted before their number is said."""
        raise NotImplementedError

    def say_more(self, name: str, key: K, count: int) -> None:
        """Say that ``count`` more of burst ``key`` came (``name``: the logger's, as given to :meth:`starts_burst`)."""
        raise NotImplementedError

    def later(self, delay_s: float, callback: Callable[..., None], *args: Any) -> None:
        """Call ``callback(*args)`` in ``delay_s``: on a timer thread (a logging filter has no loop at hand)."""
        timer = threading.Timer(delay_s, callback, args)
        timer.daemon = True
        timer.start()

    def starts_burst(self, name: str, key: K) -> bool:
        """One more of burst ``key``: whether it is the first (to be said), or counted."""
        with self._lock:
            if key in self._counts:
                self._counts[key] += 1
                return False
            self._counts[key] = 0
        self.later(self.burst_s(), self._end, name, key)
        return True

    def _end(self, name: str, key: K) -> None:
        """A burst's time is up: the others' number said, and the burst goes on while more come."""
        with self._lock:
            count = self._counts.pop(key)
            if count:
                self._counts[key] = 0
        if count:
            self.say_more(name, key, count)
            self.later(self.burst_s(), self._end, name, key)
