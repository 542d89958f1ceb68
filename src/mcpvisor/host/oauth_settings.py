"""What a server entry's ``oauth`` block says, read once and checked, naming the field that is wrong.

Shared by the sign-in flow (:mod:`mcpvisor.host.oauth`) and the machine grants
(:mod:`mcpvisor.host.oauth_grants`), which must not import each other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from mcpvisor.core.errors import ConfigError, McpvisorError, name_word
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import is_gated

__all__ = [
    "GRANTS",
    "MACHINE_GRANTS",
    "OAUTH_FIELDS",
    "SIGNING_ALGORITHMS",
    "TOKEN_ENDPOINT_AUTH_METHODS",
    "AuthorizationServerFailed",
    "LoginRequired",
    "OAuthSettings",
    "SameOrigin",
    "check_sign_in",
    "is_loopback_url",
    "oauth_error",
    "oauth_settings",
    "server_url",
    "sign_in_key",
    "token_key",
]


class LoginRequired(McpvisorError):
    """The server needs a (new) sign-in; a host never starts one by itself."""


class AuthorizationServerFailed(McpvisorError):
    """The authorization server failed to refresh a sign-in it did not refuse (a 5xx): no new sign-in mends it,
    a later try does."""


GRANTS: Final = ("authorization_code", "client_credentials", "identity_assertion")
"""``oauth.grant``: a person signs in (the default), or the host gets its tokens by itself."""
MACHINE_GRANTS: Final = ("client_credentials", "identity_assertion")
TOKEN_ENDPOINT_AUTH_METHODS: Final = ("client_secret_basic", "client_secret_post", "none")
SIGNING_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256")


@dataclass(frozen=True, slots=True)
class OAuthSettings:
    """A server's ``oauth`` block: a pre-registered client, the scopes to ask for, a fixed callback port,
    how the client authenticates at the token endpoint, a client ID metadata document, and the grant."""

    client_id: str | None = None
    client_secret: str | None = None
    scopes: str | None = None
    callback_port: int | None = None
    token_endpoint_auth_method: str | None = None
    """Forced; else chosen from the authorization server's ``token_endpoint_auth_methods_supported``."""
    client_metadata_url: str | None = None
    """An https URL of a client ID metadata document, used as ``client_id`` where the server supports it."""
    grant: str = "authorization_code"
    private_key_file: str | None = None
    """``private_key_jwt`` (RFC 7523) for the client-credentials grant: a PEM file, signed with
    ``signing_algorithm``."""
    signing_algorithm: str = "RS256"
    issuer: str | None = None
    """The authorization server a machine-to-machine client belongs to (else it is discovered)."""
    idp: Mapping[str, str] | None = None
    """For ``identity_assertion``: the identity provider's ``tokenEndpoint``, ``clientId`` and ``idToken``."""

    @property
    def machine(self) -> bool:
        """Whether the host gets its tokens by itself (no ``mcp login``, no browser)."""
        return self.grant in MACHINE_GRANTS


OAUTH_FIELDS: Final = frozenset(
    {"clientId", "clientSecret", "scopes", "callbackPort", "tokenEndpointAuthMethod", "clientMetadataUrl", "grant"}
    | {"privateKeyFile", "signingAlgorithm", "issuer", "idp"}
)
"""The fields of an ``oauth`` block mcpvisor reads."""


def oauth_settings(name: str, cfg: McpServerConfig) -> OAuthSettings:
    """The ``oauth`` block of a server entry; :class:`ConfigError` naming the field when it is malformed."""
    block = (cfg.model_extra or {}).get("oauth")
    if block is None:
        return OAuthSettings()
    at = f"mcpServers.{name}.oauth"
    if not isinstance(block, Mapping):
        raise ConfigError(f"{at} must be an object (clientId, clientSecret, scopes, callbackPort, grant, …)")
    scopes = block.get("scopes")
    if isinstance(scopes, list) and all(isinstance(s, str) for s in scopes):
        scopes = " ".join(scopes)
    port = block.get("callbackPort")
    strings: tuple[str, ...] = ("clientId", "clientSecret", "tokenEndpointAuthMethod", "clientMetadataUrl", "grant")
    strings += ("privateKeyFile", "signingAlgorithm", "issuer")
    for key, value, kind in (
        *((k, block.get(k), str) for k in strings),
        ("scopes", scopes, str),
        ("callbackPort", port, int),
    ):
        if value is not None and not isinstance(value, kind):
            raise ConfigError(f"{at}.{key} must be a {'string' if kind is str else 'number'}")
    choices = (
        ("grant", GRANTS),
        ("tokenEndpointAuthMethod", TOKEN_ENDPOINT_AUTH_METHODS),
        ("signingAlgorithm", SIGNING_ALGORITHMS),
    )
    for key, allowed in choices:
        if block.get(key) is not None and block[key] not in allowed:
            raise ConfigError(f"{at}.{key} must be one of {', '.join(allowed)}, not {block[key]!r}")
    metadata_url = block.get("clientMetadataUrl")
    if metadata_url is not None and (
        urlsplit(metadata_url).scheme != "https" or urlsplit(metadata_url).path in ("", "/")
    ):
        raise ConfigError(f"{at}.clientMetadataUrl must be an https URL with a path (the client ID metadata document)")
    idp = block.get("idp")
    if idp is not None and (
        not isinstance(idp, Mapping) or not all(isinstance(idp.get(k), str) for k in ("tokenEndpoint", "idToken"))
    ):
        raise ConfigError(f"{at}.idp must be an object with tokenEndpoint and idToken (and clientId)")
    settings = OAuthSettings(
        block.get("clientId"),
        block.get("clientSecret"),
        scopes,
        port,
        token_endpoint_auth_method=block.get("tokenEndpointAuthMethod"),
        client_metadata_url=metadata_url,
        grant=block.get("grant") or "authorization_code",
        private_key_file=block.get("privateKeyFile"),
        signing_algorithm=block.get("signingAlgorithm") or "RS256",
        issuer=block.get("issuer"),
        idp=dict(idp) if idp is not None else None,
    )
    if settings.grant == "client_credentials" and not (
        settings.client_id and (settings.client_secret or settings.private_key_file)
    ):
        raise ConfigError(f"{at}: the client_credentials grant needs clientId and clientSecret (or privateKeyFile)")
    if settings.grant == "identity_assertion" and not (settings.client_id and settings.client_secret and idp):
        raise ConfigError(f"{at}: the identity_assertion grant needs clientId, clientSecret and idp")
    return settings


def server_url(cfg: McpServerConfig) -> str | None:
    return cfg.http_url or cfg.url


def token_key(cfg: McpServerConfig, settings: OAuthSettings) -> str:
    """Where a server's sign-in is kept: its URL, and the configured client id if there is one."""
    url = server_url(cfg) or ""
    return f"{url}#{settings.client_id}" if settings.client_id else url


def sign_in_key(name: str, cfg: McpServerConfig) -> str | None:
    """Where ``cfg``'s sign-in is kept (None: a server with nothing to sign in to, or a broken oauth entry)."""
    if server_url(cfg) is None:
        return None
    try:
        return token_key(cfg, oauth_settings(name, cfg))
    except ConfigError:
        return None


def check_sign_in(
    name: str,
    cfg: McpServerConfig,
    *,
    label: str,
    approval: str | None,
    what: str = "sign in to",
    approve_command: str = "mcpvisor mcp approve {name}",
) -> None:
    """Refuse, naming the fix, a server that cannot be signed in to (or out of, ``what="sign out of"``):
    one that runs a command, or a project or workspace server (``label``) whose ``approval`` is not
    ``"approved"`` — no sign-in starts for a configuration the user has not approved. ``approve_command``: how
    to approve it where the refusal is read (``{name}``: :func:`~mcpvisor.host.status.command_hints`)."""
    if server_url(cfg) is None:
        raise ConfigError(f"cannot {what} server {name!r}: it runs a command (stdio), there is nothing to sign in to")
    if what == "sign in to" and is_gated(cfg) and approval != "approved":
        raise ConfigError(
            f"cannot sign in to server {name!r}: it is a {label} server that is not approved; "
            f"approve it first: {approve_command.format(name=name_word(name))}"
        )


def is_loopback_url(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


async def oauth_error(response: Any) -> str | None:
    """The ``error`` code of an authorization server's error answer (RFC 6749 §5.2), if it gave one."""
    try:
        error = json.loads(await response.aread()).get("error")
    except (ValueError, AttributeError):
        return None
    return error if isinstance(error, str) else None


class SameOrigin(str):
    """An expected issuer that any issuer on the same origin equals (the 2025-03-26 discovery rules)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and _origin(other) == _origin(self)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()
