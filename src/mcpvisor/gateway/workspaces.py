"""Per-client workspaces for the HTTP gateway (SPEC §5.5, §9 "Gateway").

A client names its workspace with the ``X-Mcpvisor-Workspace`` header (an absolute folder path)
on every request; clients that send no header get the gateway's own workspace (``--workspace`` or
the cwd). Each distinct workspace (its real path) gets its own :class:`Host` — its settings,
approvals, folder trust, watcher and ``Config`` — and its own :class:`Gateway`, created on first use
and shared by every client naming it. All hosts share one :class:`McpConnectionPool`, so a server
configured identically for two workspaces (typically a user-level one) runs as one process, while
a project server stays pending until approved *for that workspace*.

Routing happens in front of the SDK: this ASGI app checks DNS-rebinding protection (before anything
starts), resolves the header, and hands the request to that workspace's own streamable-HTTP
session manager. So each workspace has its own low-level server, subscription bus (modern era:
``subscriptions/listen`` streams) and handshake-era connection set, and a list-changed notice
reaches only the clients of the workspace whose set changed. A header naming no existing folder
is answered with HTTP 400 and a JSON-RPC error naming the header and the fix.

Lifecycle: a workspace's host opens on the first request naming it (concurrent first requests wait
for the same one). It closes once it has had no request in flight (an open listen or GET stream
counts), no live handshake-era session and no call waiting for its client's next round for ``idle_s``
(by default the session idle timeout, so an abandoned client's workspace closes twice that long after
its last request); the next request opens it afresh. The default workspace stays open. Sessions are
counted across workspaces against one cap (:mod:`mcpvisor.gateway.sessions`). On exit every host
closes, then the pool, so no process remains.

Usage::

    async with WorkspaceGateway(HostOptions(env=os.environ)) as gateway:
        await gateway.serve_http("127.0.0.1", 8765)
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import math
import re
import socket
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import SubscriptionBus
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp_types import INTERNAL_ERROR
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.lifecycle import StackOwner, running
from mcpvisor.core.pool import McpConnectionPool, pool_key
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from mcpvisor.gateway.http import (
    DEFAULT_HTTP_LIMITS,
    WORKSPACE_HEADER,
    HttpLimits,
    admit_workspace,
    check_workspace_root,
    header_text,
    serve_asgi_socket,
    transport_security,
    workspace_of_header,
)
from mcpvisor.gateway.limits import DEFAULT_NAME_BUDGET
from mcpvisor.gateway.listen import MCP_PATH, bind_http_socket
from mcpvisor.gateway.replay import ReplayBuffer
from mcpvisor.gateway.responses import error_response
from mcpvisor.gateway.server import DRAIN_S, Gateway
from mcpvisor.gateway.sessions import RETRY_AFTER_S, OnePath, SessionBook, opening_request
from mcpvisor.host import paths
from mcpvisor.host.host import Host, HostOptions
from mcpvisor.host.limits import max_message_bytes_of
from mcpvisor.host.oauth import TokenStore, http_auth_for
from mcpvisor.host.settings.loader import load_settings
from mcpvisor.host.status import LOGIN_HINT, in_home

__all__ = ["MAX_WORKSPACES", "WorkspaceGateway", "workspace_log_dir"]


def workspace_log_dir(base: Path, root: Path) -> Path:
    """Where a workspace other than the gateway's own keeps the logs its host writes (its language
    servers'): a folder of its own, so that two workspaces' servers of one name never write one file. (The
    MCP servers' connections are the pool's, which names their logs apart itself.)"""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:8]
    return base / "workspaces" / f"{_UNSAFE.sub('_', root.name)[:64] or 'root'}-{digest}"


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

logger = logging.getLogger(__name__)

SESSION_POLL_S = 1.0
"""While only handshake-era sessions keep a workspace open, how often to look whether they ended."""
MAX_WORKSPACES = 64
"""Open workspaces at most (the default one included); a request for one more is refused with 503."""


@dataclass(eq=False)
class _Workspace:
    """One open (or opening) workspace; its owner task enters and exits the host, gateway and manager."""

    root: Path
    serial: int
    default: bool = False
    in_flight: int = 0
    replay: ReplayBuffer = field(default_factory=ReplayBuffer)
    last_used: float = 0.0
    stopping: bool = False
    host: Host | None = None
    gateway: Gateway | None = None
    manager: StreamableHTTPSessionManager | None = None
    error: Exception | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)
    wake: anyio.Event = field(default_factory=anyio.Event)

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()


class WorkspaceGateway(StackOwner):
    """The HTTP gateway with one :class:`Host` and :class:`Gateway` per workspace a client names.

    ``options`` configure every host (``workspace`` is the default one; ``pool`` and ``session_id``
    are set here). ``workspace_root`` limits the folders clients may name to those inside it; without
    it, a client may name only folders owned by the user the gateway runs as. ``on_open(host)`` runs
    for every host before it starts (to subscribe output).
    Enter it (``async with``: opens the pool and the default workspace), then :meth:`serve_http`,
    :meth:`serve_http_socket`, or mount :meth:`http_app`.
    """

    def __init__(
        self,
        options: HostOptions,
        *,
        http_host: str = "127.0.0.1",
        idle_s: float | None = None,
        max_workspaces: int = MAX_WORKSPACES,
        on_open: Callable[[Host], None] | None = None,
        workspace_root: Path | None = None,
        limits: HttpLimits = DEFAULT_HTTP_LIMITS,
        name_budget: int = DEFAULT_NAME_BUDGET,
        round_state: Callable[[str], str] | None = None,
        bus_for: Callable[[Path], AbstractAsyncContextManager[SubscriptionBus]] | None = None,
    ) -> None:
        """``round_state`` and ``bus_for``: a fleet replica's names of input rounds (they name the replica) and
        each workspace's listen bus, entered while the workspace is open (every replica's changes reach the
        listen streams)."""
        self._options = options
        self._round_state = round_state
        self._bus_for = bus_for
        self._limits = limits
        self._name_budget = name_budget
        self.sessions = SessionBook(limits.max_sessions)
        self._default_root = paths.workspace_root(options.workspace)
        self._workspace_root = workspace_root
        self._idle_s = idle_s if idle_s is not None else limits.session_idle_timeout_s
        self._max_workspaces = max_workspaces
        self._on_open = on_open
        self._security_settings = transport_security(http_host)
        self._security = TransportSecurityMiddleware(self._security_settings)
        self._workspaces: dict[Path, _Workspace] = {}
        self._serial = itertools.count(1)
        self._tg: anyio.abc.TaskGroup | None = None
        self._pool: McpConnectionPool | None = None
        self._log_dir = Path()
        self._tokens: TokenStore | None = None
        self._stack: AsyncExitStack | None = None
        self._closing = False
        self._draining = False
        """Set by :meth:`drain`: the gateway is stopping, so no workspace opens any more."""

    def _defined_in(self, name: str) -> Path | None:
        """The file that defines server ``name`` in an open workspace (its connection is shared between them)."""
        return next((p for w in self._workspaces.values() if w.host and (p := w.host.defined_in(name))), None)

    def _login_of(self, name: str, cfg: McpServerConfig) -> str:
        """The sign-in command (``{name}``) of an open workspace holding server ``name``'s shared connection, for what
        the pool says to no workspace (its log): the pool's own names no workspace, so a server a client's workspace
        defines is not found with it; sign-ins are kept by the server's URL: any holder's command signs in for all."""
        pool = self.pool
        for host in self.workspaces().values():
            session = host.options.session_id
            if host.is_running and session in pool.holders_of(pool_key(session, name, cfg)):
                return host.config.options.login_command
        return pool.options.login_command

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> WorkspaceGateway:
        self._enter_once()
        if self._workspace_root is not None:
            check_workspace_root(self._workspace_root, paths.home(self._options.env))
        async with AsyncExitStack() as stack:
            log_dir = self._log_dir = self._options.log_dir or paths.log_dir(self._options.env)
            # One store for the shared connections and every workspace's host: a sign-in a host hears of (its
            # watcher) reaches the connections' next requests.
            self._tokens = self._options.tokens or TokenStore(paths.oauth_tokens_path(self._options.env))
            # Connections are shared between workspaces: their size limit is the gateway's own workspace's, and
            # how they say to sign in names no workspace (the gateway's home, the one their sign-ins are kept in).
            max_bytes = (
                self._options.max_message_bytes
                or max_message_bytes_of(load_settings(self._options.env, self._default_root))[0]
            )
            login = in_home(LOGIN_HINT, paths.named_home(self._options.env))
            self._pool = await stack.enter_async_context(
                McpConnectionPool(
                    ConnectionOptions(
                        log_dir=log_dir,
                        max_concurrent_starts=self._options.max_concurrent_starts,
                        http_auth=http_auth_for(self._tokens, login, self._defined_in, self._login_of),
                        client_requests=self._options.client_requests,
                        max_message_bytes=max_bytes,
                        in_memory=self._options.in_memory,
                        login_command=login,
                    )
                )
            )
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._stop_all)  # runs first on exit: hosts close, then the pool
            default = self._open(self._default_root)
            await default.ready.wait()
            if default.error is not None:
                raise default.error
            self._stack = stack.pop_all()
        return self

    def _stop_all(self) -> None:
        self._closing = True
        for workspace in list(self._workspaces.values()):
            workspace.stop()

    # -- accessors ---------------------------------------------------------------------------

    @property
    def default(self) -> Host:
        """The host of the gateway's own workspace (clients without the header)."""
        return running(self._workspaces[self._default_root].host, "gateway")

    @property
    def pool(self) -> McpConnectionPool:
        return running(self._pool, "gateway")

    def workspaces(self) -> dict[Path, Host]:
        """Workspace root -> host, for every workspace open and serving."""
        return {root: w.host for root, w in self._workspaces.items() if w.host is not None and not w.stopping}

    def gateway_of(self, root: Path) -> Gateway | None:
        """The MCP gateway serving ``root``'s clients, if that workspace is open."""
        workspace = self._workspaces.get(root)
        return workspace.gateway if workspace is not None else None

    async def drain(self, grace_s: float = DRAIN_S) -> int:
        """:meth:`Gateway.drain` for every open workspace at once; how many calls were told so in all."""
        ended: list[int] = []
        self._draining = True  # a workspace opened now would start its servers only to stop them, and serve calls

        async def one(gateway: Gateway) -> None:
            ended.append(await gateway.drain(grace_s))

        async with anyio.create_task_group() as tg:
            for workspace in list(self._workspaces.values()):
                if workspace.gateway is not None:
                    tg.start_soon(one, workspace.gateway)
        return sum(ended)

    def end_client_streams(self) -> None:
        """End every workspace's open ``subscriptions/listen`` streams and handshake-era GET streams gracefully."""
        for workspace in list(self._workspaces.values()):
            if workspace.gateway is not None:
                workspace.gateway.end_client_streams()
        self.sessions.end_notice_streams()

    # -- workspaces --------------------------------------------------------------------------

    def _open(self, root: Path) -> _Workspace:
        assert self._tg is not None
        default = root == self._default_root
        workspace = _Workspace(root, next(self._serial), default=default, last_used=anyio.current_time())
        self._workspaces[root] = workspace
        self._tg.start_soon(self._run, workspace)
        return workspace

    def _acquire(self, root: Path) -> _Workspace | None:
        """The workspace for a request, opened if needed, counted in flight (so it cannot close
        between now and the request's end); ``None`` when the gateway serves as many as it may."""
        workspace = self._workspaces.get(root)
        if workspace is None:
            if len(self._workspaces) >= self._max_workspaces:
                return None
            logger.info("workspace %s: opening for a client", root)
            workspace = self._open(root)
        workspace.in_flight += 1
        return workspace

    def _release(self, workspace: _Workspace) -> None:
        workspace.in_flight -= 1
        workspace.last_used = anyio.current_time()
        if workspace.in_flight == 0:
            workspace.wake.set()

    def _forget(self, workspace: _Workspace) -> None:
        if self._workspaces.get(workspace.root) is workspace:
            del self._workspaces[workspace.root]

    async def _run(self, workspace: _Workspace) -> None:
        """Owner task: enter the workspace's host, gateway and session manager, serve until idle or
        stopped, then exit them in this same task."""
        # A fleet's replica watches none of the files the fleet publishes, but a client folder's own are never
        # published (only the publisher's default workspace is): they are watched here.
        own = self._options.watched_scopes
        if not workspace.default and self._options.settings_source is not None:
            own = (*own, *(s for s in ("workspace", "project", "lsp_project") if s not in own))
        options = dataclasses.replace(
            self._options,
            tokens=self._tokens,
            watched_scopes=own,
            workspace=workspace.root,
            pool=self._pool,
            session_id=f"{workspace.root}#{workspace.serial}",  # unique: a reopened workspace may overlap the old
            log_dir=self._log_dir if workspace.default else workspace_log_dir(self._log_dir, workspace.root),
        )
        try:
            if not workspace.default:  # private, as the log folder is: it names the workspaces
                await anyio.Path(self._log_dir / "workspaces").mkdir(mode=0o700, parents=True, exist_ok=True)
            host = Host(options)
            if self._on_open is not None:
                self._on_open(host)
            bus_of = self._bus_for(workspace.root) if self._bus_for is not None else nullcontext(None)
            async with (
                bus_of as bus,
                host,
                Gateway(host.config, name_budget=self._name_budget, round_state=self._round_state, bus=bus) as gateway,
            ):
                manager = gateway.session_manager(self._security_settings, self._limits, workspace.replay)
                async with manager.run():
                    workspace.host, workspace.gateway, workspace.manager = host, gateway, manager
                    workspace.ready.set()
                    await self._wait_idle(workspace)
                    gateway.end_client_streams()
        except Exception as exc:  # task boundary: a workspace that fails must not take the gateway down
            if workspace.ready.is_set():
                logger.exception("workspace %s failed", workspace.root)
            else:
                logger.warning("workspace %s could not be opened: %s", workspace.root, exc)
                workspace.error = exc
        finally:
            self._forget(workspace)
            workspace.ready.set()
            logger.info("workspace %s: closed", workspace.root)

    async def _wait_idle(self, workspace: _Workspace) -> None:
        """Return when ``workspace`` should close: stopped, or (not the default) unused for ``idle_s``.
        It is forgotten in the same step as the last check, so no request can reach it afterwards."""
        gateway = workspace.gateway
        assert gateway is not None
        while True:
            workspace.wake = wake = anyio.Event()
            if workspace.stopping:
                return
            timeout = math.inf
            if workspace.default or workspace.in_flight:
                pass  # wait for the stop, or for the last request to end
            elif gateway.legacy_sessions() or gateway.rounds_waiting():
                # A live session is a use, and so is a call waiting for its client's answers between rounds
                # (it ends by itself after its round timeout).
                workspace.last_used = anyio.current_time()
                timeout = SESSION_POLL_S
            else:
                timeout = workspace.last_used + self._idle_s - anyio.current_time()
                if timeout <= 0:
                    self._forget(workspace)
                    logger.info("workspace %s: closing after %.0f s without clients", workspace.root, self._idle_s)
                    return
            with anyio.move_on_after(timeout):
                await wake.wait()

    # -- HTTP --------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI: route one request at :data:`MCP_PATH` to its workspace's session manager."""
        request = Request(scope, receive)
        refusal = await self._security.validate_request(request, is_post=request.method == "POST")
        if refusal is not None:  # a DNS-rebinding page must not open a workspace
            await refusal(scope, receive, send)
            return
        if self._closing:
            await error_response("the gateway is shutting down", 503, INTERNAL_ERROR)(scope, receive, send)
            return
        try:
            root = workspace_of_header(header_text(request.headers.get(WORKSPACE_HEADER)), self._default_root)
            root = admit_workspace(root, self._default_root, self._workspace_root, paths.home(self._options.env))
        except ConfigError as exc:
            await error_response(str(exc), 400)(scope, receive, send)
            return
        # (an open workspace serves and refuses as its session manager does: nothing to read ahead or parse here)
        read = receive if root in self._workspaces else await opening_request(scope, receive, send)
        if read is None:
            return
        session_id = request.headers.get(MCP_SESSION_ID_HEADER)
        if session_id is not None and (owner := self._owner_of(session_id)) not in (None, root):
            await error_response(self._not_its_session(session_id, owner, root), 400)(scope, read, send)
            return
        if session_id is not None and root not in self._workspaces:
            # A workspace's sessions end with it: this one is unknown (as the SDK answers it), and opens nothing.
            await error_response("Session not found", 404)(scope, read, send)
            return
        if self._closing or (self._draining and root not in self._workspaces):
            await error_response("the gateway is shutting down", 503, INTERNAL_ERROR)(scope, read, send)
            return
        workspace = self._acquire(root)
        if workspace is None:
            message = (
                f"cannot open workspace {str(root)!r}: the gateway already serves {self._max_workspaces} "
                "workspaces; try again once the clients of other workspaces have gone"
            )
            retry = {"Retry-After": str(RETRY_AFTER_S)}  # as for a full session book: a client backs off
            await error_response(message, 503, INTERNAL_ERROR, headers=retry)(scope, receive, send)
            return
        try:
            await workspace.ready.wait()
            if workspace.manager is None or workspace.error is not None:
                message = f"cannot open workspace {str(root)!r}: {workspace.error or 'it is closing'}"
                await error_response(message, 500, INTERNAL_ERROR)(scope, receive, send)
                return
            await self.sessions.handle(workspace.manager, scope, read, send)
        finally:
            self._release(workspace)

    def _owner_of(self, session_id: str) -> Path | None:
        """The root of the open workspace whose session manager holds the handshake-era session ``session_id``."""
        manager = self.sessions.manager_of(session_id)
        if manager is None:
            return None
        return next((w.root for w in self._workspaces.values() if w.manager is manager), None)

    def _not_its_session(self, session_id: str, owner: Path, named: Path) -> str:
        which = f"names {str(named)!r}" if named != self._default_root else "names none (or the gateway's own)"
        return (
            f"session {session_id[:40]!r} belongs to workspace {owner}, but this request {which} in its "
            f"{WORKSPACE_HEADER} header; send the same {WORKSPACE_HEADER} header on every request of a session, "
            "or initialize a new session for the other workspace"
        )

    def http_app(self) -> OnePath:
        """The streamable-HTTP ASGI app (path :data:`MCP_PATH`)."""
        return OnePath(MCP_PATH, self, Starlette(routes=[Route(MCP_PATH, endpoint=self)]))

    async def serve_http(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve streamable HTTP on ``host:port`` (0: a free port) until cancelled; ``task_status`` gets
        the URL once listening. ``token``: see :meth:`serve_http_socket`. DNS-rebinding protection
        follows the constructor's ``http_host``."""
        await self.serve_http_socket(bind_http_socket(host, port), token=token, task_status=task_status)

    async def serve_http_socket(
        self,
        sock: socket.socket,
        *,
        token: str | None = None,
        wrap: Callable[[Any], Any] | None = None,
        task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve on a listening socket (which it closes) until cancelled; listen streams end first.
        With ``token`` every request needs ``Authorization: Bearer <token>`` (required off loopback);
        ``wrap`` puts an ASGI layer in front of the app, behind authentication."""
        await serve_asgi_socket(
            self.http_app() if wrap is None else wrap(self.http_app()),
            sock,
            on_stop=self.end_client_streams,
            token=token,
            limits=self._limits,
            task_status=task_status,
        )
