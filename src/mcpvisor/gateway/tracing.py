"""OpenTelemetry spans for the gateway's inbound messages only when someone collects them.

The SDK's server wraps every inbound message in a span (its ``OpenTelemetryMiddleware``, on by
default). Without a configured tracer provider those spans are no-ops, yet building them (attributes,
context extraction from ``_meta``, the no-op span itself) is about a tenth of the gateway's CPU per
proxied call. :func:`only_when_tracing` keeps the SDK's middleware and skips it while OpenTelemetry
has no tracer provider: a program that sets one (``trace.set_tracer_provider``, or
``opentelemetry-instrument``) gets every span, from the next message on. (The spans of the requests sent
upstream: :mod:`mcpvisor.core.tracing`.)
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware

from mcpvisor.core.tracing import tracing

__all__ = ["only_when_tracing", "tracing"]

_SDK_SPANS = "OpenTelemetryMiddleware"


def only_when_tracing(middleware: list[ServerMiddleware[Any]]) -> list[ServerMiddleware[Any]]:
    """``middleware`` with the SDK's span middleware run only while :func:`tracing` (the rest as is)."""
    return [_WhenTracing(m) if type(m).__name__ == _SDK_SPANS else m for m in middleware]


class _WhenTracing:
    def __init__(self, spans: ServerMiddleware[Any]) -> None:
        self._spans = spans

    async def __call__(self, ctx: Any, call_next: CallNext) -> HandlerResult:
        if tracing():
            return await self._spans(ctx, call_next)
        return await call_next(ctx)
