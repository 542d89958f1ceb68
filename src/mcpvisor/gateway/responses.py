"""A JSON-RPC error as an HTTP response: what the gateway answers a request it refuses before the SDK sees it."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["JsonRefusals", "error_response"]


_SAID_BETTER = {
    (413, "Request body too large"): (
        f"Request body too large: the gateway takes at most {DEFAULT_MAX_REQUEST_BODY_SIZE >> 20} MiB in one "
        "request; send less at once"
    ),
    (400, "Invalid Content-Type header"): "Invalid Content-Type header: send the body as application/json",
    (406, ""): "Not Acceptable: the Accept header must list application/json and text/event-stream",
    (421, "Invalid Host header"): (
        "Invalid Host header: this gateway listens on a loopback address and answers only requests for localhost, "
        "127.0.0.1, [::1] or its own address (protection against DNS rebinding); connect through one of those"
    ),
    (403, "Invalid Origin header"): (
        "Invalid Origin header: this gateway listens on a loopback address and answers browsers only for pages from "
        "localhost, 127.0.0.1, [::1] or its own address (protection against DNS rebinding)"
    ),
}
"""The SDK's refusals that do not say what the gateway takes, as the gateway says them (by status and text)."""


def error_response(
    message: str, status_code: int, code: int = INVALID_REQUEST, *, headers: Mapping[str, str] | None = None
) -> Response:
    """A JSON-RPC error (no request id) at an HTTP status: the SDK client surfaces the message."""
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message))
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=status_code,
        media_type="application/json",
        headers=headers,
    )


class JsonRefusals:
    """An ASGI app whose refusals are all JSON-RPC errors: those the SDK's HTTP layers answer in plain text (a bad
    ``Host`` 421, ``Origin`` 403, ``Content-Type`` 400, a body over 4 MiB 413) or with no body at all (406, 405)
    keep their status and headers, their text becomes the error's message (the status's phrase when empty; what the
    gateway takes, when the SDK's text does not say it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400 and not _is_json(message):
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await _as_json_rpc(held, send)

        await self.app(scope, receive, sending)


def _is_json(start: Message) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(b"application/json") for k, v in start["headers"])


async def _as_json_rpc(held: list[Message], send: Send) -> None:
    start, *bodies = held
    text = b"".join(m.get("body", b"") for m in bodies).decode("utf-8", "replace").strip()
    status = start["status"]
    try:
        message = _SAID_BETTER.get((status, text)) or text or HTTPStatus(status).phrase
    except ValueError:  # a status HTTP does not name
        message = "refused"
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=INVALID_REQUEST, message=message))
    payload = body.model_dump_json(by_alias=True, exclude_unset=True).encode()
    kept = [(k, v) for k, v in start["headers"] if k.lower() not in (b"content-type", b"content-length")]
    headers = [*kept, (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
