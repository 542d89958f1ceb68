"""One replica of a fleet: follows the store's log, keeps its registry entry alive, and publishes
settings while it holds the publisher lease.

Enter a :class:`Replica` (``async with``) before the hosts it serves and give each host its
:attr:`~Replica.approvals` (``HostOptions.approvals``) and, for a gateway, the replica itself as its
settings source (``HostOptions.settings_source``: a host starts from the fleet's settings, then follows
every snapshot); :meth:`~Replica.publish_from` names the files this replica publishes while it holds
the lease. Three tasks run meanwhile:

- the **follower** reads the store whole, then the change log from where it stood (``XREAD BLOCK``):
  a changed approval record updates the mirror and reconciles the hosts; a new settings generation is
  applied to every host; an operator's ``ack-reset`` lifts the rewind guard. A connection that drops is
  re-made with back-off and followed by a whole read (the log may have been trimmed meanwhile);
- the **watchdog** holds every gated server once the mirror has not heard from the store for
  ``freshness_s``;
- the **heartbeat** refreshes ``replica:<id>`` (its address, settings generation applied, revision)
  every :data:`HEARTBEAT_S` with a :data:`REGISTRY_TTL_MS` expiry, and takes or renews the publisher
  lease; the holder publishes its hosts' settings files on start and after every change.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import httpx2

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.lifecycle import StackOwner, running
from mcpvisor.fleet.approvals import DEFAULT_FRESHNESS_S, FleetApprovalStore
from mcpvisor.fleet.bus import FleetBus
from mcpvisor.fleet.failures import redact, store_failure
from mcpvisor.fleet.pins import FleetPinStore
from mcpvisor.fleet.routing import FleetUnavailable, OwnerRouter, forwarding_client, round_name, round_owner
from mcpvisor.fleet.sealing import FleetKey, join_with_key
from mcpvisor.fleet.settings import (
    PUBLISHED_SCOPES,
    Snapshot,
    Succession,
    apply_snapshot,
    apply_to_settings,
    now,
    publish_refusal,
    read_snapshot_texts,
)
from mcpvisor.fleet.store import (
    LOG_MAXLEN,
    PUBLISH,
    RELEASE,
    TAKE_LEASE,
    FleetStore,
    new_replica_id,
    parse_record,
)
from mcpvisor.fleet.tokens import FleetTokenStore
from mcpvisor.host.settings.loader import Settings, load_settings
from mcpvisor.host.watcher import SettingsChanged, SettingsWatcher

if TYPE_CHECKING:
    import redis.asyncio

    from mcpvisor.host.host import Host

__all__ = ["HEARTBEAT_S", "LEASE_MS", "REGISTRY_TTL_MS", "Replica"]

logger = logging.getLogger(__name__)

HEARTBEAT_S: Final = 3.0
REGISTRY_TTL_MS: Final = 10_000
"""A replica that stopped refreshing its entry for this long is gone: its sessions answer 404."""
LEASE_MS: Final = 10_000
"""The publisher lease: another replica takes it over this long after its holder stopped renewing."""
BLOCK_MS: Final = 5_000
RETRY_S: Final = (0.1, 0.25, 0.5, 1.0)
"""Pauses before reconnecting to the store, one per failure in a row (the last repeats): a replica follows
Redis again within about a second of its return."""
WATCHDOG_S: Final = 0.25
"""How often the mirror's freshness is checked: gated servers are held at most this long after it expires."""


class Replica(StackOwner):
    """This process as one replica of the fleet in ``store``. Runs once."""

    def __init__(
        self,
        store: FleetStore,
        *,
        replica_id: str | None = None,
        freshness_s: float = DEFAULT_FRESHNESS_S,
        register: bool = True,
        key: FleetKey | None = None,
    ) -> None:
        """``register``: list this process in the fleet's registry (a gateway replica; a shell that only
        shares decisions does not). ``key``: the fleet key; with it the OAuth tokens are the fleet's too
        (:attr:`tokens`), without it each replica keeps its own."""
        if replica_id is not None and (not replica_id or "." in replica_id or len(replica_id) > 64):
            raise ConfigError(f"cannot use replica id {replica_id!r}: use 1-64 characters without a dot")
        self.store = store
        self.id = replica_id or new_replica_id()
        self.approvals = FleetApprovalStore(store, freshness_s=freshness_s)
        self.pins = FleetPinStore(store, fresh=lambda: self.approvals.usable)
        self.tokens = FleetTokenStore(store, key) if key is not None else None
        self._key = key
        self.address = ""
        self._nonce = secrets.token_hex(8)
        self._register = register
        self.started = time.time()
        self._hosts: list[Host] = []
        self._source: Settings | None = None
        """The settings files this replica publishes while it holds the lease (its default workspace's)."""
        self._source_watcher: SettingsWatcher | None = None
        self._snapshot: Snapshot | None = None
        self._succession = Succession(REGISTRY_TTL_MS / 1000)
        self.applied_gen = 0
        self.publisher = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._buses: dict[Path, FleetBus] = {}
        self._apply_lock: anyio.Lock | None = None
        self._wake: anyio.Event | None = None
        self._http: httpx2.AsyncClient | None = None
        self._registry: redis.asyncio.Redis | None = None

    @property
    def ready(self) -> bool:
        """Whether this replica applied the fleet's settings at least once (``/readyz``)."""
        return self.applied_gen > 0

    def readiness(self) -> dict[str, Any]:
        """What ``/readyz`` says besides its status code."""
        return {
            "ready": self.ready,
            "replica": self.id,
            "settingsGeneration": self.applied_gen,
            "publisher": self.publisher,
            "approvals": self.approvals.error or "ok",
        }

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> Replica:
        self._enter_once()
        self._apply_lock = anyio.Lock()
        self._wake = anyio.Event()
        await anyio.to_thread.run_sync(self.store.ping)
        listed_as = self.id if self._register else None
        await anyio.to_thread.run_sync(
            lambda: join_with_key(self.store, self._key, listed_as=listed_as, nonce=self._nonce, ttl_ms=REGISTRY_TTL_MS)
        )
        async with AsyncExitStack() as stack:
            self._http = await stack.enter_async_context(forwarding_client())
            self._registry = self.store.async_client()
            stack.push_async_callback(self._registry.aclose)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.push_async_callback(self._leave)
            stack.callback(self._tg.cancel_scope.cancel)
            await self._tg.start(self._follow)
            self.approvals.follow()
            self._tg.start_soon(self._watchdog)
            self._tg.start_soon(self._heartbeat)
            self._stack = stack.pop_all()
        logger.info("fleet %s: replica %s joined %s", self.store.keys.fleet, self.id, redact(self.store.url))
        return self

    def router(self, app: Any) -> OwnerRouter:
        """``app`` (a gateway's ASGI app) behind this replica's router: ``/readyz``, sessions named by
        their owner and forwarded to it (:mod:`mcpvisor.fleet.routing`)."""
        if self._http is None:
            raise RuntimeError("the replica is not running")
        return OwnerRouter(app, self, self._http)

    def round_state(self, token: str) -> str:
        """The ``requestState`` of an input round on this replica (see :func:`~mcpvisor.fleet.routing.round_name`)."""
        return round_name(self.id, token, self._key)

    def round_owner(self, state: str) -> str | None:
        """The replica a ``requestState`` names (see :func:`~mcpvisor.fleet.routing.round_owner`)."""
        return round_owner(state, self._key)

    def serve_at(self, address: str) -> None:
        """This replica's gateway listens at ``address`` (its URL): other replicas forward its sessions there."""
        self.address = address
        if self._wake is not None:
            self._wake.set()

    async def _leave(self) -> None:
        """Leave the registry and give up the lease at once (others need not wait for expiry)."""
        if self._source_watcher is not None:
            self._source_watcher.stop()
        with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
            client = self.store.async_client()
            try:
                await client.delete(self.store.keys.replica(self.id))
                if self.publisher:
                    await client.eval(RELEASE, 1, self.store.keys.lease, self.id)
            except Exception as exc:  # the store may be the reason we stop
                logger.debug("fleet: could not leave the registry: %s", exc)
            finally:
                await client.aclose()

    # -- the hosts' settings source ----------------------------------------------------------------

    def prime(self, settings: Settings) -> None:
        """A host's settings, just read from its files, become the fleet's before anything starts."""
        if self._snapshot is not None:
            apply_to_settings(settings, self._snapshot)

    def follow(self, host: Host) -> Callable[[], None]:
        """``host`` runs: every later snapshot applies to it (one it missed since :meth:`prime`, at once)."""
        tg = running(self._tg, "replica")
        self._hosts.append(host)
        if self._snapshot is not None:
            tg.start_soon(self._apply_to, [host])

        def stop() -> None:
            if host in self._hosts:
                self._hosts.remove(host)

        return stop

    async def publish_from(self, env: Mapping[str, str], root: Path) -> None:
        """Publish the settings files of ``root`` (with ``env``'s user folder) while this replica holds the
        lease: a watcher of their own follows them (the hosts follow the fleet, not their files)."""
        tg = running(self._tg, "replica")
        self._source = await anyio.to_thread.run_sync(load_settings, env, root)
        watcher = SettingsWatcher(self._source, scopes=PUBLISHED_SCOPES)
        watcher.add_change_listener(self._on_source_change)
        self._source_watcher = watcher
        await tg.start(watcher.run)
        if self._wake is not None:
            self._wake.set()  # take the lease now if it is free

    # -- following the log ----------------------------------------------------------------------

    async def _follow(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        import redis

        keys = self.store.keys
        failures = 0
        started = False
        while True:
            client = self.store.async_client()
            try:
                last_id = await self._read_whole(client)
                failures = 0
                if not started:
                    started = True
                    task_status.started()
                block_ms = int(min(BLOCK_MS, self.approvals.freshness_s * 1000 / 3))
                while True:
                    batch = await client.xread({keys.log: last_id}, block=block_ms, count=500)
                    rewound = self.approvals.note_revision(int(await client.get(keys.rev) or 0))
                    # A rewind holds what was approved; the log is continuous: a stale spell ends with its reading.
                    if self.approvals.recovered() or rewound:
                        self.approvals.changed()
                    last_id = await self._take(client, batch, last_id)
            except Exception as exc:  # the store's errors, and any entry this version cannot read
                self.approvals.note_failure(exc, first=failures == 0)
                if not isinstance(exc, redis.RedisError | OSError):
                    logger.exception("fleet: following the change log failed; reading the store whole again")
                if not started:  # the hosts start anyway: every gated server stays held meanwhile
                    started = True
                    task_status.started()
                await anyio.sleep(RETRY_S[min(failures, len(RETRY_S) - 1)])
                failures += 1
            finally:
                with anyio.CancelScope(shield=True):
                    await client.aclose()

    async def _read_whole(self, client: redis.asyncio.Redis) -> str:
        """Read every record and the settings snapshot; the log id to follow from (taken first: entries
        written meanwhile are read again, and a record older than the one held is never kept)."""
        keys = self.store.keys
        newest = await client.xrevrange(keys.log, count=1)
        last_id = newest[0][0] if newest else "0-0"
        roots = sorted(str(key) for key in await client.smembers(keys.roots))
        async with client.pipeline(transaction=True) as pipe:
            pipe.get(keys.rev)
            pipe.get(keys.epoch)
            for key in roots:
                pipe.hgetall(keys.approvals(key))
            rev, epoch, *hashes = await pipe.execute()
        records = {
            key: {str(name): rec for name, raw in fields.items() if (rec := parse_record(raw)) is not None}
            for key, fields in zip(roots, hashes, strict=True)
        }
        self.approvals.replace_all(int(rev or 0), records, int(epoch or 0))
        await self.approvals.check_witnesses(client, keys.replica_prefix, self.id)
        self.pins.mirror(await client.hgetall(keys.pins))
        self.approvals.recovered()
        self.approvals.changed()
        self.pins.changed()
        if self.tokens is not None:  # a sign-in made while this replica did not follow the log
            self.tokens.changed()
        await self._settings_from(client)
        return str(last_id)

    async def _take(self, client: redis.asyncio.Redis, batch: Any, last_id: str) -> str:
        keys = self.store.keys
        kinds: set[str] = set()
        for _stream, entries in batch or ():
            for entry_id, fields in entries:
                last_id = entry_id
                kind = str(fields.get("kind"))
                kinds.add(kind)
                if kind == "appr":
                    key, name = fields.get("key"), fields.get("name")
                    if not isinstance(key, str) or not isinstance(name, str):
                        logger.warning("fleet: skipping a change log entry without key and name: %r", fields)
                        continue
                    self.approvals.apply(key, name, parse_record(await client.hget(keys.approvals(key), name)))
        if "ack" in kinds:  # an operator trusts the store again: read it whole (with its epoch)
            return await self._read_whole(client)
        if "appr" in kinds:
            self.approvals.changed()
            if self._wake is not None:
                self._wake.set()  # the registry shows the revision applied now
        if "pins" in kinds:
            self.pins.mirror(await client.hgetall(keys.pins))
            self.pins.changed()
        if "tok" in kinds and self.tokens is not None:
            self.tokens.changed()
        if "settings" in kinds:
            await self._settings_from(client)
        return last_id

    async def _settings_from(self, client: redis.asyncio.Redis) -> None:
        fields = await client.hgetall(self.store.keys.settings)
        snapshot = Snapshot.parse({str(k): str(v) for k, v in fields.items()})
        if snapshot is None:
            return
        if self._snapshot is None or snapshot.sha != self._snapshot.sha:  # a newer text, not only a higher generation
            self._snapshot = snapshot
            await self._apply_to(list(self._hosts))
        elif snapshot.gen == self.applied_gen:
            return  # (the same text under another generation: published again after the store lost its data)
        self.applied_gen = snapshot.gen
        if self._wake is not None:
            self._wake.set()  # the registry says so now, not at the next heartbeat

    async def _apply_to(self, hosts: list[Host]) -> None:
        """Apply the newest snapshot (read under the lock: never an older one after a newer)."""
        async with running(self._apply_lock, "replica"):
            snapshot = self._snapshot
            if snapshot is None:
                return
            for host in hosts:
                try:
                    await apply_snapshot(host, snapshot)
                except Exception:
                    logger.exception("fleet settings generation %d could not be applied", snapshot.gen)

    async def _watchdog(self) -> None:
        while True:
            await anyio.sleep(min(WATCHDOG_S, self.approvals.freshness_s / 4))
            if self.approvals.check_fresh():
                self.approvals.changed()

    # -- registry and lease ---------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        import redis

        keys = self.store.keys
        client = self.store.async_client()
        try:
            while True:
                try:
                    await self._beat(client)
                except (redis.RedisError, OSError) as exc:
                    logger.debug("fleet heartbeat failed: %s", exc)
                    self._succession.away()
                    if self.publisher:
                        self.publisher = False
                        logger.warning("fleet %s: replica %s stops publishing settings", keys.fleet, self.id)
                with anyio.move_on_after(HEARTBEAT_S):
                    await running(self._wake, "replica").wait()
                self._wake = anyio.Event()
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def _beat(self, client: redis.asyncio.Redis) -> None:
        keys = self.store.keys
        if self._register:
            await self._list_self(client)
        if self._source is None:
            return
        prior = self._snapshot  # what the fleet followed: its publisher goes first, should the store have lost it
        if not self.publisher and await self._succession.defers(client, keys, prior, self.id):
            return
        taken = int(await client.eval(TAKE_LEASE, 1, keys.lease, self.id, LEASE_MS))
        if not taken:
            if self.publisher:
                self.publisher = False
                logger.warning("fleet %s: replica %s lost the publisher lease", keys.fleet, self.id)
            return
        if not self.publisher:
            self.publisher = True
            logger.info("fleet %s: replica %s publishes the settings", keys.fleet, self.id)
            if taken == 2:
                await self._succession.took_over(client, keys, self._source, prior, self.id)
        await self._publish()  # the same texts publish nothing; a publish that failed is made again

    async def _list_self(self, client: redis.asyncio.Redis) -> None:
        keys = self.store.keys
        fields = self.approvals.registry_fields()  # and a publisher that cannot publish says why: fleet status shows it
        if self.publisher and not fields["error"] and (refused := publish_refusal(self._source)):
            fields["error"] = f"publishes no settings while {refused}"
        async with client.pipeline(transaction=True) as pipe:
            pipe.hset(
                keys.replica(self.id),
                mapping={
                    "addr": self.address,
                    "started": repr(self.started),
                    "gen": self.applied_gen,
                    **fields,
                    "seen": now(),
                    "publisher": int(self.publisher),
                    "nonce": self._nonce,
                },
            )
            pipe.pexpire(keys.replica(self.id), REGISTRY_TTL_MS)
            await pipe.execute()

    async def _on_source_change(self, event: SettingsChanged) -> None:
        if self.publisher:
            await self._publish()

    async def _publish(self) -> None:
        import redis

        source = self._source
        if source is None:
            return
        texts = await anyio.to_thread.run_sync(read_snapshot_texts, source)
        if texts is None:
            return
        snapshot = Snapshot(0, str(source.root), texts, self.id)
        keys = self.store.keys
        client = self.store.async_client()
        try:
            gen = await client.eval(
                PUBLISH, 3, keys.settings, keys.log, keys.lease, snapshot.sha, snapshot.files, "", now(), self.id,
                LOG_MAXLEN,
            )  # fmt: skip
        except (redis.RedisError, OSError) as exc:
            logger.warning("could not publish the settings: %s", store_failure(self.store.url, exc, keys.fleet))
            return
        finally:
            await client.aclose()
        if int(gen) < 0:
            self.publisher = False
        elif int(gen) > self.applied_gen:  # the same texts publish nothing (every heartbeat tries)
            logger.info("fleet %s: settings generation %d published", keys.fleet, int(gen))

    @asynccontextmanager
    async def workspace_bus(self, root: Path) -> AsyncIterator[FleetBus]:
        """The listen bus of a workspace opened for a client, for as long as it is open (its Redis
        connections and tasks end with it)."""
        bus = FleetBus(self.store, self.id, root)
        async with anyio.create_task_group() as tg:
            await tg.start(bus.run)
            try:
                yield bus
            finally:
                tg.cancel_scope.cancel()

    def bus_for(self, root: Path) -> FleetBus:
        """The listen bus of one workspace (made and started on first use): its gateway publishes on it, and
        every other replica's changes to that workspace reach its listen streams through it."""
        bus = self._buses.get(root)
        if bus is None:
            bus = self._buses[root] = FleetBus(self.store, self.id, root)
            running(self._tg, "replica").start_soon(bus.run)
        return bus

    async def address_of(self, replica_id: str) -> str | None:
        """The listen address of a live replica, or ``None`` when it is not in the registry;
        :class:`FleetUnavailable` when the registry cannot be read."""
        import redis

        try:
            addr = await running(self._registry, "replica").hget(self.store.keys.replica(replica_id), "addr")
        except (redis.RedisError, OSError) as exc:
            raise FleetUnavailable(str(exc)) from exc
        return str(addr) if addr else None
