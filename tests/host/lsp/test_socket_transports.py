"""Language servers spoken to over a socket (``transport: "tcp"`` or ``"socket"``), with the real python-lsp-server:
one mcpvisor starts and stops itself (``pylsp --tcp``), one already running that only the connection ends, one
behind a Unix socket, and one nobody listens for."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from mcpvisor.host.lsp.process import connect_unix
from tests.helpers import free_port, pid_alive, wait_until
from tests.host.lsp.test_lsp_host import language_server_processes, session

PYLSP_TCP = [sys.executable, "-m", "pylsp", "--tcp", "--host", "127.0.0.1"]

RELAY = """
import asyncio, sys

async def serve(reader, writer):
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pylsp", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )

    async def pipe(source, sink):
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
        sink.close()

    await asyncio.gather(pipe(reader, server.stdin), pipe(server.stdout, writer))
    await server.wait()

async def main():
    async with await asyncio.start_unix_server(serve, path=sys.argv[1]):
        print("listening", flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


def tcp_entry(port: int, **more: Any) -> dict[str, Any]:
    return {"transport": "tcp", "socket": {"port": port}, "extensionToLanguage": {".py": "python"}, **more}


def definition_of(found: dict[str, Any]) -> list[tuple[str, int]]:
    return [(loc["file"], loc["line"]) for loc in found["locations"]]


async def test_a_tcp_server_mcpvisor_starts_answers_and_is_stopped_with_the_host(tmp_path: Path) -> None:
    port = free_port()
    entry = tcp_entry(port, command=PYLSP_TCP[0], args=[*PYLSP_TCP[1:], "--port", str(port), "-v"])
    async with session(tmp_path, user={"lspServers": {"python": entry}}, watch=False) as s:
        found = await s.ok("go_to_definition", file="service.py", line=3, character=6)
        assert definition_of(found) == [("models.py", 9)]
        [status] = (await s.ok("status"))["servers"]
        assert status["state"] == "ready"
        assert status["pid"] == s.pid("python")
        processes = language_server_processes(s.layout.root)  # pylsp, and the reaper in front of it
        assert processes
        assert all("--tcp" in process.cmdline() for process in processes)
    assert not any(pid_alive(process.pid) for process in processes)  # pylsp --tcp serves on after 'exit'...
    log = (tmp_path / "logs" / "lsp-python.log").read_text()
    assert f"Serving PythonLSPServer on (127.0.0.1, {port})" in log  # its output reaches its log


async def test_a_running_tcp_server_is_only_connected_to_and_serves_on_after_the_host(tmp_path: Path) -> None:
    port = free_port()
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    log = (tmp_path / "external.log").open("wb")
    command = [*PYLSP_TCP, "--port", str(port), "-vv"]
    async with await anyio.open_process(command, cwd=folder, stdout=log, stderr=log) as external:
        try:
            for round in (1, 2):  # the second host connects again: the server outlived the first
                async with session(tmp_path / f"host{round}", user={"lspServers": {"python": tcp_entry(port)}}) as s:
                    found = await s.ok("go_to_definition", file="service.py", line=3, character=6)
                    assert definition_of(found) == [("models.py", 9)]
                    [status] = (await s.ok("status"))["servers"]
                    assert status["state"] == "ready"
                    assert status.get("pid") is None
                assert external.returncode is None
        finally:
            external.terminate()
            log.close()
    heard = (tmp_path / "external.log").read_text()
    assert "'method': 'initialize'" in heard
    assert "'method': 'shutdown'" not in heard  # someone else's server is never asked to shut down
    assert "'method': 'exit'" not in heard


async def test_a_host_name_that_does_not_resolve_fails_at_once_saying_so(tmp_path: Path) -> None:
    entry = tcp_entry(2087) | {"socket": {"host": "no-such-host.invalid", "port": 2087}}
    async with session(tmp_path, user={"lspServers": {"python": entry}}, watch=False) as s:
        with anyio.fail_after(20):  # not the 30 s of its startupTimeout: the name will not resolve later either
            result = await s.call("hover", file="service.py", line=3, character=6)
        [content] = result.content
        assert "could not connect to no-such-host.invalid:2087: its host name does not resolve (" in getattr(
            content, "text", ""
        )
        assert "fix lspServers.python.socket" in getattr(content, "text", "")


async def test_a_server_behind_a_unix_socket_answers(tmp_path: Path) -> None:
    relay = tmp_path / "relay.py"
    relay.write_text(RELAY)
    path = tmp_path / "lsp.sock"
    async with await anyio.open_process([sys.executable, str(relay), str(path)]) as process:
        try:
            assert process.stdout is not None
            assert b"listening" in await process.stdout.receive()
            entry = {"transport": "socket", "socket": {"path": str(path)}, "extensionToLanguage": {".py": "python"}}
            entry["workspaceFolder"] = "/srv/checkout"  # the server's own folder, on its side: not looked for here
            async with session(tmp_path / "host", user={"lspServers": {"python": entry}}, watch=False) as s:
                found = await s.ok("go_to_definition", file="service.py", line=3, character=6)
                assert definition_of(found) == [("models.py", 9)]
        finally:
            process.terminate()


@pytest.mark.parametrize("connect", [connect_unix, anyio.connect_unix], ids=["mcpvisor", "anyio"])
async def test_a_unix_socket_stream_survives_a_read_cancelled_as_data_arrives(
    tmp_path: Path, connect: Callable[[str], Awaitable[anyio.abc.SocketStream]]
) -> None:
    """anyio's own Unix stream (asyncio backend) completes a future from the socket's readiness callback: a read
    cancelled in the loop pass where data arrived made that callback raise InvalidStateError (seen in a full run, a
    session ending as pylsp's relay closed). The stream a language server is reached by uses the loop's transport.
    (anyio's is run too, to show the test makes the race; once anyio's Unix stream no longer has it, that case
    fails, and :func:`connect_unix` may go back to ``anyio.connect_unix``.)"""
    path = str(tmp_path / "s.sock")
    errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: errors.append(context))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen()
        try:
            async with await connect(path) as stream:
                peer, _ = listener.accept()
                with peer:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(stream.receive)
                        await anyio.wait_all_tasks_blocked()
                        peer.send(b"x")  # readable in the next pass, whose callbacks first run this one:
                        loop.call_soon(tg.cancel_scope.cancel)  # the read is cancelled before its reader runs
                    await anyio.sleep(0.05)
        finally:
            loop.set_exception_handler(handler)
    if connect is anyio.connect_unix:
        assert [type(context.get("exception")) for context in errors] == [asyncio.InvalidStateError]
    else:
        assert errors == []


async def test_nobody_listening_fails_within_the_startup_timeout_naming_the_address_and_the_fix(
    tmp_path: Path,
) -> None:
    port = free_port()
    user = {"lspServers": {"python": tcp_entry(port, startupTimeout=1000)}}
    async with session(tmp_path, user=user, watch=False) as s:
        result = await s.call("hover", file="service.py", line=3, character=6)
        assert result.is_error
        [content] = result.content
        assert f"could not connect to 127.0.0.1:{port} within 1 s (connection refused)" in getattr(content, "text", "")
        assert "start it, or give it a command to run (see lspServers.python.socket)" in getattr(content, "text", "")


async def test_a_started_server_that_exits_before_it_listens_says_so_with_its_last_words_and_its_log(
    tmp_path: Path,
) -> None:
    port = free_port()
    script = "import sys; print('no licence for this machine', file=sys.stderr); sys.exit(3)"
    entry = tcp_entry(port, command=sys.executable, args=["-c", script])
    async with session(tmp_path, user={"lspServers": {"python": entry}}, watch=False) as s:
        result = await s.call("hover", file="service.py", line=3, character=6)
        assert result.is_error
        [content] = result.content
        log = s.host.lsp.manager.servers()["python"].log_path
        assert getattr(content, "text", "").endswith(
            f"exited with code 3 before it listened on 127.0.0.1:{port}: no licence for this machine; see its log {log}"
        )


async def test_a_server_that_closes_the_connection_is_reported_as_such(tmp_path: Path) -> None:
    """An external server that goes away while connected: the status says the connection closed."""
    port = free_port()
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    async with session(tmp_path / "host", user={"lspServers": {"python": tcp_entry(port)}}, watch=False) as s:
        async with await anyio.open_process([*PYLSP_TCP, "--port", str(port)], cwd=folder) as external:
            await s.ok("hover", file="service.py", line=3, character=6)
            external.kill()
        await wait_until(
            lambda: s.host.lsp.manager.servers()["python"].state == "failed", what="the server to be seen gone"
        )
        assert "closed the connection" in (s.host.lsp.manager.servers()["python"].last_error or "")


@pytest.mark.parametrize(
    ("socket", "problem"),
    [
        (None, "socket: required with transport 'tcp'"),
        ({"host": "127.0.0.1"}, "port 1-65535"),
        ({"port": 70000}, "port 1-65535"),
        ({"port": "2087"}, "port 1-65535"),
        ({"path": ""}, "the Unix socket's path is empty"),
        ({"port": 2087, "tls": True}, 'written as {"host": "127.0.0.1", "port": 2087}'),
    ],
)
def test_a_socket_that_cannot_be_reached_is_refused_with_the_entry(socket: Any, problem: str) -> None:
    from mcpvisor.host.lsp.config import LspServerConfig

    entry = {"transport": "tcp", "extensionToLanguage": {".py": "python"}} | ({"socket": socket} if socket else {})
    with pytest.raises(ValueError, match="socket: ") as caught:
        LspServerConfig.from_entry(entry)
    assert problem in str(caught.value)
