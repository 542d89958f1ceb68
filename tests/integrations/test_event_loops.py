"""An agent run on an event loop of its own (``run_sync`` in a worker thread) while the session runs on another."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions
from mcpvisor.integrations.pydantic_ai import McpvisorToolset
from tests.helpers import light, wait_until


async def test_an_agent_on_another_threads_event_loop_gets_its_answers(tmp_path: Path) -> None:
    # The server answers after a moment, when the agent's loop is idle: nothing but the answer wakes it.
    servers = {"a": light("a", "--tools", "echo,slow", "--slow-call", "slow=0.5", "--prompts", "brief")}
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        await config.initialize()

        async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if len(messages) == 1:
                return ModelResponse(parts=[ToolCallPart("mcp__a__slow", {"text": "hi"}, tool_call_id="c1")])
            last = messages[-1]
            assert isinstance(last, ModelRequest)
            returned = [p for p in last.parts if isinstance(p, ToolReturnPart)]
            return ModelResponse(parts=[TextPart(f"got {returned[0].content}")])

        agent = Agent(FunctionModel(model), toolsets=[McpvisorToolset(config)])
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def run_elsewhere() -> None:
            async def both() -> None:
                outcome["agent"] = (await agent.run("go")).output
                prompt = await config.get_prompt("brief", {"topic": "rivers"})
                outcome["prompt"] = prompt.messages[0].content.text  # type: ignore[union-attr]

            try:
                asyncio.run(both())
            except BaseException as exc:  # reported by the test below
                outcome["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=run_elsewhere, daemon=True)  # left behind if its loop stalls
        worker.start()
        await wait_until(done.is_set, what="the agent's run on its own event loop")
        await anyio.to_thread.run_sync(worker.join)

    assert "error" not in outcome, outcome.get("error")
    assert outcome["agent"] == "got a:slow:hi"
    assert outcome["prompt"] == "a:brief:rivers"
