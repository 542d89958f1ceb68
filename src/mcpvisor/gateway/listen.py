"""Where the HTTP gateway listens: its socket, bound before any server starts, and whether it needs a token.

Nothing here imports the MCP SDK or the web stack: ``mcpvisor serve --http`` binds its port and refuses to
serve without a token where one is needed first, starts the servers, and loads the rest meanwhile.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from mcpvisor.core.errors import ConfigError
from mcpvisor.gateway.auth import TOKEN_ENV

__all__ = ["MCP_PATH", "bind_http_socket", "http_url", "is_loopback", "refuse_without_token", "unresolvable"]

MCP_PATH = "/mcp"


def is_loopback(host: str) -> bool:
    """Whether a listen address is reachable only from this machine: ``localhost``, ``127.0.0.0/8`` or ``::1``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unresolvable(host: str, port: int) -> str | None:
    """Why the gateway cannot listen on ``host``: a name that does not resolve to an address (None: it resolves,
    or fails otherwise, which binding says)."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return _not_resolved(host, exc)
    except (OSError, UnicodeError):
        return None
    return None


def _not_resolved(host: str, exc: socket.gaierror) -> str:
    return (
        f"the address {host!r} could not be resolved ({exc.strerror}): give an IP address or a name of this "
        "machine (127.0.0.1 for this machine only, 0.0.0.0 for every network)"
    )


def refuse_without_token(host: str, token: str | None) -> None:
    """Raise :class:`ConfigError` when serving on ``host`` would need a token and there is none:
    a gateway reachable from other machines always needs one."""
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve on {host} without a token: anyone who can reach the port could call your "
            f"tools; set {TOKEN_ENV} or --token-file (and drop --no-auth), or listen on a loopback address"
        )


def bind_http_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket for the gateway (bind early: a busy port fails before any server starts)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot serve on {host}:{port}: {_not_resolved(host, exc)}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot serve on {host}:{port}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot serve on {host}:{port}: {exc.strerror or exc}; {_bind_fix(exc, host, port)}"
        ) from exc
    return sock


def _bind_fix(exc: OSError, host: str, port: int) -> str:
    """What to do about a listening socket that cannot be bound: the address is not this machine's, or the port is
    taken or reserved."""
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{host} is not an address of this machine: give one of its own in --http (127.0.0.1: this machine "
            "only; 0.0.0.0: every interface)"
        )
    if exc.errno == errno.EACCES and port < 1024:
        return f"ports under 1024 need privileges: choose another --http port (not {port})"
    return "choose another --http port"


def http_url(sock: socket.socket) -> str:
    """The gateway's URL on a socket from :func:`bind_http_socket`."""
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{MCP_PATH}"
