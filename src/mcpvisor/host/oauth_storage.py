"""The SDK's ``TokenStorage`` over one record of the OAuth token store (:mod:`.oauth_store`), and a refreshed
sign-in that cannot be saved (a full disk, a read-only file, a fleet store that does not answer): the refresh
token the authorization server just rotated would be lost with it, so it is kept in memory and serves, saving it
is tried again (at the next refresh, and every :data:`UNSAVED_RETRY_S`), and people are told once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from mcpvisor.core.errors import ConfigError, describe_invalid, name_word
from mcpvisor.host.oauth_store import TokenStore
from mcpvisor.host.status import LOGIN_HINT

if TYPE_CHECKING:
    from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, OAuthToken
    from pydantic import BaseModel

__all__ = ["UNSAVED_RETRY_S", "FileTokenStorage"]

logger = logging.getLogger(__name__)

UNSAVED_RETRY_S: Final = 30.0
"""How often a refreshed sign-in kept in memory is tried again to be saved (besides at its next refresh)."""


@dataclass
class _Unsaved:
    """A refreshed sign-in the store could not be written with."""

    tokens: OAuthToken
    fields: dict[str, Any]
    replaces: str
    """The refresh token of the stored sign-in it replaces (the authorization server no longer takes it)."""
    retry_at: float
    """When saving it is tried again (``time.monotonic()``)."""


M = TypeVar("M", bound="BaseModel")


class FileTokenStorage:
    """The SDK's ``TokenStorage`` over one record of the :class:`TokenStore`."""

    def __init__(
        self,
        store: TokenStore,
        key: str,
        *,
        client: OAuthClientInformationFull | None = None,
        name: str = "NAME",
        fresh: bool = False,
        login: str = LOGIN_HINT,
    ) -> None:
        self._store = store
        self._key = key
        self._client = client  # a pre-registered client: used as it is, never replaced
        self._name = name  # the server's, for the fix
        self._fresh = fresh
        self._login = login.format(name=name_word(name))  # how to sign in again, should a refresh be lost
        self._unsaved: _Unsaved | None = None
        self.issued: OAuthToken | None = None
        """The tokens stored through this storage (``fresh``: the only ones it reads)."""
        self.refreshed_from: str | None = None
        """The refresh token the next tokens set were refreshed with: they replace that sign-in only."""
        self.superseded = False
        """The last tokens set were not stored: another sign-in (or a sign-out) was stored since the refresh began."""
        self.not_kept: ConfigError | None = None
        """Why the tokens of a sign-in (not a refresh) could not be stored: the flow ends with this failure."""

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens; for a ``fresh`` sign-in, only those it got: the server runs the whole flow, and
        the sign-in before stays in the store (and in use elsewhere) until new tokens replace it."""
        from mcp.shared.auth import OAuthToken

        if self._fresh:
            return self.issued
        tokens = self._store.get(self._key).get("tokens")
        if (unsaved := self._pending(tokens)) is not None:
            return unsaved.tokens
        return self._valid(OAuthToken, tokens, "tokens") if isinstance(tokens, dict) else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires_at = time.time() + tokens.expires_in if tokens.expires_in is not None else None
        fields = {
            "tokens": tokens.model_dump(mode="json", exclude_none=True),
            "expires_at": expires_at,
            "refused": None,
        }
        used, self.refreshed_from = self.refreshed_from, None
        if used is not None and self._unsaved is not None and used == self._unsaved.tokens.refresh_token:
            used = self._unsaved.replaces  # refreshed from the sign-in not saved: the store holds the one before
        try:
            self.superseded = used is not None and not self._store.store_refreshed(self._key, used, **fields)
        except ConfigError as exc:
            if used is None:
                raise  # a sign-in, not a refresh: its command says it failed
            self._keep_unsaved(tokens, fields, used, exc)
            self.superseded = False
            self.issued = tokens
            return
        if used is not None:
            self._settle(saved=not self.superseded)
        if self.superseded:
            return
        self.issued = tokens
        if used is None:
            try:
                self._store.update(self._key, **fields)
            except ConfigError as exc:
                self.not_kept = exc
                raise

    def save_unsaved(self) -> None:
        """Try again to save a refreshed sign-in kept in memory, once :data:`UNSAVED_RETRY_S` passed."""
        unsaved = self._unsaved
        if unsaved is None or time.monotonic() < unsaved.retry_at:
            return
        try:
            stored = self._store.store_refreshed(self._key, unsaved.replaces, **unsaved.fields)
        except ConfigError as exc:
            unsaved.retry_at = time.monotonic() + UNSAVED_RETRY_S
            self._store.note_not_saved(self._key, str(exc))
            return
        self._settle(saved=stored)  # (not stored: another sign-in, or a sign-out, was stored since; it stands)

    def _keep_unsaved(self, tokens: OAuthToken, fields: dict[str, Any], used: str, exc: ConfigError) -> None:
        self._unsaved = _Unsaved(tokens, fields, used, time.monotonic() + UNSAVED_RETRY_S)
        self._store.note_not_saved(
            self._key,
            str(exc),
            f"server {self._name!r}: its refreshed sign-in could not be saved: {exc}. It serves from memory while "
            f"this mcpvisor runs, and saving it is tried again (at its next refresh, and every "
            f"{UNSAVED_RETRY_S:.0f} s); make room for the file or make it writable — unless it is saved before this "
            f"mcpvisor stops, the stored sign-in no longer works then: run {self._login}",
        )

    def _settle(self, *, saved: bool) -> None:
        """The store holds a sign-in again: this process's refreshed one (``saved``), or one stored since."""
        if self._unsaved is None:
            return
        self._unsaved = None
        self._store.note_not_saved(self._key, None)
        if saved:
            logger.info("server %r: its refreshed sign-in is saved now in %s", self._name, self._store.place)

    def _pending(self, stored_tokens: object) -> _Unsaved | None:
        """The refreshed sign-in not saved yet, while the store holds the one it replaces: a sign-in (or sign-out)
        stored since stands."""
        unsaved = self._unsaved
        if unsaved is None:
            return None
        if isinstance(stored_tokens, dict) and stored_tokens.get("refresh_token") == unsaved.replaces:
            return unsaved
        self._settle(saved=False)
        return None

    def _valid(self, model: type[M], value: dict[str, Any], what: str) -> M:
        """``value`` as ``model``; one that is not is an error naming the store and the record, never its
        values (a token may be among them)."""
        from pydantic import ValidationError

        try:
            return model.model_validate(value)
        except ValidationError as exc:
            raise ConfigError(
                f"in {self._store.path}, the {what} stored for {self._key} fail validation ({describe_invalid(exc)}); "
                f"sign out and in again (mcpvisor mcp logout {(word := name_word(self._name))}, "
                f"then mcpvisor mcp login {word})"
            ) from None

    def authorization_server(self) -> OAuthMetadata | None:
        """The metadata of the authorization server that issued the stored tokens (None: not kept)."""
        from mcp.shared.auth import OAuthMetadata

        kept = self._store.get(self._key).get("authorization_server")
        return self._valid(OAuthMetadata, kept, "authorization server") if isinstance(kept, dict) else None

    def keep_authorization_server(self, metadata: OAuthMetadata) -> None:
        self._store.update(self._key, authorization_server=metadata.model_dump(mode="json", exclude_none=True))

    def expires_at(self) -> float | None:
        record = self._store.get(self._key)
        unsaved = self._pending(record.get("tokens"))
        value = unsaved.fields["expires_at"] if unsaved is not None else record.get("expires_at")
        return float(value) if isinstance(value, int | float) else None

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        from mcp.shared.auth import OAuthClientInformationFull

        if self._client is not None:
            # The method chosen against the server's metadata, for a refresh before any discovery.
            method = self._store.get(self._key).get("token_endpoint_auth_method")
            return self._client.model_copy(update={"token_endpoint_auth_method": method}) if method else self._client
        client = self._store.get(self._key).get("client")
        return (
            self._valid(OAuthClientInformationFull, client, "registered client") if isinstance(client, dict) else None
        )

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self._client is None:
            self._store.update(self._key, client=client_info.model_dump(mode="json", exclude_none=True))
