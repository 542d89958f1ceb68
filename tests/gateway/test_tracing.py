"""OpenTelemetry spans of the gateway's inbound messages and of the requests it sends its servers: recorded when a
tracer provider is set, not even built when none is (SPEC §8: the call path carries nothing it does not need)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mcp.shared._otel as sdk_otel
import pytest
from mcp import Client
from opentelemetry import trace

from tests.gateway.test_gateway import running, server, text_of


class RecordingTracer(trace.NoOpTracer):
    def __init__(self) -> None:
        self.names: list[str] = []

    @contextmanager
    def start_as_current_span(self, name: str, *args: Any, **kwargs: Any) -> Iterator[trace.Span]:  # type: ignore[override]
        self.names.append(name)
        yield trace.INVALID_SPAN


class RecordingProvider(trace.NoOpTracerProvider):
    def __init__(self, tracer: RecordingTracer) -> None:
        self.tracer = tracer

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return self.tracer


@pytest.mark.parametrize("provider_set", [True, False])
async def test_spans_are_recorded_exactly_when_a_tracer_provider_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider_set: bool
) -> None:
    tracer = RecordingTracer()
    monkeypatch.setattr(sdk_otel, "_tracer", tracer)  # the SDK's module-level tracer, restored afterwards
    if provider_set:
        monkeypatch.setattr(trace, "_TRACER_PROVIDER", RecordingProvider(tracer))
    async with running(tmp_path, user={"mcpServers": {"a": server("a")}}, processes=True) as r:  # a real stdio server
        async with Client(r.gateway.server) as client:
            assert text_of(await client.call_tool("mcp__a__echo", {"text": "hi"})) == "a:echo:hi"
    served = [name for name in tracer.names if name == "tools/call mcp__a__echo"]
    assert served == (["tools/call mcp__a__echo"] if provider_set else [])
    sent = [name for name in tracer.names if name == "MCP send tools/call echo"]  # the request to the server
    assert sent == (["MCP send tools/call echo"] if provider_set else [])
