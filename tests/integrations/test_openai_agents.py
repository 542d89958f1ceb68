"""The OpenAI Agents SDK MCP server object runs real agent turns against real example servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions
from mcpvisor.integrations.openai_agents import McpvisorMCPServer
from tests.helpers import light


def tool_outputs(call: ModelCall) -> dict[str, str]:
    """The function-call outputs the model receives in this turn's input, by call id."""
    items: list[Any] = call.input if isinstance(call.input, list) else []
    return {
        item["call_id"]: str(item["output"])
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


async def test_a_removal_between_turns_changes_the_tools_and_a_late_call_gets_the_reason(config: Config) -> None:
    seen: list[set[str]] = []
    server = McpvisorMCPServer(config)

    async def first(call: ModelCall) -> Any:
        seen.append({t.name for t in call.tools})
        await config.reinitialize_mcp_servers({"a": light("a")})  # b leaves while the model thinks
        return [function_call("mcp__b__x", {"text": "late"}, call_id="c1")]

    async def second(call: ModelCall) -> Any:
        seen.append({t.name for t in call.tools})
        assert "removed from the configuration" in tool_outputs(call)["c1"]
        return [function_call("mcp__a__echo", {"text": "hi"}, call_id="c2")]

    async def third(call: ModelCall) -> Any:
        return [assistant_message(f"got {tool_outputs(call)['c2']}")]

    model = ScriptedModel([ModelStep.respond(first), ModelStep.respond(second), ModelStep.respond(third)])
    agent = Agent(name="assistant", model=model, mcp_servers=[server])
    result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))

    assert seen == [{"mcp__a__echo", "mcp__b__x", "mcp__b__y"}, {"mcp__a__echo"}]
    assert "a:echo:hi" in result.final_output
    model.assert_complete()


async def test_prompts_are_listed_and_fetched_through_the_session(tmp_path: Path) -> None:
    servers = {"p": light("p", "--prompts", "brief")}
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        await config.initialize()
        server = McpvisorMCPServer(config, name="tools")
        await server.connect()
        assert server.name == "tools"
        listed = await server.list_prompts()
        assert [p.name for p in listed.prompts] == ["brief"]
        fetched = await server.get_prompt("brief", {"topic": "rivers"})
        assert "rivers" in fetched.messages[0].content.text  # type: ignore[union-attr]
        await server.cleanup()
        assert config.manager.get_client("p") is not None  # cleanup leaves the session running


async def test_the_meta_of_the_sdks_tool_meta_resolver_reaches_the_server(tmp_path: Path) -> None:
    servers = {"m": light("m", "--tools", "echo", "--echo-meta", "echo")}
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        await config.initialize()
        server = McpvisorMCPServer(config, tool_meta_resolver=lambda context: {"tenant": context.tool_name})

        async def first(call: ModelCall) -> Any:
            return [function_call("mcp__m__echo", {"text": "hi"}, call_id="c1")]

        async def second(call: ModelCall) -> Any:
            return [assistant_message(tool_outputs(call)["c1"])]

        model = ScriptedModel([ModelStep.respond(first), ModelStep.respond(second)])
        agent = Agent(name="assistant", model=model, mcp_servers=[server])
        result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))

    assert '"tenant": "mcp__m__echo"' in result.final_output
    model.assert_complete()
