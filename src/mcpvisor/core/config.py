"""Config: the core's runtime entry point (SPEC §2.4, §4).

Three layers make the server map: the settings layer (replaced on every reload), the extension layer (only
names not already present) and the runtime overlay (always wins). Gating lists decide which of them may run.
``reinitialize_mcp_servers`` replaces the settings layer and runs one incremental reconcile; calls coalesce.

Usage::

    async with Config(mcp_servers={"echo": McpServerConfig(command=...)}) as config:
        await config.initialize()
        result = await config.call_tool("mcp__echo__echo", {"text": "hi"})
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import anyio

from mcpvisor.core.errors import ConfigError, NotFoundError, NotRunningError, RequestKind, ToolNotFoundError, timed_out
from mcpvisor.core.events import EventBus, ReconcileFinished, ToolsChanged
from mcpvisor.core.exposure import Exposure
from mcpvisor.core.gating import McpGating, names_tuple
from mcpvisor.core.lifecycle import StackOwner, on_loop
from mcpvisor.core.manager import McpClientManager
from mcpvisor.core.not_found import why_not_found
from mcpvisor.core.registry import (
    TOOL_PREFIX,
    DefinitionGate,
    PromptRegistry,
    RegisteredPrompt,
    RegisteredTool,
    ToolRegistry,
    owner_among,
)
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig, checked_servers

if TYPE_CHECKING:
    from mcp_types import CallToolResult, GetPromptResult

    from mcpvisor.core.client import Progress
    from mcpvisor.core.pool import McpConnectionPool
    from mcpvisor.core.providers import ToolProvider

__all__ = ["Config", "UnavailableReason"]

logger = logging.getLogger(__name__)

UnavailableReason = Literal["removed", "not_allowed", "excluded", "pending_approval"]


class Config(StackOwner):
    """The MCP side of one session: server layers, gating, registries and connections."""

    def __init__(
        self,
        *,
        mcp_servers: Mapping[str, McpServerConfig] | None = None,
        allowed_mcp_server_names: Iterable[str] | None = None,
        trusted_folder: bool = True,
        options: ConnectionOptions | None = None,
        pool: McpConnectionPool | None = None,
        session_id: str = "default",
        definition_gate: DefinitionGate | None = None,
        pass_wait_s: float | None = None,
    ) -> None:
        self._pool = pool
        self.options = options or ConnectionOptions()
        """How this session's connections are made (with a ``pool``, the pool's options rule)."""
        self._definition_gate = definition_gate
        self._session_id = session_id
        self._settings_servers: dict[str, McpServerConfig] = checked_servers(mcp_servers or {})
        self._extension_servers: dict[str, McpServerConfig] = {}
        self._runtime_servers: dict[str, McpServerConfig] = {}
        self._cli_allowed = names_tuple(allowed_mcp_server_names)
        self._settings_gating = self._gating = McpGating(allowed=self._cli_allowed)  # (see set_mcp_gating)
        self._host_lists: tuple[tuple[str, ...] | None, tuple[str, ...] | None] = (None, None)  # excluded, allowed
        self._refiner: Callable[[str, str], str] | None = None
        self.approve_command = "mcpvisor mcp approve {name}"
        """How a fix says to approve a server (``{name}``): the layer above names its workspace and home in it."""
        self.approvals_unreadable: Callable[[], bool] = lambda: False
        """Whether no approval can be read now (the layer above knows its approvals store): every gated server held."""
        self.invalid_entries: Callable[[], Mapping[str, str]] = dict
        """Servers whose entry the layer above skipped as invalid (not configured): where, why and the fix, by name."""
        self._removed: set[str] = set()
        self._trusted = trusted_folder
        self.events = EventBus()
        self.tool_registry = ToolRegistry()
        """Every connected tool by its registered name (live: each reconcile and list change updates it)."""
        self.prompt_registry = PromptRegistry()
        self._manager: McpClientManager | None = None
        self._initialized = False
        self._dirty = False
        self._reconcile_done: anyio.Event | None = None
        self._wait_asked: float | None = None  # the least ``wait_s`` of the calls the running run is for
        self.pass_wait_s = pass_wait_s
        """The most a reconcile pass waits for servers still handshaking (a download, a hang): they go on starting,
        and its result's ``starting`` names them. None: each one's discovery timeout, or until another pass."""
        self.last_reconcile: ReconcileFinished | None = None
        self._providers: dict[str, ToolProvider] = {}
        """Registered name -> in-process tool provider (:mod:`mcpvisor.core.providers`)."""

    @property
    def client_requests(self) -> bool:
        """Whether its connections pass what servers ask of their client to the caller (see ``McpClient``)."""
        options: ConnectionOptions = self._pool.options if self._pool is not None else self.options
        return options.client_requests

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Config:
        if self._pool is not None and not self._pool.is_running:
            raise NotRunningError(
                "the connection pool of this Config is not running: enter it first "
                "(async with McpConnectionPool() as pool:) and enter the Config inside that block"
            )
        self._enter_once()
        async with AsyncExitStack() as stack:
            if self._pool is not None:  # freed last, once its holds are released
                self._pool.join(self._session_id)
                stack.callback(self._pool.leave, self._session_id)
            tg = await stack.enter_async_context(anyio.create_task_group())
            self._manager = McpClientManager(
                self,
                tg,
                events=self.events,
                tools=self.tool_registry,
                prompts=self.prompt_registry,
                options=self.options,
                pool=self._pool,
                session_id=self._session_id,
                definition_gate=self._definition_gate,
            )
            stack.push_async_callback(self._manager.aclose)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._initialized = False
        try:
            return await super().__aexit__(exc_type, exc, tb)
        finally:
            self._manager = None  # what needs it says the config is not running, not that a server is down

    async def initialize(self, *, wait_s: float | None = None) -> ReconcileFinished | None:
        """First discovery: connect every admitted server. A no-op in an untrusted folder. ``wait_s``: the most it
        waits for servers still handshaking then (default: :attr:`pass_wait_s`, as every later pass)."""
        self._initialized = self.manager is not None
        return await self.reconcile(wait_s=wait_s)

    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def manager(self) -> McpClientManager:
        if self._manager is None:
            raise NotRunningError("the config is not running: use it inside 'async with Config(...)'")
        return self._manager

    # -- layers ------------------------------------------------------------------------------

    def set_mcp_servers(self, servers: Mapping[str, McpServerConfig]) -> None:
        """Replace (not merge) the settings layer. Allowed at any time; removals take effect."""
        before = set(self.get_merged_mcp_servers())
        self._settings_servers = checked_servers(servers)
        after = set(self.get_merged_mcp_servers())
        self._removed = (self._removed | (before - after)) - after

    def add_mcp_servers(self, servers: Mapping[str, McpServerConfig]) -> None:
        """Add servers to the settings layer before initialisation."""
        if self._initialized:
            raise ConfigError(
                "cannot add MCP servers after initialisation: use set_mcp_servers() or "
                "reinitialize_mcp_servers() to change servers at run time"
            )
        self._settings_servers.update(checked_servers(servers))

    def get_settings_mcp_servers(self) -> dict[str, McpServerConfig]:
        return dict(self._settings_servers)

    def set_extension_mcp_servers(self, servers: Mapping[str, McpServerConfig]) -> None:
        before = set(self.get_merged_mcp_servers())
        self._extension_servers = checked_servers(servers)
        after = set(self.get_merged_mcp_servers())
        self._removed = (self._removed | (before - after)) - after

    def add_runtime_mcp_server(self, name: str, config: McpServerConfig) -> None:
        """Add a server that wins over every other layer (takes effect at the next reconcile)."""
        self._runtime_servers[name] = checked_servers({name: config})[name]
        self._removed.discard(name)

    def remove_runtime_mcp_server(self, name: str) -> None:
        if self._runtime_servers.pop(name, None) is not None and name not in self.get_merged_mcp_servers():
            self._removed.add(name)

    def get_merged_mcp_servers(self) -> dict[str, McpServerConfig]:
        """Settings layer + extension servers (new names only) + runtime overlay, before allow-listing."""
        merged = dict(self._settings_servers)
        for name, cfg in self._extension_servers.items():
            merged.setdefault(name, cfg)
        merged.update(self._runtime_servers)
        return merged

    def get_mcp_servers(self) -> dict[str, McpServerConfig]:
        """The merged map filtered by the allow-list."""
        return {name: cfg for name, cfg in self.get_merged_mcp_servers().items() if self._gating.is_allowed(name)}

    # -- gating ------------------------------------------------------------------------------

    def set_excluded_mcp_servers(self, names: Iterable[str] | None) -> None:
        """Exclude ``names`` too, across reloads (see :meth:`set_mcp_gating`); None: no list of the program's own."""
        self._host_lists = (names_tuple(names), self._host_lists[1])
        self.set_mcp_gating(self._settings_gating)

    def set_allowed_mcp_servers(self, names: Iterable[str] | None) -> None:
        """Admit only ``names`` of what is admitted, across reloads (see :meth:`set_mcp_gating`); None: no such list."""
        self._host_lists = (self._host_lists[0], names_tuple(names))
        self.set_mcp_gating(self._settings_gating)

    def set_pending_mcp_servers(self, names: Iterable[str] | None) -> None:
        self.set_mcp_gating(replace(self._settings_gating, pending=names_tuple(names)))

    def set_reason_refiner(self, refine: Callable[[str, str], str] | None) -> None:
        """How the layer above words a gated server's reason (SPEC §4: the host, which knows the approvals
        store, says ``rejected`` where the core says ``pending_approval``); never changes admission."""
        self._refiner = refine

    def refined_reason(self, name: str, reason: str) -> str:
        """``reason`` as the layer above words it for server ``name`` (see :meth:`set_reason_refiner`)."""
        return self._refiner(name, reason) if self._refiner is not None else reason

    def set_mcp_gating(self, gating: McpGating) -> None:
        """Push the gating the layer above computed (a ``Host``'s, from the settings files at each reload): the lists
        the program set itself (:meth:`set_excluded_mcp_servers`, :meth:`set_allowed_mcp_servers`) narrow it."""
        self._settings_gating, self._gating = gating, gating.narrowed_by_host(*self._host_lists)

    def get_mcp_gating(self) -> McpGating:
        return self._gating

    def get_settings_mcp_gating(self) -> McpGating:  # as last pushed, before the program's own lists narrow it
        return self._settings_gating

    def get_cli_allowed_mcp_server_names(self) -> tuple[str, ...] | None:
        """The immutable start-up ceiling (``--allowed-mcp-server-names``)."""
        return self._cli_allowed

    def is_mcp_server_pending_approval(self, name: str) -> bool:
        return self._gating.is_pending(name)

    def is_trusted_folder(self) -> bool:
        return self._trusted

    def set_trusted_folder(self, trusted: bool) -> None:
        """The folder's trust as decided again (a reload after ``mcpvisor mcp trust``); the next reconcile
        starts what it admits, or — no longer trusted — stops every server."""
        self._trusted = trusted

    def get_mcp_server_unavailable_reason(self, name: str) -> UnavailableReason | None:
        """Why a server is not admitted, checked in order: removed, not allowed, excluded, pending."""
        if name not in self.get_merged_mcp_servers():
            return "removed" if name in self._removed else None
        return self._gating.reason_of(name)

    def removed_mcp_servers(self) -> frozenset[str]:
        return frozenset(self._removed)

    # -- reconcile ---------------------------------------------------------------------------

    async def reinitialize_mcp_servers(self, servers: Mapping[str, McpServerConfig]) -> None:
        """Replace the settings layer, then reconcile. A safe no-op for connections before ``initialize``."""
        if (loop := self.elsewhere()) is not None:  # called from another thread's event loop: run on this one's
            return await on_loop(loop, self.reinitialize_mcp_servers(servers))
        if self._entered and not self.is_running:  # after its block: nothing would ever apply them
            raise NotRunningError("the config is not running: use it inside 'async with Config(...)'")
        self.set_mcp_servers(servers)
        await self.reconcile()

    async def reconcile(self, *, wait_s: float | None = None) -> ReconcileFinished | None:
        """Run the incremental reconcile. A call during a run marks it dirty and waits for it; the run repeats until
        clean, so bursts coalesce and every caller sees the final state. ``wait_s``: as :attr:`pass_wait_s`, for each
        pass of the run (also of a run it joins: the least any of its callers asked for)."""
        if (loop := self.elsewhere()) is not None:  # called from another thread's event loop: run on this one's
            return await on_loop(loop, self.reconcile(wait_s=wait_s))
        if not self._initialized or self._manager is None:
            return None
        self._dirty = True
        self._ask_wait(wait_s)  # (a run this call joins waits no longer than it asks, in each of its passes)
        if self._reconcile_done is not None:  # it stops waiting for starts (they go on): this one follows
            self._manager.ask_another_pass()
        while self._reconcile_done is not None:
            await self._reconcile_done.wait()
            if not self._dirty:
                return self.last_reconcile
            # The run ended (its caller was cancelled, or it failed) with work left: take it over.
            self._ask_wait(wait_s)
        done = self._reconcile_done = anyio.Event()
        try:
            while self._dirty:
                self._dirty = False
                self._place_tool_providers(vacate_only=True)  # before a server of a provider's name connects
                self.last_reconcile = await self._manager.discover_all_mcp_tools_incremental(self._wait_asked)
                self._place_tool_providers()  # after one that had it is gone
        except BaseException:
            self._dirty = True  # this pass may be incomplete: whoever comes next runs again
            raise
        finally:
            self._reconcile_done, self._wait_asked = None, None
            done.set()
        return self.last_reconcile

    def _ask_wait(self, wait_s: float | None) -> None:
        wait_s = self.pass_wait_s if wait_s is None else wait_s  # (a call asking none asks for the config's)
        if wait_s is not None:
            self._wait_asked = wait_s if self._wait_asked is None else min(self._wait_asked, wait_s)

    async def restart_mcp_servers(self, names: Iterable[str] | None = None) -> ReconcileFinished | None:
        """Disconnect and reconnect ``names`` (all: an explicit request; hot reload never does this). Never beside
        a reconcile pass: it waits for a running one, and one asked for meanwhile runs after it."""
        if (loop := self.elsewhere()) is not None:  # called from another thread's event loop: run on this one's
            return await on_loop(loop, self.restart_mcp_servers(names))
        if not self._initialized or self._manager is None:
            return None
        await self.reconciled()
        done = self._reconcile_done = anyio.Event()
        try:
            self.last_reconcile = await self._manager.restart_mcp_servers(names, self.pass_wait_s)
        except BaseException:
            self._dirty = True  # cut short after some stopped: the next pass starts them again
            raise
        finally:
            self._reconcile_done = None
            done.set()
        return self.last_reconcile

    async def reconciled(self) -> None:
        """Return once no reconcile pass runs (one running may be applying what the caller set: a reload that finds
        the server map and gating as it would set them waits for the pass that set them)."""
        if (loop := self.elsewhere()) is not None:  # called from another thread's event loop: wait on this one's
            return await on_loop(loop, self.reconciled())
        while self._reconcile_done is not None:
            await self._reconcile_done.wait()

    def refresh_definitions(self) -> None:
        """Run the definition gate again over every connected server's tools and prompts."""
        if self._manager is not None:
            self._manager.refresh_definitions()

    # -- calls -------------------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
        progress: Progress | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> CallToolResult:
        """Call a registered tool (``mcp__<server>__<tool>``), or a tool by its own name on its server
        when exactly one connected server offers a tool by that name (clients that know a server's
        tools by their own names). Unknown names raise :class:`ToolNotFoundError` saying which server
        would own it and how to fix it. ``progress`` (an async function of progress, total, message) hears the
        server's progress notifications for the call; ``timeout_s`` (above 0) replaces the server's ``timeout``;
        ``meta`` goes to the server as the request's ``_meta`` (an in-process tool provider gets none)."""
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be a number of seconds above 0 (None: the server's), not {timeout_s!r}")
        manager = self.manager
        if (loop := self.elsewhere()) is not None:  # called from another thread's event loop: run on this one's
            return await on_loop(
                loop, self.call_tool(name, arguments, timeout_s=timeout_s, progress=progress, meta=meta)
            )
        entry = self.tool_registry.get_tool(name) or self._tool_by_own_name(name)
        provider = self._providers.get(entry.server) if entry is not None else None
        if entry is not None and provider is not None:
            with anyio.move_on_after(timeout_s if timeout_s is not None else math.inf):  # the language servers'
                return await provider.call_tool(entry.tool.name, dict(arguments or {}), progress=progress)
            what, fix = f"call to tool {name!r}", "raise the call's timeout_s"  # only when timeout_s passed
            raise timed_out(what, kind="tool", target=name, server=entry.server, timeout_s=timeout_s or 0, fix=fix)
        client = manager.get_client(entry.server) if entry is not None else None
        if entry is None or client is None:
            raise self.not_found(name, "tool")
        return await client.call_tool(entry.tool.name, arguments, timeout_s=timeout_s, progress=progress, meta=meta)

    # -- in-process tool providers -----------------------------------------------------------

    def add_tool_provider(self, provider: ToolProvider) -> None:
        """Serve ``provider``'s tools beside the servers' (:mod:`mcpvisor.core.providers`). Its tools are
        registered under ``provider.name`` — or ``<name>_1`` while an MCP server is configured by that name
        (one configured later takes the name at the next reconcile; when it is gone, the provider has it back)."""
        if self.tool_provider_key(provider) is not None:
            return
        servers = self.get_merged_mcp_servers()
        key, n = provider.name, 0
        while key in servers or key in self._providers:
            n += 1
            key = f"{provider.name}_{n}"
        self._providers[key] = provider
        self.refresh_tool_provider(provider)

    def _place_tool_providers(self, *, vacate_only: bool = False) -> None:
        """Register each provider under its own name when no MCP server is configured by it, else under the
        first free ``<name>_N``. ``vacate_only``: only move those whose key an MCP server now has."""
        servers = self.get_merged_mcp_servers()
        for key, provider in list(self._providers.items()):
            if key in servers or (not vacate_only and key != provider.name and provider.name not in servers):
                self.remove_tool_provider(provider)
                self.add_tool_provider(provider)
                logger.info("the tools of %r are served as mcp__%s__* now", key, self.tool_provider_key(provider))

    def remove_tool_provider(self, provider: ToolProvider) -> None:
        for key, known in list(self._providers.items()):
            if known is provider:
                del self._providers[key]
                if self.tool_registry.remove_mcp_tools_by_server(key):
                    self.events.emit(ToolsChanged())

    def refresh_tool_provider(self, provider: ToolProvider) -> None:
        """Register what ``provider`` offers now (call it when its tool set changes)."""
        for key, known in self._providers.items():
            if known is provider and self.tool_registry.set_server_tools(key, provider.list_tools(), Exposure()):
                self.events.emit(ToolsChanged())

    def provider_in_place_of(self, name: str) -> str | None:
        """The name the tools of the provider named ``name`` are registered under while an MCP server has its name."""
        return next((key for key, known in self._providers.items() if known.name == name and key != name), None)

    def tool_provider_key(self, provider: ToolProvider) -> str | None:
        """The name ``provider``'s tools are registered under, if it is added."""
        return next((key for key, known in self._providers.items() if known is provider), None)

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None = None, *, meta: Mapping[str, Any] | None = None
    ) -> GetPromptResult:
        """Get a prompt by its registered name or by the gateway's ``mcp__<server>__<name>``; ``meta`` goes to the
        server as the request's ``_meta`` (as :meth:`call_tool` sends it)."""
        if (loop := self.elsewhere()) is not None:  # called from another thread's event loop: run on this one's
            return await on_loop(loop, self.get_prompt(name, arguments, meta=meta))
        entry = self.find_prompt(name)
        client = self.manager.get_client(entry.server) if entry is not None else None
        if entry is None or client is None:
            known = sorted(self.prompt_registry.names())
            listed = f"; prompts: {', '.join(known[:20])}{', …' if len(known) > 20 else ''}" if known else ""
            raise NotFoundError(
                f"prompt {name!r} not found: no connected MCP server provides it{listed}", kind="prompt", target=name
            )
        return await client.get_prompt(entry.prompt.name, arguments, meta=meta)

    def find_prompt(self, name: str) -> RegisteredPrompt | None:
        """The prompt registered as ``name``, or served under it as ``mcp__<server>__<prompt>``."""
        entry = self.prompt_registry.get_prompt(name)
        if entry is not None or not name.startswith(TOOL_PREFIX):
            return entry
        registry = self.prompt_registry
        return next((e for e in registry.get_all_prompts() if registry.qualified_name(e) == name), None)

    def _tool_by_own_name(self, name: str) -> RegisteredTool | None:
        if name.startswith(TOOL_PREFIX):
            return None
        found = self.tool_registry.find_by_own_name(name)
        if len(found) > 1:
            names = ", ".join(sorted(entry.name for entry in found))
            raise ToolNotFoundError(
                f"tool {name!r} is ambiguous: servers {', '.join(sorted(e.server for e in found))} each offer a "
                f"tool by that name; call one of {names}",
                tool=name,
                reason="ambiguous",
            )
        return found[0] if found else None

    def holder_of_own_name(self, name: str, kind: RequestKind) -> str | None:
        """The one connected server that holds back a tool or prompt (``kind``) it names ``name``, if one does."""
        if name.startswith(TOOL_PREFIX) or self._manager is None:
            return None
        manager = self._manager
        holders = [
            server
            for server in manager.clients()
            if (held := manager.held(server)) is not None
            and name in (held.held_tools if kind == "tool" else held.held_prompts)
        ]
        return holders[0] if len(holders) == 1 else None

    def owner_of_tool_name(self, name: str) -> str | None:
        """The configured or removed server whose ``mcp__<server>__`` prefix (as registered names spell it: a name
        with a dot or a space is made valid) is the longest match."""
        return owner_among(name, set(self.get_merged_mcp_servers()) | self._removed)

    def not_found(self, name: str, kind: RequestKind) -> NotFoundError:
        """Why no connected server provides the tool or prompt (``kind``) ``name``, naming the server its
        ``mcp__<server>__`` prefix belongs to and the fix (SPEC §9)."""
        return why_not_found(self, self._manager, name, kind)
