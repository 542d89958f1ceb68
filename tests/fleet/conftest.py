"""A real ``redis-server`` per test, on a unix socket in a short temporary folder, durable (AOF with
``appendfsync always``) so that a test can stop it and start it again with its data."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.helpers import WAIT_S


class RedisServer:
    """One redis-server process: :meth:`start`, :meth:`kill` (SIGKILL), :meth:`start` again."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "r.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket), decode_responses=True)

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed: apt install redis-server (the fleet tests need it)")
        self.proc = subprocess.Popen(
            [binary, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
             "--dir", str(self.folder), "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with self.client() as client:
                    client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.02)  # nothing to wait on but the socket itself

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    folder = Path(tempfile.mkdtemp(prefix="mcpv-redis-"))  # a unix socket path must stay under 108 bytes
    server = RedisServer(folder)
    server.start()
    try:
        yield server
    finally:
        server.kill()
        with contextlib.suppress(OSError):
            shutil.rmtree(folder)
