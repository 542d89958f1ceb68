"""Adapters used outside the session's ``async with``: a NotRunningError, never an empty tool list (an agent run by
mistake after the block got no tools and no error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpvisor.core.config import Config
from mcpvisor.core.errors import NotRunningError
from mcpvisor.core.server_config import ConnectionOptions
from mcpvisor.examples.in_memory import light_servers_in_memory
from mcpvisor.host.host import Host, HostOptions
from mcpvisor.integrations.langchain import McpvisorToolkit
from mcpvisor.integrations.openai_agents import McpvisorMCPServer
from mcpvisor.integrations.pydantic_ai import McpvisorToolset
from tests.helpers import light
from tests.layout import make_layout, replace_text


async def listed_by_each_adapter(session: Config | Host) -> list[list[str]]:
    toolkit, server, toolset = McpvisorToolkit(session), McpvisorMCPServer(session), McpvisorToolset(session)
    return [
        [tool.name for tool in toolkit.get_tools()],
        [tool.name for tool in await server.list_tools()],
        sorted(toolset.config.tool_registry.names()),
    ]


async def test_after_a_config_or_a_host_exited_every_adapter_says_it_is_not_running(tmp_path: Path) -> None:
    options = ConnectionOptions(log_dir=tmp_path / "logs", in_memory=light_servers_in_memory)
    config = Config(mcp_servers={"a": light("a")}, options=options)
    with pytest.raises(NotRunningError, match="the config is not running"):
        await listed_by_each_adapter(config)  # before the block too
    async with config:
        await config.initialize()
        assert await listed_by_each_adapter(config) == [["mcp__a__echo"]] * 3
    layout = make_layout(tmp_path / "host", MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"a": light("a").entry()}}))
    host = Host(HostOptions(env=layout.env, workspace=layout.root, watch=False))
    async with host:
        assert await listed_by_each_adapter(host) == [["mcp__a__echo"]] * 3
    for session, what in ((config, "config"), (host, "host")):
        with pytest.raises(NotRunningError, match=f"the {what} is not running"):
            McpvisorToolkit(session).get_tools()
        with pytest.raises(NotRunningError, match=f"the {what} is not running"):
            await McpvisorMCPServer(session).list_tools()
        with pytest.raises(NotRunningError, match=f"the {what} is not running"):
            _ = McpvisorToolset(session).config
