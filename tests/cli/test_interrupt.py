"""Ctrl-C before a command runs: while its modules load and while typer builds its commands it printed Python's
traceback (exit code 1 or a death by SIGINT); it ends as Ctrl-C does later, with exit code 130 and no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import WAIT_S

# Raised where a Ctrl-C lands at that moment: in the import of typer (the command's modules loading), or in
# typer's building of the click commands from the app.
INTERRUPTED_IMPORT = """
import sys
class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupting())
"""
INTERRUPTED_BUILD = """
import sys
import typer.main
def interrupted(*args, **kwargs):
    raise KeyboardInterrupt
typer.main.get_command = interrupted
"""
INTERRUPTED_CALLBACK = """
import sys, weakref
class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            sys.meta_path.remove(self)
            class Lock: pass
            lock = Lock()
            def callback(_):
                raise KeyboardInterrupt
            ref = weakref.ref(lock, callback)
            del lock  # (Python says a KeyboardInterrupt raised in a weakref callback, and ignores it)
        return None
sys.meta_path.insert(0, Interrupting())
"""


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    return {**os.environ, "HOME": str(home), "MCPVISOR_HOME": str(home / ".mcpvisor")}


@pytest.mark.parametrize(
    "interrupt",
    [INTERRUPTED_IMPORT, INTERRUPTED_CALLBACK, INTERRUPTED_BUILD],
    ids=["loading", "loading, in a weakref callback", "building"],
)
def test_ctrl_c_before_the_command_runs_exits_130_without_a_traceback(tmp_path: Path, interrupt: str) -> None:
    code = f"{interrupt}\nsys.argv = ['mcpvisor', 'mcp', 'list']\nfrom mcpvisor.cli.entry import main\nmain()\n"
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True, timeout=WAIT_S
    )
    assert "Traceback" not in done.stderr
    assert done.returncode == 130


@pytest.mark.parametrize("after_s", [0.0, 0.05, 0.1])
def test_a_real_ctrl_c_while_the_command_loads_prints_no_traceback(tmp_path: Path, after_s: float) -> None:
    """The console script itself, interrupted once it has loaded pydantic's compiled core (the command's modules
    are loading then; about a second of it is left on a 2-core machine), or a little later: never a traceback."""
    script = Path(sys.executable).with_name("mcpvisor")
    process = subprocess.Popen(
        [str(script), "mcp", "list"], env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + WAIT_S
    while "pydantic_core" not in maps.read_text() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(after_s)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=WAIT_S)
    assert "Traceback" not in err
    assert process.returncode in (0, 130)  # done before the signal (a fast machine), or interrupted
