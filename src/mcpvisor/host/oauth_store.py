"""The OAuth token store: one 0600 file in the user directory (``$MCPVISOR_HOME/oauth-tokens.json``),
written like the approvals store (atomic, under a file lock), keyed by a server's URL and the configured
client id; what a status view may say of a sign-in (never a token). A corrupt store fails closed: nothing is
signed in, and the file is kept. (The SDK's ``TokenStorage`` over one record: :mod:`.oauth_storage`.)
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from mcpvisor.core.errors import ConfigError, name_word
from mcpvisor.core.events import Listeners
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.oauth_refreshes import Refreshes
from mcpvisor.host.oauth_settings import oauth_settings, token_key
from mcpvisor.host.private_files import STORE_MODE, PrivateJsonStore
from mcpvisor.host.status import LOGIN_HINT, fill_hint

if TYPE_CHECKING:
    from mcpvisor.core.client import McpClient

__all__ = [
    "RefreshTurn",
    "SignIn",
    "TokenStore",
    "missing_scopes",
    "sign_in_state",
    "sign_ins",
    "unreadable",
]

logger = logging.getLogger(__name__)


REFRESH_WAIT_S = 30.0
"""How long a process waits for another of the machine to refresh a sign-in before it reads the store again."""


class RefreshTurn:
    """This process's turn to refresh one sign-in; :meth:`release` says whether it refreshed (idempotent)."""

    def __init__(self, release: Callable[[bool], Awaitable[None]] | None = None) -> None:
        self._release = release

    async def release(self, refreshed: bool) -> None:
        release, self._release = self._release, None
        if release is not None:
            await release(refreshed)


class TokenStore(PrivateJsonStore):
    """``{ "<server URL>[#client id]": {"client": {...}, "tokens": {...}, "expires_at": <epoch s>} }``."""

    what = "the OAuth token store"
    consequence = "nothing is signed in until it is fixed or deleted (then sign in again with mcpvisor mcp login NAME)"
    generation = 0
    """Counts the changes this process knows of (its own writes, :meth:`note_sign_ins_changed`): a live
    connection that has not seen the current one looks at the stored sign-in before its next request."""
    refreshes: Refreshes | None = None
    """Where the refreshes of its sign-ins run, while a host uses it (:meth:`in_use`)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.unsaved: dict[str, str] = {}
        """Sign-in key -> why the sign-in a refresh brought could not be saved (in use in memory meanwhile)."""
        self._not_saved_listeners = Listeners[Callable[[str], None]]("not-saved listener")

    def on_not_saved(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """``listener(message)`` hears that a refreshed sign-in could not be saved (once per sign-in until it is
        saved); returns the function that removes it. Without a listener, the message is logged."""
        return self._not_saved_listeners.add(listener)

    @contextlib.asynccontextmanager
    async def in_use(self, on_not_saved: Callable[[str], None]) -> AsyncIterator[None]:
        """While a host uses the store: ``on_not_saved`` hears of a refreshed sign-in that could not be saved, and
        a refresh its connection stops waiting for goes on (:mod:`.oauth_refreshes`), waited for at the end."""
        remove = self.on_not_saved(on_not_saved)
        try:
            if self.refreshes is not None and not self.refreshes.closed:  # another host's, using the same store
                yield
                return
            async with Refreshes() as self.refreshes:
                yield
        finally:
            remove()

    def note_not_saved(self, key: str, reason: str | None, message: str = "") -> None:
        """``key``'s refreshed sign-in could not be saved (``reason``; ``message``: what people are told, the first
        time), or (``None``) the store holds a sign-in for it again."""
        if reason is None:
            self.unsaved.pop(key, None)
            return
        first = key not in self.unsaved
        self.unsaved[key] = reason
        if first and not self._not_saved_listeners:
            logger.warning("%s", message)
        elif first:
            self._not_saved_listeners.tell(message)

    def note_sign_ins_changed(self) -> None:
        """The stored sign-ins may have changed (e.g. ``mcpvisor mcp login`` in another process): live
        connections take a completed sign-in before their next request, without reconnecting."""
        self.generation += 1

    def get(self, key: str) -> dict[str, Any]:
        """One server's record (empty when there is none, or the store cannot be read)."""
        try:
            return dict(self.read().get(key, {}))
        except ConfigError as exc:
            logger.warning("%s", exc)
            return {}

    def update(self, key: str, **fields: Any) -> None:
        """Set fields of one record (``None`` removes one; no fields left removes the record), atomically."""

        def change(records: dict[str, Any]) -> None:
            record = {k: v for k, v in {**records.get(key, {}), **fields}.items() if v is not None}
            if record:
                records[key] = record
            else:
                records.pop(key, None)

        self.mutate(change)
        self.note_sign_ins_changed()

    def store_refreshed(self, key: str, used: str, **fields: Any) -> bool:
        """Set fields of a refresh's record (``None`` removes one) unless the sign-in refreshed is no longer the
        stored one (``used``: the refresh token it was refreshed with): a sign-in stored meanwhile (``mcp login``
        in another process) or a sign-out stands. Whether they were stored."""
        stored: list[bool] = []

        def change(records: dict[str, Any]) -> None:
            record = records.get(key)
            tokens = record.get("tokens") if isinstance(record, dict) else None
            if isinstance(record, dict) and isinstance(tokens, dict) and tokens.get("refresh_token") == used:
                records[key] = {k: v for k, v in {**record, **fields}.items() if v is not None}
                stored.append(True)

        self.mutate(change)
        self.note_sign_ins_changed()
        return bool(stored)

    def drop_refused(self, key: str, refresh_token: str, *, client_unknown: bool = False) -> None:
        """The server refused ``refresh_token``: the sign-in it belongs to is over (``mcp list`` and ``status``
        say so: the record is marked ``refused``), unless another one was stored since; ``client_unknown``
        (``invalid_client``: a server that forgot its registrations) drops the registered client too, so the
        next sign-in registers again."""
        dropped = ("tokens", "expires_at", "client") if client_unknown else ("tokens", "expires_at")

        def change(records: dict[str, Any]) -> None:
            record = records.get(key)
            if not isinstance(record, dict):
                return
            tokens = record.get("tokens")
            if isinstance(tokens, dict) and tokens.get("refresh_token") == refresh_token:
                records[key] = {k: v for k, v in record.items() if k not in dropped} | {"refused": True}

        self.mutate(change)
        self.note_sign_ins_changed()

    def on_external_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """``listener()`` hears sign-ins stored other than through this store's file (a fleet's store); returns
        the function that removes it. The file store has none: the settings watcher sees its file change."""
        return lambda: None

    async def refresh_turn(self, key: str) -> RefreshTurn | None:
        """Take the turn to refresh ``key``'s tokens: a :class:`RefreshTurn` (this process refreshes, then
        releases it), or ``None`` when another process refreshed meanwhile (read the store again). The file
        store: one process of this machine at a time (a lock file per sign-in beside the store; one that finds
        it taken waits for it, :data:`REFRESH_WAIT_S` at most). :class:`ConfigError` when the turn cannot be
        known now (a fleet's store that does not answer: no refresh then, or a refresh token could be used twice)."""
        from filelock import FileLock, Timeout

        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        lock = FileLock(self.path.with_name(f"{self.path.name}.refresh-{digest}.lock"), mode=STORE_MODE)
        try:
            lock.acquire(timeout=0)
        except Timeout:  # another process refreshes: its tokens, once it is done
            with anyio.move_on_after(REFRESH_WAIT_S):
                while True:
                    await anyio.sleep(0.05)
                    with contextlib.suppress(Timeout):
                        lock.acquire(timeout=0)
                        lock.release()
                        break
            return None
        except OSError:  # no lock file can be made here: refresh as a lone process would
            return RefreshTurn()

        async def release(refreshed: bool) -> None:
            lock.release()

        return RefreshTurn(release)

    def forget(self, key: str) -> bool:
        """Drop a server's sign-in; whether there was one."""
        if not self.get(key):
            return False
        self.update(
            key,
            client=None,
            tokens=None,
            expires_at=None,
            register_again=None,
            authorization_server=None,
            refused=None,
        )
        return True


@dataclass(frozen=True, slots=True)
class SignIn:
    """What a status view may say about a server's sign-in: never a token."""

    signed_in: bool
    expires_at: float | None = None
    refreshable: bool = False
    machine: bool = False
    """Tokens the host gets by itself (client credentials)."""
    wider: str | None = None
    """Scopes the server asked for that the sign-in does not hold (``insufficient_scope``)."""
    unreadable: bool = False
    """A record is kept but its tokens are not tokens (edited by hand, or written by something else)."""
    refused: bool = False
    """Not signed in: the authorization server refused the refresh token of the sign-in there was."""

    def needs_sign_in(self, now: float | None = None) -> bool:
        """Whether only ``mcp login`` mends it: refused, expired with no refresh token, or too narrow."""
        if self.refused or self.wider:
            return True
        expired = self.expires_at is not None and self.expires_at <= (time.time() if now is None else now)
        return self.signed_in and expired and not self.refreshable and not self.machine

    def describe(self, now: float | None = None) -> str:
        if self.unreadable:
            return "the stored sign-in is unreadable"
        if self.refused:
            return "signed out: the authorization server refused the stored sign-in (revoked or expired)"
        if not self.signed_in:
            return "not signed in"
        if self.wider:
            return f"signed in; needs a wider sign-in ({self.wider})"
        if self.machine:
            return "signed in (client credentials)"
        if self.expires_at is None:
            return "signed in"
        left = self.expires_at - (time.time() if now is None else now)
        if left <= 0:
            return (
                "signed in (token expired; it is refreshed on the next connection)"
                if self.refreshable
                else ("sign-in expired")
            )
        return f"signed in (expires in {_duration(left)})"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"


def sign_in_state(records: Mapping[str, Any], name: str, cfg: McpServerConfig) -> SignIn:
    """Whether a remote server has a sign-in among the store's ``records`` (False for stdio servers)."""
    if cfg.transport == "stdio":
        return SignIn(False)
    try:
        settings = oauth_settings(name, cfg)
    except ConfigError:
        return SignIn(False)
    record = records.get(token_key(cfg, settings), {})
    tokens = record.get("tokens") if isinstance(record, Mapping) else record
    if tokens is None:
        return SignIn(False, refused=isinstance(record, Mapping) and record.get("refused") is True)
    if not _token_shaped(tokens) or not isinstance(record.get("expires_at"), int | float | None):
        return SignIn(False, unreadable=True)
    expires_at = record.get("expires_at")
    return SignIn(
        True,
        float(expires_at) if isinstance(expires_at, int | float) else None,
        bool(tokens.get("refresh_token")),
        machine=settings.machine,
        wider=missing_scopes(record.get("scope_needed"), tokens.get("scope")),
    )


def _token_shaped(tokens: object) -> bool:
    """Whether a record's ``tokens`` are what the SDK's ``OAuthToken`` reads (checked without the SDK, which
    the commands that show sign-ins never import)."""
    if not isinstance(tokens, Mapping):
        return False
    token_type = tokens.get("token_type", "Bearer")
    return (
        isinstance(tokens.get("access_token"), str)
        and bool(tokens["access_token"])
        and isinstance(token_type, str)
        and token_type.title() == "Bearer"
        and all(isinstance(tokens.get(key), str | None) for key in ("refresh_token", "scope"))
        and isinstance(tokens.get("expires_in"), int | None)
    )


def missing_scopes(needed: object, granted: object) -> str | None:
    """The scopes of ``needed`` that ``granted`` does not hold (space-separated), or ``None``."""
    if not isinstance(needed, str):
        return None
    held = set(granted.split()) if isinstance(granted, str) else set()
    missing = [scope for scope in needed.split() if scope not in held]
    return " ".join(missing) or None


def sign_ins(
    store: TokenStore,
    servers: Mapping[str, McpServerConfig],
    login_command: str = LOGIN_HINT,
    *,
    sign_in_command: str | None = None,
) -> dict[str, str]:
    """Server -> what its sign-in looks like, for remote servers with one or one refused (never a token), with
    the command that mends it (``login_command``: ``{name}``, :func:`~mcpvisor.host.status.fix_commands`; the
    logout command is made from it). ``sign_in_command``: how to sign in, when not so (the shell's ``/login
    {name}``). The store is read only when there is a remote server (a host reads this at start-up and on each
    reload)."""
    logout_command = login_command.replace(" mcp login ", " mcp logout ", 1)
    out: dict[str, str] = {}
    for name, state in _sign_in_states(store, servers).items():
        login, logout = (fill_hint(command, name) for command in (sign_in_command or login_command, logout_command))
        if state.unreadable:
            out[name] = f"{state.describe()} — run: {logout}, then {login}"
        elif state.signed_in and (reason := _unsaved(store, name, servers[name])) is not None:
            out[name] = f"signed in; its refreshed sign-in is not saved ({reason}): it serves until mcpvisor stops"
        elif state.needs_sign_in():
            out[name] = f"{state.describe()} — run: {login}"
        elif state.signed_in:
            out[name] = state.describe()
    return out


def _unsaved(store: TokenStore, name: str, cfg: McpServerConfig) -> str | None:
    """Why the sign-in a refresh of ``name``'s brought could not be saved, if it could not (it is in use here)."""
    if not store.unsaved:
        return None
    try:
        return store.unsaved.get(token_key(cfg, oauth_settings(name, cfg)))
    except ConfigError:
        return None


def _sign_in_states(store: TokenStore, servers: Mapping[str, McpServerConfig]) -> dict[str, SignIn]:
    """Server -> its sign-in, for every server (none when the store cannot be read: said here)."""
    if all(cfg.transport == "stdio" for cfg in servers.values()):
        return {}
    try:
        records = store.read()  # once for every server
    except ConfigError as exc:
        logger.warning("%s", exc)
        return {}
    return {name: sign_in_state(records, name, cfg) for name, cfg in servers.items()}


def _holding(store: TokenStore, servers: Mapping[str, McpServerConfig]) -> frozenset[str]:
    """Those of ``servers`` with a stored sign-in (an unreadable one too: it was not signed out)."""
    return frozenset(name for name, s in _sign_in_states(store, servers).items() if s.signed_in or s.unreadable)


def unreadable(store: TokenStore, servers: Mapping[str, McpServerConfig]) -> str | None:
    """Why the store cannot be read (its file, the reason, the fix), when a remote server may need a sign-in from it."""
    if all(cfg.transport == "stdio" for cfg in servers.values()):
        return None
    return store.read_error()


def _token_digests(store: TokenStore, servers: Mapping[str, McpServerConfig]) -> dict[str, str | None]:
    """Server -> a digest of its stored access token (``None``: it has none a connection could use); never a token."""
    if all(cfg.transport == "stdio" for cfg in servers.values()):
        return dict.fromkeys(servers)
    try:
        records = store.read()
    except ConfigError:
        return dict.fromkeys(servers)  # (said by those that show the sign-ins)
    out: dict[str, str | None] = {}
    for name, cfg in servers.items():
        out[name] = None
        if sign_in_state(records, name, cfg).signed_in:  # (so its record and settings are readable)
            token = records[token_key(cfg, oauth_settings(name, cfg))]["tokens"]["access_token"]
            out[name] = hashlib.sha256(token.encode()).hexdigest()
    return out


class SignedIn:
    """The servers that had a sign-in at the last look, to tell which were signed out since (``mcp logout`` in
    another process, a refresh refused for good), and the tokens they had, to tell which got a new one."""

    def __init__(self) -> None:
        self._names: frozenset[str] = frozenset()
        self._tokens: dict[str, str | None] = {}

    def note(self, store: TokenStore, servers: Mapping[str, McpServerConfig]) -> None:
        """Count the sign-ins of ``servers`` (configured since the last look) in; none is counted out here."""
        self._names |= _holding(store, servers)
        new = {name: cfg for name, cfg in servers.items() if name not in self._tokens}
        self._tokens |= _token_digests(store, new) if new else {}

    def follow(
        self,
        store: TokenStore,
        servers: Mapping[str, McpServerConfig],
        clients: Mapping[str, McpClient],
    ) -> bool:
        """The store changed (a sign-in or sign-out elsewhere): live connections take the stored sign-in before
        their next request, those signed out end. True when a server that is not connected got a new token
        (reconnect it); a save that brings none (a sign-in registers its client before its tokens come, a refresh
        of a connected server's) starts nothing, so a start it would fail for want of a token is not tried."""
        store.note_sign_ins_changed()
        self.end_signed_out(store, servers, clients)
        before, self._tokens = self._tokens, _token_digests(store, servers)
        new = [name for name, digest in self._tokens.items() if digest is not None and digest != before.get(name)]
        return any((client := clients.get(name)) is None or client.status != "connected" for name in new)

    def signed_out(self, store: TokenStore, servers: Mapping[str, McpServerConfig]) -> frozenset[str]:
        """Those of ``servers`` signed in at the last look and no longer; this look is the next one's last."""
        before, self._names = self._names, _holding(store, servers)
        return before - self._names

    def end_signed_out(
        self,
        store: TokenStore,
        servers: Mapping[str, McpServerConfig],
        clients: Mapping[str, McpClient],
    ) -> None:
        """End the connections of those of ``servers`` signed out since the last look, for every session holding
        one (a restart would leave a connection another workspace holds); reconnected, they need a sign-in. The end
        is said in the connection's own words (its login command): a connection shared between workspaces (a
        pool's) is worded for each by its host (:func:`~mcpvisor.host.status.as_said_here`), so none hears the
        command of the workspace that saw the sign-out first."""
        for name in self.signed_out(store, servers):
            if (client := clients.get(name)) is not None:
                command = client.login_command.format(name=name_word(name))
                client.mark_lost(f"server {name!r} was signed out — run: {command}", ended=True)
