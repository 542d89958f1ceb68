"""``mcpvisor serve`` (:func:`run_gateway`): one workspace or one per client, over HTTP and stdio, in
process and as a subprocess, with real example servers (SPEC §0.3, §9 "Gateway")."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.subscriptions import ToolsListChanged

from mcpvisor.cli.serve import run_gateway
from mcpvisor.core.errors import ConfigError
from mcpvisor.gateway.listen import bind_http_socket
from mcpvisor.host.host import HostOptions
from tests.gateway.test_gateway import next_event, save, server, text_of, tool_names, wait_for_port
from tests.gateway.test_workspaces import client_for, make_setup
from tests.helpers import LIGHT, WAIT_S, free_port, marker_pids, mcpvisor_command, pid_alive, wait_until
from tests.layout import make_layout


@asynccontextmanager
async def gateway_process(argv: list[str], env: dict[str, str], errlog: Path) -> AsyncIterator[anyio.abc.Process]:
    """``argv`` (an ``mcpvisor serve``) as a subprocess, its stderr written to ``errlog``; killed on the way out if
    the test left it running."""
    with errlog.open("w") as err:
        process = await anyio.open_process(argv, env={**os.environ, **env}, stderr=err)
        async with process:
            try:
                yield process
            finally:
                if process.returncode is None:
                    process.kill()
                    with anyio.CancelScope(shield=True):
                        await process.wait()


def test_serve_starts_its_host_before_it_loads_the_sdk() -> None:
    """``mcpvisor serve`` gets as far as starting its servers without the SDK or the web stack: the host's first
    starts load them in a worker thread, each spawning its server first (``tests/core/test_spawn_ahead.py``), so the
    servers start while the imports run."""
    code = (
        "import sys\n"
        "import mcpvisor.cli.main, mcpvisor.cli.serve, mcpvisor.cli.serve_command, mcpvisor.host.host\n"
        "heavy = ('mcp', 'mcp_types', 'starlette', 'uvicorn', 'mcpvisor.gateway.server')\n"
        "print(sorted(m for m in sys.modules if m in heavy or m.startswith(tuple(h + '.' for h in heavy))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=WAIT_S)
    assert out.stdout.strip() == "[]"


_SERVE_OVER_STDIO = """
import json, sys
from mcpvisor.core import processes

spawns = []
spawn = processes.spawn


async def recording(command, args, **options):
    spawns.append("mcp" not in sys.modules)
    return await spawn(command, args, **options)


processes.spawn = recording
from mcpvisor.cli.main import app

try:
    app(["serve", "--workspace", sys.argv[1]])
except SystemExit:
    pass
print("spawned before the SDK loaded:", json.dumps(spawns), file=sys.stderr)
"""


def test_serve_over_stdio_spawns_its_servers_before_the_sdk_loads(tmp_path: Path) -> None:
    """The whole command, in a fresh interpreter, its client gone at once (stdin closed): the host's start spawns
    its server while the SDK loads (the stdio streams are the SDK's: imported only once the host entered)."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    save(layout.paths.user, {"mcpServers": {"a": server("a", "--marker", str(marker))}})
    out = subprocess.run(
        [sys.executable, "-c", _SERVE_OVER_STDIO, str(layout.root)],
        env={**os.environ, **layout.env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
    )
    assert "spawned before the SDK loaded: [true]" in out.stderr, out.stderr
    assert out.returncode == 0  # stdin at /dev/null is a client gone (uvloop used to abort the process: 134)
    assert len(marker_pids(marker)) == 1


def test_serve_over_stdio_with_no_client_at_all_ends_cleanly(tmp_path: Path) -> None:
    """stdin at /dev/null (a service started with no input): the gateway ends as when its client left; uvloop
    aborted the whole process (SIGABRT, exit 134) when the gateway asked it to poll that device."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    save(layout.paths.user, {"mcpServers": {"a": server("a", "--marker", str(marker))}})
    out = subprocess.run(
        [mcpvisor_command(), "serve", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    [pid] = marker_pids(marker)
    assert not pid_alive(pid)


@pytest.mark.parametrize(
    ("given", "flag"),
    [
        (["--max-sessions", "5"], "--max-sessions"),
        (["--max-sessions", "1000"], "--max-sessions"),  # (its default value: given all the same)
        (["--session-idle-timeout", "60"], "--session-idle-timeout"),
        (["--max-connections", "10"], "--max-connections"),
        (["--header-timeout", "3"], "--header-timeout"),
    ],
)
def test_an_http_limit_given_over_stdio_is_refused_as_its_sibling_flags_are(
    tmp_path: Path, given: list[str], flag: str
) -> None:
    """Before, a limit of the HTTP listener given without --http was taken without a word and did nothing, where
    --no-auth, --token-file and --per-client-workspaces say that they need --http."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    save(layout.paths.user, {"mcpServers": {"a": server("a", "--marker", str(marker))}})
    out = subprocess.run(
        [mcpvisor_command(), "serve", *given, "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
    )
    assert out.returncode == 1
    said = " ".join(out.stderr.split())
    assert f"error: {flag} applies to --http" in said, said
    assert not marker.exists()  # refused before any server started


def test_serve_over_stdio_answers_a_line_that_is_no_json_rpc_message(tmp_path: Path) -> None:
    """Before, the SDK's reader dropped such a line unanswered: a client whose request could not be read (its
    params a string) waited for its answer for ever. A malformed notification has no id to answer: nothing."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.user, {"mcpServers": {}})
    opening = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": opening}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        "garbage",
        json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": "x"}),
        "42",
        json.dumps([{"jsonrpc": "2.0", "id": 2, "method": "ping"}]),
        json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}),
        json.dumps({"jsonrpc": "2.0", "id": 5, "method": 7}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": "x"}),
        "",
        json.dumps({"jsonrpc": "2.0", "id": 9, "result": []}),  # a bad answer to the gateway: never answered
        json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}),
        json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": None}),  # null params are none
        json.dumps({"jsonrpc": "2.0", "id": 77, "method": "ping"}),
    ]
    with subprocess.Popen(
        [mcpvisor_command(), "serve", "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write("\n".join(lines) + "\n")
        process.stdin.flush()
        answers: list[dict[str, Any]] = []
        while not answers or answers[-1].get("id") != 77:
            answers.append(json.loads(process.stdout.readline()))
        process.stdin.close()
        process.wait(timeout=WAIT_S)
    assert answers[-2] == {"jsonrpc": "2.0", "id": 3, "result": {"tools": []}}
    refused = [(a["id"], a["error"]["code"], a["error"]["message"]) for a in answers[1:-2]]
    assert refused[:5] == [
        (None, -32700, "Parse error: the line is not JSON (expected value at line 1 column 1)"),
        (4, -32600, "'params' must be an object"),
        (None, -32600, "a line must be one JSON-RPC message (an object)"),
        (None, -32600, "batches are not supported: send one JSON-RPC message per line"),
        (None, -32600, "an 'id' must be a string or an integer"),
    ]
    assert refused[5][:2] == (5, -32600)
    assert refused[5][2] == "not a JSON-RPC request: method: Input should be a valid string"
    assert len(refused) == 6
    assert answers[-1] == {"jsonrpc": "2.0", "id": 77, "result": {}}


async def test_run_gateway_over_http_serves_until_cancelled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.user, {"mcpServers": {"a": server("a")}})
    port = free_port()
    options = HostOptions(env=layout.env, workspace=layout.root, watch=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(run_gateway, options, http=("127.0.0.1", port)))
        await wait_for_port(port)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            assert await tool_names(client) == {"mcp__a__echo"}
        # One workspace only: a client naming another folder is refused, not served these tools.
        other = layout.root.parent
        body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        async with httpx2.AsyncClient() as http:
            refused = await http.post(
                f"http://127.0.0.1:{port}/mcp",
                json=body,
                headers={"X-Mcpvisor-Workspace": str(other), "Accept": "application/json, text/event-stream"},
            )
        assert refused.status_code == 400
        assert "--per-client-workspaces" in refused.text
        tg.cancel_scope.cancel()
    assert f"mcpvisor gateway: serving 1 tool on http://127.0.0.1:{port}/mcp" in capsys.readouterr().err


async def test_a_server_slow_to_start_holds_no_client_up_and_comes_in_with_list_changed(tmp_path: Path) -> None:
    # A client gives its server tens of seconds to answer initialize: one slow server must not spend them.
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    late = {"command": "sh", "args": ["-c", f"sleep 4 && exec {sys.executable} -m {LIGHT} --name late"]}
    hung = {**server("hung", "--hang-on-initialize"), "discoveryTimeoutMs": 120_000}
    save(layout.paths.user, {"mcpServers": {"a": server("a"), "late": late, "hung": hung}})
    port = free_port()
    options = HostOptions(env=layout.env, workspace=layout.root, watch=False, startup_wait_s=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(run_gateway, options, http=("127.0.0.1", port)))
        with anyio.fail_after(60):  # well before the hung server's 120 s
            await wait_for_port(port)
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                assert await tool_names(client) == {"mcp__a__echo"}
                async with client.listen(tools_list_changed=True) as subscription:
                    while "mcp__late__echo" not in await tool_names(client):
                        assert isinstance(await next_event(subscription), ToolsListChanged)
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("http", [False, True])
async def test_a_stop_while_a_server_still_starts_stops_at_once_without_waiting_for_it(
    tmp_path: Path, http: bool
) -> None:
    """SIGTERM (``stop``) while a server still handshakes: there is no call in flight to let finish, yet the gateway
    went on waiting for the start (up to its start-up wait, 5 s for ``serve``), then served and only then stopped; a
    client that kills its server 2 s after SIGTERM (the SDK's) killed the gateway meanwhile, its servers unstopped."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    hung = {**server("hung", "--hang-on-initialize", "--marker", str(marker)), "discoveryTimeoutMs": 600_000}
    save(layout.paths.user, {"mcpServers": {"hung": hung}})
    options = HostOptions(env=layout.env, workspace=layout.root, startup_wait_s=600)
    stop = anyio.Event()
    address = ("127.0.0.1", free_port()) if http else None
    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(run_gateway, options, http=address, token=None, stop=stop))
            await wait_until(lambda: bool(marker_pids(marker)), what="the server to be spawned")
            stop.set()
    [pid] = marker_pids(marker)
    assert not pid_alive(pid)


async def test_run_gateway_on_a_busy_port_fails_before_starting_any_server(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    save(layout.paths.user, {"mcpServers": {"a": server("a", "--marker", str(marker))}})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot serve on 127.0.0.1:{port}"):
            await run_gateway(HostOptions(env=layout.env, workspace=layout.root), http=("127.0.0.1", port))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("http://127.0.0.1:8931", "give HOST:PORT or PORT, not a URL: --http 127.0.0.1:8931"),
        ("http://localhost:8931/mcp", "give HOST:PORT or PORT, not a URL: --http localhost:8931"),
        ("badhost.invalid:80", "the address 'badhost.invalid' could not be resolved"),
        ("localhost:0", "port 0 picks no port: a port must be given (1 to 65535)"),
        ("0", "port 0 picks no port: a port must be given (1 to 65535)"),
        ("localhost:", "'localhost:' gives no port: give HOST:PORT or PORT, e.g. --http localhost:8080"),
        ("localhost", "'localhost' gives no port: give HOST:PORT or PORT, e.g. --http localhost:8080"),
        ("localhost:http", "the port 'http' of 'localhost:http' is not a number: give HOST:PORT or PORT, e.g. --http"),
    ],
)
def test_an_http_address_that_cannot_be_served_on_says_what_to_give(tmp_path: Path, given: str, said: str) -> None:
    """Before: "not loopback: other machines can reach this port", then "[Errno -2] Name or service not known" (for a
    URL too, taken for a host); "port 0 is out of range"; and "'localhost:' is not HOST:PORT or PORT", of an address
    that gave no port."""
    layout = make_layout(tmp_path)
    result = subprocess.run(
        [mcpvisor_command(), "serve", "--http", given, "--workspace", str(layout.root)],
        env={**os.environ, **layout.env},
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    out = " ".join(result.stderr.split())
    assert result.returncode == 2
    assert said in out
    assert "not loopback" not in out
    assert "Errno" not in out
    assert "out of range" not in out


def test_binding_to_a_name_that_does_not_resolve_says_so() -> None:
    with pytest.raises(ConfigError, match="the address 'badhost.invalid' could not be resolved") as raised:
        bind_http_socket("badhost.invalid", 80)
    assert "Errno" not in str(raised.value)


def test_binding_to_an_address_this_machine_does_not_have_says_to_fix_the_address_not_the_port() -> None:
    """Before: "Cannot assign requested address; choose another --http port", a port that changes nothing."""
    with pytest.raises(ConfigError) as raised:
        bind_http_socket("192.0.2.1", free_port())  # TEST-NET-1: no machine's own address
    assert str(raised.value).endswith(
        "192.0.2.1 is not an address of this machine: give one of its own in --http (127.0.0.1: this machine only; "
        "0.0.0.0: every interface)"
    )
    taken = bind_http_socket("127.0.0.1", free_port())
    try:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot serve on 127.0.0.1:{port}: .*; choose another --http port$"):
            bind_http_socket("127.0.0.1", port)
    finally:
        taken.close()


@pytest.mark.parametrize(
    ("root", "why"),
    [
        ("{tmp}/missing", "no such folder"),
        ("{tmp}/file", "it is not a folder"),
        ("/etc", "it is a system folder, where clients may name no folder"),
        ("/proc/self", "it is inside /proc, which is a system folder"),
    ],
)
async def test_a_workspace_root_no_client_could_use_fails_before_starting_any_server(
    tmp_path: Path, root: str, why: str
) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    save(layout.paths.user, {"mcpServers": {"a": server("a", "--marker", str(marker))}})
    (tmp_path / "file").write_text("")
    options = HostOptions(env=layout.env, workspace=layout.root)
    with pytest.raises(ConfigError, match=f"cannot use --workspace-root .*: {why}"):
        await run_gateway(
            options,
            http=("127.0.0.1", free_port()),
            per_client_workspaces=True,
            workspace_root=Path(root.format(tmp=tmp_path)),
        )
    assert not marker.exists()


async def test_mcpvisor_serve_over_stdio_in_a_subprocess_serves_follows_edits_and_stops_its_servers(
    tmp_path: Path,
) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    save(layout.paths.user, {"mcpServers": {"a": server("a", "--marker", str(marker))}})
    params = StdioServerParameters(
        command=mcpvisor_command(), args=["serve", "--workspace", str(layout.root)], env=layout.env
    )
    errlog = tmp_path / "gateway.stderr"
    with errlog.open("w") as err:
        async with (
            Client(stdio_client(params, errlog=err)) as client,
            client.listen(tools_list_changed=True) as subscription,
        ):
            assert await tool_names(client) == {"mcp__a__echo"}
            assert text_of(await client.call_tool("mcp__a__echo", {"text": "hi"})) == "a:echo:hi"
            save(layout.paths.user, {"mcpServers": {"a": server("a", "--marker", str(marker)), "b": server("b")}})
            assert isinstance(await next_event(subscription), ToolsListChanged)
            assert await tool_names(client) == {"mcp__a__echo", "mcp__b__echo"}
    [pid] = marker_pids(marker)
    await wait_until(lambda: not pid_alive(pid))
    assert "mcpvisor gateway: serving 1 tool on stdio" in errlog.read_text()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_mcpvisor_serve_passes_what_a_server_asks_to_the_calling_client(tmp_path: Path, mode: str) -> None:
    """``serve`` offers the servers sampling, elicitation and roots and asks its client, in both eras."""
    from tests.gateway.test_client_requests import Answers

    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.user, {"mcpServers": {"a": server("a", "--control")}})
    params = StdioServerParameters(
        command=mcpvisor_command(), args=["serve", "--workspace", str(layout.root)], env=layout.env
    )
    answers = Answers()
    with (tmp_path / "gateway.stderr").open("w") as err:
        async with answers.client(stdio_client(params, errlog=err), mode=mode) as client:
            result = await client.call_tool("mcp__a__ask_client", {"kind": "sampling", "text": "hello"})
            assert text_of(result) == "sampled: an answer to hello"
            assert answers.asked == ["sampling hello"]


async def test_run_gateway_with_per_client_workspaces_serves_the_named_workspace_and_stops_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = make_setup(tmp_path)
    port = free_port()
    options = HostOptions(env=setup.layout.env, workspace=setup.default)
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(run_gateway, options, http=("127.0.0.1", port), per_client_workspaces=True))
        await wait_for_port(port)
        url = f"http://127.0.0.1:{port}/mcp"
        async with client_for(url, setup.b) as in_b, client_for(url, None) as in_default:
            assert await tool_names(in_b) == {"mcp__common__echo"}
            assert await tool_names(in_default) == {"mcp__common__echo", "mcp__pd__echo"}
        tg.cancel_scope.cancel()
    await wait_until(lambda: not any(pid_alive(pid) for pid in setup.all_pids()))
    err = capsys.readouterr().err
    assert f"serving 2 tools on {url}" in err
    assert f"opening workspace {setup.b} for a client" in err
    assert f"pb · ? needs approval — run: mcpvisor mcp approve --workspace {setup.b} pb" in err


async def test_per_client_workspaces_over_stdio_is_a_config_error(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    with pytest.raises(ConfigError, match="need --http"):
        await run_gateway(HostOptions(env=layout.env, workspace=layout.root), http=None, per_client_workspaces=True)


async def test_mcpvisor_serve_per_client_workspaces_in_a_subprocess_serves_each_workspace_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    setup = make_setup(tmp_path)
    port = free_port()
    command = [mcpvisor_command(), "serve", "--http", f"127.0.0.1:{port}", "--per-client-workspaces"]
    errlog = tmp_path / "gateway.stderr"
    env = {**setup.layout.env, "COLUMNS": "400"}
    async with gateway_process([*command, "--workspace", str(setup.default)], env, errlog) as process:
        await wait_for_port(port)
        url = f"http://127.0.0.1:{port}/mcp"
        # No token given: the gateway made one, 0600, in MCPVISOR_HOME, and said where it is.
        token_file = Path(setup.layout.env["MCPVISOR_HOME"]) / "gateway-token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        async with (
            client_for(url, setup.a, mode="legacy", token=token) as in_a,
            client_for(url, setup.b, token=token) as in_b,
        ):
            assert await tool_names(in_a) == {"mcp__common__echo", "mcp__pa__echo"}
            assert await tool_names(in_b) == {"mcp__common__echo"}
            assert len(setup.pids("common")) == 1
            process.send_signal(signal.SIGTERM)  # with a handshake-era session still open
            with anyio.fail_after(WAIT_S):
                assert await process.wait() == 0
    await wait_until(lambda: not any(pid_alive(pid) for pid in setup.all_pids()))
    assert len(setup.all_pids()) == 3
    assert not setup.markers["pb"].exists()
    err_text = errlog.read_text()
    assert f"the token is in {token_file} (generated now, kept for next time)" in err_text
    assert token not in err_text
    assert f"MCP servers of {setup.a}" in err_text  # a client's workspace is named (its own table, its lines)
    assert f"MCP servers of {setup.b}" in err_text
    assert f"MCP servers of {setup.default}" not in err_text  # the gateway's own is the one unnamed
    assert "Traceback" not in err_text  # the clients' GET streams are ended, not cut when uvicorn gives up


async def test_a_client_listening_when_the_gateway_stops_is_let_go_without_an_error(tmp_path: Path) -> None:
    """A handshake-era client keeps a GET stream open for what the server sends unasked: on SIGTERM it is ended,
    where uvicorn used to cut it after its grace and log an error with a traceback."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.user, {"mcpServers": {"a": server("a")}})
    port = free_port()
    errlog = tmp_path / "gateway.stderr"
    command = [mcpvisor_command(), "serve", "--http", f"127.0.0.1:{port}", "--no-auth", "--workspace", str(layout.root)]
    async with gateway_process(command, layout.env, errlog) as process:
        await wait_for_port(port)
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
            assert await tool_names(client) == {"mcp__a__echo"}
            await anyio.sleep(0.5)  # its GET stream open
            os.kill(process.pid, signal.SIGTERM)
            with anyio.fail_after(WAIT_S):
                assert await process.wait() == 0
    assert "stopping; calls in flight get up to 5 s" in errlog.read_text()
    assert "Traceback" not in errlog.read_text()
    assert "ERROR" not in errlog.read_text()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_on_sigterm_calls_in_flight_finish_or_are_told_the_gateway_is_shutting_down(
    tmp_path: Path, mode: str
) -> None:
    """A short call still finishes, a long one is answered "the gateway is shutting down" after the grace
    period (not "the server exited or crashed" at once), a call made meanwhile is refused the same way,
    and nothing outlives the gateway."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    save(layout.paths.user, {"mcpServers": {"a": server("a", "--control", "--marker", str(marker))}})
    port = free_port()
    command = [mcpvisor_command(), "serve", "--http", f"127.0.0.1:{port}", "--no-auth"]
    errlog = tmp_path / "gateway.stderr"
    outcomes: dict[str, str] = {}
    async with gateway_process([*command, "--workspace", str(layout.root)], layout.env, errlog) as process:
        await wait_for_port(port)
        async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode) as client:
            started: list[str] = []

            async def sleep(key: str, seconds: float) -> None:
                async def progress(progress: float, total: float | None, message: str | None) -> None:
                    started.append(key)  # the server reports progress as it starts sleeping

                result = await client.call_tool("mcp__a__sleep", {"seconds": seconds}, progress_callback=progress)
                outcomes[key] = text_of(result)

            async with anyio.create_task_group() as tg:
                tg.start_soon(sleep, "short", 1.5)
                tg.start_soon(sleep, "long", 60)
                await wait_until(lambda: {"short", "long"} <= set(started), what="both calls to start")
                process.send_signal(signal.SIGTERM)
                await wait_until(lambda: "stopping;" in errlog.read_text(), what="the gateway to stop")
                tg.start_soon(sleep, "late", 0)
        with anyio.fail_after(WAIT_S):
            assert await process.wait() == 0
    assert outcomes["short"] == "slept"
    assert (
        outcomes["long"]
        == "call to tool 'mcp__a__sleep' failed: the gateway is shutting down; make the call again once it is back"
    )
    assert outcomes["late"] == outcomes["long"]
    await wait_until(lambda: not any(pid_alive(pid) for pid in marker_pids(marker)), what="no server left")
    assert "calls in flight get up to 5 s to finish" in errlog.read_text()
    assert "2 call(s) were told the gateway is shutting down" in errlog.read_text()  # the long one and the late one
    assert "Traceback" not in errlog.read_text()  # a handshake-era client's GET stream is ended, not cut


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_every_progress_notification_of_a_call_reaches_the_client_before_its_answer(
    tmp_path: Path, mode: str
) -> None:
    """The SDK relays each upstream progress notification in a task of its own: the answer overtook the last
    one, and a 2026-07-28 request's stream, closed with the answer, dropped it (seen under serve's loop)."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.user, {"mcpServers": {"a": server("a", "--control")}})
    port = free_port()
    command = [mcpvisor_command(), "serve", "--http", f"127.0.0.1:{port}", "--no-auth", "--workspace", str(layout.root)]
    heard: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(message)

    process = await anyio.open_process(command, env={**os.environ, **layout.env})
    async with process:
        try:
            await wait_for_port(port)
            async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode) as client:
                for seconds in (0.2, 0.5):
                    heard.clear()
                    result = await client.call_tool(
                        "mcp__a__sleep", {"seconds": seconds}, progress_callback=on_progress
                    )
                    assert text_of(result) == "slept"
                    await wait_until(lambda: len(heard) == 2, timeout_s=3, what="both progress notifications")
                    assert heard == ["sleeping", "awake"]
        finally:
            process.send_signal(signal.SIGTERM)  # it stops its servers
            with anyio.CancelScope(shield=True), anyio.move_on_after(WAIT_S):
                await process.wait()
            if process.returncode is None:
                process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()


async def test_ctrl_c_pressed_again_and_again_stops_the_gateway_once_without_a_traceback(tmp_path: Path) -> None:
    """The first Ctrl-C stops in order, the second at once; more while it stops change nothing (once the signal
    receiver was closed, Python's own handler raised KeyboardInterrupt somewhere in the shutdown)."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    marker = tmp_path / "pids"
    save(layout.paths.user, {"mcpServers": {n: server(n, "--marker", str(marker)) for n in "abc"}})
    port = free_port()
    errlog = tmp_path / "gateway.stderr"
    with errlog.open("w") as err:
        process = await anyio.open_process(
            [mcpvisor_command(), "serve", "--http", f"127.0.0.1:{port}", "--no-auth", "--workspace", str(layout.root)],
            env={**os.environ, **layout.env},
            stderr=err,
        )
        async with process:
            await wait_for_port(port)
            for _ in range(40):
                with contextlib.suppress(ProcessLookupError):  # it may have stopped already
                    os.kill(process.pid, signal.SIGINT)  # send_signal() polls, and may reap it under asyncio's watcher
                await anyio.sleep(0.005)
            with anyio.fail_after(WAIT_S):
                await process.wait()
    said = errlog.read_text()
    assert "Traceback" not in said
    assert process.returncode == 0, said
    await wait_until(lambda: not any(pid_alive(pid) for pid in marker_pids(marker)), what="no server left")


async def test_the_approve_command_a_gateway_client_is_told_works_pasted_in_another_folder(tmp_path: Path) -> None:
    """``MCPVISOR_HOME=HOME mcpvisor serve --workspace WS``, started in another folder: a client calling a tool of a
    project server that needs approval was told ``run: mcpvisor mcp approve p`` — pasted in another terminal, it
    named that terminal's folder and the default home, and approved nothing the gateway reads. It names both."""
    layout = make_layout(tmp_path)
    home, elsewhere = tmp_path / "other home", tmp_path / "elsewhere"
    elsewhere.mkdir()
    save(home / "settings.json", {"mcpServers": {}})
    save(layout.paths.project, {"mcpServers": {"p": server("p")}})
    env = {**layout.env, "MCPVISOR_HOME": str(home)}
    params = StdioServerParameters(
        command=mcpvisor_command(), args=["serve", "--workspace", str(layout.root)], env=env, cwd=str(elsewhere)
    )
    another = {**os.environ, **layout.env, "PATH": f"{Path(mcpvisor_command()).parent}{os.pathsep}{os.environ['PATH']}"}
    del another["MCPVISOR_HOME"]  # another terminal: only what the command says
    with (tmp_path / "gateway.stderr").open("w") as err:
        async with (
            Client(stdio_client(params, errlog=err)) as client,
            client.listen(tools_list_changed=True) as subscription,
        ):
            said = text_of(await client.call_tool("mcp__p__echo", {"text": "hi"}))
            command = said.split("needs approval; run: ", 1)[1].split(" (in the shell:", 1)[0]
            pasted = await anyio.run_process(["sh", "-c", command], cwd=elsewhere, env=another, check=False)
            assert pasted.returncode == 0, (command, pasted.stdout, pasted.stderr)
            assert isinstance(await next_event(subscription), ToolsListChanged)
            assert text_of(await client.call_tool("mcp__p__echo", {"text": "hi"})) == "p:echo:hi"
    assert not layout.paths.approvals.exists()  # the default home's store: untouched


async def test_the_approve_command_a_gateways_status_prints_works_pasted_in_another_folder(tmp_path: Path) -> None:
    """``MCPVISOR_HOME=HOME mcpvisor serve``'s status said ``needs approval — run: mcpvisor mcp approve --workspace
    WS p``, without the home (its sign-in command had it): pasted in another terminal, it approved in the default
    home's store, which the gateway never reads. It carries ``MCPVISOR_HOME=HOME``, as ``run``'s does."""
    layout = make_layout(tmp_path)
    home, elsewhere = tmp_path / "other home", tmp_path / "elsewhere"
    elsewhere.mkdir()
    save(home / "settings.json", {"mcpServers": {}})
    save(layout.paths.project, {"mcpServers": {"p": server("p")}})
    env = {**layout.env, "MCPVISOR_HOME": str(home), "COLUMNS": "1000"}
    params = StdioServerParameters(
        command=mcpvisor_command(), args=["serve", "--workspace", str(layout.root)], env=env, cwd=str(elsewhere)
    )
    another = {**os.environ, **layout.env, "PATH": f"{Path(mcpvisor_command()).parent}{os.pathsep}{os.environ['PATH']}"}
    del another["MCPVISOR_HOME"]  # another terminal: only what the command says
    errlog = tmp_path / "gateway.stderr"
    with errlog.open("w") as err:
        async with (
            Client(stdio_client(params, errlog=err)) as client,
            client.listen(tools_list_changed=True) as subscription,
        ):
            await wait_until(lambda: "needs approval — run: " in errlog.read_text(), what="the status table")
            line = next(line for line in errlog.read_text().splitlines() if "needs approval — run: " in line)
            command = line.split("needs approval — run: ", 1)[1].strip()
            pasted = await anyio.run_process(["sh", "-c", command], cwd=elsewhere, env=another, check=False)
            assert pasted.returncode == 0, (command, pasted.stdout, pasted.stderr)
            assert not layout.paths.approvals.exists(), command  # the default home's store: untouched
            assert isinstance(await next_event(subscription), ToolsListChanged)
            assert text_of(await client.call_tool("mcp__p__echo", {"text": "hi"})) == "p:echo:hi"


def test_serving_beyond_loopback_without_a_token_is_refused_without_first_saying_each_request_needs_it(
    tmp_path: Path,
) -> None:
    """``serve --http 0.0.0.0:P --no-auth`` said "every request needs the gateway's token", then refused to start for
    lack of one: the refusal is said alone."""
    layout = make_layout(tmp_path)
    result = subprocess.run(
        [mcpvisor_command(), "serve", "--http", "0.0.0.0:1", "--no-auth", "--workspace", str(layout.root)],
        env={k: v for k, v in {**os.environ, **layout.env}.items() if k != "MCPVISOR_GATEWAY_TOKEN"},
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    out = " ".join(result.stderr.split())
    assert result.returncode == 1
    assert out.startswith("error: refusing to serve on 0.0.0.0 without a token"), out
    assert "every request needs the gateway's token" not in out
    with socket.socket() as taken:  # with a token it is said (here before the port, taken, fails)
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [mcpvisor_command(), "serve", "--http", f"0.0.0.0:{port}", "--workspace", str(layout.root)],
            env={**os.environ, **layout.env, "MCPVISOR_GATEWAY_TOKEN": "t" * 32},
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )
    out = " ".join(result.stderr.split())
    assert result.returncode == 1, out
    assert out.startswith(
        "! serving on 0.0.0.0, not loopback: other machines can reach this port; every request needs the gateway's "
        "token"
    ), out
    assert f"cannot serve on 0.0.0.0:{port}" in out
