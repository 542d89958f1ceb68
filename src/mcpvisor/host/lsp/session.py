"""A host's language servers: following the settings, deciding approvals, telling who listens (SPEC §10).

:class:`LspSession` is what :class:`~mcpvisor.host.host.Host` holds: it computes the desired state from
the settings (:func:`~mcpvisor.host.lsp.desired.compute_lsp_state`) on start, on every settings event
that concerns language servers (``.lsp.json``, ``lspServers``, ``lsp.*``, the approvals store) and on
``/reload``; hands it to the :class:`~mcpvisor.host.lsp.manager.LspManager`; keeps the ``lsp`` tool
provider registered while any language server is configured; and emits :class:`LspServerChanged` when
what a reader can see of a server changed, :class:`LspPendingApprovalChanged` when some wait for a decision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import anyio

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.registry import TOOL_PREFIX
from mcpvisor.host.approvals import ApprovalStore, is_gated
from mcpvisor.host.lsp.config import LspServerConfig
from mcpvisor.host.lsp.desired import LspDesiredState, compute_lsp_state
from mcpvisor.host.lsp.events import LspPendingApprovalChanged, LspServerChanged, LspServerView
from mcpvisor.host.lsp.manager import FAILED_START_REPORT_S, LspManager
from mcpvisor.host.lsp.status import describe_state
from mcpvisor.host.paths import named_home
from mcpvisor.host.settings.loader import Settings
from mcpvisor.host.settings.lsp_servers import LspFile
from mcpvisor.host.status import invalid_entry_text

if TYPE_CHECKING:
    from mcp_types import CallToolResult, Tool

    from mcpvisor.core.client_requests import Progress
    from mcpvisor.core.config import Config
    from mcpvisor.host.lsp.results import (
        CallsResult,
        DiagnosticsResult,
        HoverResult,
        LocationsResult,
        ReferencesResult,
        RenameResult,
        StatusResult,
        SymbolsResult,
        WorkspaceSymbolsResult,
    )
    from mcpvisor.host.lsp.server import LanguageServer
    from mcpvisor.host.lsp.tools import LspTools

__all__ = [
    "LspPendingApprovalChanged",
    "LspServerChanged",
    "LspServerView",
    "LspSession",
    "touches_lsp",
    "untrusted_warning",
]

logger = logging.getLogger(__name__)

LSP_SETTINGS_KEYS = ("lspServers", "lsp")


class _LazyTools:
    """The ``lsp`` tool provider (a :class:`~mcpvisor.core.providers.ToolProvider`) whose operations, and the
    schemas of their results, are imported with the first configured language server: a session without
    any pays neither their import time nor their memory."""

    name = "lsp"

    def __init__(self, manager: LspManager) -> None:
        self.manager = manager
        self._loaded: LspTools | None = None

    @property
    def loaded(self) -> LspTools:
        if self._loaded is None:
            from mcpvisor.host.lsp.tools import LspTools

            self._loaded = LspTools(self.manager)
        return self._loaded

    def list_tools(self) -> Sequence[Tool]:
        return self.loaded.list_tools() if self.manager.configured() else []

    async def call_tool(
        self, tool: str, arguments: dict[str, Any], *, progress: Progress | None = None
    ) -> CallToolResult:
        return await self.loaded.call_tool(tool, arguments, progress=progress)


def touches_lsp(scope: str, paths: Sequence[str]) -> bool:
    """Whether a settings event can matter to language servers."""
    if scope in ("lsp_project", "approvals"):
        return True
    return any(path.split(".", 1)[0] in LSP_SETTINGS_KEYS for path in paths)


def untrusted_warning(root: object, language_servers: bool) -> str:
    """What a session in folder ``root``, not trusted, says as it starts: no MCP server starts there, nor a language
    server when some are configured (``language_servers``)."""
    servers = "MCP server or language server" if language_servers else "MCP server"
    return f"folder {root} is not trusted: no {servers} starts here"


class LspSession:
    """The language servers of one :class:`Host` (see the module). Enter it inside the host."""

    def __init__(
        self,
        settings: Settings,
        approvals: ApprovalStore,
        config: Config,
        *,
        log_dir: Path,
        emit: Callable[[object], None],
        cli_allowed: Sequence[str] | None = None,
        cli_files: Sequence[LspFile] = (),
        max_message_bytes: int | None = None,
    ) -> None:
        self._settings = settings
        self._approvals = approvals
        self._config = config
        self._emit = emit
        self._cli_allowed = cli_allowed
        self._cli_files = list(cli_files)
        self.manager = LspManager(
            settings.root,
            log_dir=log_dir,
            trusted=settings.trusted,
            max_message_bytes=max_message_bytes,
            on_change=self._server_changed,
        )
        self.manager.approve_options = approvals.decided_with
        self.manager.approve_home = named_home(settings.env)  # pasted without it, it decides in another store
        self.manager.approve_command = config.approve_command
        self.manager.unreadable = self._unreadable
        self.tools = _LazyTools(self.manager)
        self._seen: dict[str, LspServerChanged] = {}
        self._stack: AsyncExitStack | None = None

    @property
    def state(self) -> LspDesiredState:
        return self.manager.state

    async def __aenter__(self) -> LspSession:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self.manager)
            self._config.add_tool_provider(self.tools)
            stack.callback(self._config.remove_tool_provider, self.tools)
            self._apply(self._compute())
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.__aexit__(exc_type, exc, tb)

    # -- following the settings -------------------------------------------------------------------

    def _compute(self) -> LspDesiredState:
        return compute_lsp_state(
            self._settings, self._approvals, cli_allowed=self._cli_allowed, cli_files=self._cli_files
        )

    def _apply(self, state: LspDesiredState) -> None:
        before = self.manager.state
        self.manager.apply(state)
        self._config.refresh_tool_provider(self.tools)
        for name in set(before.servers) | set(state.servers):
            self._server_changed_by_name(name)
        promptable = state.promptable()
        if promptable:
            self._emit(LspPendingApprovalChanged(promptable))

    def set_trusted(self, trusted: bool) -> None:
        """The folder's trust as decided again (a reload after ``mcpvisor mcp trust``): the next :meth:`reload`
        starts what it admits, or — no longer trusted — stops every language server, as for MCP servers."""
        self.manager.trusted = trusted

    async def reload(self, *, retry: bool = False) -> LspDesiredState:
        """Follow the settings as they are in memory now. One step on the event loop (the manager hands stops
        and starts to the servers' own tasks), so it never interleaves with another reconcile, MCP or LSP.
        ``retry`` (``/reload``): a server given up after crashing too often in a row is started by the next call."""
        state = self._compute()
        if retry:
            self.manager.retry_given_up()
        self._apply(state)
        return state

    def warnings(self) -> tuple[str, ...]:
        return self.manager.state.warnings

    async def wait_started(self) -> None:
        """Wait until every language server starting now is ready or failed (each within its startupTimeout):
        what eager start-up started, seen through."""
        async with anyio.create_task_group() as tg:
            for server in self.manager.servers().values():
                if server.state == "starting":  # failing takes a moment after its startupTimeout
                    tg.start_soon(server.wait_ready, server.config.startup_timeout_s + FAILED_START_REPORT_S)

    # -- decisions ----------------------------------------------------------------------------------

    async def decide(self, name: str, decision: str) -> LspServerConfig:
        """Approve or reject a gated language server, then follow (approving makes it startable)."""
        cfg = self.state.servers.get(name)
        if cfg is None:
            known = ", ".join(sorted(self.state.servers)) or "none"
            raise ConfigError(f"cannot {decision} language server {name!r}: it is not configured (configured: {known})")
        if not is_gated(cfg):
            raise ConfigError(
                f"cannot {decision} language server {name!r}: it is not a project or workspace server "
                "(your own need no approval)"
            )
        action = self._approvals.approve if decision == "approve" else self._approvals.reject
        await anyio.to_thread.run_sync(action, self._settings.root, name, cfg, "lsp")
        await self.reload()
        return cfg

    # -- the operations, for a library ---------------------------------------------------------------
    # Each answers like its tool (``mcp__lsp__<name>``) and returns the tool's result model; a call that
    # cannot be answered raises ToolFailure (an McpvisorError) saying why and what to do.

    async def _run(self, tool: str, arguments: dict[str, Any]) -> Any:
        return await self.tools.loaded.run(tool, arguments)

    async def status(self) -> StatusResult:
        return cast("StatusResult", await self._run("status", {}))

    async def go_to_definition(self, file: str, **position: Any) -> LocationsResult:
        """``position``: ``line`` and ``character`` (1-based), or ``symbol``; ``limit``."""
        return cast("LocationsResult", await self._run("go_to_definition", {"file": file, **position}))

    async def go_to_type_definition(self, file: str, **position: Any) -> LocationsResult:
        return cast("LocationsResult", await self._run("go_to_type_definition", {"file": file, **position}))

    async def go_to_implementation(self, file: str, **position: Any) -> LocationsResult:
        return cast("LocationsResult", await self._run("go_to_implementation", {"file": file, **position}))

    async def find_references(self, file: str, **position: Any) -> ReferencesResult:
        """Also ``include_declaration``."""
        return cast("ReferencesResult", await self._run("find_references", {"file": file, **position}))

    async def hover(self, file: str, **position: Any) -> HoverResult:
        return cast("HoverResult", await self._run("hover", {"file": file, **position}))

    async def document_symbols(self, file: str, *, depth: int = -1, limit: int = 200) -> SymbolsResult:
        arguments = {"file": file, "depth": depth, "limit": limit}
        return cast("SymbolsResult", await self._run("document_symbols", arguments))

    async def workspace_symbols(self, query: str, **filters: Any) -> WorkspaceSymbolsResult:
        """``filters``: ``language``, ``kind``, ``limit``."""
        return cast("WorkspaceSymbolsResult", await self._run("workspace_symbols", {"query": query, **filters}))

    async def incoming_calls(self, file: str, **position: Any) -> CallsResult:
        return cast("CallsResult", await self._run("incoming_calls", {"file": file, **position}))

    async def outgoing_calls(self, file: str, **position: Any) -> CallsResult:
        return cast("CallsResult", await self._run("outgoing_calls", {"file": file, **position}))

    async def diagnostics(
        self,
        files: Sequence[str] | None = None,
        *,
        severity: str = "warning",
        wait_ms: int | None = None,
        server: str | None = None,
    ) -> DiagnosticsResult:
        """``wait_ms``: how long to wait for fresh diagnostics (default: the tool's); ``server``: only that language
        server's (default: every one running for each file)."""
        arguments: dict[str, Any] = {"severity": severity}
        if wait_ms is not None:
            arguments["wait_ms"] = wait_ms
        if server is not None:
            arguments["server"] = server
        if files is not None:
            arguments["files"] = list(files)
        return cast("DiagnosticsResult", await self._run("diagnostics", arguments))

    async def rename_preview(self, file: str, new_name: str, **position: Any) -> RenameResult:
        arguments = {"file": file, "new_name": new_name, **position}
        return cast("RenameResult", await self._run("rename_preview", arguments))

    # -- views --------------------------------------------------------------------------------------

    def tools_served_as(self) -> str | None:
        """The names the language server tools are served under (``mcp__lsp__*``, or ``mcp__lsp_1__*`` while an MCP
        server is named ``lsp``); None while no language server is configured (none are served)."""
        key = self._config.tool_provider_key(self.tools)
        return f"{TOOL_PREFIX}{key}__*" if key is not None and self.manager.configured() else None

    def views(self) -> list[LspServerView]:
        state = self.manager.state
        servers = self.manager.servers()
        out = [
            LspServerView(
                name=bad.name,
                source=bad.source,
                path=str(bad.path) if bad.path is not None else None,
                target="",
                extensions=bad.extensions,
                state=invalid_entry_text(str(bad.path) if bad.path is not None else None, bad.problem),
                pid=None,
                open_documents=0,
                error=bad.problem,
                gated=False,
            )
            for bad in state.assembled.skipped.values()
        ]
        for name in sorted(state.servers):
            cfg = state.servers[name]
            entry = state.assembled.sources[name]
            server = servers.get(name)
            reason = state.reason(name) if self.manager.trusted else "untrusted"
            running = server is not None and server.state == "ready"
            out.append(
                LspServerView(
                    name=name,
                    source=entry.source,
                    path=str(entry.path) if entry.path is not None else None,
                    target=cfg.target(),
                    extensions=tuple(sorted(cfg.extension_to_language)),
                    state=describe_state(self.manager, name, server, reason, cfg),
                    pid=server.pid if server is not None else None,
                    open_documents=len(server.documents) if running and server is not None else 0,
                    error=server.last_error if server is not None and server.state == "failed" else None,
                    gated=is_gated(cfg),
                    kept=self._kept(name, entry.source),
                )
            )
        return sorted(out, key=lambda view: view.name)

    def _unreadable(self) -> list[str]:
        """The ``.lsp.json`` as it is now, when it does not parse: where, why, and what stays in force (a bad save
        changes no server, so no reload follows it)."""
        error = self._settings.errors.get("lsp_project")
        if error is None:
            return []
        return [f"{error} — until it is fixed, its last good configuration (if any) stays in force"]

    def _kept(self, name: str, source: str) -> str | None:
        """The notice saying that an edit made ``name``'s entry invalid and its last good one runs on (None: it did
        not). Read from the settings as they are now: such an edit changes no server, so no reload follows it."""
        scope = "lsp_project" if source == "project" else source
        return self._settings.kept_servers(scope, lsp=True).get(name)

    def _server_changed(self, server: LanguageServer) -> None:
        self._server_changed_by_name(server.name)

    def _server_changed_by_name(self, name: str) -> None:
        view = next((v for v in self.views() if v.name == name), None)
        if view is None:
            if self._seen.pop(name, None) is not None:
                self._emit(LspServerChanged(name, "removed", None, 0, None))
            return
        event = LspServerChanged(name, view.state, view.pid, view.open_documents, view.error)
        if self._seen.get(name) != event:
            self._seen[name] = event
            self._emit(event)
