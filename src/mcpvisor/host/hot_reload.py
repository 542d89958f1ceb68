"""The hot-reload subscriber (SPEC §8): settings edits become incremental reconciles.

On every watcher event: assemble the desired server map, recompute the gating lists with the
same function start-up uses, and stop there if neither changed (the gate). Otherwise push the
gating lists to the core, then ``reinitialize_mcp_servers``. Afterwards, if any server is
strictly promptable (exactly pending, and otherwise admitted), announce
:class:`McpPendingApprovalChanged` — decided by the approval store, never by a set difference of
names, so a rejected server whose config is edited again prompts again.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from mcpvisor.core.gating import McpGating
from mcpvisor.core.registry import Admitted
from mcpvisor.host.gating import mcp_gating_equal, mcp_servers_equal, recompute_mcp_gating
from mcpvisor.host.settings.mcp_servers import AssembledServers, TopTier, assemble_from_settings

if TYPE_CHECKING:
    from mcpvisor.core.config import Config
    from mcpvisor.host.approvals import ApprovalStore
    from mcpvisor.host.settings.loader import Settings
    from mcpvisor.host.watcher import SettingsChanged, SettingsWatcher

__all__ = [
    "DesiredState",
    "HotReloadEvent",
    "McpDefinitionsAccepted",
    "McpPendingApprovalChanged",
    "McpPromptsChanged",
    "McpReloadFailed",
    "apply_desired_state",
    "compute_desired_state",
    "mcp_gating_equal",
    "mcp_servers_equal",
    "recheck_unsaved_pins",
    "recompute_mcp_gating",
    "register_mcp_hot_reload",
    "strictly_promptable",
    "touches_mcp",
]

logger = logging.getLogger(__name__)

RELOAD_FAILED_MESSAGE = "Failed to reload MCP server settings; existing MCP state may be unchanged."


@dataclass(frozen=True, slots=True)
class McpPendingApprovalChanged:
    """Some servers wait for the user's approval (strictly pending, otherwise admitted)."""

    servers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class McpReloadFailed:
    message: str
    detail: str


@dataclass(frozen=True, slots=True)
class McpPromptsChanged:
    """The set of MCP prompts changed: a shell reloads its slash commands."""

    prompts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class McpDefinitionsAccepted:
    """Definitions of a connected server held since approval were accepted elsewhere (``mcpvisor mcp approve`` in
    another terminal, a fleet's store): its ``tools`` and ``prompts`` named here are served again."""

    server: str
    tools: tuple[str, ...]
    prompts: tuple[str, ...]


HotReloadEvent = McpPendingApprovalChanged | McpReloadFailed | McpPromptsChanged | McpDefinitionsAccepted


@dataclass(frozen=True, slots=True)
class DesiredState:
    assembled: AssembledServers
    gating: McpGating
    rejected: tuple[str, ...]


def compute_desired_state(
    settings: Settings,
    config: Config,
    approvals: ApprovalStore,
    top_tier: TopTier | None = None,
) -> DesiredState:
    """The assembled server map and its gating lists: one function for start-up and every reload."""
    assembled = assemble_from_settings(settings, top_tier)
    extra = set(config.get_merged_mcp_servers()) - set(config.get_settings_mcp_servers())
    gating = recompute_mcp_gating(
        allowed_lists={str(settings.paths.of(s)): p for s, p in settings.merged.allowed_by_scope.items()},
        excluded={str(settings.paths.of(s)): p for s, p in settings.merged.excluded_by_scope.items()},
        cli_allowed=config.get_cli_allowed_mcp_server_names(),
        servers=assembled.servers,
        approvals=approvals,
        root=settings.root,
        extra_names=extra,
        invalid_lists={(key, str(settings.paths.of(s))) for key, s in settings.merged.invalid_lists},
    )
    rejected = tuple(
        name
        for name in gating.pending or ()
        if approvals.get_state(settings.root, name, assembled.servers[name]) == "rejected"
    )
    if gating.pending and (inside := approvals.inside_project(settings.root)) is not None:
        assembled = replace(assembled, warnings=(*assembled.warnings, inside))  # (else no approve hint works)
    return DesiredState(assembled, gating, rejected)


def strictly_promptable(
    state: DesiredState, approvals: ApprovalStore, root: str | os.PathLike[str], gating: McpGating | None = None
) -> tuple[str, ...]:
    """Exactly pending servers that gating would otherwise admit (never excluded or not allowed). ``gating``: the one
    in force (``Config.get_mcp_gating()``: the lists the program set itself too); None: the state's."""
    promptable = approvals.get_promptable_mcp_servers(state.assembled.servers, root)
    gating = gating or state.gating
    return tuple(n for n in promptable if gating.is_allowed(n) and not gating.is_excluded(n))


class PendingAnnouncements:
    """The servers last announced as waiting for approval, each with its configuration hash:
    :class:`McpPendingApprovalChanged` goes out when that set changes (one more server waits, one was
    decided, a waiting one's configuration changed), never again for an edit that leaves it as it was."""

    def __init__(self) -> None:
        self._last: frozenset[tuple[str, str]] = frozenset()
        self._passes = 0

    def begin(self) -> int:
        """A reload pass begins: its number, for :meth:`changed`."""
        self._passes += 1
        return self._passes

    def changed(self, state: DesiredState, names: tuple[str, ...], of_pass: int | None = None) -> bool:
        """Whether ``names`` (waiting in ``state``) are news. Not for a pass that ``of_pass`` says began before
        the latest one: that one's state is newer (a repository switched away and back: the reload of one file,
        begun before the other file was read again, ended last and announced a server approved by then)."""
        if of_pass is not None and of_pass != self._passes:
            return False
        servers = state.assembled.servers
        key = frozenset((n, servers[n].approval_hash) for n in names if n in servers)
        if key == self._last:
            return False
        self._last = key
        return True


async def apply_desired_state(
    config: Config, state: DesiredState, *, previous: DesiredState | None = None, force: bool = False
) -> bool:
    """Gate, push gating, reconcile. Returns whether a reconcile ran. A rejection (``previous``: the state
    applied before) changes no admission but how a server's reason reads: it reconciles too, so the
    change is said (without ``previous``, any rejection counts as new)."""
    servers = dict(state.assembled.servers)
    if (
        not force
        and mcp_servers_equal(config.get_settings_mcp_servers(), servers)
        and mcp_gating_equal(config.get_settings_mcp_gating(), state.gating)
        and set(previous.rejected if previous is not None else ()) == set(state.rejected)
    ):
        return False
    config.set_mcp_gating(state.gating)
    await config.reinitialize_mcp_servers(servers)
    return True


MCP_KEYS = ("mcpServers", "mcp")
"""Settings keys that can change the server map or its gating (``mcp`` covers allowed and excluded)."""


def touches_mcp(event: SettingsChanged) -> bool:
    """Whether a settings change can matter to MCP at all: ``.mcp.json``, the approvals store and the
    OAuth token store always do; a settings file only through ``mcpServers`` or ``mcp.*`` paths."""
    if event.scope in ("project", "approvals", "tokens"):
        return True
    return any(path.split(".", 1)[0] in MCP_KEYS for path in event.paths)


def register_mcp_hot_reload(
    watcher: SettingsWatcher,
    settings: Settings,
    config: Config,
    top_tier: TopTier | None,
    *,
    approvals: ApprovalStore,
    emit: Callable[[HotReloadEvent], None],
    on_state: Callable[[DesiredState], object] | None = None,
    current: Callable[[], DesiredState | None] | None = None,
    task_group: anyio.abc.TaskGroup | None = None,
    pending: PendingAnnouncements | None = None,
    signed_in: Callable[[], bool] | None = None,
) -> Callable[[], None]:
    """Subscribe the reconcile to ``watcher``; returns the unsubscribe function. Register once.

    ``signed_in()`` is asked at each change of the OAuth token store: whether it brought a server that is down a
    sign-in (what is down is then started again); without it, every change of the store does.

    With ``task_group``, each reload runs there and the watcher goes on reading edits meanwhile;
    edits that arrive during a reconcile then coalesce into one more pass (``Config``'s guard).
    """

    async def reload(*, force: bool = False) -> None:
        await reload_now(
            settings,
            config,
            top_tier,
            approvals=approvals,
            emit=emit,
            on_state=on_state,
            previous=current() if current is not None else None,
            force=force,
            pending=pending,
        )

    async def on_change(event: SettingsChanged) -> None:
        if event.scope == "pins":
            held = held_since_approval(config)
            config.refresh_definitions()  # accepted (or reset) definitions: registries follow, nothing restarts
            for accepted in served_again(config, held):
                emit(accepted)
            return
        if not touches_mcp(event):
            recheck_unsaved_pins(config)  # (a store fixed since, e.g. made writable, changes no file of its own)
            return  # the cheap gate: e.g. a theme edit never rebuilds the server map
        if event.scope == "approvals":
            approvals.reload()
        # A sign-in changes no configuration: reconnect what is down (a server that needed one) all the same.
        force = event.scope == "tokens"
        if force and signed_in is not None and not signed_in():
            return  # no new sign-in (a client registered before its tokens come): a start would fail for want of one
        if task_group is not None:
            task_group.start_soon(functools.partial(reload, force=force))
        else:
            await reload(force=force)

    return watcher.add_change_listener(on_change)


def held_since_approval(config: Config) -> dict[str, Admitted]:
    """What is held of each connected server because it changed since approval (not for want of a pin store)."""
    manager = config.manager
    return {name: held for name in manager.clients() if (held := manager.held(name)) is not None and not held.why}


def served_again(config: Config, before: Mapping[str, Admitted]) -> list[McpDefinitionsAccepted]:
    """Of what was held ``before``, what a check of the definitions again let register, per server (by the names
    the tools and prompts are registered under)."""
    manager, accepted = config.manager, []
    for name, was in before.items():
        now = manager.held(name) or Admitted((), ())
        tools = {t.tool.name: t.name for t in config.tool_registry.tools_of(name)}
        prompts = {p.prompt.name: p.name for p in config.prompt_registry.prompts_of(name)}
        again = McpDefinitionsAccepted(
            name,
            tuple(tools[t] for t in was.held_tools if t not in now.held_tools and t in tools),
            tuple(prompts[p] for p in was.held_prompts if p not in now.held_prompts and p in prompts),
        )
        if again.tools or again.prompts:
            accepted.append(again)
    return accepted


def recheck_unsaved_pins(config: Config) -> None:
    """Ask the definition gate again for the servers whose definitions are held because their pins could not be
    saved or read (a reason is given: :attr:`~mcpvisor.core.registry.Admitted.why`): the store may be fixed now."""
    manager = config.manager
    if any((held := manager.held(name)) is not None and held.why for name in manager.clients()):
        config.refresh_definitions()


async def reload_now(
    settings: Settings,
    config: Config,
    top_tier: TopTier | None,
    *,
    approvals: ApprovalStore,
    emit: Callable[[HotReloadEvent], None],
    on_state: Callable[[DesiredState], object] | None = None,
    previous: DesiredState | None = None,
    force: bool = False,
    pending: PendingAnnouncements | None = None,
) -> DesiredState:
    """One pass of SPEC §8 steps 1-6 over the current in-memory settings. With ``pending``, servers waiting
    for approval are announced only when that set changed. Definitions held because their pins could not be
    saved are checked again first (:func:`recheck_unsaved_pins`)."""
    recheck_unsaved_pins(config)
    prompts_before = config.prompt_registry.names()
    state = compute_desired_state(settings, config, approvals, top_tier)
    this_pass = pending.begin() if pending is not None else None
    if on_state is not None:
        on_state(state)
    try:
        applied = await apply_desired_state(config, state, previous=previous, force=force)
    except Exception as exc:
        logger.exception("%s", RELOAD_FAILED_MESSAGE)
        emit(McpReloadFailed(RELOAD_FAILED_MESSAGE, str(exc)))
        applied = True
    if applied or pending is not None:  # (else the gate: nothing MCP-relevant changed)
        # What waits for approval is the latest pass's to say, also when its state passed the gate unchanged.
        promptable = strictly_promptable(state, approvals, settings.root, config.get_mcp_gating())
        if (pending is None or pending.changed(state, promptable, this_pass)) and promptable:
            emit(McpPendingApprovalChanged(promptable))
    if not applied:
        # The config holds this state already: a pass running now may be the one applying it (a decision's own
        # write, seen by the watcher first). Returns once it is over, as when this reload applies it itself: a
        # caller that bounds its wait (the shell's few seconds for a slow start) bounds that pass's.
        await config.reconciled()
        return state
    prompts_after = config.prompt_registry.names()
    if prompts_after != prompts_before:
        emit(McpPromptsChanged(tuple(sorted(prompts_after))))
    return state
