"""OpenTelemetry spans only when someone collects them.

The SDK wraps what it sends and receives in spans: every request a client sends (its JSON-RPC dispatcher's
``otel_span``) and every message a server receives (its ``OpenTelemetryMiddleware``). Without a configured tracer
provider those spans are no-ops, yet building them (attributes, the no-op span, its context) costs CPU on every
call: for a proxied call, about a thirtieth of the gateway's for the request sent upstream and a tenth for the one
received (the gateway skips that one: :mod:`mcpvisor.gateway.tracing`).

:func:`tracing` tells whether a span would be recorded anywhere; :func:`skip_unrecorded_spans` (called once by
:mod:`mcpvisor.core.client`) makes the SDK's outbound requests skip building their span while it would not. What a
no-op span did is kept: the current trace context is the same, so what ``_meta`` carries upstream is the same. A
program that sets a tracer provider (``trace.set_tracer_provider``, ``opentelemetry-instrument``) gets every span
from its next request on.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any

from mcp.shared import jsonrpc_dispatcher
from mcp.shared._otel import otel_span
from opentelemetry import trace

__all__ = ["skip_unrecorded_spans", "tracing"]

_NO_SPAN = contextlib.nullcontext(trace.INVALID_SPAN)


def tracing() -> bool:
    """Whether OpenTelemetry has a tracer provider, i.e. whether a span would be recorded anywhere."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _span_when_tracing(name: str, **options: Any) -> AbstractContextManager[trace.Span]:
    return otel_span(name, **options) if tracing() else _NO_SPAN


def skip_unrecorded_spans() -> None:
    """Make the SDK's outbound requests build their span only while :func:`tracing` (see the module)."""
    jsonrpc_dispatcher.otel_span = _span_when_tracing  # type: ignore[attr-defined,assignment]
