"""A JSON-RPC error as an HTTP response: what the gateway answers a request it refuses before the SDK sees it."""

from __future__ import annotations

from collections.abc import Mapping

from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.responses import Response

__all__ = ["error_response"]


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
