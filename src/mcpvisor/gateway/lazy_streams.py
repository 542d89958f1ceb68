"""Handshake-era responses as plain JSON unless a request needs a stream.

The SDK's streamable-HTTP transport answers every request POST of a handshake-era session with an SSE
stream: headers, a priming event, the response as an event, the end, and per request the tasks and
memory streams that machinery needs. Most calls emit nothing before their result, and a stream then
costs both sides for nothing (measured: about a third of the gateway's time per call, and the
client's SSE parsing). The 2026-07-28 handler in the same SDK already defers the choice; this module
does the same for the handshake era, as the transport spec allows ("either ``text/event-stream`` ...
or ``application/json``; the client MUST support both"):

- the request is dispatched at once; its first message decides;
- its response first → one ``application/json`` body, no stream;
- a notification or a request for the client first (progress, a log message, sampling, elicitation),
  or nothing for :data:`COMMIT_AFTER_S` → the SSE stream the SDK would have sent from the start:
  the priming event, what came so far (stored again after the priming event, so a resuming client
  replays in order), then the rest; a long silent call keeps its connection alive with the pings.

Everything else (``initialize``, notifications, responses, errors, GET and DELETE) is the SDK's own
code path. The transport is the SDK's ``StreamableHTTPServerTransport``; :class:`LazySessionManager`
makes sessions with it.
"""

from __future__ import annotations

from functools import partial
from typing import Any
from uuid import uuid4

import anyio
import pydantic_core
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.streamable_http import (
    CONTENT_TYPE_SSE,
    MCP_SESSION_ID_HEADER,
    REQUEST_STREAM_BUFFER_SIZE,
    EventMessage,
    SSEEvent,
    StreamableHTTPServerTransport,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

__all__ = ["COMMIT_AFTER_S", "LazySessionManager", "LazyStreamTransport"]

COMMIT_AFTER_S = 5.0
"""A request silent this long gets its SSE stream (whose pings keep the connection alive)."""

_CLOSED = object()
"""The request's stream closed before anything came (the session ended, or the stream was closed)."""


class LazyStreamTransport(StreamableHTTPServerTransport):
    """The SDK's transport, answering a request POST with JSON unless the request streams (see the module)."""

    async def _handle_post_request(self, scope: Scope, request: Request, receive: Receive, send: Send) -> None:
        message = await _plain_request(request)
        if message is None or self.is_json_response_enabled or self._read_stream_writer is None:
            await super()._handle_post_request(scope, request, receive, send)  # the SDK's path, errors included
            return
        if not await self._validate_accept_header(request, scope, send):
            return
        if not self._check_content_type(request):
            await super()._handle_post_request(scope, request, receive, send)  # it answers 415
            return
        if not await self._validate_request_headers(request, send):
            return
        protocol_version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER, DEFAULT_NEGOTIATED_VERSION)
        request_id = str(message.id)
        events_in: MemoryObjectSendStream[EventMessage]
        events: MemoryObjectReceiveStream[EventMessage]
        events_in, events = anyio.create_memory_object_stream(REQUEST_STREAM_BUFFER_SIZE)  # (unsubscripted: cheaper)
        self._request_streams[request_id] = (events_in, events)
        try:
            await self._read_stream_writer.send(
                self._create_session_message(message, request, request_id, protocol_version)
            )
            first: EventMessage | object | None = None
            with anyio.move_on_after(COMMIT_AFTER_S):
                try:
                    first = await events.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    first = _CLOSED
        except BaseException:
            await self._clean_up_memory_streams(request_id)
            raise
        if isinstance(first, EventMessage) and isinstance(first.message, JSONRPCResponse | JSONRPCError):
            await self._clean_up_memory_streams(request_id)
            await self._create_json_response(first.message)(scope, receive, send)
            return
        # A stream after all. Its priming event is minted now (a JSON answer needs none), and what came before it
        # is stored again after it, so that every event id the client sees resumes in order.
        priming_event = await self._mint_priming_event(request_id, protocol_version)
        pending = [await self._restored(request_id, first)] if isinstance(first, EventMessage) else []
        if first is _CLOSED and priming_event is None:
            await self._clean_up_memory_streams(request_id)
            await self._create_error_response(
                "Session terminated before the request completed", _INTERNAL_ERROR_STATUS, _INTERNAL_ERROR
            )(scope, receive, send)
            return
        await self._stream(scope, receive, send, request_id, priming_event, pending, closed=first is _CLOSED)

    async def _restored(self, request_id: str, event_message: EventMessage) -> EventMessage:
        if self._event_store is None:
            return event_message
        return EventMessage(
            event_message.message, await self._event_store.store_event(request_id, event_message.message)
        )

    async def _stream(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        request_id: str,
        priming_event: SSEEvent | None,
        pending: list[Any],
        *,
        closed: bool,
    ) -> None:
        """Commit to the SSE stream the SDK sends: priming event, what came already, then the rest."""
        sse_in: MemoryObjectSendStream[SSEEvent]
        sse_out: MemoryObjectReceiveStream[SSEEvent]
        sse_in, sse_out = anyio.create_memory_object_stream(0)
        self._sse_stream_writers[request_id] = sse_in
        headers = {
            "Cache-Control": "no-cache, no-transform",
            "Connection": "keep-alive",
            "Content-Type": CONTENT_TYPE_SSE,
            **({MCP_SESSION_ID_HEADER: self.mcp_session_id} if self.mcp_session_id else {}),
        }
        response = EventSourceResponse(
            content=sse_out,
            data_sender_callable=partial(self._send_events, request_id, sse_in, priming_event, pending, closed),
            headers=headers,
        )
        try:
            await response(scope, receive, send)
        finally:
            await sse_out.aclose()

    async def _send_events(
        self,
        request_id: str,
        sse_in: MemoryObjectSendStream[SSEEvent],
        priming_event: SSEEvent | None,
        pending: list[EventMessage],
        closed: bool,
    ) -> None:
        events: MemoryObjectReceiveStream[EventMessage] | None = None
        if not closed and request_id in self._request_streams:
            events = self._request_streams[request_id][1]
        try:
            async with sse_in:
                if priming_event is not None:
                    await sse_in.send(priming_event)
                for event_message in pending:
                    await sse_in.send(self._create_event_data(event_message))
                if events is None or any(_is_response(e) for e in pending):
                    return
                async with events:
                    async for event_message in events:
                        await sse_in.send(self._create_event_data(event_message))
                        if _is_response(event_message):
                            break
        except anyio.ClosedResourceError:  # closed by close_sse_stream(): the client resumes with Last-Event-ID
            pass
        finally:
            self._sse_stream_writers.pop(request_id, None)
            await self._clean_up_memory_streams(request_id)


class LazySessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, whose sessions use :class:`LazyStreamTransport`."""

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        transport = LazyStreamTransport(
            mcp_session_id=uuid4().hex,
            is_json_response_enabled=self.json_response,
            event_store=self.event_store,
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )
        session_id = transport.mcp_session_id
        assert session_id is not None
        if requestor is not None:
            self._session_owners[session_id] = requestor
        self._server_instances[session_id] = transport
        return transport


_INTERNAL_ERROR = -32603
_INTERNAL_ERROR_STATUS: Any = 500


async def _plain_request(request: Request) -> JSONRPCRequest | None:
    """The POST's message when it is a request other than ``initialize`` (the case handled here), else ``None``.
    The body stays cached on ``request`` for the SDK's own path."""
    try:
        message = jsonrpc_message_adapter.validate_python(pydantic_core.from_json(await request.body()), by_name=False)
    except (ValueError, ValidationError):
        return None
    if not isinstance(message, JSONRPCRequest) or message.method == "initialize":
        return None
    return message


def _is_response(event_message: EventMessage) -> bool:
    return isinstance(event_message.message, JSONRPCResponse | JSONRPCError)
