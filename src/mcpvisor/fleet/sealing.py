"""The fleet key: what seals the fleet's secrets (OAuth tokens) before they enter the store, and signs the
names of input rounds (a replica forwards only a round another replica of the fleet named).

``MCPVISOR_FLEET_KEY`` holds one or more secrets separated by commas (or ``MCPVISOR_FLEET_KEY_FILE``
names a file readable by its owner only, one secret per line): the first seals, every one opens. To
rotate: add the new secret *second* on every replica, then move it first, then drop the old one once
every sign-in was stored again (a refresh or a login does that); a record sealed with a secret no
longer in the ring reads as not signed in.
Each secret must be at least 32 characters. Sealing is AES-256-GCM under a key derived from the secret
with HKDF-SHA256, the record's own key as associated data (a sealed record moved to another key does
not open), a random 96-bit nonce per seal.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from mcpvisor.core.errors import ConfigError

if TYPE_CHECKING:
    import redis.client

    from mcpvisor.fleet.store import FleetStore

__all__ = [
    "KEY_ENV",
    "KEY_FILE_ENV",
    "KEY_MARK_MS",
    "FleetKey",
    "check_fleet_key",
    "join_with_key",
    "other_key_in_use",
    "release_key_mark",
]

KEY_ENV: Final = "MCPVISOR_FLEET_KEY"
KEY_FILE_ENV: Final = "MCPVISOR_FLEET_KEY_FILE"
MIN_SECRET: Final = 32
_PREFIX: Final = "v1."
_INFO: Final = b"mcpvisor fleet seal v1"
_MAC_INFO: Final = b"mcpvisor fleet mac v1"
KEY_MARK_MS: Final = 30_000
"""How long a replica that recorded its key counts as starting when it is not listed (and did not say it is):
longer than it waits for its id's entry left by a replica that stopped (``FleetStore.claim``)."""


class FleetKey:
    """A key ring: :meth:`seal` with the first key, :meth:`open` with any."""

    def __init__(self, secrets: list[str]) -> None:
        try:
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF
        except ImportError:
            raise ConfigError(
                f"the fleet key ({KEY_ENV}) seals sign-ins with the cryptography package, which is not installed — "
                "run: pip install 'mcpvisor[fleet]'"
            ) from None

        if not secrets:
            raise ConfigError(f"the fleet key is empty: set {KEY_ENV} to a secret of at least {MIN_SECRET} characters")
        for secret in secrets:
            if len(secret) < MIN_SECRET:
                raise ConfigError(
                    f"a fleet key secret is {len(secret)} characters long: use at least {MIN_SECRET} "
                    "(e.g. the output of: openssl rand -base64 48)"
                )
        self._keys: list[tuple[bytes, bytes]] = []
        self._macs: list[bytes] = []
        for secret in secrets:
            derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret.encode())
            self._keys.append((hashlib.sha256(derived).digest()[:4], derived))
            self._macs.append(
                HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_MAC_INFO).derive(secret.encode())
            )

    def __repr__(self) -> str:
        return f"FleetKey({len(self._keys)} key(s))"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FleetKey | None:
        """The key named by the environment, or ``None`` when none is set. :class:`ConfigError` for a key
        that is too short or a key file others may read."""
        value = env.get(KEY_ENV, "").strip()
        if value:
            return cls([s.strip() for s in value.split(",") if s.strip()])
        name = env.get(KEY_FILE_ENV, "").strip()
        if not name:
            return None
        path = Path(name).expanduser()
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077:
                raise ConfigError(f"fleet key file {path} may be read by others (mode {mode:o}): chmod 600 {path}")
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read fleet key file {path}: {exc.strerror or exc}") from exc
        return cls([line.strip() for line in text.splitlines() if line.strip()])

    def mac(self, text: str) -> str:
        """A tag that only the fleet's key makes for ``text`` (HMAC-SHA256, 128 bits, URL-safe)."""
        digest = hmac.new(self._macs[0], text.encode(), hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def verify(self, text: str, tag: str) -> bool:
        """Whether ``tag`` is :meth:`mac` of ``text`` under any key of the ring (compared in constant time)."""
        for key in self._macs:
            digest = hmac.new(key, text.encode(), hashlib.sha256).digest()[:16]
            if hmac.compare_digest(base64.urlsafe_b64encode(digest).decode().rstrip("="), tag):
                return True
        return False

    def seal(self, plaintext: bytes, context: str) -> str:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key_id, key = self._keys[0]
        nonce = os.urandom(12)
        sealed = AESGCM(key).encrypt(nonce, plaintext, context.encode())
        return _PREFIX + base64.urlsafe_b64encode(key_id + nonce + sealed).decode()

    def open(self, token: str, context: str) -> bytes:
        """The plaintext; :class:`ValueError` when no key of the ring opens it (or it was moved or changed)."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if not token.startswith(_PREFIX):
            raise ValueError("not sealed by a fleet key")
        try:
            raw = base64.urlsafe_b64decode(token.removeprefix(_PREFIX))
        except (ValueError, TypeError) as exc:
            raise ValueError("not sealed by a fleet key") from exc
        key_id, nonce, sealed = raw[:4], raw[4:16], raw[16:]
        for kid, key in self._keys:
            if kid == key_id:
                try:
                    return AESGCM(key).decrypt(nonce, sealed, context.encode())
                except InvalidTag as exc:
                    raise ValueError("sealed record does not open: changed, or moved to another key") from exc
        raise ValueError("sealed with a fleet key that is not in MCPVISOR_FLEET_KEY any more")


def check_fleet_key(store: FleetStore, key: FleetKey, *, record: bool = True, holder: str = "") -> None:
    """Refuse a fleet key that shares no secret with the key the fleet's running replicas use: the store keeps a
    tag of the latest first secret seen (``keycheck``), which any secret of this ring must verify (a key being
    rotated shares one). A replica started with another key would serve rounds and sign-ins no other replica
    reads, and a sign-in made again there would replace the fleet's with one no other replica opens. With no
    replica running, the key is the fleet's new one (every replica was given it). ``record``: keep this key's tag
    (a replica; a management command only checks), and mark it as chosen by a replica still starting (``holder``,
    until :func:`release_key_mark` once it is listed, or :data:`KEY_MARK_MS`): a replica started at the same time
    with another key is then refused too. The check and the record are one transaction (``WATCH``): of two
    replicas recording different keys at once, the second sees the first's. Blocking."""
    import redis

    from mcpvisor.fleet.failures import fleet_unreachable

    try:
        with store.sync_client().pipeline(transaction=True) as pipe:
            while True:
                try:
                    if running := other_key_in_use(store, key, pipe):
                        raise ConfigError(
                            f"{KEY_ENV} differs from the fleet key the other replicas of fleet {store.keys.fleet!r} "
                            f"use (running: {running}): give every replica the same key (to rotate it, add the new "
                            "secret second on every replica first)"
                        )
                    if record:
                        pipe.multi()
                        pipe.set(store.keys.key_check, key.mac(_key_check_text(store)))
                        pipe.set(store.keys.key_starting, holder, px=KEY_MARK_MS)
                        pipe.execute()
                    return
                except redis.WatchError:
                    continue  # another replica recorded its key meanwhile: check against that one
    except (redis.RedisError, OSError) as exc:
        raise fleet_unreachable(store.url, exc, store.named_in, fleet=store.keys.fleet) from exc


def _key_check_text(store: FleetStore) -> str:
    return f"mcpvisor fleet key check {store.keys.fleet}"


def other_key_in_use(store: FleetStore, key: FleetKey, pipe: redis.client.Pipeline) -> str:
    """Who uses a fleet key that shares no secret with ``key`` (the replicas running, or ``one starting now``), or
    "" when ``key`` is the fleet's, or no replica runs or starts. ``pipe`` is a transaction being prepared: the
    fleet's ``keycheck`` is watched, so a key recorded before it runs makes it fail (:class:`redis.WatchError`) and
    the caller checks again. Blocking."""
    pipe.watch(store.keys.key_check)  # type: ignore[no-untyped-call]
    held = pipe.get(store.keys.key_check)
    if held is None or key.verify(_key_check_text(store), str(held)):
        return ""
    running = ", ".join(entry["id"] for entry in store.replicas())
    return running or ("one starting now" if pipe.exists(store.keys.key_starting) else "")


def release_key_mark(store: FleetStore, holder: str) -> None:
    """Drop ``holder``'s mark of a replica starting (:func:`check_fleet_key`): it is listed now, or not starting.
    Blocking."""
    import redis

    from mcpvisor.fleet.failures import fleet_unreachable
    from mcpvisor.fleet.store import RELEASE

    try:
        store.sync_client().eval(RELEASE, 1, store.keys.key_starting, holder)
    except (redis.RedisError, OSError) as exc:
        raise fleet_unreachable(store.url, exc, store.named_in, fleet=store.keys.fleet) from exc


def join_with_key(store: FleetStore, key: FleetKey | None, *, listed_as: str | None, nonce: str, ttl_ms: int) -> None:
    """A process joining the fleet: check its key (:func:`check_fleet_key`) and, for a replica to be listed under
    ``listed_as``, record the key, claim the id (:meth:`FleetStore.claim`, ``nonce``, ``ttl_ms``) and drop the mark
    of a replica starting. A process never listed (a shell, a stdio gateway) only checks: it would protect no key
    of its own, and taking the mark (then dropping it) would unmark a replica starting meanwhile, whose key another
    replica starting then could replace. Blocking."""
    if key is not None:
        check_fleet_key(store, key, record=listed_as is not None, holder=nonce)
    if listed_as is None:
        return
    try:
        store.claim(listed_as, nonce, ttl_ms)
    finally:  # listed now (or not starting): the key's mark of a replica starting has done its work
        if key is not None:
            release_key_mark(store, nonce)
