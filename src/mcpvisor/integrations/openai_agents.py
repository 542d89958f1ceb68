"""An OpenAI Agents SDK MCP server backed by a running mcpvisor session (``pip install mcpvisor[openai-agents]``).

::

    async with Host(HostOptions(env=os.environ)) as host:
        agent = Agent(name="assistant", mcp_servers=[McpvisorMCPServer(host)])
        await Runner.run(agent, "...")

The Agents SDK lists an agent's MCP tools at every turn, so a settings edit changes the tools the
model sees at its next turn without rebuilding the agent. Tools are named as mcpvisor registers them
(``mcp__<server>__<tool>``), unique across servers. A call to a tool that left between the model's
answer and the call (removed, held for approval, rejected, its server down) answers with an MCP error
result carrying mcpvisor's reason, which the SDK hands to the model as the tool's output. The
session's lifetime is the caller's: :meth:`connect` and :meth:`cleanup` do nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcpvisor.integrations import framework_missing

try:
    from agents.mcp import MCPServer
except ModuleNotFoundError as exc:  # the framework's extra is not installed
    raise framework_missing(exc, "openai_agents", "the OpenAI Agents SDK", "openai-agents") from None
from mcp_types import CallToolResult, GetPromptResult, ListPromptsResult, TextContent, Tool

from mcpvisor.integrations._session import call_registered_tool, config_of

if TYPE_CHECKING:
    from agents.agent import AgentBase
    from agents.run_context import RunContextWrapper

    from mcpvisor.core.config import Config
    from mcpvisor.host.host import Host

__all__ = ["McpvisorMCPServer"]


class McpvisorMCPServer(MCPServer):
    """Every tool and prompt the session has connected right now, as one Agents SDK MCP server."""

    def __init__(
        self,
        session: Config | Host,
        *,
        name: str = "mcpvisor",
        timeout_s: float | None = None,
        use_structured_content: bool = False,
        **options: Any,
    ) -> None:
        """``session``: an entered :class:`~mcpvisor.Config` or :class:`~mcpvisor.host.Host`;
        ``options`` go to :class:`agents.mcp.MCPServer` (``require_approval``, guardrails, ...)."""
        super().__init__(use_structured_content=use_structured_content, **options)
        self._session = session
        self._name = name
        self._timeout_s = timeout_s

    @property
    def name(self) -> str:
        """The server's name as the Agents SDK shows it (``name=``; default ``mcpvisor``)."""
        return self._name

    @property
    def config(self) -> Config:
        """The session's :class:`Config`; :class:`NotRunningError` outside its ``async with``."""
        return config_of(self._session)

    async def connect(self) -> None:
        """Nothing to do: the session is already running."""

    async def cleanup(self) -> None:
        """Nothing to do: the session belongs to whoever entered it."""

    async def list_tools(
        self, run_context: RunContextWrapper[Any] | None = None, agent: AgentBase | None = None
    ) -> list[Tool]:
        """Every tool the session has connected now, named ``mcp__<server>__<tool>`` (read again at each turn)."""
        return [
            entry.tool.model_copy(update={"name": entry.name}) for entry in self.config.tool_registry.get_all_tools()
        ]

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        """Call registered tool ``tool_name``; ``meta`` (from the SDK's ``tool_meta_resolver``) goes to its server as
        the request's ``_meta``. A tool that is not there or fails answers with an error result saying why."""
        answer = await call_registered_tool(self.config, tool_name, arguments, timeout_s=self._timeout_s, meta=meta)
        if answer.result is not None:
            return answer.result
        return CallToolResult(is_error=True, content=[TextContent(type="text", text=answer.error or "tool failed")])

    async def list_prompts(self) -> ListPromptsResult:
        """Every prompt the session has connected now, by its registered name."""
        prompts = [
            entry.prompt.model_copy(update={"name": entry.name})
            for entry in self.config.prompt_registry.get_all_prompts()
        ]
        return ListPromptsResult(prompts=prompts)

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> GetPromptResult:
        """Raises :class:`~mcpvisor.core.errors.McpvisorError` naming the prompt when no server has it."""
        return await self.config.get_prompt(name, {k: str(v) for k, v in (arguments or {}).items()})
