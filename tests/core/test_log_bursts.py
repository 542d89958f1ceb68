"""A burst of one line said once, the rest counted, from however many threads log it."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mcpvisor.core.log_bursts import BurstCount


class _Counted(BurstCount[str]):
    """Its bursts end when the test says (:meth:`end_bursts`), not on a timer: the test waits on no clock."""

    def __init__(self) -> None:
        super().__init__()
        self.said: list[tuple[str, str, int]] = []
        self.pending: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def burst_s(self) -> float:
        return 1.0

    def say_more(self, name: str, key: str, count: int) -> None:
        self.said.append((name, key, count))

    def later(self, delay_s: float, callback: Callable[..., None], *args: Any) -> None:
        self.pending.append((callback, args))

    def end_bursts(self) -> None:
        """The time of every burst pending now is up."""
        pending, self.pending = self.pending, []
        for callback, args in pending:
            callback(*args)


def test_a_burst_from_many_threads_is_said_once_then_counted_and_ends_after_a_quiet_time() -> None:
    counted = _Counted()
    with ThreadPoolExecutor(8) as pool:
        firsts = list(pool.map(lambda _: counted.starts_burst("log", "a"), range(200)))
    assert firsts.count(True) == 1
    assert counted.starts_burst("log", "b")  # another key: a burst of its own
    counted.end_bursts()
    assert sorted(counted.said) == [("log", "a", 199)]  # (b had no repeats: nothing more to say)
    assert not counted.starts_burst("log", "a")  # a's burst goes on while more come
    counted.end_bursts()
    assert counted.said[-1] == ("log", "a", 1)
    counted.end_bursts()  # a quiet time: over
    assert counted.pending == []
    assert counted.starts_burst("log", "a")  # the next is said again
