"""What every adapter needs from a session: its Config, and a tool result read as text or data."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NamedTuple

from mcpvisor.core.config import Config
from mcpvisor.core.errors import McpvisorError
from mcpvisor.core.lifecycle import running

if TYPE_CHECKING:
    from mcp_types import CallToolResult

    from mcpvisor.host.host import Host

__all__ = ["Media", "ToolAnswer", "call_registered_tool", "config_of", "media_of", "result_text"]


def config_of(source: Config | Host) -> Config:
    """The :class:`Config` behind ``source`` (a Config, or a Host's), while it runs: before ``async with`` and after
    it, :class:`NotRunningError` (else an agent run by mistake outside the block got no tools, and no error)."""
    if isinstance(source, Config):
        return running(source if source.is_running else None, "config")
    config = getattr(source, "config", None)  # a Host's raises NotRunningError itself
    if not isinstance(config, Config):
        raise TypeError(f"expected an mcpvisor Config or Host, got {type(source).__name__}")
    return config


def result_text(result: CallToolResult) -> str:
    """The result's text blocks joined; other blocks named; structured content as JSON when no text."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)  # type: ignore[union-attr]
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")  # type: ignore[union-attr]
        elif kind == "resource":
            resource = block.resource  # type: ignore[union-attr]
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {resource.uri}]")
        else:
            mime = getattr(block, "mime_type", None)
            parts.append(f"[{kind}{' ' + mime if mime else ''}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)


class Media(NamedTuple):
    """An image or audio block of a tool's result, for a framework that hands it to the model as such."""

    kind: str
    """``image`` or ``audio``."""
    mime_type: str
    data: str
    """Base64, as the block carries it."""


def media_of(result: CallToolResult | None) -> list[Media]:
    """The image and audio blocks of ``result`` (which :func:`result_text` can only name)."""
    if result is None:
        return []
    return [
        Media(block.type, block.mime_type, block.data)
        for block in result.content
        if block.type in ("image", "audio")  # ImageContent, AudioContent
    ]


class ToolAnswer:
    """A call's outcome: ``output`` (structured content, else text) or ``error`` (text for the model)."""

    __slots__ = ("error", "output", "result")

    def __init__(self, output: Any = None, error: str | None = None, result: CallToolResult | None = None) -> None:
        self.output = output
        self.error = error
        self.result = result


async def call_registered_tool(
    config: Config,
    name: str,
    arguments: dict[str, Any] | None,
    *,
    timeout_s: float | None = None,
    meta: dict[str, Any] | None = None,
) -> ToolAnswer:
    """Call registered tool ``name`` (``meta``: the request's ``_meta``); an unknown tool, a failed call or an
    ``isError`` result is an error."""
    try:
        result = await config.call_tool(name, arguments, timeout_s=timeout_s, meta=meta)
    except McpvisorError as exc:
        return ToolAnswer(error=str(exc))
    if result.is_error:
        return ToolAnswer(error=result_text(result) or f"tool {name!r} failed", result=result)
    output: Any = result.structured_content if result.structured_content is not None else result_text(result)
    return ToolAnswer(output=output, result=result)
