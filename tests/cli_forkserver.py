"""The ``mcpvisor`` commands and the SDK-based example servers the tests run, as real processes forked from
one that has already imported the package and the ``mcp`` SDK: ``python tests/cli_forkserver.py SOCKET``,
one per pytest worker (started by ``tests.helpers.forked_python``), ending when its standard input closes.

Why: such a process's start is mostly importing the SDK (about 0.6 CPU-s, 0.9 under coverage), and the
suite runs a couple of hundred of them on a 2-core machine. A forked one is still its own process — its
own pid, file descriptors, working folder, environment, umask, signals and exit status — reached through
``tests/cli_forked.py``, a stdlib-only stand-in started the way ``python -m MODULE`` would be, which hands
over the module, its arguments, environment, folder, umask and standard streams (``SCM_RIGHTS``), passes
on the signals it gets and exits as the process did. A stand-in that dies (SIGKILL) takes its process
with it.

What a forked process does not prove — the interpreter starting, the entry point, which modules a command
imports — stays proven by the tests that start ``python -m mcpvisor`` themselves (``tests/cli/test_help.py``,
``tests/host/settings/test_no_sdk_import.py``, the terminal tests of ``tests/shell/test_line_editor.py``).
The stdlib example server (``light_server``, 30 ms to start) is always started for real.

Protocol (``AF_UNIX``, ``SOCK_SEQPACKET``): the stand-in sends one JSON message ``{"module", "argv",
"env", "cwd", "umask"}`` with its fds 0, 1 and 2; the server answers ``pid N`` once forked and
``exit STATUS`` (a wait status) when the process has ended.
"""

from __future__ import annotations

import atexit
import importlib
import io
import json
import os
import pkgutil
import runpy
import selectors
import signal
import socket
import sys
import traceback
from typing import Any

MAX_MESSAGE = 1 << 20
"""Bound on one request (argv and environment)."""
REQUEST_TIMEOUT_S = 5.0
"""How long a stand-in that connected may take to send its request."""


def preload() -> None:
    """Import every module a command may import lazily, so that the forked command finds them loaded."""
    import mcpvisor

    for module in pkgutil.walk_packages(mcpvisor.__path__, "mcpvisor."):
        # Not what runs as __main__ (the command line, the example servers): runpy runs those afresh.
        if module.name != "mcpvisor.__main__" and not module.name.startswith("mcpvisor.examples."):
            importlib.import_module(module.name)
    import mcp.server.mcpserver  # noqa: F401 - what the SDK-based example servers are built on
    import uvicorn  # noqa: F401

    try:
        import uvloop  # noqa: F401 - `serve` runs on it where it is installed
    except ImportError:
        pass


def main() -> None:
    path = sys.argv[1]
    preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    children: dict[int, tuple[socket.socket, int]] = {}  # pidfd -> (stand-in connection, pid)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if selector.get_map().get(key.fd) is not key:
                continue  # taken off earlier in this round (its process ended and its stand-in left at once)
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):
                    for connection, pid in children.values():
                        _kill(pid)
                        connection.close()
                    return
            elif key.data == "accept":
                connection, _ = listener.accept()
                started = _start(connection, listener, selector)
                if started is None:
                    connection.close()
                    continue
                pidfd, pid = started
                children[pidfd] = (connection, pid)
                selector.register(pidfd, selectors.EVENT_READ, "exit")
                if connection.fileno() >= 0:
                    selector.register(connection, selectors.EVENT_READ, ("gone", pidfd))
            elif key.data == "exit":
                pidfd = key.fd
                connection, pid = children.pop(pidfd)
                selector.unregister(pidfd)
                if connection.fileno() >= 0 and connection in selector.get_map():
                    selector.unregister(connection)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                try:
                    connection.send(f"exit {status}".encode())
                except OSError:
                    pass  # the stand-in is gone
                connection.close()
            else:  # the stand-in's end closed before its process ended: it was killed, so is the process
                selector.unregister(key.fileobj)
                child = children.get(key.data[1])
                if child is not None:  # not reaped yet, so its pid is still its own
                    _kill(child[1])


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _start(
    connection: socket.socket, listener: socket.socket, selector: selectors.BaseSelector
) -> tuple[int, int] | None:
    connection.settimeout(REQUEST_TIMEOUT_S)  # a stand-in stopped before it asked holds up no other
    try:
        message, fds, _, _ = socket.recv_fds(connection, MAX_MESSAGE, 3)
    except OSError:  # TimeoutError included
        return None
    connection.settimeout(None)
    try:
        request = json.loads(message)
        if len(fds) != 3 or not isinstance(request, dict):
            raise ValueError("not a request")
    except ValueError:  # a stand-in gone before it asked, or not one: never the server's end
        for fd in fds:
            os.close(fd)
        return None
    pid = os.fork()
    if pid == 0:
        try:
            selector.close()
            listener.close()
            connection.close()
            code = _run_command(request, fds)
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    try:
        connection.send(f"pid {pid}".encode())
    except OSError:  # its stand-in left before it started: it goes too (and is reaped as any other)
        _kill(pid)
        connection.close()
    return pidfd, pid


def _run_command(request: dict[str, Any], fds: list[int]) -> int:
    """In the forked child: become ``python -m MODULE ARGS...`` as the stand-in was asked, run it, and say its
    exit code."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    _fresh_standard_streams()
    sys.argv = ["-m", *request["argv"]]  # runpy puts the module's file first, as `python -m` does

    code = 0
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # as Python ends on an uncaught KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    _finish()
    return code


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def _finish() -> None:
    """What an interpreter does on the way out: exit handlers (coverage saves its data there), then flush."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _fresh_standard_streams() -> None:
    """Standard streams as a new interpreter would make them for these fds and this environment."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    encoding, _, errors = (os.environ.get("PYTHONIOENCODING") or "utf-8").partition(":")

    def stream(fd: int, mode: str, stream_errors: str, *, line_buffered: bool = False) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        tty = raw.isatty() or line_buffered
        if mode == "r":
            return io.TextIOWrapper(io.BufferedReader(raw), encoding=encoding, errors=stream_errors, line_buffering=tty)
        return io.TextIOWrapper(
            io.BufferedWriter(raw),
            encoding=encoding,
            errors=stream_errors,
            line_buffering=tty or unbuffered,
            write_through=unbuffered,
        )

    sys.stdin = stream(0, "r", errors or "strict")
    sys.stdout = stream(1, "w", errors or "strict")
    sys.stderr = stream(2, "w", "backslashreplace", line_buffered=True)  # as Python's always is


if __name__ == "__main__":
    main()
