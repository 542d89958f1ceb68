"""The life of one connection to one MCP server, over the official SDK (SPEC §5.1).

One owner task opens and closes the connection (anyio cancel scopes are task-bound): it spawns
or reaches the server, runs discovery under the discovery timeout, then keeps the connection
while listening for list-changed notices from both protocol eras, and closes it when asked to
stop or when the server goes away. Requests are :class:`~mcpvisor.core.client.McpClient`'s.
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcpvisor.core import server_log
from mcpvisor.core.client_requests import InFlight
from mcpvisor.core.errors import (
    ConnectError,
    ConnectionBrokenError,
    describe_invalid,
    name_word,
)
from mcpvisor.core.events import ServerStatus
from mcpvisor.core.listing import Listings, Refresher, discover, follow_list_changes, listen_wanted, problems_of
from mcpvisor.core.processes import SpawnedAhead, how_it_exited
from mcpvisor.core.server_config import (
    DEFAULT_MAX_MESSAGE_BYTES,
    REPOSITORY_SCOPES,
    ConnectionOptions,
    McpServerConfig,
    connection_id_of,
    redact_text,
)
from mcpvisor.core.server_notices import ServerNotices
from mcpvisor.core.stdio import StdioProcess
from mcpvisor.core.transports import closed_in_sdk, explain_start_failure, open_transport

if TYPE_CHECKING:
    from mcp.client.session import MessageHandlerFnT


__all__ = [
    "DEFAULT_CALL_TIMEOUT_S",
    "DEFAULT_REMOTE_DISCOVERY_TIMEOUT_S",
    "DEFAULT_STDIO_DISCOVERY_TIMEOUT_S",
    "ServerConnection",
    "default_log_dir",
]

logger = logging.getLogger(__name__)

DEFAULT_STDIO_DISCOVERY_TIMEOUT_S = 30.0
DEFAULT_REMOTE_DISCOVERY_TIMEOUT_S = 5.0
DEFAULT_CALL_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 10.0
"""How long a deliberate stop may take before the owner task is cancelled outright."""
_CLIENT_INFO = types.Implementation(name="mcpvisor", version="0.1.0")


def default_log_dir() -> Path:
    """Where servers log when :attr:`ConnectionOptions.log_dir` is not set: as the host's
    (:func:`mcpvisor.core.server_log.default_log_dir` of this process's environment)."""
    return server_log.default_log_dir(os.environ)


def _endpoint(url: str) -> str:
    """A URL without its query and fragment (what names an MCP endpoint)."""
    return url.split("#", 1)[0].split("?", 1)[0].rstrip("/")


def message_limit(config: McpServerConfig, options: ConnectionOptions) -> int:
    """The largest message ``config``'s server may send: its entry's ``maxMessageBytes``, else the user's (or the
    default); a repository's entry may only lower the user's, never make its server cost more memory."""
    ceiling = options.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
    if config.max_message_bytes is None:
        return ceiling
    if config.scope in REPOSITORY_SCOPES:
        return min(config.max_message_bytes, ceiling)
    return config.max_message_bytes


class ServerConnection:
    """A connection to one server: its owner task, discovery and listings, its loss and its stop
    (:class:`~mcpvisor.core.client.McpClient` adds the requests). Build it, ``await start(task_group)``,
    use it, ``await aclose()``.

    ``on_change`` is called (synchronously, must not block) whenever status, tools, prompts or the
    last error change. ``on_lost`` is called once if the connection ends without being asked to.
    ``options`` say how it is made (:class:`ConnectionOptions`); ``ahead``: its server's process, spawned already
    (while the SDK loaded), which its first connect adopts.
    """

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        options: ConnectionOptions | None = None,
        on_change: Callable[[Any], None] | None = None,
        on_lost: Callable[[Any], None] | None = None,
        log_name: str | None = None,
        ahead: SpawnedAhead | None = None,
    ) -> None:
        options = options or ConnectionOptions()
        self.name = name
        self._log_name = log_name or name
        """What the log file is named after: the server's name, unless another session runs a server of
        that name from another configuration (see :meth:`McpConnectionPool.acquire`)."""
        self.config = config
        self.max_message_bytes = message_limit(config, options)
        self.connection_id = connection_id_of(name, config)
        self.status: ServerStatus = "disconnected"
        self.last_error: str | None = None
        self.listing_problem: str | None = None
        """Why its latest listing was not taken while it stays connected (the server's bug), or None."""
        self.tools: list[types.Tool] = []
        self.withheld = Listings().withheld
        """The tools it lists that are neither registered nor served, as no client could use them (its bug)."""
        self.prompts: list[types.Prompt] = []
        self.resources: list[types.Resource] = []
        self.resource_templates: list[types.ResourceTemplate] = []
        self.protocol_version: str | None = None
        self.process: StdioProcess | None = None
        self.needs_auth = False
        """The server answered 401/403: it wants credentials."""
        self._log_dir = options.log_dir or default_log_dir()
        self._http_auth = options.http_auth
        self.login_command = options.login_command
        """How its errors say to sign in (``{name}``): with a pool, the pool's, which names no session's workspace."""
        self._in_memory = options.in_memory
        self._ahead = ahead
        self._auth_in_use: Any = None
        """What signs this connection's requests (see :data:`HttpAuth`)."""
        self._on_change = on_change
        self._on_lost = on_lost
        self._client: Client | None = None
        self._mode: str = "auto"
        self._stop = anyio.Event()
        self._wake = anyio.Event()
        self._lost_reason: str | None = None
        self._ended = False
        """Whether the connection was ended on purpose (:meth:`mark_lost` ``ended``): its calls are told why."""
        self._broken: ConnectionBrokenError | None = None
        """Why the transport stopped reading a server that still runs (it broke the size bound)."""
        self._ready = anyio.Event()
        self._done = anyio.Event()
        self._life: anyio.CancelScope | None = None
        self._stopping = False
        self._ending = False
        self._gated: str | None = None
        """Why gating stopped this connection (``rejected``, ``pending_approval``, ...), when it did."""
        self._refresher = Refresher()
        self._started = False
        self._connection_tg: anyio.abc.TaskGroup | None = None
        self._notices = ServerNotices(name)
        self._subscribers: Counter[str] = Counter()
        """Resource URI -> how many of this connection's users (gateways) subscribed to it here."""
        self._subscribing = anyio.Lock()
        self._in_flight = InFlight(name) if options.client_requests else None
        self._calls: set[anyio.CancelScope] = set()
        """The calls in flight, ended with the connection: a 2026-07-28 server's requests of its client are
        fulfilled in the calling task, which waits for that client's answer however the connection ends."""

    # -- properties --------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def ending(self) -> bool:
        """The connection is known lost and its teardown is not over (``on_lost`` comes after it)."""
        return self._lost_reason is not None and not self._done.is_set()

    @property
    def log_path(self) -> Path:
        return server_log.log_file(self._log_dir, self._log_name)

    def said_to(self, login_command: str, text: str) -> str:
        """``text`` (this connection's words) as a session that signs in with ``login_command`` (``{name}``) says
        it: a connection shared between sessions (a pool's) says to sign in with the pool's command, which names no
        workspace; told to a session, it is that session's own (its workspace and home)."""
        if login_command == self.login_command:
            return text
        shared, own = (command.format(name=name_word(self.name)) for command in (self.login_command, login_command))
        return text.replace(shared, own)

    @property
    def discovery_timeout_s(self) -> float:
        if self.config.discovery_timeout_ms is not None:
            return self.config.discovery_timeout_ms / 1000
        if self.config.transport == "stdio":
            return DEFAULT_STDIO_DISCOVERY_TIMEOUT_S
        return DEFAULT_REMOTE_DISCOVERY_TIMEOUT_S

    @property
    def call_timeout_s(self) -> float:
        return self.config.timeout / 1000 if self.config.timeout is not None else DEFAULT_CALL_TIMEOUT_S

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Connect and discover. Returns once connected; raises :class:`ConnectError` on failure.

        The connection lives in an owner task in ``tg`` until :meth:`aclose`.
        """
        if self._started:
            raise RuntimeError(f"client for server {self.name!r} was already started")
        self._started = True
        self._set_status("connecting")
        tg.start_soon(self._own, name=f"mcp-server:{self.name}")
        await self._ready.wait()
        if self.status != "connected" and self._stopping:
            raise ConnectError(f"connecting to server {self.name!r} was abandoned: it was stopped", server=self.name)
        if self.status != "connected":
            raise ConnectError(f"could not connect to server {self.name!r}: {self.last_error}", server=self.name)

    async def aclose(self, *, ending: bool = False, gated: str | None = None) -> None:
        """Disconnect (a deliberate stop: never reported as lost). Safe to call more than once. ``ending``: the
        session (or the pool) it belongs to is closing; ``gated``: gating forbids the server now (the reason, then
        after ``: `` which list leaves it out and the fix when that is known);
        either is what a call cut short is told."""
        self._stopping = True
        self._ending = self._ending or ending
        self._gated = self._gated or gated
        self._stop.set()
        self._wake.set()
        if not self._started:
            return
        if not self._ready.is_set() and self._life is not None:
            self._life.cancel()  # still connecting: abandon the attempt
        with anyio.move_on_after(STOP_TIMEOUT_S) as scope:
            await self._done.wait()
        if scope.cancelled_caught and self._life is not None:
            logger.warning("server %r did not stop in %.0f s; cancelling its connection", self.name, STOP_TIMEOUT_S)
            self._life.cancel()
            await self._done.wait()

    def _on_broken(self, error: ConnectionBrokenError) -> None:
        self._broken = error
        self.mark_lost(str(error))

    def mark_lost(self, reason: str, *, ended: bool = False) -> None:
        """Declare the connection dead (e.g. an HTTP session the server no longer knows); ``ended``: ended on
        purpose (e.g. signed out), the calls in flight are told ``reason`` (not that the server closed it)."""
        if self._lost_reason is None and not self._stopping:
            self._lost_reason = redact_text(reason, self.config)
            self._ended = ended
            if self.status == "connected":  # said at once: the teardown that follows may take a second
                self.last_error = self._lost_reason
                self._set_status("disconnected")
            self._wake.set()

    async def _own(self) -> None:
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.discovery_timeout_s) as life:
                self._life = life
                await self._connect_and_serve(life)
            if life.cancelled_caught and not self._ready.is_set() and not self._stopping:
                longer = f"a server that needs longer may have it: set mcpServers.{self.name}.discoveryTimeoutMs"
                refreshing_at = getattr(self._auth_in_use, "refreshing_at", None)  # the sign-in's, not the server's
                self.last_error = (
                    f"no answer within {self.discovery_timeout_s:g} s; check that the server starts and speaks MCP "
                    f"(its log: {self.log_path}); {longer}"
                    if self.config.transport == "stdio"
                    else f"no answer within {self.discovery_timeout_s:g} s from its authorization server "
                    f"{refreshing_at} to refresh the sign-in; {longer}"
                    if refreshing_at
                    else f"no answer within {self.discovery_timeout_s:g} s from {self.config.target()}; {longer}"
                )
        except anyio.get_cancelled_exc_class():
            self._stopping = True  # the host is shutting down: a deliberate stop, not a loss
            raise
        except Exception as exc:
            if not self._stopping:
                self.last_error = self._explain(exc)
                logger.debug("server %r connection failed: %s", self.name, self.last_error)
        finally:
            self._client = None
            self._end_calls()  # once the SDK's client is closed: what it was asking its caller is withdrawn first
            was_connected = self._ready.is_set()
            self._ready.set()
            self._list(Listings())
            if self._stopping:
                self.last_error = None if was_connected else self.last_error
            elif was_connected:
                self.last_error = self.last_error or self._lost_reason or "connection closed"
            self._set_status("disconnected")
            self._done.set()
            if was_connected and not self._stopping and self._on_lost is not None:
                self._on_lost(self)

    def _end_calls(self) -> None:
        for scope in self._calls:
            scope.cancel()

    async def _connect_and_serve(self, life: anyio.CancelScope) -> None:
        async with AsyncExitStack() as stack:
            client = await self._open(stack)
            async with anyio.create_task_group() as tg:
                self._connection_tg = tg
                if listen_wanted(client):
                    # Subscribe before listing: a change between the two is never missed (no replay).
                    await tg.start(self._listener, client)
                listings = await discover(client)
                self._list(listings)
                life.deadline = math.inf
                self._client = client
                self.last_error, self.listing_problem = None, problems_of(listings)
                self._set_status("connected")
                self._ready.set()
                logger.info("server %r connected (%d tools, %d prompts)", self.name, len(self.tools), len(self.prompts))
                tg.start_soon(
                    self._refresher.run, client, self._listings, self._relisted, self._refresh_failed, self._fetched
                )
                if self.process is not None:
                    tg.start_soon(self._watch_process, self.process)
                await self._wake.wait()
                self._client = None  # from here on a request is refused as "not connected", never sent
                tg.cancel_scope.cancel()
            self._connection_tg = None
            if not self._stopping and self._lost_reason is not None:
                self.last_error = self._lost_reason
                # Said as its sign-in's log lines say to sign in: a shared connection's own command names no workspace.
                logged = getattr(self._auth_in_use, "logged_login", None)
                reason = self.said_to(logged(), self._lost_reason) if logged is not None else self._lost_reason
                logger.warning("server %r lost: %s", self.name, reason)

    async def _open(self, stack: AsyncExitStack) -> Client:
        self._auth_in_use = self._auth()
        transport, self.process = await open_transport(
            stack,
            self.name,
            self.config,
            log_path=self.log_path,
            on_response=self._note_http_status,
            sse_timeout_s=self.discovery_timeout_s,
            max_message_bytes=self.max_message_bytes,
            on_broken=self._on_broken,
            auth=self._auth_in_use,
            in_memory=self._in_memory,
            ahead=self._ahead,
        )
        handler: MessageHandlerFnT = self._on_message
        asks = self._in_flight
        client = Client(
            transport,
            mode=self._mode,
            message_handler=handler,
            logging_callback=self._notices.on_log,
            client_info=_CLIENT_INFO,
            sampling_callback=asks.sampling if asks else None,
            elicitation_callback=asks.elicitation if asks else None,
            list_roots_callback=asks.list_roots if asks else None,
        )
        await stack.enter_async_context(client)
        self.protocol_version = client.protocol_version
        # Reconnect in the era we negotiated: no probe round trip next time (MCP-SDK-2.md pitfall 7).
        self._mode = client.protocol_version if client.protocol_version in MODERN_PROTOCOL_VERSIONS else "legacy"
        return client

    def _auth(self) -> Any:
        remote = self.config.transport != "stdio"
        return self._http_auth(self.name, self.config) if self._http_auth is not None and remote else None

    async def _note_http_status(self, response: Any) -> None:
        """Remember that the server asked for credentials (the SDK keeps only a generic error) — until its
        endpoint answers otherwise: a 401 a sign-in satisfied does not explain a 400 after it (a wrong type).
        Not when what signs the requests gets its credentials by itself: no sign-in of a person's mends that."""
        if response.status_code in (401, 403):
            self.needs_auth = not getattr(self._auth_in_use, "signs_in_by_itself", False)
        elif self.needs_auth and _endpoint(str(response.request.url)) == _endpoint(
            self.config.http_url or self.config.url or ""
        ):
            self.needs_auth = False

    def _explain(self, exc: BaseException) -> str:
        """Why the connection failed, for people: never a URL's credentials, an env or header value."""
        return redact_text(
            explain_start_failure(
                self.name,
                self.config,
                exc,
                needs_auth=self.needs_auth,
                process=self.process,
                log_path=self.log_path,
                login_command=self.login_command,
            ),
            self.config,
        )

    # -- discovery and refresh ---------------------------------------------------------------

    def _listings(self) -> Listings:
        return Listings(self.tools, self.prompts, self.resources, self.resource_templates, self.withheld)

    def _list(self, listings: Listings) -> None:
        self.tools, self.prompts, self.withheld = listings.tools, listings.prompts, listings.withheld
        self.resources, self.resource_templates = listings.resources, listings.resource_templates

    async def _on_message(self, message: Any) -> None:
        """Handshake-era notices (modern servers also copy theirs here while a listen is open)."""
        if isinstance(message, types.ToolListChangedNotification):
            self.request_refresh(tools=True)
        elif isinstance(message, types.PromptListChangedNotification):
            self.request_refresh(prompts=True)
        elif isinstance(message, types.ResourceListChangedNotification):
            self.request_refresh(resources=True)
        elif (
            isinstance(message, types.ResourceUpdatedNotification)
            and self.protocol_version not in MODERN_PROTOCOL_VERSIONS
        ):
            self._notices.tell(message)  # in the 2026-07-28 era the resource's own listen stream tells (this is a copy)
        elif isinstance(message, Exception):
            logger.debug("server %r sent something unreadable: %s", self.name, message)

    def request_refresh(self, *, tools: bool = False, prompts: bool = False, resources: bool = False) -> None:
        """Ask the owner to refetch listings. Bursts coalesce into one refetch."""
        self._refresher.request(tools=tools, prompts=prompts, resources=resources)

    def _relisted(self, listings: Listings) -> None:
        self._list(listings)
        self._notify()

    def _fetched(self, listings: Listings) -> None:
        if self._note_problem(problems_of(listings)) and listings == self._listings():
            self._notify()  # (a listing that changed is told by _relisted)

    def _note_problem(self, problem: str | None) -> bool:
        """Note what is wrong with the latest listing; whether that changed."""
        changed, self.listing_problem = problem != self.listing_problem, problem
        return changed

    def _refresh_failed(self, exc: MCPError | ValidationError) -> None:
        if isinstance(exc, ValidationError):  # the server's bug: it stays up, serving what it listed before
            invalid = f"its answer ({exc.title}) is not valid MCP ({describe_invalid(exc)})"
            logger.warning(
                "server %r: refreshing its listings failed: %s; the listing before it stays in use", self.name, invalid
            )
            if self._note_problem(
                f"its new listing is not valid MCP ({describe_invalid(exc)}); the one before is served"
            ):
                self._notify()
            return
        logger.warning("server %r: refreshing its listings failed: %s", self.name, redact_text(str(exc), self.config))
        if closed_in_sdk(exc):
            self.mark_lost("connection closed")
        else:  # it stays up, serving what it listed before
            said = redact_text(exc.message, self.config)[:200]
            if self._note_problem(f"listing it again failed: {said} (code {exc.code}); the one before is served"):
                self._notify()

    async def _listener(self, client: Client, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        await follow_list_changes(
            client,
            self.request_refresh,
            describe=lambda exc: f"server {self.name!r}" + (f" ({redact_text(str(exc), self.config)})" if exc else ""),
            task_status=task_status,
        )

    async def _watch_process(self, process: StdioProcess) -> None:
        await process.ended.wait()
        if not self._stopping:
            with anyio.move_on_after(0.5):
                while process.returncode is None:  # noqa: ASYNC110 - the exit code has no event to wait on
                    await anyio.sleep(0.01)
            code = process.returncode
            self.mark_lost(f"process {how_it_exited(code)}" if code is not None else "server closed its output")

    # -- notification ------------------------------------------------------------------------

    def _set_status(self, status: ServerStatus) -> None:
        if status != self.status:
            self.status = status
            logger.debug("server %r is %s", self.name, status)
        self._notify()

    def _notify(self) -> None:
        if self._on_change is not None:
            self._on_change(self)
