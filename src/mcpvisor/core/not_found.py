"""Why a tool or prompt is not there: the message that names the server its ``mcp__<server>__`` prefix belongs
to, why it is unavailable, and the fix (SPEC §9)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from mcpvisor.core.errors import NotFoundError, RequestKind, name_word, not_found
from mcpvisor.core.exposure import exposure_of
from mcpvisor.core.gating import McpGating, matches_any
from mcpvisor.core.registry import TOOL_PREFIX, PromptRegistry, ToolRegistry, mcp_tool_name, owner_among

if TYPE_CHECKING:
    from mcpvisor.core.client import McpClient
    from mcpvisor.core.manager import McpClientManager
    from mcpvisor.core.reconnects import Recovery
    from mcpvisor.core.server_config import McpServerConfig

__all__ = ["Servers", "why_not_found"]


class Servers(Protocol):
    """What the explanation reads of a session (a :class:`~mcpvisor.core.config.Config`)."""

    tool_registry: ToolRegistry
    prompt_registry: PromptRegistry
    approve_command: str
    invalid_entries: Callable[[], Mapping[str, str]]

    @property
    def initialized(self) -> bool: ...

    def owner_of_tool_name(self, name: str) -> str | None: ...
    def provider_in_place_of(self, name: str) -> str | None: ...
    def holder_of_own_name(self, name: str, kind: RequestKind) -> str | None: ...
    def get_mcp_server_unavailable_reason(self, name: str) -> str | None: ...
    def refined_reason(self, name: str, reason: str) -> str: ...
    def get_cli_allowed_mcp_server_names(self) -> tuple[str, ...] | None: ...
    def get_mcp_gating(self) -> McpGating: ...
    def get_mcp_servers(self) -> Mapping[str, McpServerConfig]: ...
    def not_found(self, name: str, kind: RequestKind) -> NotFoundError: ...


def why_not_found(config: Servers, manager: McpClientManager | None, name: str, kind: RequestKind) -> NotFoundError:
    """Why no connected server of ``config`` provides the tool or prompt (``kind``) ``name``."""
    server = config.owner_of_tool_name(name)
    if server is None and (holder := config.holder_of_own_name(name, kind)) is not None:
        return config.not_found(mcp_tool_name(holder, name), kind)  # called by its own name, and held
    invalid = config.invalid_entries() if server is None else {}
    if (bad := owner_among(name, invalid)) is not None:  # not configured: its entry was skipped
        head = f"{kind} {name!r} is unavailable: the entry of MCP server {bad!r}"
        return not_found(f"{head} {invalid[bad]}", kind=kind, target=name)
    if server is None:
        return not_found(
            f"{kind} {name!r} not found: no MCP server providing it is currently configured", kind=kind, target=name
        )
    if kind == "tool" and (moved := _moved_provider_tool(config, server, name)) is not None:
        return not_found(
            f"{kind} {name!r} is unavailable: MCP server {server!r} has the name of mcpvisor's own {server!r} tools, "
            f"served as {TOOL_PREFIX}{config.provider_in_place_of(server)}__* meanwhile; call {moved}, or rename MCP "
            f"server {server!r} in your settings to give them their name back",
            kind=kind,
            target=name,
            server=server,
            reason="moved",
        )
    reason: str | None = config.get_mcp_server_unavailable_reason(server)
    if reason is not None:
        reason = config.refined_reason(server, reason)
    head = f"{kind} {name!r} is unavailable: server {server!r}"
    approve = config.approve_command.format(name=name_word(server))
    in_shell = f" (in the shell: /approve {shlex.quote(server)})"
    if reason == "removed":
        text = f"{head} was removed from the configuration this session; add it back to mcpServers to use it"
    elif reason == "not_allowed":
        ceiling = config.get_cli_allowed_mcp_server_names()
        if (why := config.get_mcp_gating().why_not_allowed(server)) is not None:
            text = f"{head} is not allowed: {why}"
        elif ceiling is not None and not matches_any(server, ceiling):
            text = (
                f"{head} is not allowed by the start-up flag --allowed-mcp-server-names; "
                "restart with the server listed in that flag"
            )
        else:
            text = f"{head} is not allowed; add {server!r} to mcp.allowed in your settings"
    elif reason == "excluded":
        if (why := config.get_mcp_gating().why_excluded(server)) is not None:
            text = f"{head} is excluded: {why}"
        else:
            text = f"{head} is excluded; remove {server!r} from mcp.excluded in your settings"
    elif reason == "pending_approval":
        text = f"{head} needs approval; run: {approve}{in_shell}"
    elif reason == "rejected":
        text = f"{head} was rejected; edit its configuration to be asked again, or run: {approve}{in_shell}"
    else:
        reason = "missing"
        client = manager.get_client(server) if manager is not None else None
        if client is None and not config.initialized:
            reason = "not_started"
            text = f"{head} is not connected: no server was started yet; call `await config.initialize()` first"
        elif client is None and manager is not None and manager.starting(server):
            reason = "starting"  # (re)started by a reload: the old process may still be stopping
            text = f"{head} is being (re)started by a reload; retry in a moment"
        elif client is None or client.status == "disconnected":
            reason, text = _down(head, client, manager.recovery(server) if manager is not None else None)
        elif client.status == "connecting":
            reason = "starting"
            text = f"{head} is still starting; retry in a moment"
        elif (held := manager.held(server) if manager is not None else None) is not None and any(
            mcp_tool_name(server, own) == name for own in (held.held_tools if kind == "tool" else held.held_prompts)
        ):
            reason = "held"
            text = (
                f"{kind} {name!r} is held back: {held.why}"
                if held.why
                else f"{kind} {name!r} is held back: its definition changed since server {server!r} was approved; "
                f"review the change and accept it with: {approve}"
            )
        elif kind == "tool" and (why := _withheld(client, config.get_mcp_servers().get(server), name)) is not None:
            reason = "withheld"
            text = f"{kind} {name!r} is withheld: server {server!r} lists it, but {why}; the server needs fixing"
        else:
            listed = (
                [t.name for t in config.tool_registry.tools_of(server)]
                if kind == "tool"
                else [p.name for p in config.prompt_registry.prompts_of(server)]
            )
            offered = ", ".join(sorted(set(listed))) or "none"
            text = f"{head} does not provide it (renamed or filtered out?); its {kind}s: {offered}"
    return not_found(text, kind=kind, target=name, server=server, reason=reason)


def _withheld(client: McpClient, cfg: McpServerConfig | None, name: str) -> str | None:
    """Why the tool registered name ``name`` stands for is withheld from ``client``'s listing, or None (also when
    the tool filters of its configuration ``cfg`` hide it anyway: it is then said to be filtered out)."""
    if cfg is None:
        return None
    admits = exposure_of(cfg).admits
    return next((t.why for t in client.withheld if mcp_tool_name(client.name, t.name) == name and admits(t.name)), None)


def _down(head: str, client: McpClient | None, recovery: Recovery | None) -> tuple[str, str]:
    """The reason and the words for a server that is not connected: ``disconnected`` while it is being started
    again by itself (retry in a moment), ``down`` when it is not (what to do)."""
    error = f" (last error: {client.last_error})" if client is not None and client.last_error else ""
    log = client.log_path if client is not None else None
    named = log is not None and str(log) in error  # a failed start's error names it already
    where = f"; its log: {log}" if log is not None and log.is_file() and not named else ""
    again = "restarted" if client is None or client.config.transport == "stdio" else "reconnected"
    reload = "check its configuration: the next change to the settings starts it again (in the shell: /reload)"
    if recovery is not None and not recovery.gave_up:
        of = f" of {recovery.attempts}" if recovery.attempts is not None else ""
        return (
            "disconnected",
            f"{head} is not connected{error}{where}; it is being {again} (try {recovery.tries}{of}); retry in a moment",
        )
    if client is None:  # no client yet: as before any start of it
        return "disconnected", f"{head} is not connected; {reload}"
    gave_up = f"; it was {again} {recovery.tries} times and gave up" if recovery is not None else ""
    fix = "it is started again once signed in" if client.needs_auth else reload
    return "down", f"{head} is not connected{error}{where}{gave_up}; {fix}"


def _moved_provider_tool(config: Servers, server: str, name: str) -> str | None:
    """The registered name of the tool ``name`` stands for when it is one of the in-process tools (a
    :class:`~mcpvisor.core.providers.ToolProvider`'s) named like ``server``, moved aside while an MCP server has
    that name (``mcp__lsp__hover`` is ``mcp__lsp_1__hover`` then); None when it is not."""
    key, prefix = config.provider_in_place_of(server), f"{TOOL_PREFIX}{server}__"
    if key is None or not name.startswith(prefix):
        return None
    moved = mcp_tool_name(key, name.removeprefix(prefix))
    return moved if config.tool_registry.get_tool(moved) is not None else None
