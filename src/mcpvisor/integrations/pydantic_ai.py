"""A pydantic-ai toolset that follows a running mcpvisor session (``pip install mcpvisor[pydantic-ai]``).

::

    async with Host(HostOptions(env=os.environ)) as host:
        agent = Agent("openai:gpt-6.1-sol", toolsets=[McpvisorToolset(host)])
        await agent.run("...")

The toolset lists the session's registered tools (``mcp__<server>__<tool>``) at every run step, so
a settings edit changes what the model sees at its next request without rebuilding the agent. A call
to a tool that left between the model's request and the call (removed, held for approval, rejected,
its server down) raises :class:`~pydantic_ai.exceptions.ModelRetry` with mcpvisor's reason, which
pydantic-ai hands to the model as a retry prompt, the same path as any other unknown tool.
"""

from __future__ import annotations

from base64 import b64decode
from typing import TYPE_CHECKING, Any

from mcpvisor.integrations import framework_missing

try:
    from pydantic_ai import BinaryContent
    from pydantic_ai.exceptions import ModelRetry
    from pydantic_ai.tools import AgentDepsT, RunContext, ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
except ModuleNotFoundError as exc:  # the framework's extra is not installed
    raise framework_missing(exc, "pydantic_ai", "Pydantic AI", "pydantic-ai") from None
from pydantic_core import SchemaValidator, core_schema

from mcpvisor.integrations._session import call_registered_tool, config_of, media_of

if TYPE_CHECKING:
    from mcpvisor.core.config import Config
    from mcpvisor.host.host import Host

__all__ = ["McpvisorToolset"]

_ANY_ARGS = SchemaValidator(core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()))
"""Arguments pass through as given: the MCP server validates them against its own schema."""


class McpvisorToolset(AbstractToolset[AgentDepsT]):
    """Every tool the session has connected right now, re-read at each run step."""

    def __init__(
        self,
        session: Config | Host,
        *,
        id: str | None = None,  # pydantic-ai names a toolset's identity `id`
        max_retries: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """``session``: an entered :class:`~mcpvisor.Config` or :class:`~mcpvisor.host.Host`.
        ``max_retries``: retries per tool (default: the agent's); ``timeout_s``: bound on each call."""
        self._session = session
        self._id = id
        self._max_retries = max_retries
        self._timeout_s = timeout_s

    @property
    def id(self) -> str | None:
        return self._id

    @property
    def config(self) -> Config:
        """The session's :class:`Config`; :class:`NotRunningError` outside its ``async with``."""
        return config_of(self._session)

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        retries = self._max_retries if self._max_retries is not None else ctx.max_retries
        tools: dict[str, ToolsetTool[AgentDepsT]] = {}
        for entry in self.config.tool_registry.get_all_tools():
            definition = ToolDefinition(
                name=entry.name,
                description=entry.tool.description or entry.tool.title or "",
                parameters_json_schema=dict(entry.tool.input_schema),
                metadata={"mcpvisor_server": entry.server, "mcp_tool": entry.tool.name},
            )
            tools[entry.name] = ToolsetTool(
                toolset=self, tool_def=definition, max_retries=retries, args_validator=_ANY_ARGS
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        answer = await call_registered_tool(self.config, name, tool_args, timeout_s=self._timeout_s)
        if answer.error is not None:
            raise ModelRetry(answer.error)
        media = []  # images and sounds reach the model as themselves, not as their names
        for item in media_of(answer.result):
            try:
                media.append(BinaryContent(b64decode(item.data, validate=True), media_type=item.mime_type))
            except ValueError:  # not base64: the text names it, as it names what it cannot pass on
                continue
        return [answer.output, *media] if media else answer.output
