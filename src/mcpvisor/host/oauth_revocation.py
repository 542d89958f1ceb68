"""Signing out revokes the sign-in at the authorization server (RFC 7009), where it offers revocation.

``mcpvisor mcp logout`` deletes the tokens it keeps; before that, :func:`revoke` takes the metadata of
the authorization server that issued them (kept with them since they were issued; for a sign-in kept
without it, found as signing in does, and only when its ``issuer`` is the one the client was registered
with or the entry's ``oauth`` block names) and, when it names a ``revocation_endpoint``, revokes the
refresh token and then the access token there, authenticating as the client that got them. Whatever it
finds — no revocation offered, the server unreachable, a refusal — is said, and the local sign-in is
deleted all the same: signing out never fails because the server is down.
"""

from __future__ import annotations

import base64
import errno
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import anyio

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import redact_url
from mcpvisor.host.oauth_settings import OAuthSettings
from mcpvisor.host.private_files import describe_read_error

if TYPE_CHECKING:
    from mcp.shared.auth import OAuthMetadata
    from pydantic import BaseModel

__all__ = ["REVOKE_TIMEOUT_S", "discover_authorization_server", "not_forgotten", "revoke"]

M = TypeVar("M", bound="BaseModel")

REVOKE_TIMEOUT_S = 10.0
"""Bound on the whole revocation (discovery and both requests)."""

_REQUEST_TIMEOUT_S = 5.0


async def revoke(server_url: str, record: Mapping[str, Any], settings: OAuthSettings) -> str:
    """Revoke the sign-in ``record`` (a token store record) holds for ``server_url``; returns what happened,
    as a clause for the person ("revoked at https://auth.example.com", "… offers no revocation")."""
    import httpx2

    stored = record.get("tokens")
    tokens = stored if isinstance(stored, Mapping) else {}
    held = [(tokens[kind], kind) for kind in ("refresh_token", "access_token") if isinstance(tokens.get(kind), str)]
    if not held:
        return "the stored tokens were unreadable: nothing was revoked" if stored else "there were no tokens to revoke"
    try:
        with anyio.fail_after(REVOKE_TIMEOUT_S):
            async with httpx2.AsyncClient(timeout=_REQUEST_TIMEOUT_S, follow_redirects=False) as http:
                # The authorization server that issued them (kept with them), never one the MCP server names now.
                metadata = _kept(record) or await _discover(http, server_url, settings.issuer or _client_issuer(record))
                issuer = str(metadata.issuer) if metadata is not None else settings.issuer or server_url
                if metadata is None or metadata.revocation_endpoint is None:
                    return f"the authorization server {redact_url(issuer)} offers no revocation"
                endpoint = str(metadata.revocation_endpoint)
                for token, hint in held:
                    request = _authenticated(record, settings, token, hint)
                    answer = await http.post(endpoint, **request)
                    if answer.status_code in (400, 401) and "headers" in request:
                        # Servers built on the SDK want the secret in the form at their revocation endpoint
                        # as well, from a client that authenticates with HTTP Basic: asked once more so.
                        answer = await http.post(endpoint, **_authenticated(record, settings, token, hint, form=True))
                    if answer.status_code != 200:
                        refused = f"HTTP {answer.status_code} from {redact_url(endpoint)}"
                        return f"the authorization server refused to revoke them ({refused})"
    except TimeoutError:
        return f"the authorization server did not answer within {REVOKE_TIMEOUT_S:g} s"
    except httpx2.HTTPError as exc:
        return f"the authorization server could not be reached ({type(exc).__name__})"
    except Exception as exc:  # a URL httpx refuses, an answer it cannot read: never a reason to keep the tokens
        return f"revoking them failed ({type(exc).__name__})"
    return f"revoked at {redact_url(endpoint)}"


def not_forgotten(name: str, place: str, error: ConfigError, revoked: str) -> ConfigError:
    """The error of a sign-out whose tokens could not be deleted (``error``: the store's), after what was done at
    the authorization server (``revoked``: :func:`revoke`'s clause, "" when nothing was tried) — which it was,
    whatever the store says of itself ("nothing was changed")."""
    cause = error.__cause__
    reason = describe_read_error(cause) if isinstance(cause, OSError) else str(error)
    full = isinstance(cause, OSError) and cause.errno == errno.ENOSPC
    return ConfigError(
        f"could not sign out of {name} here: its tokens could not be deleted from {place} ({reason}), so they are "
        f"still kept{f'; {revoked}' if revoked else ''}; run mcpvisor mcp logout again "
        + ("once there is space" if full else "once it can be written")
    )


async def discover_authorization_server(server_url: str, issuer: str | None) -> OAuthMetadata | None:
    """The metadata of ``issuer`` (None: the first authorization server the MCP server's protected resource
    metadata names), when its ``issuer`` is the one asked for (RFC 8414 §3.3); None when none is found."""
    import httpx2

    with anyio.fail_after(REVOKE_TIMEOUT_S):
        async with httpx2.AsyncClient(timeout=_REQUEST_TIMEOUT_S, follow_redirects=False) as http:
            return await _discover(http, server_url, issuer)


async def _discover(http: Any, server_url: str, issuer: str | None) -> OAuthMetadata | None:
    from mcp.client.auth.utils import (
        build_oauth_authorization_server_metadata_discovery_urls,
        build_protected_resource_metadata_discovery_urls,
        issuers_match,
    )
    from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata

    if issuer is None:
        urls = build_protected_resource_metadata_discovery_urls(None, server_url)
        found = await _first_metadata(http, urls, ProtectedResourceMetadata, lambda m: bool(m.authorization_servers))
        issuer = str(found.authorization_servers[0]) if found is not None else None
    urls = build_oauth_authorization_server_metadata_discovery_urls(issuer, server_url)
    expected = issuer
    return await _first_metadata(
        http, urls, OAuthMetadata, lambda m: expected is None or issuers_match(str(m.issuer), expected)
    )


def _kept(record: Mapping[str, Any]) -> OAuthMetadata | None:
    from mcp.shared.auth import OAuthMetadata
    from pydantic import ValidationError

    kept = record.get("authorization_server")
    try:
        return OAuthMetadata.model_validate(kept) if isinstance(kept, Mapping) else None
    except ValidationError:
        return None


def _client_issuer(record: Mapping[str, Any]) -> str | None:
    client = record.get("client")
    issuer = client.get("issuer") if isinstance(client, Mapping) else None
    return issuer if isinstance(issuer, str) else None


async def _first_metadata(
    http: Any, urls: list[str], model: type[M], wanted: Callable[[M], bool] = lambda _: True
) -> M | None:
    """The first of ``urls`` that answers 200 with a valid ``model`` that is ``wanted``."""
    from pydantic import ValidationError

    for url in urls:
        answer = await http.get(url)
        if answer.status_code != 200:
            continue
        try:
            metadata = model.model_validate_json(answer.content)
        except ValidationError:
            continue
        if wanted(metadata):
            return metadata
    return None


def _authenticated(
    record: Mapping[str, Any], settings: OAuthSettings, token: str, hint: str, *, form: bool = False
) -> dict[str, Any]:
    """The revocation request's form and client authentication, as the token endpoint got them (``form``:
    the secret goes in the form too)."""
    client = record.get("client") or {}
    client_id = client.get("client_id") or settings.client_id
    secret = client.get("client_secret") or settings.client_secret
    method = (
        record.get("token_endpoint_auth_method")
        or client.get("token_endpoint_auth_method")
        or settings.token_endpoint_auth_method
        or ("client_secret_basic" if secret else "none")
    )
    data = {"token": token, "token_type_hint": hint}
    if client_id:
        data["client_id"] = client_id  # also with HTTP Basic: servers built on the SDK read it from the form
    if secret and (method == "client_secret_post" or form):
        data["client_secret"] = secret
    if method == "client_secret_basic" and client_id and secret:
        # RFC 6749 §2.3.1: the credentials are form-urlencoded before they are joined and encoded.
        credentials = f"{quote(client_id, safe='')}:{quote(secret, safe='')}".encode()
        return {"data": data, "headers": {"Authorization": f"Basic {base64.b64encode(credentials).decode()}"}}
    return {"data": data}
