"""Bounds on the HTTP gateway's handshake-era sessions: how many, and how long an idle one lives.

A client of the handshake era (protocol versions up to 2025-11-25) opens a session with ``initialize``
and names it in the ``Mcp-Session-Id`` header of every later request; the SDK's session manager keeps
a server task per session. Clients that never say goodbye would keep theirs forever, so:

- **idle expiry** — a session with no request in flight (an open GET stream counts as one) for
  ``session_idle_timeout_s`` ends; its id then answers 404 and the client initializes again, as the
  specification says (the SDK's manager does this, given the timeout);
- **a cap** — at most ``max_sessions`` sessions per gateway, whatever workspace they belong to: when
  a client opens one more, the least recently used session with nothing in flight is closed to make
  room; only when every session is busy does the new client get 503 with ``Retry-After``;
- **no seat for a failed ``initialize``** — one whose params are invalid makes no room, its session is closed
  once it is answered, and its answer names no session: a client retrying it could otherwise evict every live
  session.

A session's protocol version is the one negotiated by its ``initialize``. A later request whose
``MCP-Protocol-Version`` header is missing or names an older version (the header must carry the
negotiated one) is served as the session's version, so a 2025-11-25 session's SSE streams always
start with the priming event that makes them resumable.

2026-07-28 clients have no sessions (every request stands alone): they pass straight through.
:class:`SessionBook` sits in front of one or more session managers (one per workspace) and keeps
the books for all of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import pydantic_core
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, EventStore
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import INTERNAL_ERROR, PARSE_ERROR
from mcp_types.methods import validate_client_request
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcpvisor.gateway.lazy_streams import DirectCall, LazySessionManager
from mcpvisor.gateway.limits import HttpLimits
from mcpvisor.gateway.protocol import is_request_id, shape_problem
from mcpvisor.gateway.responses import error_response

__all__ = [
    "RETRY_AFTER_S",
    "SSE_RETRY_MS",
    "OnePath",
    "ServedBy",
    "SessionBook",
    "opening_request",
    "opens_a_session",
    "read_ahead",
    "session_manager",
]

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 5
"""What a client refused for want of a free session is told to wait."""
SSE_RETRY_MS = 1000
"""The ``retry`` field of the gateway's SSE streams: how long a client waits before it resumes one."""

_NO_SESSION = (
    "Bad Request: Missing session ID: a request other than initialize needs its session's Mcp-Session-Id header"
)
_SESSION_HEADER = MCP_SESSION_ID_HEADER.encode()
_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.encode()
_MAX_NOTED_BODY = 64 * 1024
"""The most of a request without a session id read before it is served, to learn whether it opens a session
(``initialize``, and the protocol version it asks for): a larger one is served as one that may."""


def session_manager(
    server: Any,
    *,
    security: TransportSecuritySettings | None,
    limits: HttpLimits,
    event_store: EventStore | None,
    direct_call: DirectCall | None = None,
) -> StreamableHTTPSessionManager:
    """The SDK's session manager as the gateway runs it: idle sessions expire, the cap is the
    :class:`SessionBook`'s (across managers), SSE streams start with a priming event and a ``retry``, and a
    request that streams nothing is answered with plain JSON, a plain call made by ``direct_call``
    (:mod:`mcpvisor.gateway.lazy_streams`)."""
    return LazySessionManager(
        direct_call=direct_call,
        app=server,
        security_settings=security,
        session_idle_timeout=limits.session_idle_timeout_s,
        max_sessions=None,
        event_store=event_store,
        retry_interval=SSE_RETRY_MS if event_store is not None else None,
    )


@dataclass(eq=False)
class _Session:
    manager: StreamableHTTPSessionManager
    session_id: str
    last_used: float
    version: str | None = None
    """The protocol version negotiated by the session's ``initialize``."""
    in_flight: int = 0

    def initialized(self) -> bool:
        """Whether the SDK accepted the session's ``initialize`` (an ended session says yes: nothing to close)."""
        return getattr(self.manager._server_instances.get(self.session_id), "initialized", True) is not False

    def alive(self) -> bool:
        # The SDK forgets a session the moment it ends (DELETE, idle expiry, crash); it has no public view.
        return self.session_id in self.manager._server_instances

    async def close(self) -> None:
        transport = self.manager._server_instances.get(self.session_id)
        if transport is not None:
            await self.manager._discard_session(self.session_id, transport)


@dataclass(eq=False)
class SessionBook:
    """The sessions of every session manager behind one gateway, under one cap (see the module)."""

    max_sessions: int
    _sessions: dict[str, _Session] = field(default_factory=dict)
    _opening: int = 0
    evicted: int = 0
    """Sessions closed to make room (for tests and status)."""

    def __len__(self) -> int:
        self._forget_ended()
        return len(self._sessions)

    def manager_of(self, session_id: str) -> StreamableHTTPSessionManager | None:
        """The session manager serving the live session ``session_id``, if the books know it."""
        session = self._sessions.get(session_id)
        return session.manager if session is not None and session.alive() else None

    async def handle(self, manager: StreamableHTTPSessionManager, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request through ``manager``, keeping the books."""
        raw = scope.get("headers") or ()
        headers = dict(raw)
        if len(headers) < len(raw):  # some header came twice: the books and the SDK must not read different ones
            for name in (_SESSION_HEADER, _VERSION_HEADER):
                if sum(1 for key, _ in raw if key == name) > 1:
                    message = f"the {name.decode()} header appears more than once"
                    await error_response(message, 400)(scope, receive, send)
                    return
        version = headers.get(_VERSION_HEADER)
        asked = version.decode("latin-1") if version is not None else None
        if asked is not None and asked not in HANDSHAKE_PROTOCOL_VERSIONS:
            if (unsupported := _unsupported(asked)) is not None:
                await error_response(unsupported, 400)(scope, receive, send)
                return
            with suppress(ClientDisconnect):  # it left before its body came: no one to answer (nor to log about)
                await manager.handle_request(scope, receive, send)  # the 2026-07-28 era has no sessions
            return
        session_id = headers.get(_SESSION_HEADER)
        if session_id is not None:
            with self._using(session_id.decode("latin-1")) as session:
                if session is not None and session.version is not None:
                    scope = _at_version(scope, version, session.version)
                await manager.handle_request(scope, receive, send)
            return
        if scope.get("method") != "POST":  # refused by the SDK: no session, no initialize (nor a session id)
            await manager.handle_request(scope, receive, _naming_no_session(send))
            return
        read, body, complete = await read_ahead(receive)
        if read is None:
            return  # the client left before its request's body came
        if complete and not opens_a_session(bytes(body)):  # it opens no session, takes no seat (nor a transport,
            await _no_session_refusal(bytes(body), _NO_SESSION)(scope, read, send)  # whose id the SDK's refusal
            return  # would carry)
        if complete and _refused(bytes(body)):  # its session is closed once it is answered (_noting_session):
            await manager.handle_request(scope, read, self._noting_session(manager, send, body, None))
            return  # it makes no room (nor enters the books), taking the seat of a live session for nothing
        if not await self._make_room():
            message = (
                f"the gateway already serves {self.max_sessions} sessions, all of them busy; "
                f"try again in {RETRY_AFTER_S} s"
            )
            response = error_response(message, 503, INTERNAL_ERROR, headers={"Retry-After": str(RETRY_AFTER_S)})
            await response(scope, read, send)
            return
        self._opening += 1
        opening = True

        def opened() -> None:  # its session is in the books, or it will open none: the seat is no longer held here
            nonlocal opening
            self._opening -= opening
            opening = False

        try:
            await manager.handle_request(scope, read, self._noting_session(manager, send, body, opened))
        finally:
            opened()

    @contextmanager
    def _using(self, session_id: str) -> Iterator[_Session | None]:
        session = self._sessions.get(session_id)
        if session is None:
            yield None  # unknown to the books: the SDK answers 404
            return
        session.in_flight += 1
        session.last_used = anyio.current_time()
        try:
            yield session
        finally:
            session.in_flight -= 1
            session.last_used = anyio.current_time()
            if not session.alive():
                self._sessions.pop(session_id, None)

    def _noting_session(
        self, manager: StreamableHTTPSessionManager, send: Send, body: bytearray, opened: Callable[[], None] | None
    ) -> Send:
        """``send``, noting the session an opening request created (its id is in the response's headers)
        and the protocol version its ``initialize`` (in ``body``) negotiated; ``opened`` is called once its answer
        is sent (``None``: an ``initialize`` sure to fail, kept out of the books). A session whose ``initialize``
        failed (invalid params) is then closed: it takes no seat, and its answer names no session (its id would
        answer 404), nor does a refusal (406: the SDK keeps no session). The answer (one message) is held until it
        is whole, when that is known."""
        noted: list[_Session] = []
        held: list[Message] = []

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status", 500) < 400:
                for key, value in message.get("headers") or ():
                    if key.lower() == _SESSION_HEADER:
                        session_id = value.decode("latin-1")
                        session = _Session(manager, session_id, anyio.current_time(), _negotiated(bytes(body)))
                        if opened is not None:
                            self._sessions[session_id] = session
                        noted.append(session)
            if message["type"] not in ("http.response.start", "http.response.body"):
                await send(message)
                return
            if message["type"] == "http.response.start" or message.get("more_body", False):
                held.append(message)
                return
            failed = [session for session in noted if not session.initialized()]
            for session in failed:  # out of the books before the client hears: its next initialize finds room
                self._sessions.pop(session.session_id, None)
            if opened is not None:
                opened()
            sending = _naming_no_session(send, everything=bool(failed))
            for each in [*held, message]:
                await sending(each)
            for session in failed:
                await session.close()

        return noting

    def _forget_ended(self) -> None:
        for session_id in [sid for sid, session in self._sessions.items() if not session.alive()]:
            del self._sessions[session_id]

    async def _make_room(self) -> bool:
        """Whether one more session may open, after closing the least recently used idle one if needed."""
        self._forget_ended()
        while len(self._sessions) + self._opening >= self.max_sessions:
            idle = [s for s in self._sessions.values() if s.in_flight == 0]
            if not idle:
                return False
            victim = min(idle, key=lambda s: s.last_used)
            del self._sessions[victim.session_id]
            self.evicted += 1
            logger.info("closing the least recently used session to make room for a new client")
            await victim.close()
        return True

    def end_notice_streams(self) -> None:
        """End every session's standalone GET stream (what the server sends unasked) gracefully: the gateway is
        stopping. One left open held the HTTP server's shutdown until it was cut, logged as an error with a
        traceback; a client that reconnects to a stopping gateway is refused as any new request."""
        for session in self._sessions.values():
            transport = session.manager._server_instances.get(session.session_id)
            if transport is not None:
                transport.close_standalone_sse_stream()

    async def close_all(self) -> None:
        """End every session (the gateway is stopping)."""
        for session in list(self._sessions.values()):
            await session.close()
        self._sessions.clear()


class OnePath:
    """ASGI: requests for ``path`` straight to ``endpoint``, everything else (other paths, the lifespan) to
    ``app``. Every request of a session is for one path: Starlette's routing and middleware in front of it
    cost each of them as much as the rest of the HTTP layer's own work does."""

    def __init__(self, path: str, endpoint: ASGIApp, app: ASGIApp) -> None:
        self._path = path
        self._endpoint = endpoint
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == self._path:
            await self._endpoint(scope, receive, send)
        else:
            await self._app(scope, receive, send)


class ServedBy:
    """ASGI endpoint: every request through ``book`` to ``manager``."""

    def __init__(self, book: SessionBook, manager: StreamableHTTPSessionManager) -> None:
        self._book = book
        self._manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._book.handle(self._manager, scope, receive, send)


async def read_ahead(receive: Receive) -> tuple[Receive | None, bytearray, bool]:
    """Read a request's body, up to :data:`_MAX_NOTED_BODY`, before it is served: ``(receive, body, complete)``,
    where ``receive`` hands the messages read out again first (``None``: the client left meanwhile) and
    ``complete`` says whether ``body`` is all of it. A body that never comes is the HTTP server's to end
    (:data:`~mcpvisor.gateway.limits.BODY_TIMEOUT_S`)."""
    read: list[Message] = []
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None, body, False
        read.append(message)
        body.extend(message.get("body", b""))
        if not message.get("more_body", False):
            complete = True
            break
        if len(body) > _MAX_NOTED_BODY:
            complete = False
            break

    async def replaying() -> Message:
        return read.pop(0) if read else await receive()

    return replaying, body, complete


def _naming_no_session(send: Send, *, everything: bool = False) -> Send:
    """``send``, with no session id in a refusal (status 400 or more), nor in any answer when ``everything``: the
    answer to a request without a session id that opened none (the SDK's refusals name the session it made for
    the request and closed at once: that id answers 404)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and (everything or message.get("status", 500) >= 400):
            headers = [(k, v) for k, v in message.get("headers") or () if k.lower() != _SESSION_HEADER]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _unsupported(asked: str | None) -> str | None:
    """The refusal of an ``MCP-Protocol-Version`` header the gateway does not speak (None: it does, or none)."""
    if asked is None or asked in HANDSHAKE_PROTOCOL_VERSIONS or asked in MODERN_PROTOCOL_VERSIONS:
        return None
    spoken = ", ".join(sorted({*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS}))
    return f"unsupported MCP-Protocol-Version {asked[:40]!r}; this gateway speaks {spoken}"


async def opening_request(scope: Scope, receive: Receive, send: Send) -> Receive | None:
    """``receive`` (what it read handed out again) for a request that may use a workspace (per-client workspaces);
    ``None`` when it was answered here, as it would be refused anyway and so must open no workspace (its host, its
    watcher and servers, one of the places): a handshake-era request without a session id that is no
    ``initialize``, a protocol version the gateway does not speak, and a 2026-07-28 request that is no POST of a
    JSON-RPC message."""
    headers = dict(scope.get("headers") or ())
    raw = headers.get(_VERSION_HEADER)
    version = raw.decode("latin-1") if raw is not None else None
    if (message := _unsupported(version)) is not None:
        await error_response(message, 400)(scope, receive, send)
        return None
    modern = version in MODERN_PROTOCOL_VERSIONS
    if _SESSION_HEADER in headers and not modern:
        return receive
    if scope.get("method") != "POST":
        refusal = error_response("Method Not Allowed", 405) if modern else error_response(_MISSING, 400)
        await refusal(scope, receive, send)
        return None
    read, body, complete = await read_ahead(receive)
    if read is None:
        return None
    if complete and not (_is_message(bytes(body)) if modern else opens_a_session(bytes(body))):
        refusal = error_response("Parse error", 400, PARSE_ERROR) if modern else _no_session_refusal(bytes(body))
        await refusal(scope, read, send)
        return None
    return read


_MISSING = "Bad Request: Missing session ID"


def _no_session_refusal(body: bytes, missing: str = _MISSING) -> Response:
    """The refusal of a handshake-era POST without a session id that opens none: a batch is told batches are not
    supported (a batch of one ``initialize`` too), anything else that its session id is missing (``missing``)."""
    try:
        batch = isinstance(pydantic_core.from_json(body), list)
    except ValueError:
        batch = False
    return error_response(f"Invalid Request: {shape_problem([])}", 400) if batch else error_response(missing, 400)


def _is_message(body: bytes) -> bool:
    """Whether ``body`` is a JSON object (a JSON-RPC message; the SDK answers what is wrong with it)."""
    try:
        return isinstance(pydantic_core.from_json(body), dict)
    except ValueError:
        return False


def _initialize(body: bytes) -> dict[str, Any] | None:
    """The ``initialize`` request ``body`` holds, or ``None`` (another request, or not JSON at all)."""
    try:
        request = pydantic_core.from_json(body)
    except ValueError:
        return None
    return request if isinstance(request, dict) and request.get("method") == "initialize" else None


def opens_a_session(body: bytes) -> bool:
    """Whether a request without a session id may open one: an ``initialize`` request (one not even JSON is
    refused as it is, without taking a seat)."""
    return _initialize(body) is not None


def _refused(body: bytes) -> bool:
    """Whether the ``initialize`` ``body`` holds is sure to be refused: for its params, or as no JSON-RPC request (no
    id, an id of another type, another ``jsonrpc``)."""
    request = _initialize(body)
    if request is None:
        return False
    if shape_problem(request) is not None or not is_request_id(request.get("id")):
        return True
    params = request.get("params")
    try:
        validate_client_request("initialize", LATEST_HANDSHAKE_VERSION, params if isinstance(params, dict) else None)
    except ValidationError:
        return True
    return False


def _negotiated(body: bytes) -> str | None:
    """The handshake version an ``initialize`` request body is answered with: the one it asks for when the
    gateway speaks it, else the latest (the version negotiation of the handshake era)."""
    params = (_initialize(body) or {}).get("params")
    asked = params.get("protocolVersion") if isinstance(params, dict) else None
    if not isinstance(asked, str):
        return None
    return asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION


def _at_version(scope: Scope, header: bytes | None, negotiated: str) -> Scope:
    """``scope`` with the session's negotiated version in its ``MCP-Protocol-Version`` header when the
    request's own is missing or names an older handshake version."""
    given = header.decode("latin-1") if header is not None else None
    versions = HANDSHAKE_PROTOCOL_VERSIONS
    if given == negotiated or (given is not None and (given not in versions or negotiated not in versions)):
        return scope
    if given is not None and versions.index(given) > versions.index(negotiated):
        return scope
    headers = [(k, v) for k, v in scope.get("headers") or () if k.lower() != _VERSION_HEADER]
    return {**scope, "headers": [*headers, (_VERSION_HEADER, negotiated.encode())]}
