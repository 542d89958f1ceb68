"""The gateway's HTTP plumbing: uvicorn, DNS-rebinding settings, the workspace header.

Nothing here knows the MCP server itself: :mod:`mcpvisor.gateway.server` and
:mod:`mcpvisor.gateway.workspaces` build their ASGI apps and serve them with :func:`serve_asgi_socket`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from mcp.server.transport_security import TransportSecuritySettings

from mcpvisor.core.errors import ConfigError
from mcpvisor.gateway.auth import BearerAuth
from mcpvisor.gateway.bursts import quiet_rebinding_refusals
from mcpvisor.gateway.connections import guarded_protocol
from mcpvisor.gateway.limits import DEFAULT_HTTP_LIMITS, HttpLimits
from mcpvisor.gateway.listen import http_url, is_loopback, refuse_without_token
from mcpvisor.gateway.responses import JsonRefusals, error_response
from mcpvisor.host import paths

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp

__all__ = [
    "DEFAULT_HTTP_LIMITS",
    "HTTP_SHUTDOWN_S",
    "HttpLimits",
    "WORKSPACE_HEADER",
    "OneWorkspace",
    "admit_workspace",
    "check_workspace_root",
    "header_text",
    "system_folder_of",
    "serve_asgi_socket",
    "transport_security",
    "workspace_of_header",
]

logger = logging.getLogger(__name__)

HTTP_SHUTDOWN_S = 2
"""Grace for open HTTP requests (e.g. a client's notification stream) when the gateway stops."""
WORKSPACE_HEADER = "X-Mcpvisor-Workspace"
"""The request header naming a client's workspace folder (an absolute path)."""

MAX_HEADER_PATH_CHARS = 4096
"""The longest workspace path a client may send (Linux's PATH_MAX)."""
MAX_HEADER_PATH_DEPTH = 128
"""The most folders deep a workspace path may go."""
SYSTEM_FOLDERS = tuple(Path(p) for p in ("/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/root"))
"""Folders that are never a client's workspace, nor anything inside them (``/root`` only when it is not the
home of the user the gateway runs as); ``/`` itself is never one either."""
_SHOWN_CHARS = 80


def _shown(text: str) -> str:
    """A header value as an error message quotes it: never more than a line."""
    return repr(text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…")


def workspace_of_header(value: str | None, default: Path) -> Path:
    """The workspace root a request names: ``default`` without the header, else the header's folder
    as a real path. Raises :class:`ConfigError` naming the header, the problem in a few words and the
    fix when it is not an absolute path of an existing folder (too long, too deep, unreadable: the
    same), never anything else."""
    if value is None:
        return default
    text = value.strip()
    fix = (
        f"send the absolute path of an existing project folder in the {WORKSPACE_HEADER} header, "
        f"or leave the header out to use the gateway's workspace {default}"
    )

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"cannot use workspace {_shown(text)} (header {WORKSPACE_HEADER}): {why}; {fix}")

    if not text:
        raise ConfigError(f"cannot use the workspace in header {WORKSPACE_HEADER}: it is empty; {fix}")
    if len(text) > MAX_HEADER_PATH_CHARS:
        raise refuse(f"too long ({len(text)} characters, at most {MAX_HEADER_PATH_CHARS})")
    if "\0" in text:
        raise refuse("it contains a NUL character")
    try:
        path = Path(text).expanduser() if text.startswith("~") else Path(text)
        if not path.is_absolute():
            raise refuse("not an absolute path")
        if len(path.parts) > MAX_HEADER_PATH_DEPTH:
            raise refuse(f"too deep ({len(path.parts)} levels, at most {MAX_HEADER_PATH_DEPTH})")
        if not path.is_dir():
            raise refuse("it is not a folder" if path.exists() else "no such folder")
        return paths.workspace_root(path)
    except (OSError, RuntimeError) as exc:  # e.g. a name too long for the file system, a symlink loop
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "it cannot be resolved"
        raise refuse(why.lower()) from None


def system_folder_of(root: Path, home: Path) -> Path | None:
    """The system folder ``root`` is, or lies in (:data:`SYSTEM_FOLDERS`), if any."""
    if root == Path(root.anchor):
        return root
    for folder in SYSTEM_FOLDERS:
        if not root.is_relative_to(folder):
            continue
        if folder == Path("/root") and home.is_relative_to(folder) and root.is_relative_to(home):
            continue  # root's own projects, under its home
        return folder
    return None


def _in_system_folder(root: Path, home: Path) -> str | None:
    """How ``root`` stands to the system folder it is or lies in, for "it … a system folder": ``is``, or ``is inside
    /etc, which is``; None when it is in none (:func:`system_folder_of`)."""
    system = system_folder_of(root, home)
    if system is None:
        return None
    return "is" if system == root else f"is inside {system}, which is"


def check_workspace_root(allowed_root: Path, home: Path) -> None:
    """Raise :class:`ConfigError` when ``--workspace-root`` names no folder, or one where every folder is a system
    folder's (:data:`SYSTEM_FOLDERS`), which no client may name: a gateway started so would refuse them all."""
    where = f"cannot use --workspace-root {allowed_root}"
    if not allowed_root.is_dir():
        raise ConfigError(f"{where}: {'it is not a folder' if allowed_root.exists() else 'no such folder'}")
    root = paths.workspace_root(allowed_root)
    if root != Path(root.anchor) and (inside := _in_system_folder(root, paths.workspace_root(home))) is not None:
        raise ConfigError(
            f"{where}: it {inside} a system folder, where clients may name no folder; name the folder that holds "
            "the projects"
        )


def admit_workspace(root: Path, default: Path, allowed_root: Path | None, home: Path) -> Path:
    """``root`` (a real path from :func:`workspace_of_header`) if a client may open it: the gateway's
    own workspace always; a system folder (:data:`SYSTEM_FOLDERS`) never; with ``allowed_root``
    (``--workspace-root``) only folders inside it; without one only folders under ``home`` owned by
    the user the gateway runs as. So a client can never make the gateway read ``/etc``, ``/proc`` or
    another user's files, even when the gateway runs as root. Raises :class:`ConfigError` naming the fix."""
    if root == default:
        return root
    where = f"cannot use workspace {str(root)!r} (header {WORKSPACE_HEADER})"
    home = paths.workspace_root(home)
    if (inside := _in_system_folder(root, home)) is not None:
        raise ConfigError(f"{where}: it {inside} a system folder; name a project folder")
    if allowed_root is not None:
        limit = paths.workspace_root(allowed_root)
        if root != limit and not root.is_relative_to(limit):
            raise ConfigError(
                f"{where}: it is not under the gateway's --workspace-root {limit}; name a folder inside it"
            )
        return root
    if not root.is_relative_to(home):
        raise ConfigError(
            f"{where}: it is not under your home folder {home}; start the gateway with --workspace-root DIR "
            "to serve the folders under DIR"
        )
    try:
        owner = root.stat().st_uid
    except OSError as exc:
        raise ConfigError(f"{where}: {exc.strerror or exc}") from exc
    if owner != os.getuid():
        raise ConfigError(
            f"{where}: it belongs to another user; start the gateway with --workspace-root DIR to serve the "
            "folders under DIR"
        )
    return root


def header_text(raw: str | None) -> str | None:
    """ASGI headers arrive as latin-1; clients send paths as UTF-8 bytes."""
    return None if raw is None else raw.encode("latin-1").decode("utf-8", "surrogateescape")


class OneWorkspace:
    """ASGI guard for a gateway serving one workspace: a client naming another folder in the
    workspace header gets a clear error (HTTP 400) rather than some other project's tools."""

    def __init__(self, app: Any, root: Path) -> None:
        self._app = app
        self._root = root

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            wanted = dict(scope.get("headers") or ()).get(WORKSPACE_HEADER.lower().encode())
            if wanted is not None:
                text = wanted.decode("utf-8", "surrogateescape")
                try:
                    root = workspace_of_header(text, self._root)
                except ConfigError as exc:
                    await error_response(str(exc), 400)(scope, receive, send)
                    return
                if root != self._root:
                    message = (
                        f"this gateway serves only the workspace {self._root}, not {text!r} (header "
                        f"{WORKSPACE_HEADER}); start it with 'mcpvisor serve --http ... --per-client-workspaces' "
                        "to serve other folders, or leave the header out"
                    )
                    await error_response(message, 400)(scope, receive, send)
                    return
        await self._app(scope, receive, send)


async def serve_asgi_socket(
    app: ASGIApp,
    sock: socket.socket,
    *,
    on_stop: Callable[[], None],
    token: str | None = None,
    limits: HttpLimits = DEFAULT_HTTP_LIMITS,
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve an ASGI app with uvicorn on a listening socket (which it closes) until cancelled; then
    ``on_stop()`` (end long-lived streams), open requests get ``HTTP_SHUTDOWN_S``, the app's lifespan ends.

    With ``token``, every HTTP request must carry ``Authorization: Bearer <token>``. Without one the
    socket must be a loopback address: a gateway reachable from other machines always needs a token.
    ``limits`` bound the open connections and the time a client may take to send its headers."""
    try:
        refuse_without_token(str(sock.getsockname()[0]), token)
    except ConfigError:
        sock.close()
        raise
    app = JsonRefusals(app)
    if token is not None:
        app = BearerAuth(app, token)
    try:
        protocol: Any = guarded_protocol(limits)
        server = _uvicorn_server(app, limits, protocol)
        done = anyio.Event()
        shield = anyio.CancelScope(shield=True)

        async def run() -> None:
            try:
                with shield:  # stopped through should_exit, so uvicorn shuts down in order
                    await server.serve(sockets=[sock])
            finally:
                done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            try:
                task_status.started(http_url(sock))
                await done.wait()
            finally:
                on_stop()
                for stuck in list(protocol.paused):  # a write it waits on would hold the stop until it is cut
                    stuck.cut()
                server.should_exit = True
                with anyio.CancelScope(shield=True), anyio.move_on_after(HTTP_SHUTDOWN_S * 2):
                    await done.wait()
                shield.cancel()
    finally:
        sock.close()


def transport_security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection for every loopback listener, whatever its address (none otherwise): a
    request must name the listener's own address, ``localhost``, ``127.0.0.1`` or ``[::1]`` in its ``Host``
    header (any port, or none), and a browser's ``Origin`` must be one of those too (http or https). A page on
    another site that rebinds its name to this machine is refused before anything runs."""
    if not is_loopback(host):
        return None
    quiet_rebinding_refusals()  # (one line per refused request: as many as a page cares to send)
    names = {"127.0.0.1", "localhost", "[::1]"}
    names.add(f"[{host}]" if ":" in host else host.lower())
    return TransportSecuritySettings(  # (each with any port, or none)
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(f"{name}{port}" for name in names for port in ("", ":*")),
        allowed_origins=sorted(
            f"{scheme}://{name}{port}" for scheme in ("http", "https") for name in names for port in ("", ":*")
        ),
    )


def _uvicorn_server(app: ASGIApp, limits: HttpLimits, protocol: type[asyncio.Protocol]) -> uvicorn.Server:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """uvicorn that installs no signal handlers (signals belong to ``cli/main.py``)."""

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    # No logging setup of its own, no access log: the CLI configures logging. No WebSocket protocol (MCP has
    # none; loading uvicorn's costs about 3 MB), no X-Forwarded-* rewriting (nothing here reads the client address).
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        ws="none",
        proxy_headers=False,
        lifespan="on",
        timeout_graceful_shutdown=HTTP_SHUTDOWN_S,
        http=protocol,
        backlog=max(128, min(limits.max_connections, 4096)),
    )
    return QuietServer(config)
