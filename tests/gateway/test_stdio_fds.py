"""fd 0 and fd 1 of ``serve`` over stdio, each case in a child process (fd 1 is the test worker's own wire)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

LOOPS = ["asyncio", "uvloop"]


def _run(code: str, loop: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        if LOOP == "uvloop":
            import uvloop; uvloop.run(main())
        else:
            asyncio.run(main())
        """
    )
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-c", f"LOOP = {loop!r}\n" + script], text=True, timeout=30, **kwargs
    )


@pytest.mark.parametrize("loop", LOOPS)
def test_a_socketpair_stdio_is_served_on_the_loop(loop: str) -> None:
    """A Node client's stdin and stdout are a socketpair each (libuv): both are read and written by the loop, so a
    client that stops reading cannot hold the stop and requests read before EOF are answered."""
    code = """
        import asyncio, sys
        from mcpvisor.gateway import stdio
        async def main():
            async with stdio._stdin_on_the_loop() as lines, stdio._stdout_on_the_loop(lambda: None) as output:
                print(lines is not None, output is not None, file=sys.stderr)
    """
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    with a, b, c, d:
        done = _run(code, loop, stdin=a.fileno(), stdout=c.fileno(), stderr=subprocess.PIPE)
    assert done.stderr.split()[-2:] == ["True", "True"], done.stderr


@pytest.mark.parametrize("loop", LOOPS)
def test_fd_1_is_not_pointed_at_another_file_once_the_client_is_gone(loop: str, tmp_path: object) -> None:
    """The transport closes the duplicate of fd 1 when the client's end is gone; restoring fd 1 from its number then
    pointed fd 1 at whatever file took that number meanwhile."""
    code = f"""
        import asyncio, fcntl, os, sys
        from mcpvisor.gateway import stdio
        r, w = os.pipe(); os.dup2(w, 1); os.close(w)
        r = fcntl.fcntl(r, fcntl.F_DUPFD, 50); os.close(3)
        async def main():
            async with stdio._stdout_on_the_loop(lambda: None) as out:
                os.close(r)
                await out.write("x" * 100000 + "\\n")
                for _ in range(5): await asyncio.sleep(0.01)
                global other; other = open({str(tmp_path)!r} + "/other.log", "w")
            print(os.readlink("/proc/self/fd/1"), file=sys.stderr)
    """
    done = _run(code, loop, stderr=subprocess.PIPE)
    assert not done.stderr.strip().endswith("other.log"), done.stderr


@pytest.mark.parametrize("loop", LOOPS)
def test_a_client_that_reads_nothing_of_a_waiting_answer_is_cut_off_saying_why(loop: str) -> None:
    """Answers finishing while a client reads nothing waited in memory behind the write it did not take, without
    bound (300 calls of 1 MiB each held 400 MB, 1,000 of 64 MiB could be held); now the client is cut off, as an
    HTTP connection is, and told gone: the gateway ends as when it closes its end."""
    code = """
        import asyncio, logging, os, sys
        from mcpvisor.gateway import stdio
        logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
        stdio.WRITE_STALL_S = 0.3
        r, w = os.pipe(); os.dup2(w, 1); os.close(w)  # nothing reads r
        async def main():
            gone = asyncio.Event()
            async with stdio._stdout_on_the_loop(gone.set) as out:
                await asyncio.wait_for(out.write("x" * 1_000_000 + "\\n"), 10)
                await out.write("dropped\\n")  # (at once)
                await asyncio.wait_for(gone.wait(), 10)
            print("gone", file=sys.stderr)
    """
    done = _run(code, loop, stderr=subprocess.PIPE)
    assert "cutting off the client: it read nothing of stdout for 0.3 s while answers waited" in done.stderr
    assert done.stderr.split()[-1] == "gone", done.stderr
