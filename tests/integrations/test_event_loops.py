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
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from mcpvisor.integrations.pydantic_ai import McpvisorToolset
from tests.helpers import WAIT_S, light, light_after_gate, wait_until


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


def run_on_a_loop_of_its_own(work: Any) -> tuple[threading.Event, dict[str, Any], threading.Thread]:
    """``work()`` (a coroutine function) run by ``asyncio.run`` in a worker thread; its outcome, once done is set."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["result"] = asyncio.run(work())
        except BaseException as exc:  # reported by the test
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=run, daemon=True)  # left behind if its loop stalls
    worker.start()
    return done, outcome, worker


async def test_servers_changed_from_another_threads_event_loop_are_connected(tmp_path: Path) -> None:
    servers = {"a": light("a")}
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        await config.initialize()

        async def change() -> list[str]:
            await config.reinitialize_mcp_servers(
                {**servers, "b": light("b", "--tools", "slow", "--slow-call", "slow=0.5")}
            )
            result = await config.call_tool("mcp__b__slow", {"text": "hi"})
            return [result.content[0].text, *sorted(config.tool_registry.names())]  # type: ignore[union-attr]

        done, outcome, worker = run_on_a_loop_of_its_own(change)
        # This loop idles meanwhile (no polling wakes it): only what the change does on it, thread-safely, does.
        assert await anyio.to_thread.run_sync(done.wait, WAIT_S), "the change made on another event loop stalled"
        await anyio.to_thread.run_sync(worker.join)
        assert "error" not in outcome, outcome.get("error")
        assert outcome["result"] == ["b:slow:hi", "mcp__a__echo", "mcp__b__slow"]
        later = await config.call_tool("mcp__b__slow", {"text": "later"})  # its connection outlives that loop
        assert later.content[0].text == "b:slow:later"  # type: ignore[union-attr]


async def test_a_pass_waited_for_from_another_threads_event_loop_is_seen_to_end(tmp_path: Path) -> None:
    """``reconciled()`` waited on this loop's event from the other loop: the pass's end never woke it."""
    gate = tmp_path / "gate"
    servers = {"a": McpServerConfig.model_validate(light_after_gate("a", gate))}
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        waiting = threading.Event()

        async def wait_for_the_pass() -> list[str]:
            waiting.set()
            await config.reconciled()
            return sorted(config.tool_registry.names())

        async with anyio.create_task_group() as tg:
            tg.start_soon(config.initialize)
            await wait_until(lambda: config.manager.starting("a"), what="a's start")
            done, outcome, worker = run_on_a_loop_of_its_own(wait_for_the_pass)
            await anyio.to_thread.run_sync(waiting.wait, WAIT_S)
            gate.touch()
        assert await anyio.to_thread.run_sync(done.wait, WAIT_S), "the wait made on another event loop stalled"
        await anyio.to_thread.run_sync(worker.join)
        assert "error" not in outcome, outcome.get("error")
        assert outcome["result"] == ["mcp__a__echo"]
