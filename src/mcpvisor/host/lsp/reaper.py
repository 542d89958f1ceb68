"""Runs a language server so that nothing it starts outlives the host, even a host killed with SIGKILL.

Run as ``python -I -S reaper.py COMMAND ARGS...`` by a host that spawns it with ``start_new_session=True``:
the reaper leads a process group, and the server it starts (and the server's own children) join it.

Why: on Linux a process can ask the kernel for a signal when its parent dies (``PR_SET_PDEATHSIG``), but
only the host's direct child can ask that of the host, and a language server's own children (a node
server's workers, a build daemon it starts) would outlive a host killed with SIGKILL. So the direct child
is this reaper: it asks for SIGTERM on the host's death, and turns that signal (or the host's own SIGTERM
when it stops the server) into SIGTERM to the whole group, then SIGKILL to whatever is left after a grace.
(The kernel sends it when the host *thread* that spawned the reaper ends: with anyio that is the event
loop's thread, which outlives every connection it runs.)
When the server exits by itself, whatever it left behind in the group is killed and the reaper exits with
the server's exit code, or is ended by the signal that ended the server (127 or 126 when COMMAND cannot be run).

It never reads stdin or writes stdout: the server inherits them as its protocol pipes. Stdlib only, and
run isolated and without ``site`` (``-I -S``) so that it starts fast whatever the environment holds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import FrameType

PARENT_PID_ENV = "MCPVISOR_REAPER_PARENT_PID"
"""Set by the host to its PID (removed before the server starts): a host that died before the reaper
asked for the death signal is noticed. Without it, the parent at startup is taken for the host."""
TERMINATE_GRACE_S = 2.0
"""How long the server may take to exit after SIGTERM before the group is killed."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PR_SET_PDEATHSIG = 1
POLL_S = 0.02


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_stop_signal(signum: int, _frame: FrameType | None) -> None:
    for stop_signal in STOP_SIGNALS:  # a second signal must not interrupt the stop
        signal.signal(stop_signal, signal.SIG_IGN)
    raise _Stop(signum)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -I -S reaper.py COMMAND [ARGS...]\n")
        return 2
    parent = int(os.environ.pop(PARENT_PID_ENV, "") or os.getppid())
    if sys.platform == "linux":
        import ctypes  # here, not above: the host imports this module for its path, and ctypes costs it 0.4 MB

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent:
        return 1  # the host died before the death signal was armed: start nothing
    if os.getpgid(0) != os.getpid():
        os.setsid()  # never signal a group it does not lead (the host's own, when not spawned in a new session)
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, _on_stop_signal)  # a handled signal is default again in the server
    try:
        try:
            child = subprocess.Popen(argv)
        except OSError as exc:
            sys.stderr.write(f"cannot start {argv[0]}: {exc.strerror or exc}\n")
            return 127 if isinstance(exc, FileNotFoundError | NotADirectoryError) else 126
        code = child.wait()
        _kill_others(signal.SIGKILL)  # what the server left behind
    except _Stop as stop:
        _stop_group()
        return _end_by(stop.signum)
    return code if code >= 0 else _end_by(-code)


def _end_by(signum: int) -> int:
    """End the reaper by ``signum`` (without a core dump), as the server was: its host reads a death by a signal
    where an exit code of 128 + N could be the server's own. The code a shell gives it, if that fails."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if signum != signal.SIGKILL:  # (its action cannot be set: it is the default's)
        signal.signal(signum, signal.SIG_DFL)  # Python ignores SIGPIPE; the reaper handles STOP_SIGNALS
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    return 128 + signum


def _stop_group() -> None:
    """SIGTERM to everyone else in the group, a grace for the server, then SIGKILL to whoever is left."""
    os.killpg(0, signal.SIGTERM)  # the reaper itself ignores it by now
    deadline = time.monotonic() + TERMINATE_GRACE_S
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break  # the server is gone (its own children are not the reaper's to wait for)
        if pid == 0:
            time.sleep(POLL_S)
    _kill_others(signal.SIGKILL)


def _kill_others(signum: int) -> None:
    """Send ``signum`` to every process in the reaper's group but the reaper (Linux reads /proc; elsewhere
    the whole group is signalled, the reaper included)."""
    me, group = os.getpid(), os.getpgid(0)
    if not os.path.isdir("/proc/self"):
        os.killpg(group, signum)
        return
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
            if int(fields[2]) == group:
                os.kill(int(entry), signum)
        except (OSError, IndexError, ValueError):
            continue  # it ended meanwhile, or is not ours to signal


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
