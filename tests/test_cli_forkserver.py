"""The forked ``mcpvisor`` commands most end-to-end tests run (``tests/cli_forkserver.py``) behave as
``python -m mcpvisor`` does: same output and exit code for the same argv, environment and folder, the same
end on a signal, and a command whose stand-in is killed does not outlive it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import LIGHT, SDK, WAIT_S, forked_python, marker_pids, mcpvisor_command, pid_alive

REAL = [sys.executable, "-m", "mcpvisor"]


def both(args: list[str], **options: object) -> tuple[subprocess.CompletedProcess[str], ...]:
    return tuple(
        subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, **options)  # type: ignore[call-overload]
        for command in (REAL, [mcpvisor_command()])
    )


def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "repo"
    root.mkdir()
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {"p": {"command": "x"}}}))
    home = tmp_path / "home"
    (home / ".mcpvisor").mkdir(parents=True)
    (home / ".mcpvisor" / "settings.json").write_text(json.dumps({"mcpServers": {"u": {"command": "y"}}}))
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "MCPVISOR_HOME": str(home / ".mcpvisor"), "NO_COLOR": "1"}
    return root, env


@pytest.mark.parametrize("args", [["--version"], ["nope"], ["mcp", "list"], ["mcp", "list", "--json"]])
def test_a_forked_command_says_and_exits_as_a_started_one(args: list[str], tmp_path: Path) -> None:
    root, env = project(tmp_path)
    real, forked = both(args, env=env, cwd=root)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    if args[0] == "mcp":  # the folder (its .mcp.json) and the environment (MCPVISOR_HOME) decide what it lists
        assert '"p"' in forked.stdout or " p " in forked.stdout
        assert '"u"' in forked.stdout or " u " in forked.stdout


def test_a_signal_ends_a_forked_command_as_it_ends_a_started_one(tmp_path: Path) -> None:
    _, env = project(tmp_path)
    codes = []
    for command in (REAL, [mcpvisor_command()]):
        process = subprocess.Popen(
            [*command, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        assert process.stderr is not None
        process.stderr.readline()  # it says it serves once it does
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=WAIT_S)
        codes.append(process.returncode)
    assert codes[0] == codes[1]


def test_a_command_whose_stand_in_is_killed_ends_with_it(tmp_path: Path) -> None:
    _, env = project(tmp_path)
    marker = tmp_path / "pids"
    settings = {"mcpServers": {"u": {"command": sys.executable, "args": ["-m", LIGHT, "--marker", str(marker)]}}}
    (tmp_path / "home" / ".mcpvisor" / "settings.json").write_text(json.dumps(settings))
    process = subprocess.Popen(
        [mcpvisor_command(), "run"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    deadline = time.monotonic() + WAIT_S
    while not marker_pids(marker):
        assert time.monotonic() < deadline, "the server never started"
        time.sleep(0.05)  # nothing to wait on but the marker file
    [server] = marker_pids(marker)
    process.kill()
    process.wait(timeout=WAIT_S)
    while pid_alive(server):  # the command was killed, so its server's stdin closed
        assert time.monotonic() < deadline, "the command outlived its stand-in"
        time.sleep(0.05)


def test_a_request_that_is_not_one_leaves_the_fork_server_serving(tmp_path: Path) -> None:
    sock = Path(forked_python()).with_name("sock")
    for garbage in (b"not json", b"[1, 2]"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection:
            connection.connect(str(sock))
            socket.send_fds(connection, [garbage], [0, 1, 2])
            assert connection.recv(64) == b""  # refused: the connection is closed
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection:
        connection.connect(str(sock))  # a stand-in that leaves before it asks
    result = subprocess.run([mcpvisor_command(), "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_a_forked_process_killed_by_sigkill_ends_its_stand_in_so(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    process = subprocess.Popen(
        [forked_python(), "-m", SDK, "--marker", str(marker)], stdin=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + WAIT_S
    while not marker_pids(marker):
        assert time.monotonic() < deadline, "the server never started"
        time.sleep(0.05)  # nothing to wait on but the marker file
    [pid] = marker_pids(marker)
    os.kill(pid, signal.SIGKILL)
    _, said = process.communicate(timeout=WAIT_S)
    assert process.returncode == -signal.SIGKILL
    assert b"Error" not in said
