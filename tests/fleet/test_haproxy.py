"""The HAProxy configuration the README documents (``deploy/haproxy.cfg``), checked and run in front of
three real replicas: handshake-era sessions reach the replica named in their id, everything else any
ready replica, and calls of both eras succeed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client

from tests.fleet.conftest import RedisServer
from tests.fleet.test_replicas import text, three_replicas
from tests.gateway.test_gateway import server
from tests.helpers import WAIT_S, free_port

pytestmark = pytest.mark.fleet

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "haproxy.cfg"


def haproxy() -> str:
    binary = shutil.which("haproxy")
    if binary is None:
        pytest.fail("haproxy is not installed: apt install haproxy (the fleet tests run the documented config)")
    return binary


def test_the_documented_configuration_is_valid() -> None:
    checked = subprocess.run([haproxy(), "-c", "-f", str(CONFIG)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_calls_through_haproxy_in_front_of_three_replicas(
    tmp_path: Path, redis_server: RedisServer, mode: str
) -> None:
    async with three_replicas(tmp_path, redis_server, {"u": server("u")}) as fleet:
        port = free_port()
        config = CONFIG.read_text().replace("127.0.0.1:8765", f"127.0.0.1:{port}")
        for index, replica in enumerate(fleet.replicas, 1):
            config = config.replace(f"10.0.0.1{index}:8765", f"127.0.0.1:{replica.port}")
        config_file = tmp_path / "haproxy.cfg"
        config_file.write_text(config)
        with (tmp_path / "haproxy.log").open("wb") as log:
            proxy = subprocess.Popen([haproxy(), "-f", str(config_file)], stderr=log)  # noqa: ASYNC220 - runs on
        try:
            async with httpx2.AsyncClient() as http:
                with anyio.fail_after(WAIT_S):
                    while True:
                        try:
                            if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                                break
                        except httpx2.TransportError:
                            pass
                        await anyio.sleep(0.1)  # nothing to wait on but haproxy's port and its health checks
            async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode) as client:
                for index in range(20):
                    result = await client.call_tool("mcp__u__echo", {"text": str(index)})
                    assert text(result) == f"u:echo:{index}"
        finally:
            proxy.terminate()
            proxy.wait(timeout=WAIT_S)
