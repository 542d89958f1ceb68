"""Helpers shared by the tests: example server configs, waiting on conditions, process checks."""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.examples.in_memory import NeedsAProcess, light_servers_in_memory

LIGHT = "mcpvisor.examples.light_server"
SDK = "mcpvisor.examples.sdk_server"
TESTS = Path(__file__).resolve().parent
WAIT_S = 30.0
"""Bound on anything a test waits for; generous for a slow shared machine."""


def light(name: str, *args: str, **fields: object) -> McpServerConfig:
    """A stdlib example server (starts in about 30 ms)."""
    return McpServerConfig.model_validate(
        {"command": sys.executable, "args": ["-m", LIGHT, "--name", name, *args], **fields}
    )


def light_after_gate(name: str, gate: Path, *args: str) -> dict[str, Any]:
    """The entry of a light server (``args``: its options) whose start is held until the file ``gate`` exists: its
    process runs at once, and its handshake waits (a start that ends when the test says)."""
    script = (
        "import os, pathlib, sys, time\n"
        f"while not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.02)\n"
        f"os.execv(sys.executable, [sys.executable, '-m', {LIGHT!r}, '--name', {name!r}, *{list(args)!r}])"
    )
    return {"command": sys.executable, "args": ["-c", script]}


def sdk(name: str, *args: str, **fields: object) -> McpServerConfig:
    """An SDK-based example server (about a second to start)."""
    return McpServerConfig.model_validate(
        {"command": forked_python(), "args": ["-m", SDK, "--name", name, *args], **fields}
    )


def in_memory_unless_a_process_is_needed(name: str, cfg: McpServerConfig) -> AbstractAsyncContextManager[Any] | None:
    """``in_memory`` for a protocol-level test: light servers in memory, but an entry whose options are about
    its process (a marker file with the PID, a crash, stderr... :data:`NEEDS_A_PROCESS`) is spawned."""
    try:
        return light_servers_in_memory(name, cfg)
    except NeedsAProcess:
        return None


async def wait_until(condition: Callable[[], bool], timeout_s: float = WAIT_S, what: str = "condition") -> None:
    """Poll ``condition`` until it holds, failing after ``timeout_s`` with an error that says ``what`` it waited for."""
    try:
        with anyio.fail_after(timeout_s):
            while not condition():  # noqa: ASYNC110 - polling a condition that has no event
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}") from None


async def wait_woken(
    condition: Callable[[], bool],
    woken: Callable[[], anyio.Event],
    *,
    seen: Callable[[], str],
    timeout_s: float = WAIT_S,
) -> None:
    """Wait until ``condition`` holds, checking it whenever ``woken()`` (a recorder's current "something came"
    event) is set; a timeout fails with what was ``seen``."""
    try:
        with anyio.fail_after(timeout_s):
            while not condition():
                await woken().wait()
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s:g} s; {seen()}") from None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):  # gone (the read of a process that exits meanwhile fails with ESRCH)
        return False


def marker_pids(path: Path) -> list[int]:
    """PIDs recorded by servers started with ``--marker path``."""
    if not path.exists():
        return []
    return [int(line.split()[0]) for line in path.read_text().splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def http_server(
    name: str, *args: str, transport: str = "streamable-http", port: int | None = None
) -> AsyncIterator[str]:
    """Run the SDK example server over HTTP on loopback (a free port unless given); yields its URL."""
    port = port or free_port()
    process = await anyio.open_process(
        [forked_python(), "-m", SDK, "--name", name, "--transport", transport, "--port", str(port), *args],
        stdout=None,
        stderr=None,
    )
    path = "/mcp" if transport == "streamable-http" else "/sse"
    try:
        with anyio.fail_after(WAIT_S):
            while True:
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.05)
                    continue
                await stream.aclose()
                break
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()
        await process.aclose()


_forked: Path | None = None


def forked_python() -> str:
    """An executable that runs ``-m MODULE ARGS...`` as this Python would, forked from a process of this
    worker's that has already imported the package and the SDK (``tests/cli_forkserver.py`` says what that
    does and does not prove). For the ``mcpvisor`` commands and the SDK-based example servers; started on
    first use, ended with the worker."""
    global _forked
    if _forked is None:
        folder = Path(tempfile.mkdtemp(prefix="mcpvisor-forked-"))
        sock = folder / "sock"
        server = subprocess.Popen(
            [sys.executable, str(TESTS / "cli_forkserver.py"), str(sock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert server.stdout is not None
        if server.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the fork server did not start (exit code {server.wait()})")
        shim = " ".join(shlex.quote(part) for part in (sys.executable, "-S", "-E", str(TESTS / "cli_forked.py")))
        for name, module in (("python", ""), ("mcpvisor", "-m mcpvisor ")):
            (folder / name).write_text(f'#!/bin/sh\nexec {shim} {shlex.quote(str(sock))} {module}"$@"\n')
            (folder / name).chmod(0o755)

        def stop() -> None:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(timeout=WAIT_S)
            shutil.rmtree(folder, ignore_errors=True)

        atexit.register(stop)
        _forked = folder
    return str(_forked / "python")


def mcpvisor_command() -> str:
    """An executable that runs ``mcpvisor ARGS...`` as ``python -m mcpvisor ARGS...`` would (forked: see
    :func:`forked_python`)."""
    return str(Path(forked_python()).with_name("mcpvisor"))


async def paste_elsewhere(command: str, env: dict[str, str], folder: Path) -> subprocess.CompletedProcess[bytes]:
    """``command`` as a user pastes it in another terminal: in ``folder`` (made), with ``env`` but no
    ``MCPVISOR_HOME`` (only what the command says), ``mcpvisor`` on the ``PATH``."""
    await anyio.Path(folder).mkdir(parents=True, exist_ok=True)
    another = {**os.environ, **env, "PATH": f"{Path(mcpvisor_command()).parent}{os.pathsep}{os.environ['PATH']}"}
    another.pop("MCPVISOR_HOME", None)
    another.pop("DISPLAY", None)
    return await anyio.run_process(["sh", "-c", command], cwd=folder, env=another, check=False)


def python_for(module: str) -> str:
    """The Python to start example server ``module`` with: forked for the SDK-based ones (a second of
    imports each), this one for the stdlib light server (30 ms)."""
    return sys.executable if module == LIGHT else forked_python()


_RAW_SERVER = """
import json, sys, time
def send(message):
    print(json.dumps({{"jsonrpc": "2.0", **message}}), flush=True)
{answers}
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, params = msg.get("method"), msg.get("params") or {{}}
    if method == "initialize":
        result = {{"protocolVersion": params["protocolVersion"], "capabilities": {capabilities!r},
                  "serverInfo": {{"name": {name!r}, "version": "1"}}}}
    else:
        result = answer(method, params)
    if result is not None:
        send({{"id": msg["id"], "result": result}})
{after}
"""


def raw_server(name: str, answers: str, *, capabilities: dict[str, Any] | None = None, after: str = "") -> str:
    """The source of a stdio MCP server written without the SDK, to send what no example server would: it answers
    ``initialize`` as server ``name`` offering ``capabilities`` (default: tools), and every other request with
    ``answer(method, params)``, a function the source ``answers`` defines; ``after`` runs once its input ends. An
    answer of ``None`` sends none: the source answers later itself with ``send(message)`` (it may ask its client
    first: the client's answer comes to ``answer(None, {})``, the message read being ``msg``)."""
    return _RAW_SERVER.format(
        name=name, capabilities=capabilities or {"tools": {}}, answers=textwrap.dedent(answers), after=after
    )
