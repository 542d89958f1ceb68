"""Any request on any replica: the ASGI layer in front of a replica's gateway.

- ``GET /readyz`` answers 200 once the replica applied the fleet's settings, 503 before (a load
  balancer's health check: traffic only reaches replicas that reconciled).
- 2026-07-28 requests carry no session: they are served where they land, except the retry of a call
  waiting for input: its ``requestState`` names the replica where the call runs, which gets it.
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
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

import anyio
import httpx2

from mcpvisor.fleet.sealing import FleetKey

__all__ = ["HOP_HEADER", "FleetUnavailable", "OwnerRouter", "forwarding_client", "round_name", "round_owner"]

logger = logging.getLogger(__name__)

SESSION_HEADER: Final = b"mcp-session-id"
HOP_HEADER: Final = "x-mcpvisor-hop"
ROUND_PREFIX: Final = "mcpvisor-round-"
"""How the gateway's ``requestState`` begins (:mod:`mcpvisor.gateway.asks`); a fleet's names its replica next."""
MAX_FORWARD_BODY: Final = 16 * 1024 * 1024
"""The largest request body forwarded to an owner (the owner applies its own, smaller limits)."""
_HOP_BY_HOP: Final = frozenset(
    {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"content-length"}
)

FORWARD_CONNECTIONS: Final = 1000
FORWARD_CONNECT_TIMEOUT_S: Final = 1.0
"""A session's owner that does not accept a connection within this is taken as gone (404)."""

ASGIApp = Any


def forwarding_client() -> httpx2.AsyncClient:
    """The client a replica forwards with: replica to replica, never through a proxy (the requests carry
    clients' tokens); a full pool answers at once rather than queueing a forward for ever."""
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(None, connect=FORWARD_CONNECT_TIMEOUT_S, pool=FORWARD_CONNECT_TIMEOUT_S),
        limits=httpx2.Limits(max_connections=FORWARD_CONNECTIONS, max_keepalive_connections=64),
        trust_env=False,
    )


class FleetUnavailable(Exception):
    """The fleet's registry cannot be read now (the store does not answer)."""


class Routed(Protocol):
    """What the router needs of its replica (:class:`~mcpvisor.fleet.replica.Replica`)."""

    @property
    def id(self) -> str: ...

    @property
    def ready(self) -> bool: ...

    def readiness(self) -> dict[str, Any]: ...

    def round_owner(self, state: str) -> str | None: ...

    async def address_of(self, replica_id: str) -> str | None: ...


class OwnerRouter:
    """Wraps a gateway's ASGI app for one replica (see the module)."""

    def __init__(self, app: ASGIApp, replica: Routed, client: httpx2.AsyncClient) -> None:
        self._app = app
        self._replica = replica
        self._client = client
        self._own = replica.id.encode() + b"."

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        index = _session_index(headers)
        if index < 0:
            if scope["path"] == "/readyz":
                await self._readyz(send)
            else:
                await self._sessionless(scope, receive, send, headers)
            return
        value = headers[index][1]
        if value.startswith(self._own) and len(value) > len(self._own):  # the hot path: a session held here
            inner = list(headers)
            inner[index] = (SESSION_HEADER, value[len(self._own) :])
            await self._app({**scope, "headers": inner}, receive, self._naming_sessions(send))
            return
        session = value.decode("latin-1")
        owner, dot, local = session.partition(".")
        if not dot or not local:
            await _not_found(send, f"session {session!r} was not made by this fleet; start a new session")
            return
        address = await self._owner_address(owner, headers, send)
        if address is None:
            return
        if not address:
            await _not_found(send, f"replica {owner} that held session {session!r} is gone; start a new session")
            return
        body = await _read_body(receive, send)
        if body is None:
            return
        gone = partial(_not_found, send, f"replica {owner} that held this session does not answer; start a new session")
        await self._forward(scope, body, receive, send, address, owner, gone=gone)

    async def _owner_address(self, owner: str, headers: list[tuple[bytes, bytes]], send: Any) -> str | None:
        """Where ``owner`` listens: its address, ``""`` when it is gone (or this request was forwarded once
        already: never twice), ``None`` when the registry cannot be read now (answered here: 503)."""
        if any(k == HOP_HEADER.encode() for k, _ in headers):
            return ""
        try:
            return await self._replica.address_of(owner) or ""
        except FleetUnavailable as exc:
            logger.info("fleet: cannot look up replica %s: %s", owner, exc)
            await _respond(send, 503, {"error": "the fleet store does not answer; try again"}, retry_after=1)
            return None

    async def _sessionless(
        self, scope: dict[str, Any], receive: Any, send: Any, headers: list[tuple[bytes, bytes]]
    ) -> None:
        """A request without a session: served here, unless it continues an input round another replica
        holds (its ``requestState`` names the owner): then forwarded there, or answered that the round is
        gone (the client makes the call again)."""
        if scope.get("method") != "POST":
            await self._app(scope, receive, self._naming_sessions(send))
            return
        body = await _read_body(receive, send)
        if body is None:
            return  # the client went away, or the body was too large (answered)
        state = _request_state(body) if b'"requestState"' in body else None
        try:
            owner = self._replica.round_owner(state) if state is not None else None
        except ValueError as exc:
            await _rpc_error(send, body, f"{exc}; make the call again without it")
            return
        if owner is None or owner == self._replica.id:
            await self._app(scope, _replay(body, receive), self._naming_sessions(send))
            return
        address = await self._owner_address(owner, headers, send)
        if address is None:
            return
        message = (
            f"the call waiting for input was held by replica {owner}, which is gone; make the call again "
            "without requestState"
        )
        if not address:
            await _rpc_error(send, body, message)
            return
        await self._forward(scope, body, receive, send, address, owner, gone=partial(_rpc_error, send, body, message))

    def _naming_sessions(self, send: Any) -> Any:
        """``send`` with the SDK's session id prefixed by this replica's id on the way out."""
        prefix = self._own

        async def named(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [
                        (k, prefix + v if k.lower() == SESSION_HEADER else v) for k, v in message.get("headers") or ()
                    ],
                }
            await send(message)

        return named

    async def _readyz(self, send: Any) -> None:
        await _respond(send, 200 if self._replica.ready else 503, self._replica.readiness())

    async def _forward(
        self,
        scope: dict[str, Any],
        body: bytes,
        receive: Any,
        send: Any,
        address: str,
        owner: str,
        *,
        gone: Callable[[], Awaitable[None]],
    ) -> None:
        """Send the request (its ``body`` read already) to ``owner`` at ``address`` and stream its answer
        back until it ends or the client leaves; ``gone`` answers when the owner does not take the
        connection (it died and the registry has not noticed yet)."""
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k not in _HOP_BY_HOP]
        headers.append((HOP_HEADER, self._replica.id))
        query = scope.get("query_string") or b""
        where = urlsplit(address)  # the owner's URL as it registered it: its origin, this request's path
        url = f"{where.scheme}://{where.netloc}" + (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        if query:
            url += "?" + query.decode("latin-1")
        request = self._client.build_request(scope["method"], url, headers=headers, content=body)
        try:
            response = await self._client.send(request, stream=True)
        except httpx2.PoolTimeout:  # this replica has too many forwards open: busy, not gone
            await _respond(send, 503, {"error": "too many forwarded requests; try again"}, retry_after=1)
            return
        except httpx2.TransportError as exc:
            logger.info("fleet: replica %s does not answer (%s): what it held is gone", owner, exc)
            await gone()
            return
        try:
            out = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            async with anyio.create_task_group() as tg:

                async def until_the_client_leaves() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()  # a stream the client left is closed at the owner too

                tg.start_soon(until_the_client_leaves)
                try:
                    async for chunk in response.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except httpx2.TransportError as exc:  # the owner died mid-stream: end our stream too
                    logger.info("fleet: replica %s stopped answering mid-response: %s", owner, exc)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()


def round_name(replica: str, token: str, key: FleetKey | None) -> str:
    """The ``requestState`` of an input round on ``replica``: ``mcpvisor-round-<replica>.<token>``, and a tag
    of the fleet key when there is one (a replica forwards only rounds the fleet named)."""
    state = f"{ROUND_PREFIX}{replica}.{token}"
    return f"{state}.{key.mac(state)}" if key is not None else state


def round_owner(state: str, key: FleetKey | None) -> str | None:
    """The replica a ``requestState`` names (``None``: not a fleet's round); :class:`ValueError` when its
    tag is not the fleet key's (made up, or changed)."""
    if not state.startswith(ROUND_PREFIX):
        return None
    owner, dot, rest = state.removeprefix(ROUND_PREFIX).partition(".")
    if not dot or not owner or not rest:
        return None
    if key is not None:
        named, _, tag = state.rpartition(".")
        if not tag or named.count(".") < 1 or not key.verify(named, tag):
            raise ValueError("requestState was not made by this fleet")
    return owner


def _session_index(headers: list[tuple[bytes, bytes]]) -> int:
    """Where the session header is among ``headers`` (ASGI lower-cases names), or -1."""
    for index, (name, _) in enumerate(headers):
        if name == SESSION_HEADER:
            return index
    return -1


async def _read_body(receive: Any, send: Any) -> bytes | None:
    """The whole request body (at most :data:`MAX_FORWARD_BODY`); ``None`` when the client left, or the
    body was too large (answered 413)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > MAX_FORWARD_BODY:
            await _respond(send, 413, {"error": f"a request body larger than {MAX_FORWARD_BODY} bytes"})
            return None
        if not message.get("more_body"):
            return bytes(body)


def _replay(body: bytes, receive: Any) -> Any:
    """``receive`` with the body already read given back first, whole."""
    given = False

    async def replay() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        message: dict[str, Any] = await receive()
        return message

    return replay


def _request_state(body: bytes) -> str | None:
    """A request's ``params.requestState``, if it has one."""
    try:
        state = json.loads(body).get("params", {}).get("requestState")
    except (ValueError, AttributeError):
        return None
    return state if isinstance(state, str) else None


async def _rpc_error(send: Any, body: bytes, message: str) -> None:
    try:
        request_id = json.loads(body).get("id")
    except (ValueError, AttributeError):
        request_id = None
    await _respond(send, 200, {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": message}})


async def _not_found(send: Any, message: str) -> None:
    await _respond(send, 404, {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}})


async def _respond(send: Any, status: int, body: dict[str, Any], *, retry_after: int | None = None) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
