"""LangChain tools and the create_agent middleware run real agent steps against real example servers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, tool
from pydantic import ConfigDict

from mcpvisor.core.config import Config
from mcpvisor.integrations.langchain import McpvisorMiddleware, McpvisorTool, McpvisorToolkit
from tests.helpers import light

Script = Callable[[list[BaseMessage], list[str]], Awaitable[AIMessage]]


class ScriptedChatModel(BaseChatModel):
    """A chat model whose answers come from a test's script, given the messages and the bound tools."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: Script
    bound: list[str] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self.model_copy(update={"bound": [t.name for t in tools]})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("the scripted model is asynchronous")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = await self.script(messages, self.bound)
        return ChatResult(generations=[ChatGeneration(message=message)])


def call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


@tool
def local_clock() -> str:
    """The agent's own tool, next to mcpvisor's."""
    return "noon"


async def test_the_middleware_follows_a_removal_mid_step_and_reports_the_reason(config: Config) -> None:
    seen: list[set[str]] = []
    errors: list[ToolMessage] = []

    async def script(messages: list[BaseMessage], bound: list[str]) -> AIMessage:
        seen.append(set(bound))
        if len(seen) == 1:
            await config.reinitialize_mcp_servers({"a": light("a")})  # b leaves while the model thinks
            return call("mcp__b__x", {"text": "late"}, "c1")
        if len(seen) == 2:
            errors.extend(m for m in messages if isinstance(m, ToolMessage))
            return call("mcp__a__echo", {"text": "hi"}, "c2")
        if len(seen) == 3:
            return call("local_clock", {}, "c3")
        answers = [m.content for m in messages if isinstance(m, ToolMessage)]
        return AIMessage(content=" | ".join(str(a) for a in answers))

    agent = create_agent(ScriptedChatModel(script=script), tools=[local_clock], middleware=[McpvisorMiddleware(config)])
    state = await agent.ainvoke({"messages": [HumanMessage("go")]})

    assert seen[0] == {"local_clock", "mcp__a__echo", "mcp__b__x", "mcp__b__y"}
    assert seen[1] == {"local_clock", "mcp__a__echo"}
    assert len(errors) == 1
    assert errors[0].status == "error"
    assert "mcp__b__x" in str(errors[0].content)
    assert "removed" in str(errors[0].content)
    final = state["messages"][-1]
    assert final.content.endswith("a:echo:hi | noon")


async def test_a_name_no_server_ever_had_gets_the_reason_and_unknown_names_stay_langchains(config: Config) -> None:
    async def script(messages: list[BaseMessage], bound: list[str]) -> AIMessage:
        if len(messages) == 1:
            return AIMessage(
                content="",
                tool_calls=[
                    {"name": "mcp__ghost__t", "args": {}, "id": "g", "type": "tool_call"},
                    {"name": "nonsense", "args": {}, "id": "n", "type": "tool_call"},
                    {"name": "echo", "args": {"text": "bare"}, "id": "e", "type": "tool_call"},
                ],
            )
        return AIMessage(content="end")

    agent = create_agent(ScriptedChatModel(script=script), tools=[], middleware=[McpvisorMiddleware(config)])
    state = await agent.ainvoke({"messages": [HumanMessage("go")]})
    replies = {m.tool_call_id: str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)}
    assert "no MCP server providing it is currently configured" in replies["g"]
    # LangChain's own answer listed only the tools the agent was built with ("try one of []")
    assert replies["n"] == "Error: nonsense is not a valid tool, try one of [mcp__a__echo, mcp__b__x, mcp__b__y]."
    later = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "n"]
    assert len(later) == 1
    assert replies["e"] == "a:echo:bare"  # a tool's own name, without its mcp__a__ prefix, still reaches it


async def test_toolkit_tools_follow_the_registry_and_carry_the_mcp_result(config: Config) -> None:
    toolkit = McpvisorToolkit(config)
    tools: list[BaseTool] = toolkit.get_tools()
    assert {t.name for t in tools} == {"mcp__a__echo", "mcp__b__x", "mcp__b__y"}
    y = next(t for t in tools if t.name == "mcp__b__y")
    assert isinstance(y, McpvisorTool)
    assert y.tool_call_schema["properties"] == {"text": {"type": "string"}}  # type: ignore[index]

    message = await y.ainvoke({"name": y.name, "args": {"text": "v"}, "id": "1", "type": "tool_call"})
    assert isinstance(message, ToolMessage)
    assert message.content == "b:y:v"
    assert message.artifact.content[0].text == "b:y:v"

    await config.reinitialize_mcp_servers({"a": light("a")})
    assert {t.name for t in toolkit.get_tools()} == {"mcp__a__echo"}
    stale = await y.ainvoke({"name": y.name, "args": {"text": "v"}, "id": "2", "type": "tool_call"})
    assert stale.status == "error"
    assert "removed from the configuration" in stale.content
    with pytest.raises(NotImplementedError, match="ainvoke"):
        y.invoke({"text": "v"})


async def test_two_sessions_give_one_agent_two_middlewares_by_their_own_names(config: Config) -> None:
    async def script(messages: list[BaseMessage], bound: list[str]) -> AIMessage:
        return AIMessage(content="end")

    two = [McpvisorMiddleware(config), McpvisorMiddleware(config, name="mcpvisor-other")]
    agent = create_agent(ScriptedChatModel(script=script), tools=[], middleware=two)  # one name twice is refused
    state = await agent.ainvoke({"messages": [HumanMessage("go")]})
    assert state["messages"][-1].content == "end"
