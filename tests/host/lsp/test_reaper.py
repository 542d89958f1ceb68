"""The reaper in front of a language server: it mirrors the server's exit and leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from mcpvisor.host.lsp import reaper
from tests.helpers import WAIT_S, pid_alive, wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the reaper is used on Linux only")

REAPER = [sys.executable, "-I", "-S", str(Path(reaper.__file__))]
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print({}, flush=True); time.sleep(60)"
"""Python code for a process that ignores SIGTERM and says so by printing something."""


async def run(*command: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return await anyio.run_process([*REAPER, *command], input=stdin, check=False, start_new_session=True)


@pytest.mark.parametrize(
    ("code", "exit_code"),
    [("raise SystemExit(3)", 3), ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL)],
)
async def test_the_reaper_exits_with_the_server_s_exit_code_or_is_ended_by_its_signal(
    code: str, exit_code: int
) -> None:
    assert (await run(sys.executable, "-c", code)).returncode == exit_code


async def test_the_server_has_the_reaper_s_stdin_and_stdout_to_itself() -> None:
    done = await run(sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read().upper())", stdin=b"ping")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"PING", b"")


async def test_a_command_that_cannot_run_is_one_line_and_exit_code_127_or_126(tmp_path: Path) -> None:
    missing = await run(str(tmp_path / "missing"))
    assert (missing.returncode, missing.stderr) == (
        127,
        f"cannot start {tmp_path / 'missing'}: No such file or directory\n".encode(),
    )
    (tmp_path / "not-executable").write_text("#!/bin/sh\n")
    refused = await run(str(tmp_path / "not-executable"))
    assert refused.returncode == 126
    assert refused.stderr.decode().startswith(f"cannot start {tmp_path / 'not-executable'}: ")


async def test_what_the_server_leaves_behind_is_killed_when_it_exits() -> None:
    spawner = (
        "import subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', {STUBBORN.format('1')!r}], stdout=subprocess.PIPE,"
        " stderr=subprocess.DEVNULL)\n"
        "child.stdout.readline()\n"
        "print(child.pid, flush=True)\n"
    )
    done = await run(sys.executable, "-c", spawner)
    assert done.returncode == 0
    await wait_until(lambda: not pid_alive(int(done.stdout)), what="the grandchild to be gone")


async def test_sigterm_to_the_reaper_stops_the_group_even_a_server_that_ignores_it() -> None:
    process = await anyio.open_process(
        [*REAPER, sys.executable, "-c", STUBBORN.format("__import__('os').getpid()")], start_new_session=True
    )
    async with process:
        assert process.stdout is not None
        with anyio.fail_after(WAIT_S):
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive()
            os.kill(process.pid, signal.SIGTERM)  # as the kernel does when the host dies
            assert await process.wait() == -signal.SIGTERM
    await wait_until(lambda: not pid_alive(int(line)), what="the server to be gone")
