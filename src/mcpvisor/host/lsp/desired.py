"""What language servers a session should run, and what an edit does to the running ones (SPEC §10).

Pure: :func:`compute_lsp_state` turns the settings (plus approvals and the start-up ceiling) into the
desired map and its admission lists — the same rules as MCP servers: ``lsp.allowed`` narrows across
scopes and under ``--allowed-lsp-server-names``, ``[]`` admits none, ``lsp.excluded`` is united and
wins, project and workspace entries wait for approval. :func:`plan_lsp_reconcile` compares the desired
map with the servers known now and says, per server, what to do (LSP.md §6.3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcpvisor.core.gating import McpGating
from mcpvisor.host.approvals import ApprovalStore, is_gated
from mcpvisor.host.gating import allow_lists, resolve_allowed, resolve_excluded
from mcpvisor.host.lsp.config import LspServerConfig
from mcpvisor.host.settings.loader import SETTINGS_SCOPES, Settings
from mcpvisor.host.settings.lsp_servers import AssembledLsp, LspFile, assemble_lsp_servers

__all__ = [
    "LspDesiredState",
    "LspPlan",
    "Startup",
    "compute_lsp_state",
    "lsp_servers_equal",
    "plan_lsp_reconcile",
]

Startup = Literal["lazy", "eager"]


@dataclass(frozen=True, slots=True)
class LspDesiredState:
    """The language servers the settings ask for, who may run, and how they start and stop."""

    assembled: AssembledLsp = field(default_factory=AssembledLsp)
    gating: McpGating = field(default_factory=McpGating)
    rejected: tuple[str, ...] = ()
    startup: Startup = "lazy"
    idle_stop_s: float | None = None
    warnings: tuple[str, ...] = ()

    @property
    def servers(self) -> Mapping[str, LspServerConfig]:
        return self.assembled.servers

    def admitted(self) -> dict[str, LspServerConfig]:
        """The servers that may run now: allowed, not excluded, approved where they need it."""
        g = self.gating
        return {
            name: cfg
            for name, cfg in self.servers.items()
            if g.is_allowed(name) and not g.is_excluded(name) and not g.is_pending(name)
        }

    def reason(self, name: str) -> str | None:
        """Why a configured server may not run (``not_allowed``, ``excluded``, ``rejected``,
        ``pending_approval``), or ``None``."""
        if name not in self.servers:
            return None
        if not self.gating.is_allowed(name):
            return "not_allowed"
        if self.gating.is_excluded(name):
            return "excluded"
        if self.gating.is_pending(name):
            return "rejected" if name in self.rejected else "pending_approval"
        return None

    def promptable(self) -> tuple[str, ...]:
        """Gated servers waiting for a first decision on their current configuration (never excluded
        or not allowed ones)."""
        return tuple(
            n for n in self.gating.pending or () if self.reason(n) == "pending_approval" and n not in self.rejected
        )


def _patterns(
    value: Any, what: str, where: Path, problems: list[str], on_invalid: tuple[str, ...], invalid: set[tuple[str, str]]
) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    invalid.add((what, str(where)))
    fallback = "deny all: no language server may run" if what == "lsp.allowed" else "exclude all"
    problems.append(f"invalid {what} in {where}: expected a list of glob patterns; treated as {fallback}")
    return on_invalid


def compute_lsp_state(
    settings: Settings,
    approvals: ApprovalStore,
    *,
    cli_allowed: Sequence[str] | None = None,
    cli_files: Iterable[LspFile] = (),
) -> LspDesiredState:
    """The desired language servers and their admission, from the settings as they are in memory."""
    assembled = assemble_lsp_servers(settings.lsp_layers(), settings.lsp_project, list(cli_files), env=settings.env)
    allowed_lists: dict[str, tuple[str, ...]] = {}
    excluded: dict[str, tuple[str, ...]] = {}
    problems: list[str] = []
    invalid: set[tuple[str, str]] = set()  # (the lists whose value is no list of patterns)
    startup: Startup = "lazy"
    idle: float | None = None
    for scope in SETTINGS_SCOPES:
        if not settings.is_active(scope):
            continue
        section = settings.data(scope).get("lsp")
        if not isinstance(section, Mapping):
            continue
        where = settings.paths.of(scope)
        if "allowed" in section:
            allowed_lists[str(where)] = _patterns(section["allowed"], "lsp.allowed", where, problems, (), invalid)
        if "excluded" in section:
            excluded[str(where)] = _patterns(section["excluded"], "lsp.excluded", where, problems, ("*",), invalid)
        if "startup" in section:
            if section["startup"] in ("lazy", "eager"):
                startup = section["startup"]
            else:
                problems.append(f"invalid lsp.startup in {where}: expected 'lazy' or 'eager'; treated as 'lazy'")
        if "idleStopSeconds" in section:
            value = section["idleStopSeconds"]
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                idle = float(value) or None
            else:
                problems.append(f"invalid lsp.idleStopSeconds in {where}: expected a number of seconds; ignored")
    servers = assembled.servers
    pending = approvals.get_pending_gated_mcp_servers(servers, settings.root, "lsp")
    gating = McpGating(
        excluded=resolve_excluded([pattern for patterns in excluded.values() for pattern in patterns]),
        allowed=resolve_allowed(list(allowed_lists.values()), cli_allowed, servers),
        pending=pending or None,
        allowed_by=allow_lists(
            allowed_lists, cli_allowed, key="lsp.allowed", flag="--allowed-lsp-server-names", invalid=invalid
        ),
        excluded_by=allow_lists(excluded, key="lsp.excluded", invalid=invalid),
    )
    rejected = tuple(
        n
        for n in pending
        if is_gated(servers[n]) and approvals.get_state(settings.root, n, servers[n], "lsp") == "rejected"
    )
    return LspDesiredState(assembled, gating, rejected, startup, idle, (*assembled.warnings, *problems))


def lsp_servers_equal(a: Mapping[str, LspServerConfig], b: Mapping[str, LspServerConfig]) -> bool:
    """Whether two maps configure the same servers (key order irrelevant)."""
    return a.keys() == b.keys() and all(
        a[n] is b[n] or (a[n].entry(), a[n].approval_hash) == (b[n].entry(), b[n].approval_hash) for n in a
    )


@dataclass(frozen=True, slots=True)
class LspPlan:
    """What a reconcile does to each language server (names; every admitted one is in exactly one list)."""

    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()
    reconfigure: tuple[str, ...] = ()
    """Only ``settings`` changed: sent live."""
    update: tuple[str, ...] = ()
    """Only the extension map or the policy (timeouts, restarts) changed: applied in place."""
    keep: tuple[str, ...] = ()


def plan_lsp_reconcile(current: Mapping[str, LspServerConfig], admitted: Mapping[str, LspServerConfig]) -> LspPlan:
    """``current``: the servers known now (running or waiting to start lazily) by their config;
    ``admitted``: the servers that should be known after the reconcile."""
    add, restart, reconfigure, update, keep = [], [], [], [], []
    for name, cfg in admitted.items():
        old = current.get(name)
        if old is None:
            add.append(name)
        elif old.connection_id(name) != cfg.connection_id(name):
            restart.append(name)
        elif old.settings != cfg.settings:
            reconfigure.append(name)
        elif old is not cfg and old.entry() != cfg.entry():
            update.append(name)
        else:
            keep.append(name)
    remove = tuple(name for name in current if name not in admitted)
    return LspPlan(tuple(add), remove, tuple(restart), tuple(reconfigure), tuple(update), tuple(keep))
