"""A tool's images and audio reach the model through the LangChain and pydantic-ai adapters as content, not as
their names: a real server process answers with an image and a sound."""

from __future__ import annotations

import base64
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic_ai import Agent, BinaryContent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from mcpvisor.integrations.langchain import McpvisorToolkit
from mcpvisor.integrations.pydantic_ai import McpvisorToolset
from tests.helpers import raw_server

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-not-really-a-picture").decode()
WAV = base64.b64encode(b"RIFF-not-really-a-sound").decode()

SCREENSHOT_SERVER = raw_server(
    "shots",
    f"    PNG, WAV = {PNG!r}, {WAV!r}\n"
    """
    def answer(method, params):
        if method == "tools/list":
            return {"tools": [{"name": "screenshot", "inputSchema": {"type": "object"}}]}
        if method != "tools/call":
            return {}
        content = [{"type": "text", "text": "the screen:"}, {"type": "image", "data": PNG, "mimeType": "image/png"}]
        content.append({"type": "audio", "data": WAV, "mimeType": "audio/wav"})
        content.append({"type": "image", "data": "not base64!", "mimeType": "image/png"})
        return {"content": content}
    """,
)


@pytest.fixture
async def shots(tmp_path: Path) -> AsyncIterator[Config]:
    script = tmp_path / "shots.py"
    script.write_text(SCREENSHOT_SERVER)
    server = McpServerConfig(command=sys.executable, args=[str(script)])
    async with Config(mcp_servers={"shots": server}, options=ConnectionOptions(log_dir=tmp_path)) as config:
        await config.initialize()
        yield config


async def test_langchain_tools_carry_images_and_audio_as_content_blocks(shots: Config) -> None:
    [tool] = McpvisorToolkit(shots).get_tools()
    message = await tool.ainvoke({"name": tool.name, "args": {}, "id": "1", "type": "tool_call"})
    assert isinstance(message.content, list), message.content
    assert [{k: v for k, v in block.items() if k != "id"} for block in message.content] == [
        {"type": "text", "text": "the screen:\n[image image/png]\n[audio audio/wav]\n[image image/png]"},
        {"type": "image", "base64": PNG, "mime_type": "image/png"},
    ]  # LangChain's tool messages take no audio, and the data that is not base64 is only named


async def test_pydantic_ai_gets_images_and_audio_as_binary_content(shots: Config) -> None:
    seen: list[object] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("mcp__shots__screenshot", {}, tool_call_id="c1")])
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        for part in last.parts:
            if isinstance(part, UserPromptPart | ToolReturnPart) and isinstance(part.content, list):
                seen.extend(part.content)
        return ModelResponse(parts=[TextPart("seen")])

    result = await Agent(FunctionModel(model), toolsets=[McpvisorToolset(shots)]).run("look")
    assert result.output == "seen"
    media = [item for item in seen if isinstance(item, BinaryContent)]
    assert [(m.media_type, m.data) for m in media] == [
        ("image/png", base64.b64decode(PNG)),
        ("audio/wav", base64.b64decode(WAV)),
    ]
