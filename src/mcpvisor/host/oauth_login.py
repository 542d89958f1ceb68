"""``mcpvisor mcp login NAME``: the authorization-code flow with PKCE through the SDK's provider
(:mod:`mcpvisor.host.oauth`), the browser (or a printed URL), and the redirect received on a loopback port
(:mod:`mcpvisor.host.oauth_callback`). A sign-in that does not complete leaves the one before as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from mcpvisor.core.errors import ConfigError, McpvisorError, name_word
from mcpvisor.core.server_config import McpServerConfig, redact_url
from mcpvisor.host.oauth import oauth_provider, stored_redirect
from mcpvisor.host.oauth_callback import Callback
from mcpvisor.host.oauth_registration import registered_for
from mcpvisor.host.oauth_settings import is_loopback_url, oauth_settings, server_url, token_key
from mcpvisor.host.oauth_store import TokenStore
from mcpvisor.host.status import LOGIN_HINT

__all__ = ["DEFAULT_LOGIN_TIMEOUT_S", "login", "open_in_browser"]

DEFAULT_LOGIN_TIMEOUT_S: Final = 300.0
BROWSER_ANSWER_S: Final = 2.0
"""How long the browser command is waited for before the sign-in goes on without its answer: one that stays until
its window closes (``BROWSER=firefox`` when none runs yet) would otherwise hold the URL's line, and the sign-in's
end, until then."""


def open_in_browser(url: str) -> bool:
    """Open ``url`` in the user's browser; False when there is none (e.g. over SSH)."""
    import webbrowser

    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False


async def login(
    store: TokenStore,
    name: str,
    cfg: McpServerConfig,
    *,
    open_url: Callable[[str], bool],
    announce: Callable[[str], None],
    timeout_s: float = DEFAULT_LOGIN_TIMEOUT_S,
    log_dir: Path | None = None,
    defined_in: Path | None = None,
    login_command: str = LOGIN_HINT,
) -> int:
    """Sign in to server ``name`` and return how many tools it offers once signed in.

    ``open_url`` opens the authorization URL in a browser (False: none could be opened), ``announce``
    tells the person what to do. Raises :class:`ConfigError` for what they can fix (not a remote
    server, not https, a corrupt store, no sign-in within ``timeout_s``) and :class:`McpvisorError`
    when the flow fails; nothing is stored then. ``defined_in``: the file that defines the server; ``login_command``:
    how a sign-in that did not come says to try again (``{name}``: :func:`~mcpvisor.host.status.fix_commands`)."""
    import anyio

    from mcpvisor.core.client import McpClient
    from mcpvisor.core.server_config import ConnectionOptions

    url = server_url(cfg)
    if url is None:
        raise ConfigError(f"server {name!r} runs a command (stdio): there is nothing to sign in to")
    if urlsplit(url).scheme != "https" and not is_loopback_url(url):
        raise ConfigError(
            f"refusing to sign in to server {name!r} over plain HTTP ({redact_url(url)}): tokens would travel "
            "unencrypted; use its https:// URL"
        )
    settings = oauth_settings(name, cfg)
    key = token_key(cfg, settings)
    store.read()  # a corrupt store: refuse before anything starts
    stored = stored_redirect(store.get(key))  # the port the stored client was registered with
    port = settings.callback_port or (urlsplit(stored).port if stored else None) or 0
    try:
        callback = Callback(port)
    except OSError:
        if settings.callback_port:
            raise ConfigError(
                f"cannot receive the sign-in on port {port} (mcpServers.{name}.oauth.callbackPort): it is in use"
            ) from None
        callback = Callback(0)
    try:
        original = store.get(key)
        forgotten: list[bool] = []  # a reused registration found forgotten: not put back on failure
        if not settings.client_id and port and callback.port != port:
            store.update(key, client=None)  # registered for another redirect port: register again
        elif not settings.client_id and (not registered_for(original) or original.get("register_again")):
            # registered without the scope a refused request asked for, or perhaps forgotten by the server: again
            store.update(key, client=None, register_again=None)
        before = store.get(key)

        async def redirect_handler(authorization_url: str) -> None:
            callback.reset(authorization_url)
            opened = True  # a browser command still running: it opened a window and stays until it is closed
            with anyio.move_on_after(BROWSER_ANSWER_S):
                opened = await _opened(open_url, authorization_url)
            announce(
                f"Opening your browser to sign in to {name}. If it does not open, visit:\n  {authorization_url}"
                if opened
                else f"Sign in to {name} by visiting this URL in a browser:\n  {authorization_url}\n"
                f"(The sign-in ends at {callback.redirect_uri} on this machine: from a browser on another one, forward "
                f"that port first, e.g. ssh -L {callback.port}:127.0.0.1:{callback.port} THIS-HOST)"
            )

        async def callback_handler() -> Any:
            from mcp.shared.auth import AuthorizationCodeResult

            got = await anyio.to_thread.run_sync(callback.done.wait, timeout_s, abandon_on_cancel=True)
            if not got:
                reused = not settings.client_id and before.get("client") is not None
                if reused:  # the server may have forgotten it (a restart): its page then shows an error
                    forgotten.append(True)
                raise ConfigError(
                    f"no sign-in to {name!r} within {timeout_s:g} s (was the browser closed?"
                    + (
                        "; an error page about the client means the server forgot the client registered earlier, "
                        "which is registered again next time"
                        if reused
                        else ""
                    )
                    + f"); run {login_command.format(name=name_word(name))} again"
                )
            query = callback.received
            if "code" not in query:
                reason = query.get("error_description") or query.get("error") or "no authorization code"
                raise McpvisorError(f"signing in to {name!r} failed: the authorization server said: {reason}")
            return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

        provider = oauth_provider(
            store,
            name,
            cfg,
            redirect_uri=callback.redirect_uri,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
            defined_in=defined_in,
        )
        patient = cfg.model_copy(update={"discovery_timeout_ms": int((timeout_s + 60) * 1000)})
        client = McpClient(name, patient, options=ConnectionOptions(log_dir=log_dir, http_auth=lambda _n, _c: provider))
        try:
            async with anyio.create_task_group() as tg:
                try:
                    await client.start(tg)
                    tools = len(client.tools)
                finally:
                    await client.aclose()
            if not settings.machine and provider.context.storage.issued is None:
                raise ConfigError(
                    f"server {name!r} did not ask for a sign-in: it answered without one, so nothing was stored "
                    f"(credentials it takes in a header go in mcpServers.{name}.headers)"
                )
            store.update(key, scope_needed=None, register_again=None)  # what a refused request asked for is held
            return tools
        except BaseException as exc:
            # The sign-in before stays as it was (its tokens were never touched), with its client: a refresh needs
            # both. A client the server may have forgotten is registered again next time (at once when no tokens
            # depend on it).
            if not settings.machine and provider.context.storage.issued is None and not settings.client_id:
                suspect = bool(forgotten) or bool(original.get("register_again"))
                keep = original.get("tokens") or not suspect
                store.update(
                    key,
                    client=original.get("client") if keep else None,
                    register_again=True if keep and suspect else None,
                )
            not_kept = provider.context.storage.not_kept
            if not_kept is not None and isinstance(exc, Exception):
                # The server and its authorization server answered: only storing the sign-in failed.
                raise ConfigError(
                    f"signed in to server {name!r}, but the sign-in could not be kept: {not_kept}"
                ) from exc
            raise
    finally:
        callback.close()


async def _opened(open_url: Callable[[str], bool], url: str) -> bool:
    """``open_url(url)`` in a thread of its own that neither the sign-in nor the process waits for once it is
    cancelled: a browser command that stays until its window closes (``BROWSER=firefox`` when none runs yet) is
    waited for by Python's ``webbrowser``, and an anyio worker thread would hold Ctrl-C until then, and the
    interpreter's exit after it (it waits for such threads)."""
    import threading

    import anyio
    import anyio.from_thread
    import anyio.lowlevel

    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    outcome: list[bool | BaseException] = []

    def run() -> None:
        try:
            outcome.append(open_url(url))
        except BaseException as exc:  # raised in the sign-in, as the browser's own failures always were
            outcome.append(exc)
        try:
            anyio.from_thread.run_sync(done.set, token=token)
        except RuntimeError:  # anyio.RunFinishedError among them
            pass  # the sign-in was cancelled and its event loop has ended: nobody waits for the answer

    threading.Thread(target=run, name="mcpvisor-browser", daemon=True).start()
    await done.wait()
    [result] = outcome
    if isinstance(result, BaseException):
        raise result
    return result
