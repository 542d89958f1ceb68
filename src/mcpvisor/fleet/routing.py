"""Any request on any replica: the ASGI layer in front of a replica's gateway.

- ``GET /readyz`` answers 200 once the replica applied the fleet's settings, 503 before (a load
  balancer's health check: traffic only reaches replicas that reconciled).
- 2026-07-28 requests carry no session: they are served where they land.
- A handshake-era session id names its owner: the SDK's id ``S`` leaves this replica as
  ``<replica>.S``. A request whose ``Mcp-Session-Id`` names this replica is served with the prefix
  taken off; one naming another live replica is forwarded once to it (streamed both ways, the
  ``Authorization`` header unchanged, ``X-Mcpvisor-Hop`` set so that it is never forwarded again);
  one naming a replica that is gone — or that cannot be reached — answers **404** at once, and the
  client starts a new session as the protocol says (never a hang).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

import httpx2

__all__ = ["HOP_HEADER", "OwnerRouter"]

logger = logging.getLogger(__name__)

SESSION_HEADER: Final = b"mcp-session-id"
HOP_HEADER: Final = "x-mcpvisor-hop"
MAX_FORWARD_BODY: Final = 16 * 1024 * 1024
"""The largest request body forwarded to an owner (the owner applies its own, smaller limits)."""
_HOP_BY_HOP: Final = frozenset(
    {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"content-length"}
)

ASGIApp = Any


class Routed(Protocol):
    """What the router needs of its replica (:class:`~mcpvisor.fleet.replica.Replica`)."""

    @property
    def id(self) -> str: ...

    @property
    def ready(self) -> bool: ...

    def readiness(self) -> dict[str, Any]: ...

    async def address_of(self, replica_id: str) -> str | None: ...


class OwnerRouter:
    """Wraps a gateway's ASGI app for one replica (see the module)."""

    def __init__(self, app: ASGIApp, replica: Routed, client: httpx2.AsyncClient) -> None:
        self._app = app
        self._replica = replica
        self._client = client

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self._app(scope, receive, send)
            return
        if scope.get("path") == "/readyz":
            await self._readyz(send)
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers") or ())
        session = next((v.decode("latin-1") for k, v in headers if k == SESSION_HEADER), None)
        if session is None:
            await self._app(scope, receive, self._naming_sessions(send))
            return
        owner, dot, local = session.partition(".")
        if not dot or not local:
            await _not_found(send, f"session {session!r} was not made by this fleet; start a new session")
            return
        if owner == self._replica.id:
            inner = [(k, local.encode("latin-1") if k == SESSION_HEADER else v) for k, v in headers]
            await self._app({**scope, "headers": inner}, receive, self._naming_sessions(send))
            return
        if any(k == HOP_HEADER.encode() for k, _ in headers):
            await _not_found(send, f"session {session!r} belongs to replica {owner}, which this request came from")
            return
        address = await self._replica.address_of(owner)
        if not address:
            await _not_found(send, f"replica {owner} that held session {session!r} is gone; start a new session")
            return
        await self._forward(scope, receive, send, address, owner)

    def _naming_sessions(self, send: Any) -> Any:
        """``send`` with the SDK's session id prefixed by this replica's id on the way out."""
        prefix = self._replica.id.encode() + b"."

        async def named(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                message = dict(message)
                message["headers"] = [
                    (k, prefix + v if k.lower() == SESSION_HEADER else v) for k, v in message.get("headers") or ()
                ]
            await send(message)

        return named

    async def _readyz(self, send: Any) -> None:
        await _respond(send, 200 if self._replica.ready else 503, self._replica.readiness())

    async def _forward(self, scope: dict[str, Any], receive: Any, send: Any, address: str, owner: str) -> None:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > MAX_FORWARD_BODY:
                await _respond(send, 413, {"error": "request body too large to forward"})
                return
            if not message.get("more_body"):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k not in _HOP_BY_HOP]
        headers.append((HOP_HEADER, self._replica.id))
        query = scope.get("query_string") or b""
        where = urlsplit(address)  # the owner's URL as it registered it: its origin, this request's path
        url = f"{where.scheme}://{where.netloc}" + (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        if query:
            url += "?" + query.decode("latin-1")
        request = self._client.build_request(scope["method"], url, headers=headers, content=bytes(body))
        try:
            response = await self._client.send(request, stream=True)
        except httpx2.TransportError as exc:
            logger.info("fleet: replica %s does not answer (%s): its sessions are gone", owner, exc)
            await _not_found(send, f"replica {owner} that held this session does not answer; start a new session")
            return
        try:
            out = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except httpx2.TransportError as exc:  # the owner died mid-stream: end our stream too
            logger.info("fleet: replica %s stopped answering mid-response: %s", owner, exc)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


async def _not_found(send: Any, message: str) -> None:
    await _respond(send, 404, {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}})


async def _respond(send: Any, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
