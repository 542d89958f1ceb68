"""Signing in to remote MCP servers with OAuth (the MCP authorization flow), and staying signed in.

``mcpvisor mcp login NAME`` runs the authorization-code flow with PKCE through the SDK's
``OAuthClientProvider``: discovery from the server's ``WWW-Authenticate`` and ``.well-known``
metadata, dynamic client registration (or the configured ``oauth.clientId`` / ``clientSecret`` /
``scopes``), the browser (or a printed URL), and the redirect received on a loopback port.

The tokens live in one store in the user directory (``$MCPVISOR_HOME/oauth-tokens.json``), written
like the approvals store (atomic, 0600, under a file lock) and keyed by the server's URL and the
configured client id. A corrupt store fails closed: nothing is signed in, the file is kept, and
``login`` refuses to write over it. Tokens never reach a log, an error, a status view or ``--json``.

A running host signs its remote servers' requests with what the store holds (:func:`http_auth_for`)
and never starts a browser: a token close to expiry, or refused with 401, is refreshed; a refresh the
server refuses (revoked) reads "needs authentication — run: mcpvisor mcp login NAME". Tokens are not
part of the connection id, so a refresh never restarts anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from mcpvisor.core.errors import ConfigError, name_word
from mcpvisor.core.server_config import HttpAuth, McpServerConfig
from mcpvisor.host.oauth_callback import CALLBACK_PATH
from mcpvisor.host.oauth_refreshes import send_refresh
from mcpvisor.host.oauth_registration import widening_metadata
from mcpvisor.host.oauth_settings import (
    AuthorizationServerFailed,
    LoginRequired,
    SameOrigin,
    check_sign_in,
    is_loopback_url,
    oauth_error,
    oauth_settings,
    server_url,
    token_key,
)
from mcpvisor.host.oauth_storage import FileTokenStorage
from mcpvisor.host.oauth_store import (
    RefreshTurn,
    SignedIn,
    SignIn,
    TokenStore,
    missing_scopes,
    sign_in_state,
    sign_ins,
    unreadable,
)
from mcpvisor.host.status import LOGIN_HINT

if TYPE_CHECKING:
    pass

__all__ = [
    "LoginRequired",
    "SignIn",
    "SignedIn",
    "TokenStore",
    "check_sign_in",
    "http_auth_for",
    "is_loopback_url",
    "oauth_provider",
    "oauth_settings",
    "sign_in_state",
    "sign_ins",
    "stored_redirect",
    "token_key",
    "unreadable",
]

logger = logging.getLogger(__name__)

REFRESH_MARGIN_S: Final = 60.0
"""A token this close to its expiry is refreshed before it is used."""
TURN_TRIES: Final = 4
"""Times a host asks for the turn to refresh a sign-in before it gives up (each waits up to 10 s)."""


# --- the provider ---------------------------------------------------------------------------


def oauth_provider(
    store: TokenStore,
    name: str,
    cfg: McpServerConfig,
    *,
    redirect_uri: str,
    redirect_handler: Callable[[str], Awaitable[None]] | None,
    callback_handler: Callable[[], Awaitable[Any]] | None,
    login_command: str = LOGIN_HINT,
    defined_in: Path | None = None,
    logged_login: Callable[[], str] | None = None,
) -> Any:
    """An ``httpx2.Auth`` for one server. Without handlers it never starts a sign-in: a refusal it
    cannot mend with the refresh token raises :class:`LoginRequired`, and a request refused for want of
    scope (403 ``insufficient_scope``) fails alone, the wider scope remembered for the next sign-in.
    ``login_command``: how its refusals say to sign in (``{name}``: :func:`~mcpvisor.host.status.fix_commands`);
    ``defined_in``: the file that defines the server (a machine grant's refused credentials name it);
    ``logged_login()``: how its log lines say to sign in (``{name}``; None: ``login_command``), for a connection
    whose refusals each session words its own way but whose log no session words."""
    settings = oauth_settings(name, cfg)
    url = server_url(cfg)
    assert url is not None
    key = token_key(cfg, settings)
    if settings.machine:
        from mcpvisor.host.oauth_grants import machine_provider

        storage = FileTokenStorage(store, key, name=name)
        return machine_provider(name, url, settings, storage, defined_in=defined_in)

    from mcp.client.auth import OAuthClientProvider
    from mcp.client.auth.utils import extract_field_from_www_auth, extract_scope_from_www_auth, union_scopes
    from mcp.shared.auth import OAuthClientInformationFull

    # A confidential client's method is settled against the server's metadata (_choose_method); until
    # then it is client_secret_basic, RFC 8414's default.
    method = settings.token_endpoint_auth_method or ("client_secret_basic" if settings.client_secret else "none")
    interactive = redirect_handler is not None
    # A sign-in asks for the configured scopes and what a refused request asked for, besides what the server
    # says: in the registration of a new client as in the authorization request (the SDK sets the scope it
    # chose between the two, so the metadata keeps ours in whatever it is given).
    wanted = union_scopes(settings.scopes, store.get(key).get("scope_needed")) if interactive else None

    metadata = widening_metadata()(
        client_name="mcpvisor",
        redirect_uris=[redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method=method if settings.client_id else None,
        scope=union_scopes(settings.scopes, wanted),
    )
    metadata.wanted = wanted
    client = None
    if settings.client_id:
        client = OAuthClientInformationFull(
            client_id=settings.client_id,
            client_secret=settings.client_secret,
            redirect_uris=[redirect_uri],
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method=method,
            scope=settings.scopes,
        )
    storage = FileTokenStorage(store, key, client=client, name=name, fresh=interactive, login=login_command)

    class Provider(OAuthClientProvider):
        _refreshing = False
        _turn: RefreshTurn | None = None
        _refresh_request: Any = None
        """The refresh request the flow is about to send (sent by :func:`send_refresh`, not the connection)."""
        _seen = -1
        """The token store's generation whose tokens are in use; after a newer one they are read again."""
        step_up_scope: str | None = None
        """Scopes the server refused a request for want of (read once by the client: see core.client)."""
        sign_in_refused: str | None = None
        """Why a request found no usable sign-in (it ends the connection; the client says this, not 'closed')."""
        refreshing_at: str | None = None
        """The authorization server (its origin) a refresh of the sign-in waits for an answer from."""

        def refusal(self, message: str, kind: type[Exception] = LoginRequired) -> Exception:
            self.sign_in_refused = message
            return kind(message)

        def logged_login(self) -> str:
            """How its log lines say to sign in (``{name}``), and the log line saying its connection was lost."""
            return logged_login() if logged_login is not None else login_command

        async def _initialize(self) -> None:
            self._seen = store.generation
            await super()._initialize()
            # The SDK forgets when a stored token expires: a token near its end is refreshed first.
            expires_at = storage.expires_at()
            self.context.token_expiry_time = expires_at - REFRESH_MARGIN_S if expires_at is not None else None
            if not interactive:  # and where to: the authorization server that issued the tokens
                self.context.oauth_metadata = storage.authorization_server() or self.context.oauth_metadata

        async def _refresh_token(self) -> Any:
            """The refresh goes to the token endpoint of the authorization server that issued the tokens (kept
            with them), never one guessed from the MCP server's URL; a sign-in kept without it finds it first."""
            issued_by = storage.authorization_server()
            if issued_by is None and self.context.oauth_metadata is None:
                from mcpvisor.host.oauth_revocation import discover_authorization_server

                issuer = settings.issuer or (self.context.client_info.issuer if self.context.client_info else None)
                issued_by = await discover_authorization_server(self.context.server_url, issuer)
                if issued_by is None:
                    raise self.refusal(
                        f"server {name!r}: its authorization server cannot be found to refresh the sign-in — "
                        f"run: {login_command.format(name=name_word(name))}"
                    )
                storage.keep_authorization_server(issued_by)
            if issued_by is not None:
                self.context.oauth_metadata = issued_by
            request = self._refresh_request = await super()._refresh_token()
            self.refreshing_at = "{0.scheme}://{0.netloc}".format(urlsplit(str(request.url)))
            return request

        def _expected_issuer(self) -> str:
            expected: str = super()._expected_issuer()
            if self.context.auth_server_url is not None:
                return expected
            # The 2025-03-26 rules (no protected resource metadata): the authorization server's metadata is
            # found at the MCP server's origin, whatever path its issuer has, so any issuer on that origin is
            # the server's own. RFC 8414 §3.3's exact match, which the SDK applies, refuses such servers.
            if self.context.oauth_metadata is not None:
                return str(self.context.oauth_metadata.issuer)
            return SameOrigin(expected)

        def _choose_method(self) -> None:
            """A pre-registered confidential client authenticates the way the authorization server accepts
            (``token_endpoint_auth_methods_supported``; none listed: ``client_secret_basic``)."""
            info = self.context.client_info
            if client is None or info is None or settings.token_endpoint_auth_method or not settings.client_secret:
                return
            asm = self.context.oauth_metadata
            supported = (asm.token_endpoint_auth_methods_supported or None) if asm is not None else None
            chosen = "client_secret_basic"
            if supported is not None and chosen not in supported and "client_secret_post" in supported:
                chosen = "client_secret_post"
            if info.token_endpoint_auth_method != chosen:
                self.context.client_info = info.model_copy(update={"token_endpoint_auth_method": chosen})
            store.update(key, token_endpoint_auth_method=chosen)

        def _refresh_due(self) -> bool:
            """Whether this request refreshes the sign-in first (no store read once initialized)."""
            if self._initialized:
                return not self.context.is_token_valid() and self.context.can_refresh_token()
            expires_at = storage.expires_at()
            return expires_at is not None and expires_at - REFRESH_MARGIN_S <= time.time()

        async def _adopt_stored_tokens(self) -> float | None:
            """The newest stored tokens (this process's or another's) become the ones in use, unexpired for as
            long as they are (no margin); returns when they expire."""
            if not self._initialized:
                await self._initialize()
            self._seen = store.generation
            self.context.current_tokens = await storage.get_tokens()
            expires_at = storage.expires_at()
            if expires_at is not None:
                self.context.token_expiry_time = expires_at
            return expires_at

        async def _take_turn(self) -> None:
            """Before a refresh: refresh tokens rotate, and one used twice may revoke the whole grant, so one
            process at a time refreshes (a fleet's store), always with the newest stored refresh token; a
            process that finds another's refresh done uses its tokens."""
            for _ in range(TURN_TRIES):
                try:
                    turn = await store.refresh_turn(key)
                except ConfigError:
                    expires_at = await self._adopt_stored_tokens()
                    if expires_at is not None and expires_at > time.time():
                        return  # unexpired still: used as it is, refreshed once the store answers
                    raise
                expires_at = await self._adopt_stored_tokens()
                if turn is None:  # another process refreshed: its tokens, unless they expired meanwhile
                    if expires_at is not None and expires_at > time.time():
                        return
                    continue
                if expires_at is not None and expires_at - REFRESH_MARGIN_S > time.time():
                    await turn.release(False)  # refreshed just before this turn: nothing to do
                    return
                self._turn = turn  # released when the new tokens are stored (or the flow ends)
                if expires_at is not None:
                    self.context.token_expiry_time = expires_at - REFRESH_MARGIN_S  # the SDK refreshes now
                return
            raise LoginRequired(f"server {name!r}: another process keeps the turn to refresh its sign-in; try again")

        async def _auth_flow(self, request: Any) -> Any:
            try:
                if not interactive and self._initialized and self._seen != store.generation:
                    # Signed in again since (a wider scope, another account): the stored sign-in (tokens and
                    # client) serves this request, on the connection as it is. A record without tokens is a
                    # sign-out (or a refresh token refused elsewhere): the tokens in use go too.
                    self._seen = store.generation
                    if await storage.get_tokens() is not None:
                        await self._initialize()
                    else:
                        self.context.clear_tokens()
                if not interactive:
                    storage.save_unsaved()  # a refreshed sign-in that could not be saved, once its back-off passed
                if not interactive and self._refresh_due():
                    await self._take_turn()
                inner = super()._auth_flow(request)
                try:
                    outgoing = await inner.__anext__()
                    while True:
                        if outgoing is self._refresh_request:  # it runs to its end, whoever stops waiting for it
                            self._refresh_request = None
                            answer = await send_refresh(
                                outgoing, name=name, keeper=store.refreshes, abandoned=self._gone
                            )
                            outgoing = await inner.asend(answer)
                            continue
                        response = yield outgoing
                        if not interactive and outgoing is request and _insufficient_scope(response):
                            self._note_step_up(response)
                            return
                        outgoing = await inner.asend(response)
                except StopAsyncIteration:
                    return
                finally:
                    await inner.aclose()
            finally:
                await self._end_turn(False)

        def _gone(self) -> Callable[[Any], Awaitable[None]]:
            """The refresh under way goes on without this flow: it keeps the turn, and stores what it gets."""
            turn, self._turn = self._turn, None

            async def store_answer(response: Any) -> None:
                self._turn, self._refreshing = turn, False
                if response is None:
                    await self._end_turn(False)
                else:
                    await self._handle_refresh_response(response)

            return store_answer

        async def _end_turn(self, refreshed: bool) -> None:
            turn, self._turn = self._turn, None
            if turn is not None:
                await turn.release(refreshed)

        def _note_step_up(self, response: Any) -> None:
            """No crash and no sign-in from a host: this request fails alone (the transport turns the 403
            into its error), and the next mcp login asks for the union of the scopes."""
            record = store.get(key)
            granted = (record.get("tokens") or {}).get("scope")
            needed = union_scopes(
                union_scopes(record.get("scope_needed"), granted), extract_scope_from_www_auth(response)
            )
            self.step_up_scope = missing_scopes(needed, granted) or needed
            store.update(key, scope_needed=needed)
            logger.warning(
                "server %r needs a wider sign-in (%s) — run: %s",
                name,
                self.step_up_scope,
                self.logged_login().format(name=name_word(name)),
            )

        async def _perform_authorization(self) -> Any:
            self._choose_method()
            if interactive:
                return await super()._perform_authorization()  # the scope: see Metadata
            if self.context.can_refresh_token():
                self._refreshing = True  # refused although unexpired: try the refresh token once
                if self._turn is None:
                    turn = await store.refresh_turn(key)
                    await self._adopt_stored_tokens()  # the newest refresh token, whoever stored it
                    self._turn = turn
                return await self._refresh_token()
            raise self.refusal(
                f"server {name!r} needs authentication — run: {login_command.format(name=name_word(name))}"
            )

        async def _handle_token_response(self, response: Any) -> None:
            if not self._refreshing:
                await super()._handle_token_response(response)
                if self.context.oauth_metadata is not None:  # where these tokens are refreshed and revoked
                    storage.keep_authorization_server(self.context.oauth_metadata)
                return None
            self._refreshing = False
            if not await self._handle_refresh_response(response):
                raise self.refusal(
                    f"server {name!r} refused its refresh token (signed out or revoked) — "
                    f"run: {login_command.format(name=name_word(name))}"
                )
            return None

        async def _handle_refresh_response(self, response: Any) -> bool:
            self.refreshing_at = None
            held, expires_at = self.context.current_tokens, storage.expires_at()
            used = held.refresh_token if held else None
            storage.refreshed_from = used  # stored only over the sign-in refreshed, not one stored since
            try:
                ok = await super()._handle_refresh_response(response)
            finally:
                storage.refreshed_from = None
            if ok and storage.superseded:  # signed in (or out) elsewhere meanwhile: that sign-in serves
                logger.info("server %r: a sign-in stored while its sign-in was refreshed is used instead", name)
                await self._adopt_stored_tokens()
            failed = None
            if not ok:
                logger.info("server %r: refreshing its sign-in failed (HTTP %s)", name, response.status_code)
                if response.status_code in (400, 401) and used:  # refused (revoked), not failing: signed out
                    unknown = not settings.client_id and await oauth_error(response) == "invalid_client"
                    try:  # before the turn passes on: nobody tries the refused token again
                        store.drop_refused(key, used, client_unknown=unknown)
                    except ConfigError as exc:
                        logger.warning("%s", exc)
                elif held is not None and expires_at is not None and expires_at > time.time():
                    # The authorization server failed (it did not refuse): a token refreshed early still serves
                    # until it expires, and the refresh is tried again on the next request.
                    logger.warning(
                        "server %r: its authorization server failed to refresh the sign-in (HTTP %s); the token in "
                        "hand serves for %.0f s more",
                        name,
                        response.status_code,
                        expires_at - time.time(),
                    )
                    self.context.current_tokens, self.context.token_expiry_time = held, expires_at
                else:  # failed, no token left to use: no sign-in mends that (nor is it asked for), a later try does
                    failed = (
                        f"server {name!r}: its authorization server failed to refresh the sign-in "
                        f"(HTTP {response.status_code}); it is tried again later"
                    )
            await self._end_turn(ok)  # the new tokens are stored: the turn passes on
            if failed is not None:
                raise self.refusal(failed, AuthorizationServerFailed)
            return ok

    def _insufficient_scope(response: Any) -> bool:
        return bool(
            response.status_code == 403 and extract_field_from_www_auth(response, "error") == "insufficient_scope"
        )

    return Provider(
        url,
        metadata,
        storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        client_metadata_url=settings.client_metadata_url,
    )


def _refusing(error: ConfigError) -> Any:
    """An ``httpx2.Auth`` that sends nothing: every request fails with ``error`` (an ``oauth`` block to fix)."""
    import httpx2

    class Refusing(httpx2.Auth):
        def auth_flow(self, request: Any) -> Any:
            raise error
            yield request  # a generator, as httpx drives it

    return Refusing()


def stored_redirect(record: Mapping[str, Any]) -> str | None:
    """The stored client's first redirect URI, if the record holds one that is a loopback URL."""
    client = record.get("client")
    uris = client.get("redirect_uris") if isinstance(client, dict) else None
    if isinstance(uris, list) and uris and isinstance(uris[0], str) and urlsplit(uris[0]).hostname == "127.0.0.1":
        return uris[0]
    return None


def http_auth_for(
    store: TokenStore,
    login_command: str = LOGIN_HINT,
    defined_in: Callable[[str], Path | None] | None = None,
    logged_login: Callable[[str, McpServerConfig], str] | None = None,
) -> HttpAuth:
    """What a host signs remote servers' requests with: a server with a stored sign-in gets a provider
    that refreshes and never prompts; one without gets nothing (a 401 then reads "needs authentication").
    ``login_command``: how a refused sign-in says to sign in again (``{name}``); ``defined_in``: the file that
    defines a server, by its name (None: not known); ``logged_login(name, cfg)``: how the log says to sign in to a
    server (``{name}``; None: ``login_command``)."""

    def auth(name: str, cfg: McpServerConfig) -> Any:
        try:
            settings = oauth_settings(name, cfg)
        except ConfigError as exc:  # the connection fails saying so (not "needs authentication": no login mends it)
            logger.warning("%s", exc)
            return _refusing(exc)
        redirect = None
        if not (settings.machine and server_url(cfg) is not None):  # a machine grant gets its tokens by itself
            record = store.get(token_key(cfg, settings))
            if not record.get("tokens") or not (settings.client_id or record.get("client")):
                return None  # no sign-in, or tokens without the client they were issued to (no refresh, no prompt)
            redirect = stored_redirect(record)
        return oauth_provider(
            store,
            name,
            cfg,
            redirect_uri=redirect or f"http://127.0.0.1{CALLBACK_PATH}",
            redirect_handler=None,
            callback_handler=None,
            login_command=login_command,
            defined_in=defined_in(name) if defined_in is not None else None,
            logged_login=partial(logged_login, name, cfg) if logged_login is not None else None,
        )

    return auth
