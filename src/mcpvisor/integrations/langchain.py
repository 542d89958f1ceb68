"""LangChain tools that follow a running mcpvisor session (``pip install mcpvisor[langchain]``).

Two ways in:

- :class:`McpvisorToolkit` for any LangChain code: ``toolkit.get_tools()`` returns one
  :class:`McpvisorTool` per tool connected right now; call it again to follow a settings edit.
- :class:`McpvisorMiddleware` for ``langchain.agents.create_agent``: it offers the current tools at
  every model call and runs mcpvisor's tool calls, so one agent follows every edit::

      async with Host(HostOptions(env=os.environ)) as host:
          agent = create_agent(model, tools=[], middleware=[McpvisorMiddleware(host)])
          await agent.ainvoke({"messages": [("user", "...")]})

A tool that left between the model's answer and the call (removed, held for approval, rejected, its
server down) raises :class:`~langchain_core.tools.ToolException` with mcpvisor's reason; the tool's
``handle_tool_error`` turns it into an error ``ToolMessage`` the model reads, as LangChain does for
any failing tool. The tools are asynchronous only: run agents with ``ainvoke``/``astream``.
"""

from __future__ import annotations

import json
from base64 import b64decode
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mcpvisor.integrations import framework_missing

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain.agents.middleware.types import ToolCallRequest
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.messages.content import ContentBlock, create_image_block, create_text_block
    from langchain_core.tools import BaseTool, BaseToolkit, ToolException
except ModuleNotFoundError as exc:  # the framework's extra is not installed
    raise framework_missing(exc, "langchain", "LangChain", "langchain") from None
from pydantic import ConfigDict, PrivateAttr

from mcpvisor.core.registry import TOOL_PREFIX
from mcpvisor.integrations._session import call_registered_tool, config_of, media_of

if TYPE_CHECKING:
    from langgraph.types import Command
    from mcp_types import CallToolResult

    from mcpvisor.core.config import Config
    from mcpvisor.core.registry import RegisteredTool
    from mcpvisor.host.host import Host

__all__ = ["McpvisorMiddleware", "McpvisorTool", "McpvisorToolkit"]


class McpvisorTool(BaseTool):
    """One registered tool (``mcp__<server>__<tool>``), called through the session when invoked.

    Its content is the result's text (or its structured content as JSON), followed by its images and audio as
    content blocks when it has any; its artifact is the MCP ``CallToolResult`` itself."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    handle_tool_error: bool | str | Callable[[ToolException], str] | None = True
    response_format: str = "content_and_artifact"  # type: ignore[assignment]
    timeout_s: float | None = None
    _config: Config = PrivateAttr()

    @classmethod
    def of(cls, config: Config, entry: RegisteredTool, *, timeout_s: float | None = None) -> McpvisorTool:
        tool = cls(
            name=entry.name,
            description=entry.tool.description or entry.tool.title or entry.name,
            args_schema=dict(entry.tool.input_schema),
            timeout_s=timeout_s,
            metadata={"mcpvisor_server": entry.server, "mcp_tool": entry.tool.name},
        )
        tool._config = config
        return tool

    @classmethod
    def departed(cls, config: Config, name: str) -> McpvisorTool:
        """A tool the session no longer has: calling it answers with mcpvisor's reason."""
        tool = cls(name=name, description=name, args_schema={"type": "object", "properties": {}})
        tool._config = config
        return tool

    def _run(self, *args: Any, **kwargs: Any) -> tuple[str | list[ContentBlock], CallToolResult | None]:
        raise NotImplementedError(f"{self.name}: mcpvisor tools are asynchronous; use ainvoke/astream")

    async def _arun(self, *args: Any, **kwargs: Any) -> tuple[str | list[ContentBlock], CallToolResult | None]:
        kwargs.pop("run_manager", None)
        answer = await call_registered_tool(self._config, self.name, kwargs, timeout_s=self.timeout_s)
        if answer.error is not None:
            raise ToolException(answer.error)
        content = answer.output if isinstance(answer.output, str) else json.dumps(answer.output)
        media = media_of(answer.result)
        if not media:
            return content, answer.result
        blocks: list[ContentBlock] = [create_text_block(content)] if content else []
        # Images reach the model as themselves, not as their names (a tool's message takes no audio: the text
        # names a sound, as it names data that is not base64).
        blocks.extend(
            create_image_block(base64=item.data, mime_type=item.mime_type)
            for item in media
            if item.kind == "image" and _is_base64(item.data)
        )
        return (blocks, answer.result) if len(blocks) > bool(content) else (content, answer.result)


class McpvisorToolkit(BaseToolkit):
    """The session's tools as LangChain tools; :meth:`get_tools` reads the registry at each call."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    session: Any
    """An entered :class:`~mcpvisor.Config` or :class:`~mcpvisor.host.Host`."""
    timeout_s: float | None = None

    def __init__(self, session: Config | Host, *, timeout_s: float | None = None) -> None:
        """``session``: a :class:`~mcpvisor.Config` or :class:`~mcpvisor.host.Host`, entered by the time tools are
        taken; ``timeout_s``: replaces each server's call timeout (None: the server's)."""
        super().__init__(session=session, timeout_s=timeout_s)

    @property
    def config(self) -> Config:
        return config_of(self.session)

    def get_tools(self) -> list[BaseTool]:
        """The session's tools now, as LangChain tools (a snapshot: a tool added later is not in it; one removed since
        answers with the reason). :class:`NotRunningError` outside the session's ``async with``."""
        config = self.config
        return [
            McpvisorTool.of(config, entry, timeout_s=self.timeout_s) for entry in config.tool_registry.get_all_tools()
        ]


class McpvisorMiddleware(AgentMiddleware[Any, Any]):
    """Offers the session's current tools at every model call of a ``create_agent`` agent and runs
    the calls to them; the agent's own tools are kept as they are."""

    def __init__(self, session: Config | Host, *, timeout_s: float | None = None, name: str = "mcpvisor") -> None:
        """``name``: one of its own for each such middleware of one agent (two sessions), which LangChain requires."""
        super().__init__()
        self.toolkit = McpvisorToolkit(session, timeout_s=timeout_s)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelResponse[Any] | AIMessage:
        own = [tool for tool in request.tools if not isinstance(tool, McpvisorTool)]
        return await handler(request.override(tools=[*own, *self.toolkit.get_tools()]))

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
    ) -> ToolMessage | Command[Any]:
        if request.tool is not None and not isinstance(request.tool, McpvisorTool):
            return await handler(request)
        name = request.tool_call["name"]
        config = self.toolkit.config
        entry = config.tool_registry.get_tool(name)
        if entry is not None:
            return await handler(
                request.override(tool=McpvisorTool.of(config, entry, timeout_s=self.toolkit.timeout_s))
            )
        if request.tool is not None or name.startswith(TOOL_PREFIX):
            return await handler(request.override(tool=McpvisorTool.departed(config, name)))
        own = config.tool_registry.find_by_own_name(name)  # a model that left out the mcp__<server>__ prefix
        if len(own) == 1:
            return await handler(
                request.override(tool=McpvisorTool.of(config, own[0], timeout_s=self.toolkit.timeout_s))
            )
        if own:  # several servers offer it: the call answers which names to use
            return await handler(request.override(tool=McpvisorTool.departed(config, name)))
        answer = await handler(request)  # the agent's own (or a later middleware's); LangChain names only its tools
        unknown = f"Error: {name} is not a valid tool, try one of ["
        if isinstance(answer, ToolMessage) and isinstance(answer.content, str) and answer.content.startswith(unknown):
            theirs = [n.strip() for n in answer.content[len(unknown) :].rstrip(".]").split(",") if n.strip()]
            offered = ", ".join(dict.fromkeys([*theirs, *sorted(config.tool_registry.names())]))
            answer.content = f"{unknown}{offered}]."
        return answer


def _is_base64(data: str) -> bool:
    try:
        b64decode(data, validate=True)
    except ValueError:
        return False
    return True
