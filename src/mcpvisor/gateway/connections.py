"""The gateway's HTTP connections: uvicorn's protocol with the guards it lacks against clients that cost too much.

A connection beyond the cap is closed as it arrives; one that dribbles its headers or its body, that sends headers
too large, or that reads nothing of what it is sent is closed (:func:`guarded_protocol`). :mod:`mcpvisor.gateway.http`
serves its apps with it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, ClassVar

from mcp_types import INVALID_REQUEST

from mcpvisor.gateway.bursts import Burst
from mcpvisor.gateway.limits import BODY_TIMEOUT_S, MAX_HEADER_BYTES, WRITE_STALL_S, HttpLimits

__all__ = ["guarded_protocol"]

logger = logging.getLogger(__name__)


def _http_protocol() -> type[asyncio.Protocol]:
    """uvicorn's fastest HTTP/1.1 protocol here: httptools' C parser when it is installed, else h11 (pure Python)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is missing (it has wheels for the usual platforms)
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    return HttpToolsProtocol


_HEADERS_TOO_LARGE_SAID = (
    f"Request Header Fields Too Large: the request's target and headers take more than {MAX_HEADER_BYTES >> 10} KiB; "
    "send fewer or shorter headers"
)


def _refusal(status: bytes, message: str) -> bytes:
    """A whole HTTP response that refuses a request with a JSON-RPC error (as every refusal of the gateway) and
    closes its connection, for the protocol to write itself."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}).encode()
    head = b"HTTP/1.1 %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
    return head % (status, len(body)) + body


_HEADERS_TOO_LARGE = _refusal(b"431 Request Header Fields Too Large", _HEADERS_TOO_LARGE_SAID)
_UNSAID = logging.Logger("mcpvisor.gateway.refused", logging.CRITICAL + 1)  # (a refused connection's uvicorn logger)


def _body_timeout_response() -> bytes:
    """The 408 a request whose body did not come in :data:`BODY_TIMEOUT_S` gets before its connection is closed."""
    message = (
        f"Request Timeout: the request's body did not arrive whole within {BODY_TIMEOUT_S:g} s of its headers; send "
        "all of it right after them"
    )
    return _refusal(b"408 Request Timeout", message)


class _HeadTooLarge(Exception):
    """Raised from the parser's callback that finds a request's head too large (answered 431 already)."""


def guarded_protocol(limits: HttpLimits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with the guards uvicorn lacks: a connection beyond ``limits.max_connections``
    is closed as it arrives; one that has not sent a request's complete headers ``limits.header_timeout_s``
    after it opened (or after its previous response), or its body :data:`BODY_TIMEOUT_S` after its headers,
    is closed, so clients that dribble bytes cannot hold file descriptors (nor, a body, a session's seat);
    and a request whose target and headers pass :data:`MAX_HEADER_BYTES` is answered 431 and its connection
    closed, whether they come in one read or several (with httptools' parser, which keeps whatever it is sent;
    h11's own bound, 16 KiB, applies where httptools is missing). A request read whole at once costs no timer.

    Both of uvicorn's protocols set ``cycle`` when a request's headers are complete, and call
    ``on_response_complete`` when its response is sent: the timer notes the cycle it was armed under,
    and closes the connection only if no newer request arrived and none is being answered."""
    base: Any = _http_protocol()
    refusals = Burst(logger, "refusing a connection: %d are open already", "refused %d more connections (%d are open)")

    class GuardedProtocol(base):  # type: ignore[misc]
        paused: ClassVar[set[GuardedProtocol]] = set()
        """The connections whose client has not taken what was written to it (cut as the server stops)."""
        _stall_timer: asyncio.TimerHandle | None = None
        _unsent = 0
        _header_timer: asyncio.TimerHandle | None = None
        _armed_under: object = None
        _body_timer: asyncio.TimerHandle | None = None
        _in_head = False
        _head_bytes = 0
        _parsed_head = 0
        _began_here = False
        _refused = False

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # the rest of a refused request's bytes are dropped unread
            self._began_here = False
            super().data_received(data)
            if self._in_head and not self._began_here:  # a head spans reads: bounded before its lines end (the
                self._head_bytes += len(data)  # read it began in may end an earlier request's body: not counted)
                if self._head_bytes > MAX_HEADER_BYTES:
                    self._refuse_head()
            else:
                self._arm_body_timer()

        def _arm_body_timer(self) -> None:
            """Time the body still on its way, unless its request waits behind an earlier one still answered (a
            session's GET stream): its body is not read meanwhile (its time starts with its turn), and a 408 would
            land inside the earlier answer."""
            if self._body_timer is None and (cycle := self.cycle) is not None and cycle.more_body:
                waiting = bool(getattr(self, "pipeline", ()))
                if not cycle.response_complete and not waiting and not self.transport.is_closing():
                    self._body_timer = self.loop.call_later(BODY_TIMEOUT_S, self._body_too_slow, cycle)

        def on_message_begin(self) -> None:
            self._in_head, self._began_here, self._head_bytes, self._parsed_head = True, True, 0, 0
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:  # (httptools: a head read whole in one chunk is counted here)
            self._count_head(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count_head(len(name) + len(value) + 4)
            super().on_header(name, value)

        def _count_head(self, size: int) -> None:
            self._parsed_head += size
            if self._parsed_head > MAX_HEADER_BYTES:
                self._refuse_head()
                raise _HeadTooLarge  # stops the parser: the request is never dispatched

        def _refuse_head(self) -> None:
            """The 431, and the end of the connection, once the requests before the refused one are answered (a
            pipelined client gets those answers first, in order)."""
            self._refused, self.logger = True, _UNSAID  # uvicorn's "Invalid HTTP request" is said at INFO below
            cycle = self.cycle
            busy = (cycle is not None and not cycle.response_complete) or bool(getattr(self, "pipeline", ()))
            if not busy and not self.transport.is_closing():
                logger.info("closing a connection whose request headers exceed %d bytes", MAX_HEADER_BYTES)
                self.transport.write(_HEADERS_TOO_LARGE)
                self.transport.close()

        def send_400_response(self, msg: str) -> None:  # (uvicorn's answer to the parser stopped above: not sent)
            if not self._refused:
                super().send_400_response(msg)

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm_body_timer()
            super().on_message_complete()

        def _disarm_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _body_too_slow(self, cycle: Any) -> None:
            self._body_timer = None
            if cycle.more_body and not cycle.response_complete and not self.transport.is_closing():
                logger.info("closing a connection that sent no complete request body in %g s", BODY_TIMEOUT_S)
                if not cycle.response_started:  # (the app waits on the body: it can answer nothing before the close)
                    self.transport.write(_body_timeout_response())
                self.transport.close()

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                refusals.said(self.loop, limits.max_connections)  # (once per burst: a client may make thousands)
                self.transport.close()
                return
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            self._disarm_body_timer()
            self.resume_writing()  # (its stall timer)
            super().connection_lost(exc)

        def pause_writing(self) -> None:  # the client's socket is full: it reads slowly, or not at all
            super().pause_writing()
            if self._stall_timer is None:
                self._arm_stall_timer()
                self.paused.add(self)

        def _arm_stall_timer(self) -> None:
            self._unsent = self.transport.get_write_buffer_size()
            self._stall_timer = self.loop.call_later(WRITE_STALL_S, self._stalled)

        def resume_writing(self) -> None:
            super().resume_writing()
            self.paused.discard(self)
            if self._stall_timer is not None:
                self._stall_timer.cancel()
                self._stall_timer = None

        def _stalled(self) -> None:
            self._stall_timer = None
            if self.transport.get_write_buffer_size() < self._unsent:  # it reads, slowly: it gets another while
                self._arm_stall_timer()
                return
            logger.info("closing a connection whose client read nothing it was sent for %g s", WRITE_STALL_S)
            self.cut()

        def cut(self) -> None:
            """Cut the connection (its client reads nothing: a write waits on it): a disconnect to the app, so a
            stream held open to it ends, and what its session sends next is no longer held behind that write."""
            self.transport.abort()  # close() would wait to send what it does not read

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._refused:
                self._refuse_head()  # (its turn may have come)
            elif not self.transport.is_closing():
                self._arm_header_timer()  # the next request on this connection gets the same time
                self._arm_body_timer()  # (one pipelined behind the answered one: its turn has come)

        def _arm_header_timer(self) -> None:
            self._disarm_header_timer()
            self._armed_under = self.cycle
            self._header_timer = self.loop.call_later(limits.header_timeout_s, self._headers_too_slow)

        def _disarm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            idle = self.cycle is None or self.cycle.response_complete
            if self.cycle is self._armed_under and idle and not self.transport.is_closing():
                logger.info("closing a connection that sent no complete request in %g s", limits.header_timeout_s)
                self.transport.close()

    return GuardedProtocol
