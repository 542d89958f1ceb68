"""How a :class:`~mcpvisor.host.host.Host` runs: :class:`HostOptions`, and the :class:`SettingsSource` a host
may follow instead of its settings files (a fleet's)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mcpvisor.core.pool import McpConnectionPool
from mcpvisor.core.server_config import ConnectionOptions, InMemoryServers, McpServerConfig
from mcpvisor.host import paths
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.limits import max_message_bytes_of
from mcpvisor.host.oauth import http_auth_for
from mcpvisor.host.oauth_store import TokenStore
from mcpvisor.host.pins import PinStore
from mcpvisor.host.settings.loader import Settings
from mcpvisor.host.watcher import DEFAULT_WATCHED_SCOPES, WatchScope

__all__ = ["HostOptions", "SettingsSource"]


@dataclass(frozen=True)
class HostOptions:
    """How a :class:`Host` runs: the environment it reads (``env``: settings paths, ``MCPVISOR_HOME``,
    ``${VAR}`` values), the workspace (default: the current folder), the command line's ``--mcp-config``
    files and start-up ceiling, servers of this session only, whether to watch the settings files, and the
    connection limits. Only ``env`` is required."""

    env: Mapping[str, str] = field(repr=False)  # a whole environment, with whatever secrets it holds
    workspace: Path | None = None
    mcp_config: Sequence[Path] = ()
    allowed_mcp_server_names: Sequence[str] | None = None
    session_servers: Mapping[str, McpServerConfig] = field(default_factory=dict)
    watch: bool = True
    startup_wait_s: float | None = None
    """The most a reconcile waits for servers still handshaking — entering the host, and each edit's, decision's or
    reload's after it (they go on starting, come in with a ``list_changed``, and the reconcile's result names them
    ``starting``); default: each one's discovery timeout. The commands set a few seconds."""
    log_dir: Path | None = None
    max_concurrent_starts: int | None = None
    pool: McpConnectionPool | None = None
    """Share identical servers with other hosts in this process (one per workspace or client)."""
    session_id: str = "default"
    client_requests: bool = False
    """Offer the servers sampling, elicitation and roots, answered by the caller whose call caused the
    request (:mod:`mcpvisor.core.client_requests`); the gateway sets it. With a ``pool``, the pool's setting rules."""
    max_message_bytes: int | None = None
    """The largest message a server may send when its config sets none; default: ``mcp.maxMessageBytes`` in
    the settings, else 64 MiB. With a ``pool``, the pool's setting rules."""
    in_memory: InMemoryServers | None = None
    """Servers served inside this process rather than spawned or reached (protocol-level tests, embedding;
    see :class:`~mcpvisor.core.server_config.ConnectionOptions`). With a ``pool``, the pool's setting rules."""
    lsp_config: Sequence[Path] = ()
    """``--lsp-config`` files: language servers in the ``.lsp.json`` format, above every other source."""
    allowed_lsp_server_names: Sequence[str] | None = None
    """``--allowed-lsp-server-names``: a ceiling ``lsp.allowed`` in the settings can only narrow."""
    watched_scopes: Sequence[WatchScope] = DEFAULT_WATCHED_SCOPES
    """The files the watcher follows (with ``watch``): a fleet replica follows the fleet's settings instead
    of its own settings files, and its decisions come from the fleet, so it watches only the stores."""
    settings_source: SettingsSource | None = None
    """Settings that come from elsewhere than the files (a fleet's): it primes the settings as read, before
    anything starts, and applies its later changes to the running host (``watched_scopes`` leave the files out)."""
    tokens: TokenStore | None = None
    """Where OAuth sign-ins are kept, when not in the user folder's file (a fleet's store)."""
    pins: PinStore | None = None
    """Where tool and prompt pins are kept, when not in the user folder's file (a fleet's store)."""
    approvals: ApprovalStore | None = None
    """Where decisions on gated servers are kept, when not in the user folder's file (a fleet's store:
    :mod:`mcpvisor.fleet`); its changes reconcile as an edit of the file would."""

    def __post_init__(self) -> None:
        for name in ("mcp_config", "lsp_config", "allowed_mcp_server_names", "allowed_lsp_server_names"):
            value = getattr(self, name)
            if isinstance(value, str | os.PathLike):  # (a string is a sequence: of one-letter names or paths)
                raise TypeError(f"HostOptions.{name} takes a list, not one {type(value).__name__}: {name}=[{value!r}]")

    def connections(
        self,
        settings: Settings,
        tokens: TokenStore,
        login_command: str,
        defined_in: Callable[[str], Path | None] | None = None,
    ) -> ConnectionOptions:
        """How the host's own connections are made, by these options and the workspace's ``settings``: signed
        with ``tokens``, and saying to sign in with ``login_command`` (``{name}``: how the host's status says it)
        or what to fix in the file that defines a server (``defined_in``, by its name)."""
        starts = self.max_concurrent_starts or settings.merged.get("mcp.maxConcurrentStarts")
        return ConnectionOptions(
            log_dir=self.log_dir or paths.log_dir(self.env),
            max_concurrent_starts=starts if isinstance(starts, int) and starts > 0 else None,
            http_auth=http_auth_for(tokens, login_command, defined_in),
            client_requests=self.client_requests,
            max_message_bytes=self.max_message_bytes or max_message_bytes_of(settings)[0],
            in_memory=self.in_memory,
            login_command=login_command,
        )


class SettingsSource(Protocol):
    """A source of settings other than the files (:class:`~mcpvisor.fleet.replica.Replica`)."""

    def prime(self, settings: Settings) -> None:
        """Make ``settings``, just read from the files, the source's (in memory)."""

    def follow(self, host: Any) -> Callable[[], None]:
        """Apply later changes to the running ``host`` (a :class:`~mcpvisor.host.host.Host`, through its
        watcher's listeners); returns the function that stops."""
