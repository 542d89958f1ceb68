"""Fail closed: a definition check that crashes holds back everything the server offers (never lets it
through unchecked)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from mcp_types import Prompt, Tool

from mcpvisor.core.config import Config
from mcpvisor.core.errors import ToolNotFoundError
from mcpvisor.core.registry import Admitted
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from tests.helpers import light


def crashing_gate(name: str, cfg: McpServerConfig, tools: Sequence[Tool], prompts: Sequence[Prompt]) -> Admitted:
    raise RuntimeError("the pin store exploded")


async def test_a_definition_check_that_crashes_holds_back_every_tool_and_prompt(tmp_path: Path) -> None:
    servers = {"s": light("s", "--tools", "echo,other", "--prompts", "brief")}
    async with Config(
        mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path), definition_gate=crashing_gate
    ) as config:
        await config.initialize()
        client = config.manager.get_client("s")
        assert client is not None
        assert client.status == "connected"
        assert config.tool_registry.names() == frozenset()
        assert config.prompt_registry.names() == frozenset()
        held = config.manager.held("s")
        assert held is not None
        assert (sorted(held.held_tools), held.held_prompts) == (["echo", "other"], ("brief",))
        with pytest.raises(ToolNotFoundError) as caught:
            await config.call_tool("mcp__s__echo", {"text": "x"})
        assert caught.value.reason == "held"
