"""The gateway: every admitted, connected server's tools and prompts as one MCP server (SPEC §0.3, §9).

Built on the SDK's low-level ``Server``: every request is answered from the live registries, so a
settings edit or an upstream ``list_changed`` shows on the next ``tools/list`` with no restart.
When the exposed set changes the gateway tells its clients, in both protocol eras:

- modern era (2026-07-28): ``bus.publish(ToolsListChanged())`` on an ``InMemorySubscriptionBus``
  served by ``ListenHandler(bus)`` (``subscriptions/listen`` streams);
- handshake era: ``Connection.send_tool_list_changed()`` on every live handshake connection, seen by
  a ``Server.middleware`` from its ``initialize`` on and forgotten when it closes.

Notices never trail the change: one goes out in the step after the registries changed (what changed in
the same step goes out together), so a client reacting to it finds the new tools, and a tool is never
callable for long without its notice, however long the rest of its reconcile takes. Upstream failures become
``CallToolResult(is_error=True)``, never a JSON-RPC error.

Usage::

    async with Host(HostOptions(env=os.environ)) as host, Gateway(host.config) as gateway:
        await gateway.serve_stdio()          # or: await gateway.serve_http("127.0.0.1", 8765)

Over HTTP, :mod:`mcpvisor.gateway.workspaces` serves one such gateway per workspace a client
names (``run_gateway(..., per_client_workspaces=True)``, ``mcpvisor serve --per-client-workspaces``).
"""

from __future__ import annotations

import logging
import socket
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Route

from mcpvisor import __version__
from mcpvisor.core.call_logs import LOG_LEVELS, CallLog, hearing, rank
from mcpvisor.core.client import McpClient, Notice, Progress
from mcpvisor.core.client_requests import answering
from mcpvisor.core.config import Config
from mcpvisor.core.errors import McpvisorError, ToolNotFoundError
from mcpvisor.core.events import McpClientUpdate, McpEvent, PromptsChanged, ServerStateChanged, ToolsChanged
from mcpvisor.core.lifecycle import StackOwner
from mcpvisor.core.registry import RegisteredPrompt, mcp_tool_name
from mcpvisor.gateway.asks import ROUND_TIMEOUT_S, CallingClient, Rounds, pass_log, served_logger
from mcpvisor.gateway.http import (
    DEFAULT_HTTP_LIMITS,
    MCP_PATH,
    HttpLimits,
    OneWorkspace,
    bind_http_socket,
    serve_asgi_socket,
    transport_security,
)
from mcpvisor.gateway.limits import DEFAULT_NAME_BUDGET, MIN_NAME_BUDGET
from mcpvisor.gateway.names import ServedNames
from mcpvisor.gateway.replay import ReplayBuffer
from mcpvisor.gateway.resources import (
    ServedResource,
    parse_namespaced_uri,
    served_resources,
    servers_matching_templates,
)
from mcpvisor.gateway.sessions import ServedBy, SessionBook, session_manager
from mcpvisor.gateway.subscriptions import ResourceSubscriptions, release_all
from mcpvisor.gateway.tracing import only_when_tracing

if TYPE_CHECKING:
    from mcp.shared._stream_protocols import ReadStream, WriteStream  # the types of Server.run's streams
    from mcp.shared.message import SessionMessage

__all__ = ["DRAIN_S", "PAGE_SIZE", "SHUTTING_DOWN", "Gateway"]

logger = logging.getLogger(__name__)

DRAIN_S = 5.0
"""When the gateway stops, how long calls in flight may take to finish before they are ended."""
SHUTTING_DOWN = "the gateway is shutting down; make the call again once it is back"
NOTIFY_TIMEOUT_S = 5.0
"""Bound on pushing one notice to one handshake-era client (a stuck client never stalls the others)."""

PAGE_SIZE = 500
"""Listings longer than this are served in pages (``nextCursor``)."""


RESOURCE_NOT_FOUND = -32002
"""The JSON-RPC error code MCP uses for an unknown resource."""

_MODERN_NOTICES: dict[str, type[ToolsListChanged | PromptsListChanged | ResourcesListChanged]] = {
    "tools": ToolsListChanged,
    "prompts": PromptsListChanged,
    "resources": ResourcesListChanged,
}

_Ctx: TypeAlias = ServerRequestContext[dict[str, Any]]


class _ShuttingDown(Exception):
    """A call the gateway refused or ended because it is stopping."""


class _GatewayServer(Server[dict[str, Any]]):
    """A low-level server that advertises ``listChanged`` for tools, prompts and resources on every transport.

    The in-memory and streamable-HTTP transports call ``create_initialization_options()`` with no
    arguments, so the default has to say it; the modern era derives it from the listen handler."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(tools_changed=True, prompts_changed=True, resources_changed=True),
            experimental_capabilities,
            extensions,
        )


T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)


def _page(items: list[T], params: types.PaginatedRequestParams | None, what: str) -> tuple[list[T], str | None]:
    """One page of ``items`` from the request's cursor, and the cursor of the next page (None: the last).

    A cursor is an opaque offset into the list as it is now; if the list changes between pages the
    client also gets a list-changed notice and starts over."""
    start = 0
    cursor = params.cursor if params is not None else None
    if cursor is not None:
        offset = cursor.removeprefix(_CURSOR_PREFIX) if cursor.startswith(_CURSOR_PREFIX) else ""
        if not offset.isdigit():
            raise MCPError(
                types.INVALID_PARAMS,
                f"invalid cursor {cursor[:40]!r} for {what}: pass the nextCursor of the previous page, or none to "
                "start from the beginning",
            )
        start = int(offset)
    end = start + PAGE_SIZE
    return items[start:end], f"{_CURSOR_PREFIX}{end}" if end < len(items) else None


_CURSOR_PREFIX = "mcpvisor-offset-"


def _progress_to(ctx: ServerRequestContext[Any, Any]) -> Progress:
    """Relays an upstream's progress on a call to the client that made it (``report_progress`` does nothing
    when that client asked for no progress; it knows the token, or the callback in process)."""

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        await ctx.session.report_progress(progress, total, message)

    return relay


def _log_level_asked(params: types.RequestParams) -> types.LoggingLevel | None:
    """The level a 2026-07-28 request asked to hear log messages from (its ``_meta``), if any."""
    level = (params.meta or {}).get(types.LOG_LEVEL_META_KEY)
    return next((known for known in LOG_LEVELS if known == level), None)


def _error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(is_error=True, content=[types.TextContent(type="text", text=message)])


def _connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection | None:
    """The per-client connection behind a request. The SDK (2.3) keeps it on the per-request session
    only; the ``ctx.connection`` spelling is its announced public successor."""
    connection = getattr(ctx, "connection", None) or getattr(ctx.session, "_connection", None)
    return connection if isinstance(connection, Connection) else None


class Gateway(StackOwner):
    """One MCP server over one :class:`Config`'s live registries.

    Enter it (``async with``) to follow the config's change events; then serve it with
    :meth:`serve_stdio`, :meth:`serve_streams`, :meth:`serve_http`, or mount :meth:`http_app`.
    ``server`` is the low-level SDK server (``mcp.Client(gateway.server)`` connects in process).
    """

    def __init__(
        self,
        config: Config,
        *,
        name: str = "mcpvisor",
        round_timeout_s: float = ROUND_TIMEOUT_S,
        name_budget: int = DEFAULT_NAME_BUDGET,
    ) -> None:
        if name_budget < MIN_NAME_BUDGET:
            raise ValueError(f"name_budget must be at least {MIN_NAME_BUDGET}, not {name_budget}")
        self.config = config
        self.name_budget = name_budget
        self._tool_names: ServedNames | None = None
        """Served tool names under the budget, rebuilt after the tools change (see :mod:`.names`)."""
        self._round_timeout_s = round_timeout_s
        self.bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.bus)
        self._legacy: dict[Connection, None] = {}
        self.subscriptions = ResourceSubscriptions(config, self._resource_owner, self._resource_updated)
        self._subscribers: dict[Connection, set[str]] = {}
        self._log_levels: dict[Connection, types.LoggingLevel] = {}
        self._heard: dict[str, tuple[McpClient, Callable[[], None]]] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._rounds: Rounds | None = None
        self._pending: set[str] = set()
        self._served_resources: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
        self._wake = anyio.Event()
        self._stack: AsyncExitStack | None = None
        self._draining = False
        self._calls: set[anyio.CancelScope] = set()
        self._calls_done = anyio.Event()
        self.sessions: SessionBook | None = None
        """The handshake-era sessions of the HTTP app, once :meth:`http_app` made it."""
        self.notices_sent = 0
        """How many coalesced rounds of notices went out (for tests and status)."""
        with warnings.catch_warnings():
            # Log forwarding serves handshake-era clients; the 2026-07-28 era dropped logging/setLevel.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            self.server = _GatewayServer(
                name,
                version=__version__,
                instructions="Tools and prompts of the MCP servers mcpvisor runs; the set follows its settings files.",
                get_tool_input_schema=self._input_schema,
                on_list_tools=self._on_list_tools,
                on_call_tool=self._on_call_tool,
                on_list_prompts=self._on_list_prompts,
                on_list_resources=self._on_list_resources,
                on_list_resource_templates=self._on_list_resource_templates,
                on_read_resource=self._on_read_resource,
                on_completion=self._on_completion,
                on_get_prompt=self._on_get_prompt,
                on_subscribe_resource=self._on_subscribe_resource,
                on_unsubscribe_resource=self._on_unsubscribe_resource,
                on_subscriptions_listen=self._listen_with_subscriptions,
                on_set_logging_level=self._on_set_logging_level,
            )
        self.server.middleware = [*only_when_tracing(self.server.middleware), self._tracking]

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Gateway:
        async with AsyncExitStack() as stack:
            tg = await stack.enter_async_context(anyio.create_task_group())
            self._tg = tg
            self._rounds = Rounds(tg, timeout_s=self._round_timeout_s)
            stack.callback(tg.cancel_scope.cancel)
            stack.callback(self._listen.close)  # listen streams end gracefully (the client re-listens)
            self._served_resources = self._served()  # what is served already needs no notice
            stack.callback(self.config.events.subscribe(self._on_event))
            tg.start_soon(self._notify_loop)
            stack.callback(self._stop_hearing)
            self._stack = stack.pop_all()
        return self

    async def drain(self, grace_s: float = DRAIN_S) -> int:
        """Stop taking calls (a new one is answered that the gateway is shutting down), let those in flight
        finish for up to ``grace_s``, then end the rest with the same answer. Returns how many were ended."""
        self._draining = True
        with anyio.move_on_after(grace_s):
            while self._calls:
                self._calls_done = anyio.Event()
                await self._calls_done.wait()
        ended = len(self._calls)
        for scope in list(self._calls):
            scope.cancel()
        with anyio.move_on_after(grace_s):
            while self._calls:  # they answer as they end
                self._calls_done = anyio.Event()
                await self._calls_done.wait()
        if ended:
            logger.info("ended %d call(s) still in flight: the gateway is shutting down", ended)
        return ended

    def legacy_sessions(self) -> int:
        """How many handshake-era client connections are live."""
        return len(self._legacy)

    # -- request handlers --------------------------------------------------------------------

    def _names(self) -> ServedNames:
        if self._tool_names is None:
            self._tool_names = ServedNames(self.config.tool_registry.names(), self.name_budget)
        return self._tool_names

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        entry = self.config.tool_registry.get_tool(self._names().registered(name))
        return entry.tool.input_schema if entry is not None else None

    async def _on_list_tools(self, ctx: _Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        entries, next_cursor = _page(self.config.tool_registry.get_all_tools(), params, "tools/list")
        names = self._names()
        tools = [t.tool.model_copy(update={"name": names.served(t.name)}) for t in entries]
        return types.ListToolsResult(tools=tools, next_cursor=next_cursor)

    async def _on_call_tool(
        self, ctx: _Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        async def call(progress: Progress) -> types.CallToolResult:
            try:
                name = self._names().registered(params.name)
                return await self.config.call_tool(name, params.arguments, progress=progress)
            except McpvisorError as exc:  # not found (with the reason), unavailable, timed out, failed
                logger.debug("gateway call to %r failed: %s", params.name, exc)
                return _error_result(str(exc))
            except Exception as exc:  # request boundary: a client never sees a crash
                logger.exception("gateway call to tool %r failed", params.name)
                return _error_result(f"call to tool {params.name!r} failed: {type(exc).__name__}: {exc}")

        try:
            return await self._interactive(ctx, params, call)
        except _ShuttingDown:
            return _error_result(f"call to tool {params.name!r} failed: {SHUTTING_DOWN}")

    async def _interactive(
        self, ctx: _Ctx, params: types.InputResponseRequestParams, call: Callable[[Progress], Awaitable[R]]
    ) -> R | types.InputRequiredResult:
        """Make a call during which the server may ask its client something: the client that made it is
        asked, in the way its protocol era asks (:mod:`mcpvisor.gateway.asks`). Raises :class:`_ShuttingDown`
        when the gateway drains (:meth:`drain`) before the call starts or ends."""
        if self._draining:
            raise _ShuttingDown
        with anyio.CancelScope() as scope:
            self._calls.add(scope)
            try:
                return await self._call_interactively(ctx, params, call)
            finally:
                self._calls.discard(scope)
                if not self._calls:
                    self._calls_done.set()
        raise _ShuttingDown  # ended by drain()

    async def _call_interactively(
        self, ctx: _Ctx, params: types.InputResponseRequestParams, call: Callable[[Progress], Awaitable[R]]
    ) -> R | types.InputRequiredResult:
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        level = _log_level_asked(params) if modern else None
        if modern and self.config.client_requests and self._rounds is not None:
            return await self._rounds.run(ctx, params, call, log_level=level)
        with answering(CallingClient(ctx, _connection_of(ctx))), ExitStack() as stack:
            if level is not None:
                stack.enter_context(hearing(CallLog(level, partial(pass_log, ctx))))
            return await call(_progress_to(ctx))

    def _prompts_by_name(self) -> dict[str, RegisteredPrompt]:
        """Prompts under the tools' naming rule, ``mcp__<server>__<prompt>`` (hashed when too long or
        not a valid name): unique across servers and the same on every reload, unlike the registry's
        bare names, whose clash rule depends on which server connected first."""
        named = self._prompts_by_full_name()
        served = ServedNames(named, self.name_budget)
        return {served.served(name): prompt for name, prompt in named.items()}

    def _prompts_by_full_name(self) -> dict[str, RegisteredPrompt]:
        return {mcp_tool_name(p.server, p.prompt.name): p for p in self.config.prompt_registry.get_all_prompts()}

    def _find_prompt(self, name: str) -> RegisteredPrompt | None:
        """The prompt served as ``name``, or named ``name`` before shortening."""
        return self._prompts_by_name().get(name) or self._prompts_by_full_name().get(name)

    async def _on_list_prompts(self, ctx: _Ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        entries, next_cursor = _page(list(self._prompts_by_name().items()), params, "prompts/list")
        prompts = [p.prompt.model_copy(update={"name": name}) for name, p in entries]
        return types.ListPromptsResult(prompts=prompts, next_cursor=next_cursor)

    async def _on_get_prompt(
        self, ctx: _Ctx, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult | types.InputRequiredResult:
        # A prompt result has no error flag: failures are JSON-RPC errors carrying the same messages.
        entry = self._find_prompt(params.name)
        if entry is None:
            raise MCPError(types.INVALID_PARAMS, self._prompt_not_found(params.name))

        async def get(progress: Progress) -> types.GetPromptResult:
            try:
                return await self.config.get_prompt(entry.name, params.arguments)
            except ToolNotFoundError as exc:
                raise MCPError(types.INVALID_PARAMS, str(exc)) from exc
            except McpvisorError as exc:
                raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc

        try:
            return await self._interactive(ctx, params, get)
        except _ShuttingDown:
            raise MCPError(types.INTERNAL_ERROR, f"getting prompt {params.name!r} failed: {SHUTTING_DOWN}") from None

    def _resources(self) -> dict[str, ServedResource]:
        clients = self.config.manager.clients()
        return served_resources({name: c.resources for name, c in clients.items() if c.status == "connected"})

    def _templates(self) -> dict[str, list[types.ResourceTemplate]]:
        """Server -> the resource templates it lists, for connected servers that list any."""
        clients = self.config.manager.clients()
        return {n: c.resource_templates for n, c in clients.items() if c.status == "connected" and c.resource_templates}

    async def _on_list_resource_templates(
        self, ctx: _Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        templates = [t for _, listed in sorted(self._templates().items()) for t in listed]
        page, next_cursor = _page(templates, params, "resources/templates/list")
        return types.ListResourceTemplatesResult(resource_templates=page, next_cursor=next_cursor)

    async def _on_completion(self, ctx: _Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        """Completion of a prompt's or a resource template's argument, answered by the server that owns it."""
        ref = params.ref
        upstream_ref: types.PromptReference | types.ResourceTemplateReference
        if isinstance(ref, types.PromptReference):
            entry = self._find_prompt(ref.name)
            if entry is None:
                raise MCPError(types.INVALID_PARAMS, self._prompt_not_found(ref.name))
            server, upstream_ref = entry.server, ref.model_copy(update={"name": entry.prompt.name})
        else:
            owners = [s for s, listed in self._templates().items() if any(t.uri_template == ref.uri for t in listed)]
            if not owners:
                raise MCPError(
                    types.INVALID_PARAMS,
                    f"cannot complete for resource template {ref.uri!r}: no connected MCP server lists it",
                )
            server, upstream_ref = sorted(owners)[0], ref
        client = self.config.manager.get_client(server)
        if client is None:
            raise MCPError(types.INVALID_PARAMS, f"cannot complete: server {server!r} is not connected")
        context = params.context.arguments if params.context is not None else None
        argument = {"name": params.argument.name, "value": params.argument.value}
        try:
            return await client.complete(upstream_ref, argument, context)
        except McpvisorError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc

    async def _on_list_resources(
        self, ctx: _Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        entries, next_cursor = _page(list(self._resources().items()), params, "resources/list")
        resources = [s.resource.model_copy(update={"uri": uri}) for uri, s in entries]
        return types.ListResourcesResult(resources=resources, next_cursor=next_cursor)

    async def _on_read_resource(
        self, ctx: _Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        uri = str(params.uri)
        server, upstream_uri = self._resource_owner(uri)
        client = self.config.manager.get_client(server)
        if client is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"resource {uri!r} is unavailable: server {server!r} is not connected")

        async def read(progress: Progress) -> types.ReadResourceResult:
            try:
                result = await client.read_resource(upstream_uri)
            except McpvisorError as exc:
                raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc
            if upstream_uri == uri:
                return result
            contents = [c.model_copy(update={"uri": uri}) if str(c.uri) == upstream_uri else c for c in result.contents]
            return result.model_copy(update={"contents": contents})

        try:
            return await self._interactive(ctx, params, read)
        except _ShuttingDown:
            raise MCPError(types.INTERNAL_ERROR, f"reading resource {uri!r} failed: {SHUTTING_DOWN}") from None

    def _resource_owner(self, uri: str) -> tuple[str, str]:
        """(server, URI on it) for a URI a client asks for; MCPError naming the reason when none owns it."""
        served = self._resources().get(uri)
        if served is not None:
            return served.server, str(served.resource.uri)
        namespaced = parse_namespaced_uri(uri)
        if namespaced is not None:
            return namespaced
        by_template = servers_matching_templates(uri, self._templates())
        if len(by_template) == 1:
            return by_template[0], uri
        if len(by_template) > 1:
            raise MCPError(
                RESOURCE_NOT_FOUND,
                f"resource {uri!r} is ambiguous: it matches resource templates of servers {', '.join(by_template)}; "
                "read it through a URI one of them lists",
            )
        clients = self.config.manager.clients()
        with_resources = [n for n, c in clients.items() if c.resources or c.resource_templates]
        if len(with_resources) == 1:  # e.g. a resource_link of the only server with resources
            return with_resources[0], uri
        raise MCPError(
            RESOURCE_NOT_FOUND,
            f"resource {uri!r} not found: no connected MCP server lists it"
            + (f" (servers with resources: {', '.join(sorted(with_resources))})" if with_resources else ""),
        )

    # -- resource subscriptions --------------------------------------------------------------

    async def _on_subscribe_resource(self, ctx: _Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        connection = _connection_of(ctx)
        if connection is None:
            raise MCPError(
                types.INVALID_REQUEST,
                f"cannot subscribe to resource {uri!r} on a connection that does not stay open; "
                "subscribe through subscriptions/listen instead",
            )
        mine = self._subscribers.get(connection)
        if mine is not None and uri in mine:
            return types.EmptyResult()
        await self.subscriptions.acquire(uri)
        if mine is None:
            mine = self._subscribers[connection] = set()
            connection.exit_stack.push_async_callback(self._forget_subscriber, connection)
        mine.add(uri)
        return types.EmptyResult()

    async def _on_unsubscribe_resource(self, ctx: _Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        connection = _connection_of(ctx)
        mine = self._subscribers.get(connection) if connection is not None else None
        if mine is not None and uri in mine:
            mine.discard(uri)
            await self.subscriptions.release(uri)
        return types.EmptyResult()

    async def _forget_subscriber(self, connection: Connection) -> None:
        """A handshake-era client went away: its subscriptions end with it."""
        await release_all(self.subscriptions, sorted(self._subscribers.pop(connection, set())))

    async def _listen_with_subscriptions(
        self, ctx: _Ctx, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """A modern-era listen stream: its resource subscriptions hold upstream ones while it is open."""
        acquired: list[str] = []
        try:
            for uri in params.notifications.resource_subscriptions or ():
                await self.subscriptions.acquire(uri)
                acquired.append(uri)
            return await self._listen(ctx, params)
        finally:
            await release_all(self.subscriptions, acquired)

    def _resource_updated(self, uri: str) -> None:
        """An upstream said the resource behind gateway URI ``uri`` changed: tell who subscribed."""
        if self._tg is not None:
            self._tg.start_soon(self._send_updated, uri)

    async def _send_updated(self, uri: str) -> None:
        await self.bus.publish(ResourceUpdated(uri))
        for connection, uris in list(self._subscribers.items()):
            if uri in uris:
                with anyio.move_on_after(NOTIFY_TIMEOUT_S):
                    try:
                        await connection.send_resource_updated(uri)
                    except Exception:  # one broken client never keeps the others from hearing
                        logger.exception("could not tell a client that resource %r changed", uri)

    # -- log messages ------------------------------------------------------------------------

    async def _on_set_logging_level(self, ctx: _Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        """A handshake-era client wants the servers' log messages from ``level`` up."""
        connection = _connection_of(ctx)
        if connection is None:
            raise MCPError(types.INVALID_REQUEST, "logging/setLevel needs a connection that stays open")
        if connection not in self._log_levels:
            connection.exit_stack.callback(self._log_levels.pop, connection, None)
        self._log_levels[connection] = params.level
        self._hear_all()
        await self._set_upstream_levels()
        return types.EmptyResult()

    def _lowest_level(self) -> types.LoggingLevel | None:
        levels = list(self._log_levels.values())
        if not levels:
            return None
        return min(levels, key=rank)

    async def _set_upstream_levels(self, servers: list[str] | None = None) -> None:
        level = self._lowest_level()
        if level is None:
            return
        async with anyio.create_task_group() as tg:
            for name, client in self.config.manager.clients().items():
                if servers is None or name in servers:
                    tg.start_soon(client.set_logging_level, level)

    def _hear_all(self) -> None:
        """Listen to every connected server's log messages (once a client asked for them)."""
        if not self._log_levels:
            return
        for name, client in self.config.manager.clients().items():
            heard = self._heard.get(name)
            if heard is not None and heard[0] is client:
                continue
            if heard is not None:
                heard[1]()
            self._heard[name] = (client, client.add_listener(self._on_upstream_notice))

    def _stop_hearing(self) -> None:
        for _, remove in self._heard.values():
            remove()
        self._heard.clear()

    def _on_upstream_notice(self, server: str, notice: Notice) -> None:
        if isinstance(notice, types.LoggingMessageNotification) and self._tg is not None:
            self._tg.start_soon(self._relay_log, server, notice.params)

    async def _relay_log(self, server: str, params: types.LoggingMessageNotificationParams) -> None:
        """One upstream log message to every client whose level lets it through, its logger named after the server."""
        severity = rank(params.level)
        logger_name = served_logger(server, params)
        for connection, level in list(self._log_levels.items()):
            if severity >= rank(level):
                with anyio.move_on_after(NOTIFY_TIMEOUT_S):
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore", MCPDeprecationWarning)  # handshake-era clients only
                            await connection.log(params.level, params.data, logger_name)
                    except Exception:  # one broken client never keeps the others from hearing
                        logger.exception("could not pass a log message of server %r to a client", server)

    def _prompt_not_found(self, name: str) -> str:
        """Why no server provides prompt ``name``, naming the server its prefix belongs to and the fix."""
        if self.config.owner_of_tool_name(name) is None:
            return f"prompt {name!r} not found: no MCP server providing it is currently configured"
        text = str(self.config.tool_not_found(name))
        return "prompt" + text.removeprefix("tool") if text.startswith("tool") else text

    # -- change notices ----------------------------------------------------------------------

    async def _tracking(self, ctx: _Ctx, call_next: CallNext) -> HandlerResult:
        """Middleware: every inbound message, ``initialize`` included, passes here first."""
        self._track(ctx)
        return await call_next(ctx)

    def _track(self, ctx: _Ctx) -> None:
        """Remember a handshake-era connection from its ``initialize`` on, until it closes (modern-era
        connections live for one request; they hear about changes on ``subscriptions/listen`` streams)."""
        if ctx.method != "initialize" and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        connection = _connection_of(ctx)
        if connection is None or connection in self._legacy:
            return
        self._legacy[connection] = None
        connection.exit_stack.callback(self._legacy.pop, connection, None)

    def _on_event(self, event: McpEvent) -> None:
        if isinstance(event, ToolsChanged):
            self._tool_names = None
        if isinstance(event, ToolsChanged | PromptsChanged):
            self.mark_changed(tools=isinstance(event, ToolsChanged), prompts=isinstance(event, PromptsChanged))
        elif isinstance(event, ServerStateChanged) or (isinstance(event, McpClientUpdate) and event.server):
            self._check_resources()  # a server came or went, or one's listings changed
            if (
                isinstance(event, ServerStateChanged)
                and event.status == "connected"
                and event.server in self.subscriptions.servers()
                and self._tg is not None
            ):
                self._tg.start_soon(self.subscriptions.resubscribe, event.server)
            if isinstance(event, ServerStateChanged) and event.status == "connected" and self._log_levels:
                self._hear_all()
                if self._tg is not None:
                    self._tg.start_soon(self._set_upstream_levels, [event.server])
        elif isinstance(event, McpClientUpdate) and event.server is None and not event.in_progress:
            self._check_resources()

    def _served(self) -> tuple[frozenset[str], frozenset[str]]:
        """The URIs and templates served now."""
        templates = frozenset(t.uri_template for listed in self._templates().values() for t in listed)
        return frozenset(self._resources()), templates

    def _check_resources(self) -> None:
        """Resources change when servers connect or leave, or a server's own list changed: announce it when
        the served URIs or templates differ."""
        served = self._served()
        if served != self._served_resources:
            self._served_resources = served
            self.mark_changed(resources=True)

    def mark_changed(self, *, tools: bool = False, prompts: bool = False, resources: bool = False) -> None:
        """Schedule a (coalesced) list-changed notice to every client."""
        self._pending |= {
            kind for kind, changed in (("tools", tools), ("prompts", prompts), ("resources", resources)) if changed
        }
        self._wake.set()

    async def _notify_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            await anyio.lowlevel.checkpoint()  # what changed in the same step goes out together
            kinds, self._pending = frozenset(self._pending), set()
            if kinds:
                try:
                    await self._publish(kinds)
                except Exception:  # task boundary: the next change must still be announced
                    logger.exception("could not send list-changed notices")

    async def _publish(self, kinds: frozenset[str]) -> None:
        self.notices_sent += 1
        logger.debug("announcing changed %s", " and ".join(sorted(kinds)))
        for kind, notice in _MODERN_NOTICES.items():
            if kind in kinds:
                await self.bus.publish(notice())
        async with anyio.create_task_group() as tg:
            for connection in list(self._legacy):
                tg.start_soon(self._notify_connection, connection, kinds)

    async def _notify_connection(self, connection: Connection, kinds: frozenset[str]) -> None:
        with anyio.move_on_after(NOTIFY_TIMEOUT_S):
            try:
                if "tools" in kinds:
                    await connection.send_tool_list_changed()
                if "prompts" in kinds:
                    await connection.send_prompt_list_changed()
                if "resources" in kinds:
                    await connection.send_resource_list_changed()
            except Exception:  # one broken client never keeps the others from hearing
                logger.exception("dropping a client that could not take a list-changed notice")
                self._legacy.pop(connection, None)

    # -- transports --------------------------------------------------------------------------

    def initialization_options(self) -> InitializationOptions:
        return self.server.create_initialization_options()

    async def serve_streams(
        self, read: ReadStream[SessionMessage | Exception], write: WriteStream[SessionMessage]
    ) -> None:
        """Serve one client over a stream pair (either era) until it closes."""
        await self.server.run(read, write, self.initialization_options())

    async def serve_stdio(self) -> None:
        """Serve one client over this process's stdin and stdout until stdin closes."""
        async with stdio_server() as (read, write):
            await self.serve_streams(read, write)

    def http_app(self, *, host: str = "127.0.0.1", limits: HttpLimits = DEFAULT_HTTP_LIMITS) -> Starlette:
        """The streamable-HTTP ASGI app (path :data:`MCP_PATH`); ``host`` decides DNS-rebinding protection,
        ``limits`` how many handshake-era sessions it keeps and for how long (:mod:`mcpvisor.gateway.sessions`)."""
        manager = session_manager(
            self.server, security=transport_security(host), limits=limits, event_store=ReplayBuffer()
        )
        self.sessions = SessionBook(limits.max_sessions)

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with manager.run():
                yield

        return Starlette(routes=[Route(MCP_PATH, endpoint=ServedBy(self.sessions, manager))], lifespan=lifespan)

    async def serve_http(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        limits: HttpLimits = DEFAULT_HTTP_LIMITS,
        task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve streamable HTTP on ``host:port`` (0: a free port) until cancelled; ``task_status`` gets
        the URL once listening. With ``token`` every request needs ``Authorization: Bearer <token>``
        (required off loopback). A port that cannot be bound raises :class:`ConfigError`."""
        await self.serve_http_socket(bind_http_socket(host, port), token=token, limits=limits, task_status=task_status)

    async def serve_http_socket(
        self,
        sock: socket.socket,
        *,
        only_workspace: Path | None = None,
        token: str | None = None,
        limits: HttpLimits = DEFAULT_HTTP_LIMITS,
        task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve streamable HTTP on a listening socket (see :func:`bind_http_socket`, which it closes)
        until cancelled, then shut down in order: listen streams end, open requests get
        ``HTTP_SHUTDOWN_S``, the SDK's session manager stops.

        With ``only_workspace``, a request whose workspace header names another folder is refused
        (HTTP 400) instead of being silently served this workspace's servers. ``limits``: see :class:`HttpLimits`."""
        try:
            app: Any = self.http_app(host=sock.getsockname()[0], limits=limits)
            if only_workspace is not None:
                app = OneWorkspace(app, only_workspace)
        except BaseException:
            sock.close()
            raise
        await serve_asgi_socket(
            app, sock, on_stop=self.close_listen_streams, token=token, limits=limits, task_status=task_status
        )

    def close_listen_streams(self) -> None:
        """End every open ``subscriptions/listen`` stream gracefully (the clients re-listen)."""
        self._listen.close()
