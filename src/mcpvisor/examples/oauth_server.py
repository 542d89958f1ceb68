"""An MCP server over streamable HTTP that requires OAuth, built from the SDK's ``mcp.server.auth`` pieces.

Run it as ``python -m mcpvisor.examples.oauth_server --port 8123``. One process is both the
authorization server (metadata, dynamic client registration, ``/authorize``, ``/token``, ``/revoke``)
and the protected resource (``/mcp``, which answers 401 without a valid bearer token). It is made for
tests and demos on loopback:

- ``/authorize`` approves at once: it redirects straight back to the client's ``redirect_uri`` with a
  code, so following the redirect with any HTTP client completes the "browser" step;
- ``--token-lifetime SECONDS`` makes short-lived access tokens, to exercise refreshing;
- ``POST /admin/revoke-all`` revokes every token it issued (a user revoking access at the provider);
  ``POST /admin/token-endpoint-down`` makes ``/token`` answer 503 from then on (an authorization server that fails),
  ``POST /admin/token-endpoint-up`` answers again; ``POST /admin/hold-refresh`` keeps each refresh waiting
  (marked ``refresh-held``) until ``POST /admin/release-refresh`` (a slow authorization server);
- ``--issuer URL`` advertises another authorization server (e.g. one that is down) in the resource's
  metadata;
- ``--auth-host HOST`` serves the authorization server under another host name (``localhost`` for a server
  bound to 127.0.0.1: another origin) and answers its endpoints there only — 404 at the resource's origin,
  as where the two are separate servers;
- ``--garbage-token-endpoint`` makes ``/token`` answer 200 with a body that is not a token response,
  ``--echoing-token-endpoint`` 400 with the request it got in the body (as some servers' error pages do);
- ``--needs-scope TOOL=SCOPE`` refuses a call of TOOL made with a token without SCOPE: 403
  ``insufficient_scope`` naming the scope, as a server asking for a wider sign-in (a scope step-up);
- ``--client ID:SECRET`` pre-registers a confidential client for the machine-to-machine grant
  (``client_credentials``, its secret sent with HTTP Basic or in the form); a wrong secret is refused with 401
  ``invalid_client``; repeatable;
- ``--marker PATH`` appends a line per event (``register``, ``authorize``, ``token``, ``refresh``,
  ``client-credentials``, ``revoke``, ``token-endpoint-down``: a request it answered 503) so a test can
  count them;
- ``--hang-on-call TOOL`` never answers a call of TOOL (a call left in flight), once it reported progress 0.

Tools: the configurable tools of the other examples (``--tools``, each returns ``"{name}:{tool}:{text}"``).
Everything lives in memory: a restart forgets clients and tokens.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import json
import secrets
import time
from typing import Any
from urllib.parse import parse_qs, unquote

import anyio
import uvicorn
from mcp.server import MCPServer
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import Context
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcpvisor.examples._options import split_names, tool_text

__all__ = ["DemoOAuthProvider", "build_server", "main"]

CODE_LIFETIME_S = 300


class DemoOAuthProvider(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]):
    """An authorization server that approves every request at once and keeps everything in memory."""

    def __init__(self, *, token_lifetime_s: int, marker: str | None = None) -> None:
        self.token_lifetime_s = token_lifetime_s
        self.token_endpoint_down = False
        self.refresh_held: anyio.Event | None = None
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self._marker = marker

    def _mark(self, event: str) -> None:
        if self._marker is not None:
            with open(self._marker, "a", encoding="utf-8") as fh:
                fh.write(f"{event}\n")

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self._mark("register")

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(32)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + CODE_LIFETIME_S,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        self._mark("authorize")
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self._mark("token")
        return self._issue(authorization_code.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if self.refresh_held is not None:
            self._mark("refresh-held")
            await self.refresh_held.wait()
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token was revoked")
        self._mark("refresh")
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access.get(token)
        if access is None or (access.expires_at is not None and access.expires_at < time.time()):
            return None
        return access

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)
        self._mark("revoke")

    def revoke_all(self) -> None:
        self.access.clear()
        self.refresh.clear()

    def exchange_client_credentials(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        """An access token for the client itself (RFC 6749 §4.4): no refresh token, it asks again."""
        self._mark("client-credentials")
        return self._issue(client_id, scopes, resource, refreshable=False)

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, *, refreshable: bool = True
    ) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        expires_at = int(time.time()) + self.token_lifetime_s
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires_at, resource=resource
        )
        if refreshable:
            self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.token_lifetime_s,
            refresh_token=refresh if refreshable else None,
            scope=" ".join(scopes) or None,
        )


def build_server(
    *,
    name: str,
    host: str,
    port: int,
    tools: tuple[str, ...],
    token_lifetime_s: int,
    marker: str | None,
    issuer: str | None = None,
    clients: tuple[tuple[str, str], ...] = (),
    hang: str | None = None,
) -> tuple[MCPServer[Any], DemoOAuthProvider]:
    provider = DemoOAuthProvider(token_lifetime_s=token_lifetime_s, marker=marker)
    base = f"http://{host}:{port}"
    server: MCPServer[Any] = MCPServer(
        name,
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=issuer or base,
            resource_server_url=f"{base}/mcp",
            client_registration_options=ClientRegistrationOptions(enabled=True),
            revocation_options=RevocationOptions(enabled=True),
            validate_token_resource=True,
        ),
    )
    for client_id, secret in clients:
        provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            grant_types=["client_credentials"],
            token_endpoint_auth_method="client_secret_basic",
        )
    for tool in tools:
        server.add_tool(
            _hanging if tool == hang else _tool_function(name, tool),
            name=tool,
            description=f"Return {tool_text(name, tool, '{text}')!r}.",
        )

    async def revoke_all(request: Request) -> Response:
        provider.revoke_all()
        return JSONResponse({"revoked": True})

    server.custom_route("/admin/revoke-all", methods=["POST"])(revoke_all)

    async def token_endpoint_down(request: Request) -> Response:
        provider.token_endpoint_down = True
        return JSONResponse({"down": True})

    server.custom_route("/admin/token-endpoint-down", methods=["POST"])(token_endpoint_down)

    async def token_endpoint_up(request: Request) -> Response:
        provider.token_endpoint_down = False
        return JSONResponse({"down": False})

    server.custom_route("/admin/token-endpoint-up", methods=["POST"])(token_endpoint_up)

    async def hold_refresh(request: Request) -> Response:
        provider.refresh_held = anyio.Event()
        return JSONResponse({"held": True})

    server.custom_route("/admin/hold-refresh", methods=["POST"])(hold_refresh)

    async def release_refresh(request: Request) -> Response:
        held, provider.refresh_held = provider.refresh_held, None
        if held is not None:
            held.set()
        return JSONResponse({"held": False})

    server.custom_route("/admin/release-refresh", methods=["POST"])(release_refresh)

    return server, provider


async def _hanging(ctx: Context[Any, Any], text: str = "") -> str:
    await ctx.report_progress(0)  # (heard by a caller that asked: the call reached the server)
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


def _tool_function(server: str, tool: str) -> Any:
    def call(text: str = "") -> str:
        return tool_text(server, tool, text)

    return call


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mcpvisor.examples.oauth_server",
        description="An OAuth-protected example MCP server (streamable HTTP at /mcp) shipped with mcpvisor.",
    )
    parser.add_argument("--name", default="secure", help="server name, reported in tool output")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, required=True, help="port to listen on")
    parser.add_argument("--tools", default="echo", help="comma-separated tool names (default: echo)")
    parser.add_argument("--token-lifetime", type=int, default=3600, metavar="SECONDS", help="access token lifetime")
    parser.add_argument("--marker", metavar="PATH", help="append one line per OAuth event to PATH")
    parser.add_argument("--issuer", metavar="URL", help="advertise this authorization server instead of itself")
    parser.add_argument(
        "--auth-host", metavar="HOST", help="serve the authorization server at http://HOST:PORT, and only there"
    )
    parser.add_argument(
        "--garbage-token-endpoint", action="store_true", help="answer /token with a body that is not a token response"
    )
    parser.add_argument("--echoing-token-endpoint", action="store_true", help="answer /token 400 quoting the request")
    parser.add_argument(
        "--needs-scope",
        metavar="TOOL=SCOPE",
        action="append",
        default=[],
        help="refuse a call of TOOL without SCOPE (403 insufficient_scope); repeatable",
    )
    parser.add_argument(
        "--client",
        metavar="ID:SECRET",
        action="append",
        default=[],
        help="pre-register a client for the client_credentials grant; repeatable",
    )
    parser.add_argument("--hang-on-call", metavar="TOOL", help="never answer a call of TOOL")
    args = parser.parse_args(argv)
    server, provider = build_server(
        name=args.name,
        host=args.host,
        port=args.port,
        tools=split_names(args.tools),
        token_lifetime_s=args.token_lifetime,
        marker=args.marker,
        issuer=args.issuer or (f"http://{args.auth_host}:{args.port}" if args.auth_host else None),
        clients=tuple((item.partition(":")[0], item.partition(":")[2]) for item in args.client),
        hang=args.hang_on_call,
    )
    app = server.streamable_http_app(host=args.host)

    async def down_or(request: Request) -> Response:
        provider._mark("token-endpoint-down")
        return Response("<html>503 Service Unavailable</html>", status_code=503, media_type="text/html")

    token_route = next(r for r in app.router.routes if isinstance(r, Route) and r.path == "/token")
    served_token = _ClientCredentials(token_route.app, provider)
    token_route.app = _Switch(lambda: provider.token_endpoint_down, down_or, served_token)
    if args.garbage_token_endpoint:

        async def garbage(request: Request) -> Response:
            return Response("<html>upstream proxy error</html>", media_type="text/html")

        app.router.routes.insert(0, Route("/token", garbage, methods=["POST"]))
    if args.echoing_token_endpoint:

        async def echoing(request: Request) -> Response:
            return Response(f"bad request: {(await request.body()).decode()}", status_code=400)

        app.router.routes.insert(0, Route("/token", echoing, methods=["POST"]))
    needs = dict(item.partition("=")[::2] for item in args.needs_scope)
    served: Any = _StepUp(app, provider, needs, f"http://{args.host}:{args.port}") if needs else app
    if args.auth_host:
        served = _AuthHost(served, f"{args.auth_host}:{args.port}")
    uvicorn.run(served, host=args.host, port=args.port, log_level="warning")


class _Switch:
    """ASGI: ``when()`` true, a request goes to ``then`` (a Starlette endpoint), else on to ``otherwise``."""

    def __init__(self, when: Any, then: Any, otherwise: Any) -> None:
        self.when, self.then, self.otherwise = when, then, otherwise

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.when():
            await (await self.then(Request(scope, receive)))(scope, receive, send)
            return
        await self.otherwise(scope, receive, send)


class _ClientCredentials:
    """ASGI: a token request of the ``client_credentials`` grant, which the SDK's token endpoint does not
    serve, is answered here (the client's secret in HTTP Basic or in the form); any other goes on to ``app``."""

    def __init__(self, app: Any, provider: DemoOAuthProvider) -> None:
        self.app, self.provider = app, provider

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        messages: list[Any] = []
        while not messages or messages[-1].get("more_body"):
            messages.append(await receive())
        body = b"".join(m.get("body", b"") for m in messages)

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        if form.get("grant_type") != "client_credentials":
            await self.app(scope, replay, send)
            return
        client = self._authenticated(Request(scope), form)
        if client is None:
            answer = _token_error("invalid_client", "unknown client or wrong secret", 401)
        elif "client_credentials" not in client.grant_types:
            answer = _token_error("unauthorized_client", "the client may not use this grant", 400)
        else:
            scopes = form.get("scope", "").split()
            token = self.provider.exchange_client_credentials(client.client_id, scopes, form.get("resource"))
            answer = JSONResponse(token.model_dump(mode="json", exclude_none=True), headers=_NO_STORE)
        await answer(scope, receive, send)

    def _authenticated(self, request: Request, form: dict[str, str]) -> OAuthClientInformationFull | None:
        """The client the request authenticates as: HTTP Basic (RFC 6749 §2.3.1), or the secret in the form."""
        client_id, secret = form.get("client_id"), form.get("client_secret")
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(credentials).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return None
            client_id, secret = unquote(user), unquote(password)
        client = self.provider.clients.get(client_id or "")
        if client is None or client.client_secret is None or secret is None:
            return None
        return client if hmac.compare_digest(client.client_secret.encode(), secret.encode()) else None


_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


def _token_error(error: str, description: str, status: int) -> Response:
    return JSONResponse({"error": error, "error_description": description}, status_code=status, headers=_NO_STORE)


class _AuthHost:
    """ASGI middleware: the authorization server's endpoints answer only at ``host`` (``Host`` header), the
    protected resource's anywhere."""

    _AUTH_PATHS = ("/authorize", "/token", "/register", "/revoke", "/.well-known/oauth-authorization-server")

    def __init__(self, app: Any, host: str) -> None:
        self.app, self.host = app, host

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self._AUTH_PATHS):
            if dict(scope["headers"]).get(b"host", b"").decode() != self.host:
                await Response(status_code=404)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _StepUp:
    """ASGI middleware: a ``tools/call`` of a tool in ``needs`` made with a token that lacks its scope gets 403
    ``insufficient_scope`` with the scope in ``WWW-Authenticate`` (RFC 6750 §3.1)."""

    def __init__(self, app: Any, provider: DemoOAuthProvider, needs: dict[str, str], base: str) -> None:
        self.app, self.provider, self.needs, self.base = app, provider, needs, base

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/mcp" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        messages: list[Any] = []
        while not messages or messages[-1].get("more_body"):
            messages.append(await receive())
        try:
            request = json.loads(b"".join(m.get("body", b"") for m in messages))
        except ValueError:
            request = None
        call = request.get("params") if isinstance(request, dict) and request.get("method") == "tools/call" else None
        needed = self.needs.get(str(call.get("name"))) if isinstance(call, dict) else None
        token = dict(scope["headers"]).get(b"authorization", b"").decode().partition(" ")[2]
        held = self.provider.access.get(token)
        if needed and held is not None and needed not in held.scopes:
            challenge = (
                f'Bearer error="insufficient_scope", scope="{needed}", '
                f'resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"'
            )
            await Response(status_code=403, headers={"WWW-Authenticate": challenge})(scope, receive, send)
            return

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


if __name__ == "__main__":
    main()
