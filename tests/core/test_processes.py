"""Stopping a server's process group (SPEC §5.1): real processes."""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest

from mcpvisor.core import processes
from tests.helpers import WAIT_S, pid_alive


async def test_a_stop_does_not_wait_for_a_zombie_left_in_the_servers_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process the server started and never reaped stays in its group as a zombie, and once the server is gone an
    init that reaps nothing (as in some containers; this test stands in for one) keeps it so: it counted as the group
    running on, so a stop waited out the whole grace after SIGTERM (and a restart with it), though nothing ran."""
    monkeypatch.setattr(processes, "TERMINATE_GRACE_S", WAIT_S * 4)
    with _reaping_nothing():
        process = await anyio.open_process(["sh", "-c", "sleep 0.01 & exec sleep 60"], start_new_session=True)
        deadline = time.monotonic() + WAIT_S
        while _members(process.pid) != {"Z", "S"}:  # the child has ended, unreaped; the server sleeps on
            assert time.monotonic() < deadline, _members(process.pid)
            await anyio.sleep(0.01)
        with anyio.fail_after(WAIT_S):
            await processes.stop_process(process, exit_grace_s=0)
        assert process.returncode is not None
        assert not pid_alive(process.pid)


@contextmanager
def _reaping_nothing() -> Iterator[None]:
    """This process adopts the orphans of its descendants (Linux's child subreaper) and reaps none of them until the
    block ends: as an init that never reaps."""
    libc = ctypes.CDLL(None, use_errno=True)
    set_child_subreaper = 36  # PR_SET_CHILD_SUBREAPER
    assert libc.prctl(set_child_subreaper, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    adopted = set(os.listdir("/proc"))
    try:
        yield
    finally:
        libc.prctl(set_child_subreaper, 0, 0, 0, 0)
        for entry in filter(str.isdigit, set(os.listdir("/proc")) - adopted):
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                if parent == os.getpid():
                    os.waitpid(int(entry), os.WNOHANG)  # (a zombie it adopted)
            except (OSError, ChildProcessError, ValueError):
                continue


def _members(pgid: int) -> set[str]:
    """The states of the processes of group ``pgid``."""
    states = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                state, _parent, group = stat.read().rsplit(")", 1)[1].split(maxsplit=3)[:3]
        except OSError:
            continue
        if group == str(pgid):
            states.add(state)
    return states
