"""The gateway: every admitted, connected server's tools and prompts as one MCP server (SPEC §0.3, §9).

Built on the SDK's low-level ``Server``: every request is answered from the live registries, so a
settings edit or an upstream ``list_changed`` shows on the next ``tools/list`` with no restart.
When the exposed set changes the gateway tells its clients, in both protocol eras
(:mod:`mcpvisor.gateway.notices`). Notices never trail the change: one goes out in the step after the
registries changed (what changed in the same step goes out together), so a client reacting to it
finds the new tools, and a tool is never callable for long without its notice, however long the rest
of its reconcile takes. Upstream failures become ``CallToolResult(is_error=True)``, never JSON-RPC errors.

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
from collections.abc import Awaitable, Callable, Hashable, Mapping
from contextlib import AsyncExitStack, ExitStack
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, SubscriptionBus
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Route

from mcpvisor import __version__
from mcpvisor.core.call_logs import CallLog, hearing
from mcpvisor.core.client import Progress
from mcpvisor.core.client_requests import answering
from mcpvisor.core.config import Config
from mcpvisor.core.errors import McpvisorError
from mcpvisor.core.events import McpClientUpdate, McpEvent, PromptsChanged, ServerStateChanged, ToolsChanged
from mcpvisor.core.lifecycle import StackOwner
from mcpvisor.gateway.asks import ROUND_TIMEOUT_S, CallingClient, OffersNothing, Rounds, offers_input, pass_log
from mcpvisor.gateway.calls import DRAIN_S, SHUTTING_DOWN, InFlight, ShuttingDown
from mcpvisor.gateway.http import (
    DEFAULT_HTTP_LIMITS,
    HttpLimits,
    OneWorkspace,
    serve_asgi_socket,
    transport_security,
)
from mcpvisor.gateway.lazy_streams import note_initialize
from mcpvisor.gateway.limits import DEFAULT_NAME_BUDGET, MIN_NAME_BUDGET
from mcpvisor.gateway.listen import MCP_PATH, bind_http_socket
from mcpvisor.gateway.log_relay import LogRelay
from mcpvisor.gateway.names import ServedNames, ServedPrompts
from mcpvisor.gateway.notices import ChangeNotices
from mcpvisor.gateway.protocol import (
    PAGE_SIZE,
    RESOURCE_NOT_FOUND,
    GatewayServer,
    as_mcp_errors,
    as_served,
    connection_of,
    error_result,
    failed_call,
    log_level_asked,
    page,
    progress_to,
    takes_url_errors,
)
from mcpvisor.gateway.replay import ReplayBuffer
from mcpvisor.gateway.resources import ResourceRoutes, complete
from mcpvisor.gateway.sessions import OnePath, ServedBy, SessionBook, session_manager
from mcpvisor.gateway.stdio import stdio_streams
from mcpvisor.gateway.subscriptions import ResourceSubscriptions, Subscribers, acquire_each, release_all
from mcpvisor.gateway.tracing import only_when_tracing
from mcpvisor.gateway.waiting import INSTRUCTIONS, WaitingNotices, instructions

if TYPE_CHECKING:
    from mcp.server.streamable_http import EventStore
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from mcp.shared._stream_protocols import ReadStream, WriteStream  # the types of Server.run's streams
    from mcp.shared.message import SessionMessage

__all__ = ["DRAIN_S", "PAGE_SIZE", "SHUTTING_DOWN", "Gateway"]

logger = logging.getLogger(__name__)

_Ctx: TypeAlias = ServerRequestContext[dict[str, Any]]
R = TypeVar("R", bound=BaseModel)


class Gateway(StackOwner):
    """One MCP server over one :class:`Config`'s live registries. Enter it (``async with``) to follow the
    config's change events; then serve it with :meth:`serve_stdio`, :meth:`serve_streams`, :meth:`serve_http`,
    or mount :meth:`http_app`. ``server`` is the SDK's low-level server (``mcp.Client(gateway.server)``)."""

    def __init__(
        self,
        config: Config,
        *,
        name: str = "mcpvisor",
        round_timeout_s: float = ROUND_TIMEOUT_S,
        name_budget: int = DEFAULT_NAME_BUDGET,
        round_state: Callable[[str], str] | None = None,
        bus: SubscriptionBus | None = None,
    ) -> None:
        if name_budget < MIN_NAME_BUDGET:
            raise ValueError(f"name_budget must be at least {MIN_NAME_BUDGET}, not {name_budget}")
        self.config, self.name_budget = config, name_budget
        self._tool_names: ServedNames | None = None
        """Served tool names under the budget, rebuilt after the tools change (see :mod:`.names`)."""
        self._former_names: ServedNames | None = None  # the names served before the last change of tools
        self._round_timeout_s = round_timeout_s
        self._round_state = round_state  # a fleet replica's (--fleet): its input rounds name it
        self.bus: SubscriptionBus = bus or InMemorySubscriptionBus()  # a fleet's reaches every replica's clients
        self._listen = ListenHandler(self.bus)
        self.notices = ChangeNotices(self.bus)
        self.routes = ResourceRoutes(config)
        self.subscriptions = ResourceSubscriptions(config, self.routes.owner, self._resource_updated)
        self._subscribers = Subscribers(self.subscriptions, self.bus)
        self._logs = LogRelay(config)
        self._tg: anyio.abc.TaskGroup | None = None
        self._rounds: Rounds | None = None
        self._served_resources: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
        self._stack: AsyncExitStack | None = None
        self._in_flight = InFlight()
        self.sessions: SessionBook | None = None
        """The handshake-era sessions of the HTTP app, once :meth:`http_app` made it."""
        with warnings.catch_warnings():  # log forwarding serves handshake-era clients (2026-07-28 dropped setLevel)
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            self.server = GatewayServer(
                name,
                version=__version__,
                instructions=INSTRUCTIONS,
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
        self.server.middleware = [*only_when_tracing(self.server.middleware), self.notices.middleware, note_initialize]
        self.server.live_instructions = partial(instructions, config)  # naming the servers waiting for approval
        self._waiting = WaitingNotices(config, self.notices, self._logs)

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Gateway:
        self._enter_once()
        async with AsyncExitStack() as stack:
            tg = await stack.enter_async_context(anyio.create_task_group())
            self._tg = tg
            self._rounds = Rounds(tg, timeout_s=self._round_timeout_s, name=self._round_state)
            stack.callback(tg.cancel_scope.cancel)
            stack.callback(self._listen.close)  # listen streams end gracefully (the client re-listens)
            self._served_resources = self.routes.served()  # what is served already needs no notice
            stack.callback(self.config.events.subscribe(self._on_event))
            tg.start_soon(self.notices.run)
            self._logs.start(tg)
            self._waiting.start(tg)
            stack.callback(self._logs.stop)
            self._stack = stack.pop_all()
        return self

    async def drain(self, grace_s: float = DRAIN_S) -> int:
        """Stop taking calls (a new one is answered that the gateway is shutting down), let those in flight
        finish for up to ``grace_s``, then end the rest with the same answer. Returns how many were told so."""
        return await self._in_flight.drain(grace_s)

    def legacy_sessions(self) -> int:
        """How many handshake-era client connections are live."""
        return self.notices.legacy_connections()

    def rounds_waiting(self) -> int:
        """How many calls of 2026-07-28-era clients wait for their clients' answers between rounds."""
        return len(self._rounds) if self._rounds is not None else 0

    @property
    def notices_sent(self) -> int:
        """How many coalesced rounds of list-changed notices went out (for tests and status)."""
        return self.notices.sent

    # -- request handlers --------------------------------------------------------------------

    def _names(self) -> ServedNames:
        """Served tool names; a tool held back since approval keeps its own (a call of it is told why)."""
        if self._tool_names is None:
            names = self.config.tool_registry.names() | self.config.manager.held_tool_names()
            self._tool_names = ServedNames(names, self.name_budget, former=self._former_names)
        return self._tool_names

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        entry = self.config.tool_registry.get_tool(self._names().registered(name))
        return entry.tool.input_schema if entry is not None else None

    async def _on_list_tools(self, ctx: _Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        entries, next_cursor = page(self.config.tool_registry.get_all_tools(), params, "tools/list")
        names = self._names()
        tools = [t.tool.model_copy(update={"name": names.served(t.name)}) for t in entries]
        return types.ListToolsResult(tools=tools, next_cursor=next_cursor)

    async def _on_call_tool(
        self, ctx: _Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        call = partial(self._call_tool, params, url_errors=takes_url_errors(ctx))
        try:
            return await self._interactive(ctx, params, call)
        except ShuttingDown:
            return error_result(f"call to tool {params.name!r} failed: {SHUTTING_DOWN}")

    async def call_tool_directly(self, params: types.CallToolRequestParams, client: Hashable) -> types.CallToolResult:
        """A handshake-era call that can involve its client in nothing (see :mod:`.lazy_streams`), made without the
        SDK's per-request machinery; answered as :meth:`_on_call_tool` answers it, a drain included."""
        try:
            with answering(OffersNothing(client)):
                return await self._in_flight.run(partial(self._call_tool, params, None))
        except ShuttingDown:
            return error_result(f"call to tool {params.name!r} failed: {SHUTTING_DOWN}")

    async def _call_tool(
        self, params: types.CallToolRequestParams, progress: Progress | None, *, url_errors: bool = False
    ) -> types.CallToolResult:
        try:
            name = self._names().registered(params.name)
            return as_served(await self.config.call_tool(name, params.arguments, progress=progress, meta=params.meta))
        except McpvisorError as exc:  # not found (with the reason), unavailable, timed out, failed
            logger.debug("gateway call to %r failed: %s", params.name, exc)
            return failed_call(self.config, exc, url_errors=url_errors)
        except Exception as exc:  # request boundary: a client never sees a crash
            logger.exception("gateway call to tool %r failed", params.name)
            return error_result(f"call to tool {params.name!r} failed: {type(exc).__name__}: {exc}")

    async def _interactive(
        self, ctx: _Ctx, params: types.InputResponseRequestParams, call: Callable[[Progress], Awaitable[R]]
    ) -> R | types.InputRequiredResult:
        """Make a call during which the server may ask its client something: the client that made it is
        asked, in the way its protocol era asks (:mod:`mcpvisor.gateway.asks`). Raises :class:`ShuttingDown`
        when the gateway drains (:meth:`drain`) before the call starts or ends."""
        return await self._in_flight.run(partial(self._call_interactively, ctx, params, call))

    async def _call_interactively(
        self, ctx: _Ctx, params: types.InputResponseRequestParams, call: Callable[[Progress], Awaitable[R]]
    ) -> R | types.InputRequiredResult:
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        level = log_level_asked(params) if modern else None
        rounds = self._rounds if modern and self.config.client_requests else None
        # A client that offers nothing a server could ask needs no rounds: its servers' asks are refused at once.
        if rounds is not None and (params.request_state is not None or offers_input(ctx.session.client_capabilities)):
            return await rounds.run(ctx, params, call, log_level=level)
        connection = connection_of(ctx)
        with answering(CallingClient(ctx, connection)), ExitStack() as stack:
            # A 2026-07-28 server logs only to requests that ask: a handshake-era client's level asks (the relay hears).
            asked = level or (None if modern else self._logs.level_of(connection))
            if asked is not None:
                stack.enter_context(hearing(CallLog(asked, partial(pass_log, ctx), ask_only=level is None)))
            return await call(progress_to(ctx))

    def _prompts(self) -> ServedPrompts:
        return ServedPrompts(self.config.prompt_registry, self.name_budget)

    async def _on_list_prompts(self, ctx: _Ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        entries, next_cursor = page(list(self._prompts().by_name.items()), params, "prompts/list")
        prompts = [p.prompt.model_copy(update={"name": name}) for name, p in entries]
        return types.ListPromptsResult(prompts=prompts, next_cursor=next_cursor)

    async def _on_get_prompt(
        self, ctx: _Ctx, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult | types.InputRequiredResult:
        async def get(progress: Progress) -> types.GetPromptResult:  # (a retry of a round goes on with the first's)
            # A prompt result has no error flag: failures are JSON-RPC errors carrying the same messages.
            with as_mcp_errors(self.config):  # (several servers offering a prompt by its own name: which to get)
                if (entry := self._prompts().find(params.name)) is None:
                    raise self.config.not_found(params.name, "prompt")
                return as_served(await self.config.get_prompt(entry.name, params.arguments, meta=params.meta))

        try:
            return await self._interactive(ctx, params, get)
        except ShuttingDown:
            raise MCPError(types.INTERNAL_ERROR, f"getting prompt {params.name!r} failed: {SHUTTING_DOWN}") from None

    async def _on_list_resource_templates(
        self, ctx: _Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        templates = [t for _, listed in sorted(self.routes.templates().items()) for t in listed]
        served, next_cursor = page(templates, params, "resources/templates/list")
        return types.ListResourceTemplatesResult(resource_templates=served, next_cursor=next_cursor)

    async def _on_completion(self, ctx: _Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        return as_served(await complete(self.config, self._prompts(), self.routes, params))

    async def _on_list_resources(
        self, ctx: _Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        entries, next_cursor = page(list(self.routes.resources().items()), params, "resources/list")
        resources = [s.resource.model_copy(update={"uri": uri}) for uri, s in entries]
        return types.ListResourcesResult(resources=resources, next_cursor=next_cursor)

    async def _on_read_resource(
        self, ctx: _Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        uri = str(params.uri)

        async def read(progress: Progress) -> types.ReadResourceResult:  # (a retry of a round goes on with the first's)
            server, upstream_uri = self.routes.owner(uri)
            if (client := self.config.manager.get_client(server)) is None:
                raise MCPError(
                    RESOURCE_NOT_FOUND, f"resource {uri!r} is unavailable: server {server!r} is not connected"
                )
            with as_mcp_errors(self.config):
                result = as_served(await client.read_resource(upstream_uri, meta=params.meta))
            if upstream_uri == uri:
                return result
            contents = [c.model_copy(update={"uri": uri}) if str(c.uri) == upstream_uri else c for c in result.contents]
            return result.model_copy(update={"contents": contents})

        try:
            return await self._interactive(ctx, params, read)
        except ShuttingDown:
            raise MCPError(types.INTERNAL_ERROR, f"reading resource {uri!r} failed: {SHUTTING_DOWN}") from None

    # -- resource subscriptions --------------------------------------------------------------

    async def _on_subscribe_resource(self, ctx: _Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        connection = connection_of(ctx)
        if connection is None:
            raise MCPError(
                types.INVALID_REQUEST,
                f"cannot subscribe to resource {uri!r} on a connection that does not stay open; "
                "subscribe through subscriptions/listen instead",
            )
        await self._subscribers.subscribe(connection, uri)
        return types.EmptyResult()

    async def _on_unsubscribe_resource(self, ctx: _Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        connection = connection_of(ctx)
        if connection is not None:
            await self._subscribers.unsubscribe(connection, str(params.uri))
        return types.EmptyResult()

    async def _listen_with_subscriptions(
        self, ctx: _Ctx, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """A modern-era listen stream: its resource subscriptions hold upstream ones while it is open; one that
        cannot be made is left out of those its acknowledgement says are honoured (the stream goes on)."""
        acquired: list[str] = []
        try:
            await acquire_each(self.subscriptions, params.notifications.resource_subscriptions or (), acquired)
            honoured = params.notifications.model_copy(update={"resource_subscriptions": acquired or None})
            return await self._listen(ctx, params.model_copy(update={"notifications": honoured}))
        finally:
            await release_all(self.subscriptions, acquired)

    def _resource_updated(self, uri: str) -> None:
        """An upstream said the resource behind gateway URI ``uri`` changed: tell who subscribed."""
        if self._tg is not None:
            self._tg.start_soon(self._subscribers.updated, uri)

    # -- log messages ------------------------------------------------------------------------

    async def _on_set_logging_level(self, ctx: _Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        """A handshake-era client wants the servers' log messages from ``level`` up."""
        connection = connection_of(ctx)
        if connection is None:
            raise MCPError(types.INVALID_REQUEST, "logging/setLevel needs a connection that stays open")
        await self._logs.set_level(connection, params.level)
        return types.EmptyResult()

    # -- change notices ----------------------------------------------------------------------

    def _on_event(self, event: McpEvent) -> None:
        self._waiting.on_event(event)
        if isinstance(event, ToolsChanged):
            self._former_names, self._tool_names = self._tool_names or self._former_names, None
        if isinstance(event, ToolsChanged | PromptsChanged):
            self.notices.mark_changed(tools=isinstance(event, ToolsChanged), prompts=isinstance(event, PromptsChanged))
        elif isinstance(event, ServerStateChanged) or (isinstance(event, McpClientUpdate) and event.server):
            self._check_resources(event.server)  # a server came or went, or one's listings changed
            if (
                isinstance(event, ServerStateChanged)
                and event.status == "connected"
                and event.server in self.subscriptions.servers()
                and self._tg is not None
            ):
                self._tg.start_soon(self.subscriptions.resubscribe, event.server)
            if isinstance(event, ServerStateChanged) and event.status == "connected":
                self._logs.server_connected(event.server)
        elif isinstance(event, McpClientUpdate) and event.server is None and not event.in_progress:
            self._check_resources()

    def _check_resources(self, server: str | None = None) -> None:
        """Resources change as servers come and go, or one's list changed: announce it (a restart's once over)."""
        served = self.routes.served()
        if served != self._served_resources and not (server and self.config.manager.restart_untold(server)):
            self._served_resources = served
            self.notices.mark_changed(resources=True)

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
        async with stdio_streams() as (read, write):
            await self.serve_streams(read, write)

    def http_app(self, *, host: str = "127.0.0.1", limits: HttpLimits = DEFAULT_HTTP_LIMITS) -> OnePath:
        """The streamable-HTTP ASGI app (path :data:`MCP_PATH`); ``host`` decides DNS-rebinding protection,
        ``limits`` how many handshake-era sessions it keeps and for how long (:mod:`mcpvisor.gateway.sessions`)."""
        manager = self.session_manager(transport_security(host), limits, ReplayBuffer())
        self.sessions = SessionBook(limits.max_sessions)
        mcp = ServedBy(self.sessions, manager)
        app = Starlette(routes=[Route(MCP_PATH, endpoint=mcp)], lifespan=lambda _: manager.run())  # the SDK's sessions
        return OnePath(MCP_PATH, mcp, app)

    def session_manager(
        self, security: TransportSecuritySettings | None, limits: HttpLimits, replay: EventStore | None
    ) -> StreamableHTTPSessionManager:
        """The SDK's session manager for this gateway's HTTP sessions (:func:`.sessions.session_manager`)."""
        return session_manager(
            self.server, security=security, limits=limits, event_store=replay, direct_call=self.call_tool_directly
        )

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
        wrap: Callable[[Any], Any] | None = None,
        task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve streamable HTTP on a listening socket (see :func:`bind_http_socket`, which it closes)
        until cancelled, then shut down in order: listen streams end, open requests get
        ``HTTP_SHUTDOWN_S``, the SDK's session manager stops.

        With ``only_workspace``, a request whose workspace header names another folder is refused (HTTP
        400) instead of being silently served this workspace's servers. ``limits``: see :class:`HttpLimits`;
        ``wrap``: an ASGI layer in front of the app, behind authentication (a fleet replica's router)."""
        try:
            app: Any = self.http_app(host=sock.getsockname()[0], limits=limits)
            if only_workspace is not None:
                app = OneWorkspace(app, only_workspace)
            if wrap is not None:
                app = wrap(app)
        except BaseException:
            sock.close()
            raise
        on_stop = self.end_client_streams
        await serve_asgi_socket(app, sock, on_stop=on_stop, token=token, limits=limits, task_status=task_status)

    def end_client_streams(self) -> None:
        """End every stream held open to a client (``subscriptions/listen``, handshake-era GET): it is stopping."""
        self._listen.close()
        if self.sessions is not None:
            self.sessions.end_notice_streams()
