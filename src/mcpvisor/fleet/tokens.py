"""OAuth tokens kept in the fleet store, sealed with the fleet key, refreshed by one replica at a time.

:class:`FleetTokenStore` is a :class:`~mcpvisor.host.oauth_store.TokenStore` whose records live in one
Redis hash (``tokens``), each sealed (:mod:`mcpvisor.fleet.sealing`): Redis never holds a token in
clear. A sign-in made anywhere (``mcpvisor mcp login NAME --fleet URL``) reaches every replica.

Refreshing is one replica's job: OAuth 2.1 refresh-token rotation treats a refresh token used twice as
stolen and may revoke the whole grant, so :meth:`FleetTokenStore.refresh_turn` hands the turn to the
one replica that takes ``lock:tok:<key>`` (``SET NX PX``, released by compare-and-delete); the others
wait for it to finish (at most :data:`WAIT_S`) and use the tokens it stored, as does a replica that
wants to refresh within :data:`FRESH_MS` of that refresh (``fresh:tok:<key>``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio

from mcpvisor.core.errors import ConfigError
from mcpvisor.fleet.records import FleetRecords
from mcpvisor.fleet.sealing import KEY_ENV, FleetKey, other_key_in_use
from mcpvisor.fleet.store import RELEASE, FleetStore
from mcpvisor.host.oauth_store import RefreshTurn, TokenStore

__all__ = ["LOCK_MS", "WAIT_S", "FleetTokenStore"]

logger = logging.getLogger(__name__)

LOCK_MS: Final = 30_000
"""The longest a refresh may hold the turn (a crashed holder's turn passes on after this)."""
WAIT_S: Final = 10.0
"""How long a replica waits for another one's refresh before it refreshes itself."""
POLL_S: Final = 0.05
FRESH_MS: Final = 10_000
"""A refresh this recent serves every replica: one that wants to refresh uses what it stored instead."""


class FleetTokenStore(FleetRecords, TokenStore):
    """The OAuth tokens of one fleet (see the module)."""

    what = "the fleet's OAuth sign-ins"
    unanswered = "the servers signed in through it connect without their sign-in until it answers"
    consequence = "that server is not signed in until it signs in again (mcpvisor mcp login NAME --fleet URL)"
    log_kind = "tok"
    skip_unreadable = True  # one record sealed with a key no longer in the ring costs that sign-in, not all

    def __init__(self, store: FleetStore, key: FleetKey, *, checks_key: bool = False) -> None:
        """``checks_key``: for a process that is no listed replica (a command such as ``mcp login``), whose key
        was checked when it started only: a replica started since with another key made that key the fleet's."""
        TokenStore.__init__(self, Path(os.devnull))
        self._fleet_init(store, store.keys.tokens)
        self._key = key
        self._checks_key = checks_key

    def _before_writing(self, pipe: Any) -> None:
        """Refuse to seal records with a key that is no longer the fleet's: no replica would open them (each would
        leave them out). The check is part of the write's transaction."""
        if self._checks_key and (running := other_key_in_use(self.store, self._key, pipe)):
            raise ConfigError(
                f"could not save {self.what}: {KEY_ENV} differs from the fleet key of fleet {self.store.keys.fleet!r} "
                f"(running: {running}), so no replica could open them; nothing was stored: run this again with the "
                "replicas' key (or restart them with this one)"
            )

    def encode(self, key: str, record: Any) -> str:
        return self._key.seal(json.dumps(record, sort_keys=True).encode(), key)

    def decode(self, key: str, text: str) -> Any:
        return json.loads(self._key.open(text, key))

    async def refresh_turn(self, key: str) -> RefreshTurn | None:
        import redis

        digest = hashlib.sha256(key.encode()).hexdigest()[:32]
        lock, fresh = self.store.keys.token_lock(digest), self.store.keys.token_fresh(digest)
        holder = secrets.token_hex(8)
        client = self.store.async_client()
        try:
            if not await client.exists(fresh) and await client.set(lock, holder, nx=True, px=LOCK_MS):
                if not await client.exists(fresh):  # not refreshed between the two questions
                    return RefreshTurn(partial(self._release, lock, fresh, holder))
                await client.eval(RELEASE, 1, lock, holder)
            with anyio.move_on_after(WAIT_S):  # another process refreshes: wait for it to finish
                while await client.exists(lock):  # noqa: ASYNC110 - another process's lock
                    await anyio.sleep(POLL_S)
            return None
        except (redis.RedisError, OSError) as exc:
            raise ConfigError(
                f"cannot take the turn to refresh a sign-in: {self.failure(exc)}; the sign-in is refreshed when it "
                "answers again"
            ) from exc
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def _release(self, lock: str, fresh: str, holder: str, refreshed: bool) -> None:
        import redis

        client = self.store.async_client()
        try:
            with anyio.CancelScope(shield=True):
                if refreshed:  # what this process stored serves every replica for a while
                    await client.set(fresh, holder, px=FRESH_MS)
                await client.eval(RELEASE, 1, lock, holder)
        except (redis.RedisError, OSError) as exc:
            logger.warning("could not release a sign-in's refresh turn: %s; it expires by itself", self.failure(exc))
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()
