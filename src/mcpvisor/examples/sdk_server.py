"""An example MCP server built on the official SDK (`mcp.server.MCPServer`).

Run it as ``python -m mcpvisor.examples.sdk_server --help``. It speaks both protocol eras: the
handshake era (``initialize``; list-changed pushed on the session) and the modern era
(``server/discover``; list-changed delivered on ``subscriptions/listen`` streams), over stdio,
streamable HTTP (``/mcp``) or SSE (``/sse``).

Two things `MCPServer` does not do by itself are added here:

- Handshake-era capabilities: `MCPServer` answers ``initialize`` with ``listChanged: false`` for
  tools and prompts (it never passes `NotificationOptions`), so a middleware sets both to true in
  the ``initialize`` result. Modern-era ``server/discover`` derives them from the
  ``subscriptions/listen`` handler, which `MCPServer` serves, so they are already true there.
- Announcing a change: `add_tool`/`remove_tool` notify nobody, so ``set_tools`` publishes on the
  subscription bus (`Context.notify_tools_changed`, modern era) and pushes
  ``notifications/tools/list_changed`` on the calling session (handshake era; dropped by the SDK on
  modern connections). The same goes for prompts.
"""

from __future__ import annotations

import inspect
import os
import re
import threading
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.prompts.base import Prompt
from mcp.server.mcpserver.resources import TextResource
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

from mcpvisor import __version__
from mcpvisor.examples._options import (
    ASK_CLIENT_DESCRIPTION,
    CONTROL_TOOLS,
    CRASH_EXIT_CODE,
    Options,
    answer_text,
    ask_request,
    parse_options,
    perform_start_actions,
    prompt_text,
    split_names,
    tool_text,
)


class ExampleServer:
    """An `MCPServer` whose configurable tools and prompts can be replaced while it runs."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.mcp: MCPServer[Any] = MCPServer(
            options.name,
            version=__version__,
            middleware=[self._crash_or_hang, _advertise_list_changed],
        )
        self._tools: tuple[str, ...] = ()
        self._prompts: tuple[str, ...] = ()
        self.set_tools(options.tools)
        self.set_prompts(options.prompts)
        for uri in options.resources:
            text = f"{options.name}:{uri}"
            self.mcp.add_resource(TextResource(uri=uri, name=uri, text=text, mime_type="text/plain"))
        for template in options.templates:
            self.mcp.resource(template, name=template, mime_type="text/plain")(_template_reader(options.name, template))
        if options.big:

            def blob(mib: float) -> str:
                return "x" * int(mib * 1024 * 1024)

            self.mcp.add_tool(blob, description="Answer with MIB mebibytes of text.", structured_output=False)
        if options.control:
            self._add_control_tools()

    def set_tools(self, names: tuple[str, ...]) -> None:
        """Replace the configurable tools (those named like a control tool are left out)."""
        if self.options.control:
            names = tuple(name for name in names if name not in CONTROL_TOOLS)
        for tool in self._tools:
            self.mcp.remove_tool(tool)
        for tool in names:
            self.mcp.add_tool(
                _text_tool(self.options.name, tool),
                name=tool,
                description=f"Return {tool_text(self.options.name, tool, '{text}')!r}.",
                structured_output=False,
            )
        self._tools = names

    def set_prompts(self, names: tuple[str, ...]) -> None:
        """Replace the configurable prompts."""
        for prompt in self._prompts:
            self.mcp.remove_prompt(prompt)
        for prompt in names:
            self.mcp.add_prompt(
                Prompt.from_function(
                    _topic_prompt(self.options.name, prompt),
                    name=prompt,
                    description=f"One user message: {prompt_text(self.options.name, prompt, '{topic}')!r}.",
                )
            )
        self._prompts = names

    def _add_control_tools(self) -> None:
        async def set_tools(names: str, ctx: Context[Any, Any]) -> str:
            """Replace the configurable tools (comma-separated names) and announce the change."""
            self.set_tools(split_names(names))
            await ctx.notify_tools_changed()  # modern era: subscriptions/listen streams
            await ctx.session.send_tool_list_changed()  # handshake era: this session
            return ",".join(self._tools)

        async def set_prompts(names: str, ctx: Context[Any, Any]) -> str:
            """Replace the configurable prompts (comma-separated names) and announce the change."""
            self.set_prompts(split_names(names))
            await ctx.notify_prompts_changed()
            await ctx.session.send_prompt_list_changed()
            return ",".join(self._prompts)

        async def sleep(seconds: float) -> str:
            """Sleep for the given number of seconds, then return 'slept'."""
            await anyio.sleep(seconds)
            return "slept"

        def pid() -> str:
            """Return the server's process id."""
            return str(os.getpid())

        async def log(level: types.LoggingLevel, text: str, ctx: Context[Any, Any]) -> str:
            """Send a log message at the given level (in the 2026-07-28 era only to a request that asked for it)."""
            await ctx.log(level, text, logger_name="sdk")
            return "sent"

        for tool in (set_tools, set_prompts, sleep, pid):
            self.mcp.add_tool(tool, structured_output=False)
        self.mcp.add_tool(ask_client, description=ASK_CLIENT_DESCRIPTION, structured_output=False)
        self.mcp.add_tool(log, structured_output=False)
        if self.options.resources:

            async def touch_resource(uri: str, ctx: Context[Any, Any]) -> str:
                """Announce that a resource changed to the subscriptions/listen streams subscribed to it."""
                await ctx.notify_resource_updated(uri)
                return "notified"

            self.mcp.add_tool(touch_resource, structured_output=False)

    async def _crash_or_hang(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: apply `--crash-on-call` and `--hang-on-call` before the tool is looked up."""
        if ctx.method == "tools/call" and ctx.params is not None:
            tool = ctx.params.get("name")
            if tool is not None and tool == self.options.crash_on_call:
                os._exit(CRASH_EXIT_CODE)
            if tool is not None and tool == self.options.hang_on_call:
                await anyio.sleep_forever()
        return await call_next(ctx)

    def run(self) -> None:
        """Serve on the transport the options name, until the transport closes."""
        if self.options.transport == "stdio":
            self.mcp.run("stdio")
        elif self.options.transport == "streamable-http":
            self.mcp.run("streamable-http", host=self.options.host, port=self.options.port)
        else:
            self.mcp.run("sse", host=self.options.host, port=self.options.port)


async def _advertise_list_changed(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Middleware: advertise `listChanged` for tools and prompts in the handshake-era `initialize` result."""
    result = await call_next(ctx)
    if ctx.method != "initialize" or not isinstance(result, dict):
        return result
    capabilities = dict(result.get("capabilities") or {})
    for kind in ("tools", "prompts"):
        if isinstance(capabilities.get(kind), dict):
            capabilities[kind] = {**capabilities[kind], "listChanged": True}
    return {**result, "capabilities": capabilities}


_INPUT_REQUEST: TypeAdapter[types.InputRequest] = TypeAdapter(types.InputRequest)
_ANSWER_TYPES: dict[str, type[types.CreateMessageResult | types.ElicitResult | types.ListRootsResult]] = {
    "sampling": types.CreateMessageResult,
    "elicitation": types.ElicitResult,
    "roots": types.ListRootsResult,
}


async def ask_client(kind: str, ctx: Context[Any, Any], text: str = "") -> str | types.InputRequiredResult:
    """Ask the client ('sampling', 'elicitation' or 'roots') and return its answer: a request in the middle of
    the call in the handshake era, an input-required result answered by the client's retry in the modern era."""
    request = _INPUT_REQUEST.validate_python(ask_request(kind, text))
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        answer = (ctx.input_responses or {}).get("ask")
        if answer is None:
            return types.InputRequiredResult(input_requests={"ask": request}, request_state="asked")
    else:
        metadata = ServerMessageMetadata(related_request_id=ctx.request_context.request_id)
        answer = await ctx.session.send_request(request, _ANSWER_TYPES[kind], metadata=metadata)
    return answer_text(kind, answer.model_dump(by_alias=True, mode="json", exclude_none=True))


def _text_tool(server: str, tool: str) -> Callable[..., str]:
    def run(text: str = "") -> str:
        return tool_text(server, tool, text)

    run.__name__ = tool
    return run


def _topic_prompt(server: str, prompt: str) -> Callable[..., str]:
    def render(topic: str = "") -> str:
        return prompt_text(server, prompt, topic)

    render.__name__ = prompt
    return render


def _template_reader(name: str, template: str) -> Callable[..., str]:
    """A read function for ``template`` whose parameters are the template's variables: a matching URI reads
    ``"{name}:{uri}"``, as in the light server."""
    variables = re.findall(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", template)

    def read(**values: str) -> str:
        uri = template
        for variable, value in values.items():
            uri = uri.replace(f"{{{variable}}}", value)
        return f"{name}:{uri}"

    parameters = [inspect.Parameter(v, inspect.Parameter.KEYWORD_ONLY, annotation=str) for v in variables]
    read.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    read.__annotations__ = {**dict.fromkeys(variables, str), "return": str}
    return read


def main(argv: list[str] | None = None) -> None:
    options = parse_options(argv, "python -m mcpvisor.examples.sdk_server", network=True)
    perform_start_actions(options)
    if options.hang_on_initialize:
        threading.Event().wait()  # never serve: neither initialize nor server/discover is answered
    ExampleServer(options).run()


if __name__ == "__main__":
    main()
