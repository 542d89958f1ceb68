"""The pydantic-ai toolset runs real agent steps against real example servers (SPEC §0, issue: live toolsets)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from mcpvisor.core.config import Config
from mcpvisor.host.host import Host, HostOptions
from mcpvisor.integrations.pydantic_ai import McpvisorToolset
from tests.helpers import LIGHT, light, wait_until
from tests.layout import make_layout, replace_text


def last_parts(messages: list[ModelMessage]) -> list[object]:
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    return list(last.parts)


async def test_a_tool_removed_mid_step_gets_a_retry_with_the_reason_and_leaves_the_next_list(config: Config) -> None:
    seen: list[set[str]] = []
    retries: list[str] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append({t.name for t in info.function_tools})
        step = len(seen)
        if step == 1:
            # the user removes server b while the model is thinking about calling it
            await config.reinitialize_mcp_servers({"a": light("a")})
            return ModelResponse(parts=[ToolCallPart("mcp__b__x", {"text": "late"}, tool_call_id="c1")])
        if step == 2:
            # pydantic-ai reports a ModelRetry to the model as a tool return marked as retried
            retries.extend(
                str(p.content)
                for p in last_parts(messages)
                if isinstance(p, RetryPromptPart) or (isinstance(p, ToolReturnPart) and p.outcome == "retried")
            )
            return ModelResponse(parts=[ToolCallPart("mcp__a__echo", {"text": "hi"}, tool_call_id="c2")])
        returned = [p for p in last_parts(messages) if isinstance(p, ToolReturnPart)]
        return ModelResponse(parts=[TextPart(f"done: {returned[0].content}")])

    agent = Agent(FunctionModel(model), toolsets=[McpvisorToolset(config)])
    result = await agent.run("go")

    assert seen[0] == {"mcp__a__echo", "mcp__b__x", "mcp__b__y"}
    assert seen[1] == {"mcp__a__echo"}
    assert len(retries) == 1
    assert "mcp__b__x" in retries[0]
    assert "removed" in retries[0]
    assert result.output == "done: a:echo:hi"


async def test_arguments_reach_the_server_and_its_error_reply_is_a_retry_with_its_message(config: Config) -> None:
    toolset = McpvisorToolset(config, max_retries=2, id="mcpvisor")
    assert toolset.id == "mcpvisor"
    retried: list[str] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        definitions = {t.name: t for t in info.function_tools}
        assert definitions["mcp__b__y"].parameters_json_schema["properties"] == {"text": {"type": "string"}}
        if len(messages) == 1:  # a wrong argument type: the server answers with a JSON-RPC error
            return ModelResponse(parts=[ToolCallPart("mcp__b__y", {"text": 5}, tool_call_id="c1")])
        parts = last_parts(messages)
        if not retried:
            retried.extend(str(p.content) for p in parts if isinstance(p, ToolReturnPart | RetryPromptPart))
            return ModelResponse(parts=[ToolCallPart("mcp__b__y", json.dumps({"text": "payload"}), tool_call_id="c2")])
        returned = [p for p in parts if isinstance(p, ToolReturnPart)]
        return ModelResponse(parts=[TextPart(str(returned[0].content))])

    result = await Agent(FunctionModel(model), toolsets=[toolset]).run("go")
    assert len(retried) == 1
    assert "argument 'text' must be a string" in retried[0]
    assert result.output == "b:y:payload"


async def test_a_settings_edit_changes_the_tools_at_the_next_step_of_the_same_agent(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))

    def save(servers: dict[str, list[str]]) -> None:
        entries = {
            name: {"command": sys.executable, "args": ["-m", LIGHT, "--name", name, *args]}
            for name, args in servers.items()
        }
        replace_text(layout.paths.user, json.dumps({"mcpServers": entries}))

    save({"a": []})
    seen: list[set[str]] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append({t.name for t in info.function_tools})
        return ModelResponse(parts=[TextPart("ok")])

    async with Host(HostOptions(env=layout.env, workspace=layout.root)) as host:
        agent = Agent(FunctionModel(model), toolsets=[McpvisorToolset(host)])
        await agent.run("first")
        save({"a": [], "c": ["--tools", "z"]})
        await wait_until(lambda: host.config.tool_registry.get_tool("mcp__c__z") is not None, what="c connected")
        await agent.run("second")

    assert seen == [{"mcp__a__echo"}, {"mcp__a__echo", "mcp__c__z"}]
