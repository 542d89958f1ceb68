"""Reaching one server: the transport for its config (stdio, streamable HTTP, SSE), and why a start failed.

Secrets never reach a message: the caller redacts with ``redact_text`` before showing one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcpvisor.core.errors import (
    ConnectError,
    ConnectionBrokenError,
    McpvisorError,
    MessageTooLargeError,
    describe_invalid,
    name_word,
)
from mcpvisor.core.listing import ListingTooLong
from mcpvisor.core.processes import SpawnedAhead, how_it_exited, uses_host_path
from mcpvisor.core.server_config import InMemoryServers, McpServerConfig, arguments_hint
from mcpvisor.core.server_log import ServerLog, log_problem
from mcpvisor.core.stdio import StdioProcess, open_stdio_transport

__all__ = [
    "closed_in_sdk",
    "describe_failure",
    "explain_start_failure",
    "flatten",
    "open_transport",
    "timed_out_in_sdk",
]


async def open_transport(
    stack: AsyncExitStack,
    name: str,
    cfg: McpServerConfig,
    *,
    log_path: Path,
    on_response: Callable[[Any], Awaitable[None]],
    sse_timeout_s: float,
    max_message_bytes: int,
    on_broken: Callable[[ConnectionBrokenError], None],
    auth: Any = None,
    in_memory: InMemoryServers | None = None,
    ahead: SpawnedAhead | None = None,
) -> tuple[Any, StdioProcess | None]:
    """Enter ``cfg``'s transport on ``stack``: ``(transport for mcp.Client, the stdio process or None)``.

    A stdio server is spawned here (its stderr appended to ``log_path``, created 0600); a remote
    one gets an HTTP client whose every response passes ``on_response``, signed by ``auth`` (an
    ``httpx2.Auth``, e.g. an OAuth provider) when given. No message may be larger than
    ``max_message_bytes``: a larger one is reported to ``on_broken`` and fails what was waiting for it.
    Raises :class:`ConnectError` naming the config field to fix when the executable or working
    directory does not exist. A server ``in_memory`` serves (see :data:`InMemoryServers`) is neither
    spawned nor reached: its streams are the transport, and there is no process. ``ahead``: the server's process
    if it was spawned before its connection (while the SDK loaded), adopted when it was spawned for ``cfg``."""
    served = in_memory(name, cfg) if in_memory is not None else None
    if served is not None:
        return _FixedStreams(await stack.enter_async_context(served)), None
    transport: Any
    process: StdioProcess | None = None
    if cfg.command is None:
        _check_url(name, cfg)
    if cfg.command is not None:
        adopted = ahead.take(cfg) if ahead is not None else None
        # A server may print anything it was given, secrets included: the log is the user's alone (0600).
        try:
            log = adopted[1] if adopted is not None else ServerLog(log_path)
        except OSError as exc:
            raise ConnectError(f"could not start server {name!r}: {log_problem(log_path, exc)}", server=name) from exc
        host_path = uses_host_path(cfg)
        try:
            streams, process = await stack.enter_async_context(
                open_stdio_transport(
                    cfg.command,
                    cfg.args,
                    env=cfg.env,
                    cwd=cfg.cwd,
                    log=log,
                    server=name,
                    max_message_bytes=max_message_bytes,
                    on_broken=on_broken,
                    host_path=host_path,
                    process=adopted[0] if adopted is not None else None,
                )
            )
        except FileNotFoundError as exc:
            bad_cwd = _missing_dir(cfg.cwd)
            what, missing, field = (
                ("working directory", cfg.cwd, "cwd") if bad_cwd else ("executable", cfg.command, "command")
            )
            where = (
                " on the host's PATH (a repository's server never runs what its own env.PATH finds)"
                if host_path and not bad_cwd
                else ""
            )
            hint = "" if bad_cwd else arguments_hint(cfg.approved_value("command"))
            raise ConnectError(
                f"could not start server {name!r}: {what} {missing!r} not found{where}; "
                f"check mcpServers.{name}.{field}{hint}",
                server=name,
            ) from exc
        except PermissionError as exc:
            written = cfg.approved_value("command")
            unset = ": a variable in it is unset or empty" if "$" in str(written) else ""
            reason = (
                f"its command is empty (written {written!r}{unset})"
                if not cfg.command
                else f"permission denied running {cfg.command!r}"
            )
            raise ConnectError(
                f"could not start server {name!r}: {reason}; check mcpServers.{name}.command", server=name
            ) from exc
        transport = _FixedStreams(streams)
    elif cfg.http_url is not None:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=cfg.headers or {},
                timeout=httpx2.Timeout(30.0, read=300.0),
                event_hooks={"response": [on_response]},
                auth=auth,
                transport=_limited(name, max_message_bytes, on_broken),
            )
        )
        # Events are bounded by the transport (which can say why); the SDK's own 1 MiB bound would come first.
        transport = streamable_http_client(cfg.http_url, http_client=http, max_sse_event_size=None)
    else:
        import httpx2
        from mcp.client.sse import sse_client

        from mcpvisor.core.http_limits import LEGACY_SSE_MAX_EVENT_BYTES

        def http_client(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(
                headers=headers,
                timeout=timeout or httpx2.Timeout(30.0, read=300.0),
                auth=auth or signer,
                event_hooks={"response": [on_response]},
                transport=_limited(
                    name,
                    min(max_message_bytes, LEGACY_SSE_MAX_EVENT_BYTES),
                    on_broken,
                    transport_bound=max_message_bytes > LEGACY_SSE_MAX_EVENT_BYTES,
                ),
            )

        signer = auth

        assert cfg.url is not None
        transport = sse_client(
            cfg.url,
            headers=dict(cfg.headers or {}),
            timeout=sse_timeout_s,
            httpx_client_factory=http_client,
        )
    return transport, process


_SCHEMES = ("http", "https")
"""The schemes of a remote server's URL."""


def _check_url(name: str, cfg: McpServerConfig) -> None:
    """Refuse a remote server's URL that cannot be reached (no host, no scheme, a scheme MCP is not served over),
    saying how to write it; the URL is shown as written (``${VAR}`` kept: a value may be a secret)."""
    run = cfg.http_url or cfg.url or ""
    parts = urlsplit(run)
    if parts.hostname and parts.scheme.lower() in _SCHEMES:
        return
    written = str(cfg.approved_value("http_url" if cfg.http_url is not None else "url"))
    if not parts.hostname:
        run = run.strip()
        if run and not run.startswith("/") and _lacks_scheme(run):  # (a host left empty by a variable: "/mcp")
            raise ConnectError(
                f"could not reach server {name!r}: its URL has no scheme (written {written!r}); write it as "
                f"{'https://' + written.strip()!r} (or http:// for a server without TLS) in mcpServers.{name}.url",
                server=name,
            )
        unset = ": a variable in it is unset or empty" if "$" in written else ""
        raise ConnectError(
            f"could not reach server {name!r}: its URL has no host (written {written!r}{unset}); "
            f"check mcpServers.{name}.url",
            server=name,
        )
    raise ConnectError(
        f"could not reach server {name!r}: its URL's scheme {parts.scheme.lower()!r} is not one MCP is served over "
        f"(written {written!r}); write an https:// (or http://) URL in mcpServers.{name}.url",
        server=name,
    )


def _lacks_scheme(url: str) -> bool:
    """Whether ``url`` was written without its ``https://`` (``example.com/mcp``, ``localhost:8080/mcp``), not with
    another scheme (``unix:/tmp/mcp.sock``), which adding one would not mend."""
    if "://" in url:
        return False
    scheme = urlsplit(url).scheme
    return not scheme or url[len(scheme) + 1 : len(scheme) + 2].isdigit()  # ``HOST:PORT`` reads as a scheme


def _limited(
    name: str, limit: int, on_broken: Callable[[ConnectionBrokenError], None], *, transport_bound: bool = False
) -> Any:
    """An HTTP transport that lets no message over ``limit`` bytes through (:mod:`mcpvisor.core.http_limits`);
    ``transport_bound``: the limit is the transport's own, not the configured one."""
    import httpx2

    from mcpvisor.core.http_limits import LimitedTransport

    def too_large() -> None:
        on_broken(MessageTooLargeError(server=name, limit=limit, transport_bound=transport_bound))

    return LimitedTransport(httpx2.AsyncHTTPTransport(), limit=limit, on_too_large=too_large)


def flatten(exc: BaseException) -> list[BaseException]:
    """The leaves of nested exception groups (the SDK wraps errors in two)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in flatten(sub)]
    return [exc]


_SDK_TIMED_OUT = re.compile(r"Request '[^']*' timed out")
_SDK_CLOSED = re.compile(
    r"Connection closed|SSE stream failed: .*|SSE stream ended without a response"
    r"|SSE stream ended and reconnection attempts were exhausted",
    re.DOTALL,
)
"""What the SDK says, with code -32000, when a connection (or an HTTP request's own event stream) is gone."""


def closed_in_sdk(exc: MCPError) -> bool:
    """Whether ``exc`` is the SDK's own word that the connection closed, rather than an error the server
    answered with the same code: -32000 opens JSON-RPC's server-error range, and servers use it for anything
    (taking one of those for a lost connection would restart a healthy server on every failing call)."""
    return exc.code == types.CONNECTION_CLOSED and exc.data is None and _SDK_CLOSED.fullmatch(exc.message) is not None


def timed_out_in_sdk(exc: MCPError) -> bool:
    """Whether ``exc`` is the SDK's own timeout of a request, rather than a server's error with code -32001."""
    return exc.code == types.REQUEST_TIMEOUT and exc.data is None and _SDK_TIMED_OUT.fullmatch(exc.message) is not None


def explain_start_failure(
    name: str,
    cfg: McpServerConfig,
    exc: BaseException,
    *,
    needs_auth: bool,
    process: StdioProcess | None,
    log_path: Path,
    login_command: str = "mcpvisor mcp login {name}",
) -> str:
    """Why a connection could not be made, for people (the caller redacts it); ``login_command``: how to sign in
    (``{name}``, see :class:`~mcpvisor.core.server_config.ConnectionOptions`)."""
    for leaf in flatten(exc):
        if isinstance(leaf, McpvisorError) and not isinstance(leaf, ConnectError):
            return str(leaf)  # e.g. a sign-in the layer above says is needed, with its fix
        if type(leaf).__module__.startswith("mcp.client.auth"):
            return f"signing in to {cfg.target()} failed: {_auth_failure(leaf)}"
        if "Illegal header value" in str(leaf) or "Illegal header name" in str(leaf):  # h11's words (the value shown)
            return (
                f"a header in mcpServers.{name}.headers cannot be sent: a value is empty or holds a line break "
                "(a ${VAR} that is not set expands to nothing)"
            )
    if needs_auth:
        for leaf in flatten(exc):
            if (origin := _unreachable_origin(leaf)) is not None:
                return (
                    f"the server needs authentication, but its authorization server {origin} cannot be reached "
                    f"({leaf}); try again later"
                )
        return (
            f"the server needs authentication ({cfg.target()} answered 401/403); sign in with: "
            f"{login_command.format(name=name_word(name))} "
            f"(or put the credentials it expects in mcpServers.{name}.headers)"
        )
    for leaf in flatten(exc):  # another origin than the server's is its sign-in's (e.g. a refresh): that one is down
        if (origin := _unreachable_origin(leaf)) is not None and origin != _origin_of(cfg.http_url or cfg.url):
            return f"its authorization server {origin} cannot be reached ({leaf}); try again later"
    for leaf in flatten(exc):
        if isinstance(leaf, ConnectError):
            return str(leaf).split(": ", 1)[-1]
        if isinstance(leaf, ValidationError) and leaf.title.endswith("Result"):  # before the exit its teardown caused
            return f"its answer to a start-up request ({leaf.title}) is not valid MCP ({describe_invalid(leaf)})"
        if isinstance(leaf, RuntimeError) and (version := _UNSUPPORTED_VERSION.fullmatch(str(leaf))) is not None:
            spoken = f"{HANDSHAKE_PROTOCOL_VERSIONS[0]} to {HANDSHAKE_PROTOCOL_VERSIONS[-1]}"
            return (
                f"it answered the handshake with protocol version {version[1][:40]!r}, which mcpvisor does not speak "
                f"(it speaks {spoken}); update the server, or mcpvisor if the server is newer"
            )
    for leaf in flatten(exc):
        if isinstance(leaf, MCPError) and not closed_in_sdk(leaf) and not timed_out_in_sdk(leaf):
            where = "" if cfg.transport == "stdio" else f" (reaching {cfg.target()})"
            if isinstance(leaf, ListingTooLong):
                return f"{leaf.message}{where}"
            status = _SDK_HTTP_STATUSES.get((leaf.code, leaf.message)) if cfg.transport == "http" else None
            if status is not None:  # the SDK's stand-in for an HTTP status, not an answer of the server's
                return (
                    f"the server answered its start-up request with {status}{where}; check the URL, and if it "
                    f'speaks the older SSE transport, set mcpServers.{name}.type to "sse"'
                )
            if leaf.code == types.PARSE_ERROR and leaf.message.startswith("Failed to parse"):
                # The SDK's text quotes the answer, which may hold a secret.
                return f"the server's answer to its start-up requests is not valid JSON-RPC (not shown){where}"
            return f"the server answered its start-up requests with an error: {leaf.message} (code {leaf.code}){where}"
    reason = describe_failure(exc)
    if cfg.transport == "stdio":
        code = process.returncode if process is not None else None
        if code is not None:
            return f"process {how_it_exited(code)} during start-up; see its log {log_path}"
        # (a server served in memory has no process, and no log)
        return f"{reason}; see its log {log_path}" if process is not None or log_path.exists() else reason
    return f"{reason} (reaching {cfg.target()}){_transport_hint(exc, name, cfg)}"


_UNSUPPORTED_VERSION = re.compile(r"Unsupported protocol version from the server: (.*)", re.DOTALL)
"""What the SDK raises when a server's ``initialize`` result claims a version it did not ask for."""

_SDK_HTTP_STATUSES = {
    (types.METHOD_NOT_FOUND, "Not Found"): "HTTP 404 (Not Found)",
    (types.INTERNAL_ERROR, "Server returned an error response"): "an HTTP error status",
}
"""The errors the SDK's streamable HTTP client makes of an HTTP error status, and what they stand for."""


def _transport_hint(exc: BaseException, name: str, cfg: McpServerConfig) -> str:
    """The fix when an HTTP status says an SSE server may speak streamable HTTP: a ``url`` without a ``type``
    is the older SSE transport, which a streamable HTTP endpoint refuses (400, 405 or 406)."""
    statuses = {getattr(getattr(leaf, "response", None), "status_code", None) for leaf in flatten(exc)}
    if cfg.transport == "sse" and statuses & {400, 405, 406}:
        return f'; if it speaks streamable HTTP, set mcpServers.{name}.type to "http"'
    return ""


_ANSWER_QUOTED = re.compile(r"^((?:Token exchange|Registration) failed:? \(?\d{3}\)?[^:]*?)[: ] ?(.*)$", re.S)
"""The SDK's sign-in errors that quote the authorization server's answer (which may echo the request's secrets)."""
_OAUTH_ERROR = re.compile(r"[\w.-]{1,64}")


def _auth_failure(leaf: BaseException) -> str:
    """An SDK sign-in error in one line: e.g. a token endpoint's answer that is no token response. An answer
    the SDK quotes is left out but for its OAuth ``error`` code (RFC 6749 §5.2): it may echo the request,
    client secret and code included, and is any length."""
    text = str(leaf).splitlines()[0] if str(leaf) else type(leaf).__name__
    if quoted := _ANSWER_QUOTED.match(str(leaf)):
        head, body = quoted.groups()
        try:
            error = json.loads(body).get("error")
        except (ValueError, AttributeError):
            error = None
        if isinstance(error, str) and _OAUTH_ERROR.fullmatch(error):
            return f"{head}: {error}"
        return f"{head} (its answer is not shown: it may hold a secret)"
    errors = getattr(leaf.__cause__ or leaf.__context__, "errors", None)
    if callable(errors):  # pydantic's ValidationError: its first problem, not the whole dump
        try:
            first = errors()[0]["msg"]
        except (IndexError, KeyError, TypeError):
            return text
        return f"{text.split(':', 1)[0]}: {first}"
    return text


def _unreachable_origin(leaf: BaseException) -> str | None:
    """The origin an HTTP client could not reach (connection refused, timed out), if ``leaf`` is that."""
    if not type(leaf).__module__.startswith("httpx") or type(leaf).__name__ not in ("ConnectError", "ConnectTimeout"):
        return None
    try:
        url = leaf.request.url  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError when no request is attached
        return None
    return f"{url.scheme}://{url.netloc.decode() if isinstance(url.netloc, bytes) else url.netloc}"


def _origin_of(url: str | None) -> str | None:
    """``scheme://host[:port]`` of ``url`` as :func:`_unreachable_origin` writes it (a default port left out)."""
    if url is None:
        return None
    import httpx2

    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError):
        return None
    return f"{parsed.scheme}://{parsed.netloc.decode() if isinstance(parsed.netloc, bytes) else parsed.netloc}"


def describe_failure(exc: BaseException) -> str:
    """A one-line reason for a failure that may be wrapped in nested exception groups."""
    leaves = [e for e in flatten(exc) if not isinstance(e, anyio.get_cancelled_exc_class())] or flatten(exc)
    leaf = leaves[0]
    if isinstance(leaf, MCPError):
        return f"server answered error {leaf.code}: {leaf.message}"
    lines = str(leaf).strip().splitlines()
    text = lines[0].strip() if lines else type(leaf).__name__  # e.g. httpx adds a line pointing at MDN
    return text if type(leaf).__name__ in text else f"{type(leaf).__name__}: {text}"


def _missing_dir(path: str | None) -> bool:
    return path is not None and not Path(path).is_dir()


class _FixedStreams:
    """An already open pair of streams, presented as a transport (entering yields them)."""

    def __init__(self, streams: Any) -> None:
        self._streams = streams

    async def __aenter__(self) -> Any:
        return self._streams

    async def __aexit__(self, *exc_info: object) -> None:
        return None
