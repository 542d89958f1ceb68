"""Machine-to-machine sign-in: the host gets its tokens by itself, no ``mcp login`` and no browser.

What a gateway running unattended needs. An entry's ``oauth.grant`` chooses:

- ``client_credentials`` (OAuth 2.1 §4.2): ``clientId`` with ``clientSecret`` (sent as HTTP Basic unless
  ``tokenEndpointAuthMethod`` says ``client_secret_post``), or with ``privateKeyFile`` (RFC 7523
  ``private_key_jwt``: a JWT signed with ``signingAlgorithm``, RS256 by default, ES256 and the rest of
  :data:`~mcpvisor.host.oauth.SIGNING_ALGORITHMS` too);
- ``identity_assertion`` (enterprise-managed authorization, SEP-990): the user's ID token from the
  identity provider (``idp.idToken``) is exchanged there for an identity assertion grant (RFC 8693), which
  the SDK presents to the authorization server (RFC 7523).

Both are the SDK's providers (``mcp.client.auth.extensions``) over the same token store as a person's
sign-in; a token is fetched when a connection needs one and again before it expires. No ``mcp login``
mends them (``signs_in_by_itself``): credentials the authorization server refuses are said as such, naming
the ``oauth`` block to fix and the file it is in, never a secret.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mcpvisor.core.errors import ConfigError
from mcpvisor.host.file_reads import read_regular
from mcpvisor.host.oauth_settings import LoginRequired, oauth_error

if TYPE_CHECKING:
    from mcp.client.auth import TokenStorage

    from mcpvisor.host.oauth_settings import OAuthSettings

__all__ = ["machine_provider"]

logger = logging.getLogger(__name__)

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
IDP_TIMEOUT_S = 30.0


def machine_provider(
    name: str, url: str, settings: OAuthSettings, storage: TokenStorage, *, defined_in: Path | None = None
) -> Any:
    """The ``httpx2.Auth`` for a server whose ``oauth.grant`` is a machine-to-machine grant; ``defined_in``: the
    file that defines the server (named when its credentials are refused)."""
    from mcp.shared.exceptions import MCPDeprecationWarning

    assert settings.client_id is not None  # checked by oauth_settings
    if settings.grant == "identity_assertion":
        return _identity_assertion_provider(name, url, settings, storage)
    if settings.issuer is None:
        logger.warning(
            "server %r: mcpServers.%s.oauth.issuer is not set, so its client credentials go to whichever "
            "authorization server the MCP server names; set it to that server's issuer URL to pin them",
            name,
            name,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)  # said above, in this project's words
        provider = _client_credentials_provider(name, url, settings, storage)
    what = "clientId and privateKeyFile" if settings.private_key_file else "clientId and clientSecret"
    where = f"mcpServers.{name}.oauth" + (f" in {defined_in}" if defined_in is not None else "")
    provider.refused_says = (
        f"server {name!r}: its authorization server refused the client credentials ({{refusal}}); no sign-in "
        f"mends that: check {what} in {where}"
    )
    return provider


class _SaysRefusal:
    """Mixed into the SDK's client-credentials providers: a token request the authorization server refuses
    (400 or 401: credentials unknown, wrong, or not allowed the grant) ends the connection saying so (see
    ``sign_in_refused`` in :data:`~mcpvisor.core.server_config.HttpAuth`), not as a sign-in to make."""

    signs_in_by_itself = True
    sign_in_refused: str | None = None
    refused_says = "{refusal}"
    """What a refusal reads (``{refusal}``: the HTTP status and the OAuth error code)."""

    async def _handle_token_response(self, response: Any) -> None:
        if response.status_code in (400, 401):
            error = await oauth_error(response)
            code = f", {error}" if error is not None and _ERROR_CODE.fullmatch(error) else ""
            self.sign_in_refused = self.refused_says.format(refusal=f"HTTP {response.status_code}{code}")
            raise ConfigError(self.sign_in_refused)
        await super()._handle_token_response(response)  # type: ignore[misc]


_ERROR_CODE = re.compile(r"[a-z_]{1,64}")
"""An OAuth error code (RFC 6749 §5.2) as shown: anything else an answer puts there may echo the request."""


def _client_credentials_provider(name: str, url: str, settings: OAuthSettings, storage: TokenStorage) -> Any:
    from mcp.client.auth.extensions.client_credentials import (
        ClientCredentialsOAuthProvider,
        PrivateKeyJWTOAuthProvider,
        SignedJWTParameters,
    )

    class ClientCredentials(_SaysRefusal, ClientCredentialsOAuthProvider):
        pass

    class PrivateKeyJWT(_SaysRefusal, PrivateKeyJWTOAuthProvider):
        pass

    assert settings.client_id is not None
    if settings.private_key_file:
        jwt = SignedJWTParameters(
            issuer=settings.client_id,
            subject=settings.client_id,
            signing_key=_private_key(name, settings.private_key_file),
            signing_algorithm=settings.signing_algorithm,
        )
        return PrivateKeyJWT(
            url,
            storage,
            settings.client_id,
            jwt.create_assertion_provider(),
            scope=settings.scopes,
            issuer=settings.issuer,
        )
    assert settings.client_secret is not None
    return ClientCredentials(
        url,
        storage,
        settings.client_id,
        settings.client_secret,
        token_endpoint_auth_method=_secret_method(settings),
        scope=settings.scopes,
        issuer=settings.issuer,
    )


def _secret_method(settings: OAuthSettings) -> Literal["client_secret_basic", "client_secret_post"]:
    """How a client secret reaches the token endpoint: HTTP Basic (RFC 6749's default) unless configured."""
    return (
        "client_secret_post" if settings.token_endpoint_auth_method == "client_secret_post" else "client_secret_basic"
    )


MAX_KEY_FILE_BYTES = 64 * 1024
"""A PEM private key is a few kB; a file larger than this is not one."""


def _private_key(name: str, path: str) -> str:
    try:
        return read_regular(Path(path).expanduser(), MAX_KEY_FILE_BYTES, what="a private key file")[1].decode()
    except (OSError, UnicodeDecodeError) as exc:
        reason = "it is not text" if isinstance(exc, UnicodeDecodeError) else exc.strerror or str(exc)
        raise ConfigError(f"cannot read mcpServers.{name}.oauth.privateKeyFile {path}: {reason}") from None


def _identity_assertion_provider(name: str, url: str, settings: OAuthSettings, storage: TokenStorage) -> Any:
    import httpx2
    from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

    idp = dict(settings.idp or {})
    assert settings.client_id is not None
    assert settings.client_secret is not None

    async def identity_assertion(audience: str, resource: str) -> str:
        """The identity provider's token exchange: the user's ID token for an identity assertion grant."""
        data = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": idp["idToken"],
            "subject_token_type": ID_TOKEN,
            "requested_token_type": ID_JAG,
            "audience": audience,
            "resource": resource,
        }
        if idp.get("clientId"):
            data["client_id"] = idp["clientId"]
        if settings.scopes:
            data["scope"] = settings.scopes
        async with httpx2.AsyncClient(timeout=IDP_TIMEOUT_S) as http:
            answer = await http.post(idp["tokenEndpoint"], data=data)
        if answer.status_code != 200:
            raise LoginRequired(
                f"server {name!r}: the identity provider refused the token exchange (HTTP {answer.status_code}); "
                f"check mcpServers.{name}.oauth.idp"
            )
        return str(answer.json()["access_token"])

    if settings.issuer is None:
        raise ConfigError(f"mcpServers.{name}.oauth.issuer is needed for the identity_assertion grant")
    return IdentityAssertionOAuthProvider(
        url,
        storage,
        settings.client_id,
        settings.client_secret,
        settings.issuer,
        identity_assertion,
        scope=settings.scopes,
        token_endpoint_auth_method=_secret_method(settings),
    )
