"""``--fleet``: where a command finds the fleet store, and how a running command joins it.

The fleet URL comes from ``--fleet`` or ``MCPVISOR_FLEET`` only (never from a workspace or a
repository, which could otherwise point a gateway at a store of its own choosing); ``--fleet-name``
or ``MCPVISOR_FLEET_NAME`` picks one fleet among several in one Redis. ``--fleet`` is the same as
setting ``MCPVISOR_FLEET`` for the command: every part of it then reads one environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

if TYPE_CHECKING:
    from mcpvisor.fleet.replica import Replica
    from mcpvisor.fleet.store import FleetStore
    from mcpvisor.host.approvals import ApprovalStore
    from mcpvisor.host.host import HostOptions
    from mcpvisor.host.oauth_store import TokenStore
    from mcpvisor.host.pins import PinStore
    from mcpvisor.host.settings.loader import Settings

__all__ = [
    "FleetNameOpt",
    "FleetOpt",
    "approval_store",
    "fleet_store",
    "follow_fleet_settings",
    "joined",
    "pin_store",
    "token_store",
    "with_fleet_stores",
]

FLEET_ENV: Final = "MCPVISOR_FLEET"
FLEET_NAME_ENV: Final = "MCPVISOR_FLEET_NAME"
FRESHNESS_ENV: Final = "MCPVISOR_FLEET_FRESHNESS_S"


def _set_env(name: str) -> Callable[[str | None], str | None]:
    def callback(value: str | None) -> str | None:
        if value:
            os.environ[name] = value
        return value

    return callback


FleetOpt = Annotated[
    str | None,
    typer.Option(
        "--fleet",
        metavar="URL",
        callback=_set_env(FLEET_ENV),
        help="Share approvals (and, for serve, settings and sessions) with the other replicas of a fleet kept "
        "in Redis: redis://HOST:PORT/DB, rediss://… (TLS) or unix:///PATH. Default: $MCPVISOR_FLEET.",
    ),
]
FleetNameOpt = Annotated[
    str | None,
    typer.Option(
        "--fleet-name",
        metavar="NAME",
        callback=_set_env(FLEET_NAME_ENV),
        help="Which fleet in that Redis (default: $MCPVISOR_FLEET_NAME, else 'default').",
    ),
]


def fleet_store(env: Mapping[str, str]) -> FleetStore | None:
    """The fleet store this command was pointed at, or ``None``: ``--fleet`` / ``MCPVISOR_FLEET``, else the
    ``fleet`` block of the enforced (system) settings, else the user's; never a workspace's."""
    from mcpvisor.fleet.store import FleetStore

    url = env.get(FLEET_ENV, "").strip()
    if url:
        return FleetStore(url, fleet=env.get(FLEET_NAME_ENV, "").strip() or "default")
    found = _fleet_in_settings(env)
    if found is None:
        return None
    url, name, path = found
    return FleetStore(url, fleet=env.get(FLEET_NAME_ENV, "").strip() or name, named_in=f"fleet.url in {path}")


def _fleet_in_settings(env: Mapping[str, str]) -> tuple[str, str, Path] | None:
    """``(url, name, file)`` from the ``fleet`` block of the system settings, else the user's."""
    from mcpvisor.core.errors import ConfigError
    from mcpvisor.fleet.settings import CLEAR_PASSWORD_PROBLEM, holds_clear_password
    from mcpvisor.host import paths
    from mcpvisor.host.settings.expand import expand_string
    from mcpvisor.host.settings.files import SettingsFileError, read_settings_file

    for path in (paths.system_settings_path(env), paths.user_settings_path(env)):
        try:
            data = read_settings_file(path)
        except SettingsFileError:
            if _mentions_fleet(path):
                raise  # its fleet cannot be read: the command must not decide outside it (the error names the file)
            continue  # a file that does not parse names no fleet; the command itself reports it
        block = data.get("fleet") if data is not None else None
        if block is None:
            continue
        url = block.get("url") if isinstance(block, dict) else None
        if not isinstance(url, str) or not url.strip():
            raise ConfigError(f"{path}: 'fleet' must be an object with a 'url', e.g. {FLEET_EXAMPLE}")
        name = block.get("name", "default")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{path}: 'fleet.name' must be a non-empty string")
        if path == paths.user_settings_path(env) and holds_clear_password(url):
            raise ConfigError(f"{path}: {CLEAR_PASSWORD_PROBLEM}")
        missing: set[str] = set()
        expanded = expand_string(url.strip(), env, missing)
        if missing:
            raise ConfigError(f"{path}: 'fleet.url' uses ${{{sorted(missing)[0]}}}, which is not set")
        return expanded, name.strip(), path
    return None


def _mentions_fleet(path: Path) -> bool:
    from mcpvisor.host.file_reads import read_regular
    from mcpvisor.host.settings.files import MAX_SETTINGS_BYTES

    try:
        text = read_regular(path, MAX_SETTINGS_BYTES)[1].decode("utf-8", errors="replace")
        return re.search(r"""(^|[{,\s"'])fleet["']?\s*:""", text) is not None
    except OSError:
        return False


FLEET_EXAMPLE: Final = '{"fleet": {"url": "redis://127.0.0.1:6379/0"}}'


def _freshness(env: Mapping[str, str]) -> float:
    from mcpvisor.core.errors import ConfigError
    from mcpvisor.fleet.approvals import DEFAULT_FRESHNESS_S

    raw = env.get(FRESHNESS_ENV, "").strip()
    if not raw:
        return DEFAULT_FRESHNESS_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.5 <= value <= 300:
        raise ConfigError(f"cannot use {FRESHNESS_ENV}={raw!r}: expected seconds between 0.5 and 300")
    return value


def approval_store(env: Mapping[str, str]) -> ApprovalStore:
    """The approvals a management command reads and decides in: the fleet's, or the user folder's file."""
    store = fleet_store(env)
    if store is not None:
        return _fleet_approvals(store, env)
    from mcpvisor.host import paths
    from mcpvisor.host.approvals import ApprovalStore

    return ApprovalStore(paths.approvals_path(env))


def token_store(env: Mapping[str, str]) -> TokenStore:
    """The OAuth sign-ins a command reads and stores: the fleet's (with a fleet key), or the user folder's file."""
    store = fleet_store(env)
    tokens = _fleet_tokens(store, env) if store is not None else None
    if tokens is not None:
        return tokens
    from mcpvisor.host import paths
    from mcpvisor.host.oauth_store import TokenStore

    return TokenStore(paths.oauth_tokens_path(env))


def pin_store(env: Mapping[str, str]) -> PinStore:
    """The tool pins a management command reads and accepts in: the fleet's, or the user folder's file."""
    store = fleet_store(env)
    if store is not None:
        from mcpvisor.fleet.pins import FleetPinStore

        return FleetPinStore(store)
    from mcpvisor.host import paths
    from mcpvisor.host.pins import PinStore

    return PinStore(paths.pins_path(env))


def follow_fleet_settings(settings: Settings) -> None:
    """``settings``, read from this machine's files, take the fleet's published settings when a fleet is named:
    the servers its replicas serve (the publisher's files, which need not be on this machine)."""
    store = fleet_store(settings.env)
    if store is None:
        return
    from mcpvisor.fleet.settings import Snapshot, apply_to_settings

    try:
        with store.answering() as client:
            fields = {str(k): str(v) for k, v in client.hgetall(store.keys.settings).items()}
    finally:
        store.close()
    snapshot = Snapshot.parse(fields)
    if snapshot is not None:
        apply_to_settings(settings, snapshot)


def with_fleet_stores(options: HostOptions) -> HostOptions:
    """``options`` with the fleet's approvals, pins and sign-ins when a fleet is named (a command that
    connects once, such as ``status``: it reads them, it does not follow them), over one store."""
    store = fleet_store(options.env)
    if store is None:
        return options
    import dataclasses

    from mcpvisor.fleet.pins import FleetPinStore

    approvals = _fleet_approvals(store, options.env)
    tokens = _fleet_tokens(store, options.env)
    return dataclasses.replace(options, approvals=approvals, pins=FleetPinStore(store), tokens=tokens)


def _fleet_approvals(store: FleetStore, env: Mapping[str, str]) -> ApprovalStore:
    from mcpvisor.fleet.approvals import FleetApprovalStore

    store.ping()
    return FleetApprovalStore(store, freshness_s=_freshness(env))


def _fleet_tokens(store: FleetStore, env: Mapping[str, str]) -> TokenStore | None:
    """The fleet's sign-ins, sealed with the fleet key; ``None`` without a key (each process keeps its own). A key
    that shares no secret with the running replicas' is refused: a sign-in stored with it opens on none of them."""
    from mcpvisor.fleet.sealing import FleetKey, check_fleet_key

    key = FleetKey.from_env(env)
    if key is None:
        return None
    check_fleet_key(store, key, record=False)
    from mcpvisor.fleet.tokens import FleetTokenStore

    return FleetTokenStore(store, key, checks_key=True)  # a replica may start with another key meanwhile


@asynccontextmanager
async def joined(
    options: HostOptions, *, replica_id: str | None = None, register: bool = False, follow_settings: bool = False
) -> AsyncIterator[tuple[HostOptions, Replica | None]]:
    """Join the fleet (when one is named) for the time of the body: the options come back with the
    fleet's approvals in them, with the running :class:`Replica` (``None`` without a fleet).
    ``register``: list this process among the replicas (a gateway serving HTTP); ``follow_settings``:
    the hosts take their settings from the fleet, not from their files (a gateway)."""
    store = fleet_store(options.env)
    if store is None:
        if replica_id is not None:
            from mcpvisor.core.errors import ConfigError

            raise ConfigError("--replica-id names this process in a fleet: it needs --fleet (or MCPVISOR_FLEET)")
        yield options, None
        return
    import dataclasses

    from mcpvisor.fleet.replica import Replica
    from mcpvisor.fleet.sealing import FleetKey

    key = FleetKey.from_env(options.env)
    replica = Replica(store, replica_id=replica_id, freshness_s=_freshness(options.env), register=register, key=key)
    joined_options = dataclasses.replace(options, approvals=replica.approvals, pins=replica.pins)
    if replica.tokens is not None:
        joined_options = dataclasses.replace(joined_options, tokens=replica.tokens)
    else:  # said on stderr, not logged: a command's default log level shows errors only
        from rich.markup import escape

        from mcpvisor.shell.consoles import new_console

        new_console(stderr=True, highlight=False).print(
            f"[yellow]! fleet {escape(store.keys.fleet)}: no fleet key (MCPVISOR_FLEET_KEY or "
            "MCPVISOR_FLEET_KEY_FILE): OAuth sign-ins stay with each replica; set one to share them[/]",
            soft_wrap=True,
        )
    if follow_settings:  # its settings are the fleet's, its decisions too: it watches only its own stores
        joined_options = dataclasses.replace(joined_options, watched_scopes=("tokens", "pins"), settings_source=replica)
    try:
        async with replica:
            yield joined_options, replica
    finally:
        store.close()
