"""Who may talk to the HTTP gateway: a bearer token on every request (SPEC §9 "Gateway").

The token comes from ``MCPVISOR_GATEWAY_TOKEN``, from a file the user names, or is generated once
into ``$MCPVISOR_HOME/gateway-token`` (mode 0600) and reused from then on. It is compared in
constant time and never logged or shown: people are told where it is, not what it is.
"""

from __future__ import annotations

import hmac
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mcpvisor.core.errors import ConfigError
from mcpvisor.host import paths
from mcpvisor.host.private_files import DIR_MODE, write_private

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "TOKEN_ENV",
    "TOKEN_FILENAME",
    "BearerAuth",
    "GatewayToken",
    "gateway_token_path",
    "load_gateway_token",
]

TOKEN_ENV = "MCPVISOR_GATEWAY_TOKEN"
MIN_TOKEN_CHARS = 16
"""The shortest token the gateway accepts from the environment or a file (the one it makes has 43)."""
TOKEN_FILENAME = "gateway-token"
_TOKEN_BYTES = 32
_MAX_TOKEN_FILE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class GatewayToken:
    value: str
    source: str
    """Where it came from, for people (never the value): ``$MCPVISOR_GATEWAY_TOKEN`` or a file path."""
    generated: bool = False

    def __repr__(self) -> str:  # a token never reaches a log through a repr
        return f"GatewayToken(source={self.source!r}, generated={self.generated})"

    def hint(self) -> str:
        """One line telling a client how to authenticate, without the token."""
        where = f"the token is in {self.source}" if self.source != f"${TOKEN_ENV}" else f"the token is ${TOKEN_ENV}"
        made = " (generated now, kept for next time)" if self.generated else ""
        return f"clients send 'Authorization: Bearer <token>'; {where}{made}"


def gateway_token_path(env: Mapping[str, str]) -> Path:
    return paths.user_dir(env) / TOKEN_FILENAME


def load_gateway_token(env: Mapping[str, str], token_file: Path | None = None) -> GatewayToken:
    """The gateway's token: ``$MCPVISOR_GATEWAY_TOKEN``, else ``token_file``, else the user's
    ``gateway-token`` file, generated (0600) when it does not exist. Raises :class:`ConfigError`
    naming the file and the fix when a file is empty, unreadable or readable by others."""
    from_env = env.get(TOKEN_ENV, "").strip()
    if from_env:
        return _long_enough(GatewayToken(from_env, f"${TOKEN_ENV}"))
    if token_file is not None:
        value = _read_token_file(token_file.expanduser(), option="--token-file")
        return _long_enough(GatewayToken(value, str(token_file)))
    path = gateway_token_path(env)
    if path.exists():
        return _long_enough(GatewayToken(_read_token_file(path, option=None), str(path)))
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    value = secrets.token_urlsafe(_TOKEN_BYTES)
    write_private(path, value + "\n")
    return GatewayToken(value, str(path), generated=True)


def _long_enough(token: GatewayToken) -> GatewayToken:
    """``token``, unless it is short enough to be guessed: a bearer token is all that stands between the
    network and every tool the gateway serves."""
    if len(token.value) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"the gateway token in {token.source} has {len(token.value)} characters; use at least "
            f"{MIN_TOKEN_CHARS} random ones, e.g. the output of: "
            "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


def _read_token_file(path: Path, *, option: str | None) -> str:
    fix = "point --token-file at a file holding the token" if option else f"delete {path} to have a new one made"
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"cannot read the gateway token from {path}: not a regular file; {fix}")
        if st.st_mode & 0o077:
            raise ConfigError(
                f"cannot use the gateway token in {path}: other users can read it (mode {stat.S_IMODE(st.st_mode):o}); "
                f"run: chmod 600 {path}"
            )
        with path.open("rb") as fh:
            data = fh.read(_MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the gateway token from {path}: {exc.strerror or exc}; {fix}") from exc
    try:
        value = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        value = ""
    if not value or len(data) > _MAX_TOKEN_FILE_BYTES or any(c.isspace() for c in value):
        raise ConfigError(f"cannot use the gateway token in {path}: it must be one line of text; {fix}")
    return value


class BearerAuth:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer <token>`` gets 401 with
    ``WWW-Authenticate: Bearer`` and a JSON-RPC error, before anything else sees it. The scheme is
    case-insensitive (RFC 9110 §11.1); the token is compared in constant time."""

    OPEN_PATHS = frozenset({"/readyz"})
    """Answered without a token: a load balancer's health check (a fleet replica's readiness; elsewhere 404)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") not in self.OPEN_PATHS and not self._authorized(scope):
            await self._refuse(scope, receive, send)
            return
        await self._app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        given = [value for key, value in scope.get("headers") or () if key.lower() == b"authorization"]
        if len(given) != 1:
            return False
        scheme, _, credentials = given[0].strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), self._expected)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The web stack loads with the gateway, not with the token (``serve`` reads it before its servers start).
        from mcpvisor.gateway.responses import error_response

        message = (
            "this mcpvisor gateway needs 'Authorization: Bearer <token>'; the token is in the gateway's "
            f"{TOKEN_FILENAME} file or ${TOKEN_ENV} (see the line it printed at start-up)"
        )
        response = error_response(message, 401, headers={"WWW-Authenticate": 'Bearer realm="mcpvisor"'})
        await response(scope, receive, send)
