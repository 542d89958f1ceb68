"""A burst of one line said once, the rest counted, from however many threads log it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from mcpvisor.core.log_bursts import BurstCount
from tests.helpers import wait_until


class _Counted(BurstCount[str]):
    def __init__(self) -> None:
        super().__init__()
        self.said: list[tuple[str, str, int]] = []

    def burst_s(self) -> float:
        return 0.2

    def say_more(self, name: str, key: str, count: int) -> None:
        self.said.append((name, key, count))

    def in_burst(self) -> bool:
        return bool(self._counts)


async def test_a_burst_from_many_threads_is_said_once_then_counted_and_ends_after_a_quiet_time() -> None:
    counted = _Counted()
    with ThreadPoolExecutor(8) as pool:
        firsts = list(pool.map(lambda _: counted.starts_burst("log", "a"), range(200)))
    assert firsts.count(True) == 1
    assert counted.starts_burst("log", "b")  # another key: a burst of its own
    await wait_until(lambda: not counted.in_burst(), what="the bursts' end")
    assert sorted(counted.said) == [("log", "a", 199)]
    assert counted.starts_burst("log", "a")  # over: the next is said again
