"""A load balancer for the fleet tests: strict round robin per request, a new connection to the replica
for every request (connection reuse would hide routing bugs), responses streamed back as they come.
Replicas that refuse the connection are skipped (as a balancer's health check would)."""

from __future__ import annotations

import itertools
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import uvicorn

_HOP_BY_HOP = frozenset({b"host", b"connection", b"keep-alive", b"transfer-encoding", b"content-length"})


class RoundRobin:
    """An ASGI app that sends each request to the next of ``upstreams`` (base URLs)."""

    def __init__(self, upstreams: list[str]) -> None:
        self.upstreams = upstreams
        self._turn = itertools.count()
        self.sent: dict[str, int] = dict.fromkeys(upstreams, 0)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k not in _HOP_BY_HOP]
        path = scope["path"] + (("?" + scope["query_string"].decode()) if scope.get("query_string") else "")
        for _ in range(len(self.upstreams)):
            upstream = self.upstreams[next(self._turn) % len(self.upstreams)]
            client = httpx2.AsyncClient(timeout=httpx2.Timeout(None, connect=2.0), trust_env=False)
            try:
                request = client.build_request(scope["method"], upstream + path, headers=headers, content=bytes(body))
                response = await client.send(request, stream=True)
            except httpx2.ConnectError:
                await client.aclose()
                continue  # that replica is down: the next one
            self.sent[upstream] += 1
            try:
                out = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP]
                await send({"type": "http.response.start", "status": response.status_code, "headers": out})
                try:
                    async for chunk in response.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except httpx2.TransportError:
                    pass  # the replica died mid-stream: so does this stream
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                await response.aclose()
                await client.aclose()
            return
        await send({"type": "http.response.start", "status": 502, "headers": []})
        await send({"type": "http.response.body", "body": b"no replica answers"})


@asynccontextmanager
async def balancer(upstreams: list[str]) -> AsyncIterator[tuple[str, RoundRobin]]:
    """A running balancer in this event loop: its URL and its app."""
    app = RoundRobin(upstreams)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 - uvicorn says so by a flag only
            await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}", app
        finally:
            server.should_exit = True
    sock.close()
