"""The reconcile planner (SPEC §5.3 steps 3-4): pure, table-tested.

Given what runs now and what is desired, decide per server: stop, start, restart, re-filter in
place, keep, or skip because gating forbids it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from mcpvisor.core.events import ReconcileFinished
from mcpvisor.core.exposure import Exposure, exposure_of
from mcpvisor.core.gating import McpGating
from mcpvisor.core.server_config import McpServerConfig, connection_id_of

__all__ = ["DesiredServers", "LiveServer", "ReconcilePlan", "admitted", "plan_for", "plan_reconcile"]


class DesiredServers(Protocol):
    """What a reconcile reads about the desired state: the narrow view of ``Config`` the manager
    needs (so the manager never depends on ``Config`` itself)."""

    def get_merged_mcp_servers(self) -> dict[str, McpServerConfig]: ...

    def get_mcp_servers(self) -> dict[str, McpServerConfig]: ...

    def refined_reason(self, name: str, reason: str) -> str: ...

    def get_mcp_gating(self) -> McpGating: ...

    def is_trusted_folder(self) -> bool: ...

    def get_mcp_server_unavailable_reason(self, name: str) -> str | None: ...


def admitted(config: DesiredServers, name: str) -> bool:
    """Whether ``name`` may start now: desired, in a trusted folder, and not held back (pending, rejected...)."""
    if not config.is_trusted_folder() or name not in config.get_mcp_servers():
        return False
    return config.get_mcp_server_unavailable_reason(name) is None


@dataclass(frozen=True, slots=True)
class LiveServer:
    """What the manager holds for one server."""

    connection_id: str
    exposure: Exposure
    connected: bool


@dataclass(frozen=True, slots=True)
class ReconcilePlan:
    remove: tuple[str, ...] = ()
    """Live servers no longer configured."""
    unconfigured: tuple[str, ...] = ()
    """Servers no longer configured that were not live (gated, or failed to start): nothing to stop, only to report."""
    gate_stop: Mapping[str, str] = field(default_factory=dict)
    """Live servers that gating now forbids, with the reason."""
    gate_skip: Mapping[str, str] = field(default_factory=dict)
    """Configured servers gating forbids that are not live (nothing to do but report)."""
    start: tuple[str, ...] = ()
    """Desired servers with no live connection (or a dead one)."""
    restart: tuple[str, ...] = ()
    """Live servers whose connection id changed."""
    refilter: tuple[str, ...] = ()
    """Live servers whose exposure settings changed only."""
    keep: tuple[str, ...] = ()

    @property
    def is_noop(self) -> bool:
        return not (self.remove or self.gate_stop or self.start or self.restart or self.refilter)

    def finished(
        self,
        retried: tuple[str, ...],
        changed: tuple[str, ...],
        failed: Mapping[str, str],
        starting: Collection[str],
        duration_ms: float,
    ) -> ReconcileFinished:
        """What a pass that carried this plan out reports: of its starts, ``retried`` had failed before and
        ``changed`` replaced a connection (restarts); ``failed`` did not start; ``starting`` still handshake."""
        return ReconcileFinished(
            added=tuple(n for n in self.start if n not in retried and n not in changed),
            retried=retried,
            removed=(*self.remove, *self.unconfigured),
            restarted=(*self.restart, *changed),
            refiltered=self.refilter,
            kept=self.keep,
            gated={**self.gate_stop, **self.gate_skip},
            failed=dict(failed),
            duration_ms=duration_ms,
            starting=tuple(sorted(starting)),
        )


def plan_reconcile(
    live: Mapping[str, LiveServer],
    desired: Mapping[str, McpServerConfig],
    gating: McpGating,
    *,
    not_allowed: Mapping[str, McpServerConfig] | None = None,
    known: Collection[str] = (),
) -> ReconcilePlan:
    """Plan one reconcile.

    ``desired`` is the allow-list-filtered map (``Config.get_mcp_servers()``); ``not_allowed``
    holds configured servers the allow-list filtered out, so they read as gated, not removed.
    ``known`` names the servers reported before (live or not): those no longer configured read as removed.
    """
    not_allowed = not_allowed or {}
    remove = tuple(name for name in live if name not in desired and name not in not_allowed)
    unconfigured = tuple(sorted(n for n in known if n not in live and n not in desired and n not in not_allowed))
    gate_stop: dict[str, str] = {}
    gate_skip: dict[str, str] = {}
    start: list[str] = []
    restart: list[str] = []
    refilter: list[str] = []
    keep: list[str] = []

    for name in not_allowed:
        (gate_stop if name in live else gate_skip)[name] = "not_allowed"

    for name, cfg in desired.items():
        reason = "excluded" if gating.is_excluded(name) else "pending_approval" if gating.is_pending(name) else None
        current = live.get(name)
        if reason is not None:
            (gate_stop if current is not None else gate_skip)[name] = reason
        elif current is None or not current.connected:
            start.append(name)
        elif current.connection_id != connection_id_of(name, cfg):
            restart.append(name)
        elif current.exposure != exposure_of(cfg):
            refilter.append(name)
        else:
            keep.append(name)

    return ReconcilePlan(
        remove=remove,
        unconfigured=unconfigured,
        gate_stop=gate_stop,
        gate_skip=gate_skip,
        start=tuple(start),
        restart=tuple(restart),
        refilter=tuple(refilter),
        keep=tuple(keep),
    )


def plan_for(config: DesiredServers, live: Mapping[str, LiveServer], known: Collection[str] = ()) -> ReconcilePlan:
    """Plan one reconcile of ``live`` against what ``config`` desires: nothing in an untrusted folder, and
    configured servers the allow-list filtered out read as gated; ``known``: as for :func:`plan_reconcile`."""
    trusted = config.is_trusted_folder()
    merged = config.get_merged_mcp_servers() if trusted else {}
    desired = config.get_mcp_servers() if trusted else {}
    not_allowed = {name: cfg for name, cfg in merged.items() if name not in desired}
    known = known if trusted else ()  # (an untrusted folder stops what ran; the rest is said once trusted again)
    return plan_reconcile(live, desired, config.get_mcp_gating(), not_allowed=not_allowed, known=known)
