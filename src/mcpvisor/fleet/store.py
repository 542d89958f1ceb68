"""The fleet store: records, their change log and the settings snapshot in one Redis (SPEC-level
design: replicas share decisions and settings through Redis).

Every key lives under ``mcpv:{<fleet>}:`` (the braces are a Redis Cluster hash tag: the scripts below
touch several keys, which must sit in one slot):

==================  ===========================================================================
``rev``             the records' revision counter: every record change increments it
``epoch``           counts operators' acknowledgements of a store that lost writes (``fleet ack-reset``)
``log``             a capped stream, one entry per change (``kind`` ``appr``, ``pins``, ``tok``, ``settings``, ``ack``)
``roots``           the set of approval keys in use (``<root>`` or ``lsp:<root>``)
``appr:<key>``      hash: server name -> JSON ``{hash, status, rev, by, at}``
``pins``            hash: scope -> JSON of that scope's pinned servers (:mod:`mcpvisor.fleet.pins`)
``tokens``          hash: token key -> the record sealed with the fleet key (:mod:`mcpvisor.fleet.tokens`)
``lock:tok:<key>``  the replica refreshing that token (expires); ``fresh:tok:<key>``: it was just refreshed
``settings``        hash: ``gen``, ``sha``, ``files`` (JSON of the raw settings texts), ``by``, ``at``
``keycheck``        a tag of the fleet key (:func:`~mcpvisor.fleet.sealing.check_fleet_key`)
``keycheck:starting``  the replica that recorded that tag and is not listed yet (expires)
``lease:publisher`` the replica id of the one replica that publishes settings (expires)
``replica:<id>``    hash: ``addr``, ``started``, ``gen``, ``seen`` of a live replica (expires)
``bus:<workspace>``  pub/sub channel: one workspace's list-changed notices, for every replica's listen streams
==================  ===========================================================================

Each change is one Lua script that checks, writes, bumps ``rev`` and appends to ``log`` at once, so
a record never changes without its log entry (a reader that follows the log misses nothing).
:class:`FleetStore` holds the URL and builds clients; it does no I/O until asked.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from mcpvisor.core.errors import ConfigError
from mcpvisor.fleet.failures import NAMED_BY_OPTION, fleet_unreachable, redact

if TYPE_CHECKING:
    import redis
    import redis.asyncio

__all__ = [
    "FLEET_ENV",
    "LOG_MAXLEN",
    "FleetRecord",
    "FleetStore",
    "Keys",
    "new_replica_id",
    "parse_record",
]

logger = logging.getLogger(__name__)

FLEET_ENV: Final = "MCPVISOR_FLEET"
"""The environment variable naming the fleet store when ``--fleet`` is not given."""
LOG_MAXLEN: Final = 100_000
"""Entries the change log keeps (approximately): a replica further behind reads the records whole."""
SOCKET_TIMEOUT_S: Final = 8.0
"""A command that has not answered after this long counts as the store being unreachable (the log
reader blocks at most :data:`~mcpvisor.fleet.mirror.BLOCK_MS` less than this)."""
CONNECT_TIMEOUT_S: Final = 2.0
SYNC_TIMEOUT_S: Final = 2.0
"""The blocking client's bound (decisions, pins, sign-ins): a host may call it on its event loop, so a store
that stopped answering costs at most this long before the caller fails closed."""

DECIDE: Final = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[4] ~= '' then
  local seen = 0
  if current then seen = cjson.decode(current)['rev'] or 0 end
  if tostring(seen) ~= ARGV[4] then return {0, seen} end
end
local rev = redis.call('INCR', KEYS[2])
local record = cjson.encode({hash=ARGV[2], status=ARGV[3], rev=rev, by=ARGV[5], at=tonumber(ARGV[6])})
redis.call('HSET', KEYS[1], ARGV[1], record)
redis.call('SADD', KEYS[4], ARGV[7])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], '*', 'kind', 'appr', 'key', ARGV[7], 'name', ARGV[1], 'rev', rev)
return {1, rev}
"""
"""KEYS: appr:<key>, rev, log, roots. ARGV: name, hash, status, expected rev ('' = any), by, at, key,
maxlen. Returns ``{1, rev}`` once written, ``{0, rev seen}`` when the record changed since it was shown."""

PUBLISH: Final = """
if redis.call('GET', KEYS[3]) ~= ARGV[5] then return -1 end
if redis.call('HGET', KEYS[1], 'sha') == ARGV[1] then return tonumber(redis.call('HGET', KEYS[1], 'gen')) end
local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
redis.call('HSET', KEYS[1], 'sha', ARGV[1], 'files', ARGV[2], 'by', ARGV[5], 'at', ARGV[4])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'kind', 'settings', 'gen', gen)
return gen
"""
"""KEYS: settings, log, lease. ARGV: sha, files, (unused), at, replica id, maxlen. Only the lease holder
publishes (-1 otherwise); the same texts publish nothing and return the current generation."""

ACK: Final = """
local rev = tonumber(redis.call('GET', KEYS[1]) or '0')
local t = redis.call('TIME')
local epoch = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
local prev = redis.call('GET', KEYS[3])
if prev and tonumber(prev) >= tonumber(epoch) then epoch = string.format('%.0f', tonumber(prev) + 1) end
redis.call('SET', KEYS[3], epoch)
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', 'kind', 'ack', 'rev', rev, 'epoch', epoch)
return rev
"""
"""KEYS: rev, log, epoch. The operator's acknowledgement that the store's revision may be lower than before:
kept in ``epoch`` (a replica that missed the log entry sees it on its next whole read). The epoch is the
store's clock in ms (one more than the last when that is not behind): a store that lost its data lost its
epoch too, and a count would start again below what the replicas have seen."""


TAKE_LEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 2 end
return 0
"""
"""KEYS: the lease. ARGV: holder, ms. Renews the holder's lease (1), takes a free one (2), or 0."""

CLAIM_POLL_S: Final = 0.25
"""How often a replica id still listed is tried again, while its entry may be expiring."""
CLAIM: Final = """
local held = redis.call('HGET', KEYS[1], 'nonce')
if held and held ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'nonce', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
"""KEYS: the replica's registry entry. ARGV: this process's nonce, ms. 0: another live process has the id."""

RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
"""KEYS: a lock or lease. ARGV: holder. Deletes it only for its holder."""


@dataclass(frozen=True, slots=True)
class Keys:
    """The key names of one fleet."""

    fleet: str

    def _k(self, rest: str) -> str:
        return f"mcpv:{{{self.fleet}}}:{rest}"

    @property
    def rev(self) -> str:
        return self._k("rev")

    @property
    def epoch(self) -> str:
        return self._k("epoch")

    @property
    def log(self) -> str:
        return self._k("log")

    @property
    def roots(self) -> str:
        return self._k("roots")

    @property
    def settings(self) -> str:
        return self._k("settings")

    @property
    def pins(self) -> str:
        return self._k("pins")

    @property
    def tokens(self) -> str:
        return self._k("tokens")

    def token_lock(self, digest: str) -> str:
        return self._k(f"lock:tok:{digest}")

    def token_fresh(self, digest: str) -> str:
        return self._k(f"fresh:tok:{digest}")

    @property
    def key_check(self) -> str:
        return self._k("keycheck")

    @property
    def key_starting(self) -> str:
        return self._k("keycheck:starting")

    @property
    def lease(self) -> str:
        return self._k("lease:publisher")

    def approvals(self, key: str) -> str:
        return self._k(f"appr:{key}")

    def bus(self, workspace: str) -> str:
        """The pub/sub channel of one workspace's listen notices."""
        return self._k(f"bus:{workspace}")

    def replica(self, replica_id: str) -> str:
        return self._k(f"replica:{replica_id}")

    @property
    def replica_prefix(self) -> str:
        return self._k("replica:")


@dataclass(frozen=True, slots=True)
class FleetRecord:
    """One decision as the fleet store holds it."""

    hash: str
    status: str
    rev: int
    by: str = ""
    at: float = 0.0


def parse_record(raw: str | bytes | None) -> FleetRecord | None:
    """A record from its JSON; ``None`` for a missing or unreadable one (which reads as pending)."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return FleetRecord(
            hash=str(data["hash"]),
            status=str(data["status"]),
            rev=int(data["rev"]),
            by=str(data.get("by", "")),
            at=float(data.get("at", 0.0)),
        )
    except (ValueError, KeyError, TypeError):
        return None


def new_replica_id() -> str:
    """A replica id unique per process start (never inherited across a fork): host, pid and 6 random
    characters. Dots are left out: a handshake session id names its owner as ``<replica>.<id>``."""
    host = socket.gethostname().split(".", 1)[0] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


_FLEET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_FLEET_KEY = re.compile(r"mcpv:\{(" + _FLEET_NAME.pattern + r")\}:")


class FleetStore:
    """One fleet in one Redis: its URL, its name and its clients (made on first use)."""

    def __init__(self, url: str, *, fleet: str = "default", named_in: str = NAMED_BY_OPTION) -> None:
        try:
            import redis  # noqa: F401  (the fleet's extra: say so here, not as a traceback at first use)
        except ImportError:
            raise ConfigError(
                f"cannot use fleet store {redact(url)!r}: the Redis client is not installed — run: pip install "
                "'mcpvisor[fleet]' (or leave out --fleet, MCPVISOR_FLEET and fleet.url in the settings)"
            ) from None
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(
                f"cannot use fleet store {redact(url)!r}: expected a redis://, rediss:// or unix:// URL "
                "(e.g. redis://127.0.0.1:6379/0 or unix:///run/redis/redis.sock)"
            )
        try:
            parts = urlsplit(url)
            _ = parts.port
            readable = not parts.fragment
        except ValueError:  # a port that is no number: a ':' or '#' of a password read as one
            readable = False
        if not readable:
            raise ConfigError(
                f"cannot use fleet store {redact(url)!r}: it does not read as a URL; a password with any of "
                "# / ? @ : % in it must be percent-encoded (# as %23, / as %2F, ? as %3F, @ as %40, : as %3A)"
            )
        database = parts.path.strip("/") if parts.scheme != "unix" else ""
        if database and not database.isdigit():  # redis-py would use database 0 without a word
            raise ConfigError(
                f"cannot use fleet store {redact(url)!r}: its path names the database by number, e.g. "
                "redis://HOST:6379/0 (for a unix socket: unix:///PATH?db=0)"
            )
        if not _FLEET_NAME.fullmatch(fleet):
            raise ConfigError(
                f"invalid fleet name {fleet!r}: use letters, digits, '-', '_' and '.' (it names the fleet's keys)"
            )
        self.url, self.named_in = url, named_in
        self.keys = Keys(fleet)
        self._sync: redis.Redis | None = None

    def __repr__(self) -> str:
        return f"FleetStore({redact(self.url)!r}, fleet={self.keys.fleet!r})"

    def sync_client(self) -> redis.Redis:
        """A blocking client, for management commands and for decisions made off the event loop."""
        if self._sync is None:
            try:
                import redis
            except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
                raise ConfigError("--fleet needs the redis client: pip install 'mcpvisor[fleet]'") from exc
            self._sync = redis.Redis.from_url(
                self.url,
                socket_timeout=SYNC_TIMEOUT_S,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                decode_responses=True,
            )
        return self._sync

    def async_client(self, *, decode: bool = True) -> redis.asyncio.Redis:
        """A new asyncio client (each long-running task owns its own); ``decode=False`` gives bytes."""
        try:
            import redis.asyncio
        except ImportError as exc:  # pragma: no cover
            raise ConfigError("--fleet needs the redis client: pip install 'mcpvisor[fleet]'") from exc
        return redis.asyncio.Redis.from_url(
            self.url,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            decode_responses=decode,
        )

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    # -- blocking operations (CLI, decisions) ---------------------------------------------------

    @contextmanager
    def answering(self) -> Iterator[redis.Redis]:
        """The blocking client; a store that does not answer raises :class:`ConfigError` naming it, with the fix."""
        import redis

        try:
            yield self.sync_client()
        except (redis.RedisError, OSError) as exc:
            raise fleet_unreachable(self.url, exc, self.named_in, fleet=self.keys.fleet) from exc

    def ping(self) -> None:
        """Raise :class:`ConfigError` naming the store when it does not answer."""
        with self.answering() as client:
            client.ping()

    def claim(self, replica_id: str, nonce: str, ttl_ms: int) -> None:
        """Take ``replica_id`` for this process (``nonce``), refused when another live replica has it: two
        processes must never both own ``<id>.*`` sessions. An entry left by a process that stopped without a word
        (killed, and restarted at once by its supervisor) is waited out, up to its expiry; one that is renewed
        meanwhile is a live replica's (blocking: run it in a thread)."""
        import redis

        client, key = self.sync_client(), self.keys.replica(replica_id)
        deadline, left_before = time.monotonic() + ttl_ms / 1000 + 1, None
        while True:
            try:
                if client.eval(CLAIM, 1, key, nonce, ttl_ms):
                    return
                left = int(client.pttl(key))
            except (redis.RedisError, OSError) as exc:
                raise fleet_unreachable(self.url, exc, self.named_in, fleet=self.keys.fleet) from exc
            if (left_before is not None and left > left_before) or time.monotonic() > deadline:
                raise ConfigError(
                    f"replica id {replica_id!r} is in use by another running replica of fleet {self.keys.fleet!r}: "
                    "pick another --replica-id"
                )
            if left_before is None:
                logger.warning(
                    "replica id %r is still listed in fleet %r: waiting up to %.0f s for the entry of a replica that "
                    "stopped to expire", replica_id, self.keys.fleet, max(left, 0) / 1000,
                )  # fmt: skip
            left_before = left
            time.sleep(CLAIM_POLL_S)

    def decide(self, key: str, name: str, digest: str, status: str, *, expected_rev: int | None, by: str) -> int | None:
        """Write one decision; the new revision, or ``None`` when the record changed since ``expected_rev``."""
        client = self.sync_client()
        written, rev = client.eval(
            DECIDE,
            4,
            self.keys.approvals(key),
            self.keys.rev,
            self.keys.log,
            self.keys.roots,
            name,
            digest,
            status,
            "" if expected_rev is None else str(expected_rev),
            by,
            repr(time.time()),
            key,
            LOG_MAXLEN,
        )
        return int(rev) if int(written) == 1 else None

    def ack_reset(self) -> int:
        """Tell every replica that the store's current revision is to be trusted; returns it."""
        with self.answering() as client:
            return int(client.eval(ACK, 3, self.keys.rev, self.keys.log, self.keys.epoch, LOG_MAXLEN))

    def replicas(self) -> list[dict[str, Any]]:
        """The live replicas' registry entries (each with its ``id``), and the settings generation."""
        out: list[dict[str, Any]] = []
        with self.answering() as client:
            for key in sorted(client.scan_iter(match=self.keys.replica_prefix + "*", count=200)):
                fields = {str(k): str(v) for k, v in client.hgetall(key).items()}
                if fields:
                    out.append({"id": str(key).removeprefix(self.keys.replica_prefix), **fields})
        return out

    def settings_generation(self) -> int:
        with self.answering() as client:
            return int(client.hget(self.keys.settings, "gen") or 0)

    def publisher(self) -> str | None:
        with self.answering() as client:
            value = client.get(self.keys.lease)
        return str(value) if value is not None else None

    def revision(self) -> int:
        with self.answering() as client:
            return int(client.get(self.keys.rev) or 0)

    def fleet_names(self) -> list[str]:
        """The names of the fleets this Redis holds keys of (one ``SCAN`` of ``mcpv:{*``: for a command that
        did not find its fleet, not for a path taken often)."""
        with self.answering() as client:
            keys = list(client.scan_iter(match="mcpv:{*}:*", count=1000))
        return sorted({match.group(1) for key in keys if (match := _FLEET_KEY.match(str(key))) is not None})
