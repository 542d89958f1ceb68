"""One running mcpvisor session: settings, approvals, the core ``Config``, the watcher (SPEC §1).

Start-up and every reload go through the same two functions (:func:`compute_desired_state`,
:func:`apply_desired_state`), so boot and reload can never disagree. Everything that happens is
published as a :data:`HostEvent` to subscribers (the ``run`` output, the shell, the gateway).

Usage::

    async with Host(HostOptions(env=os.environ, workspace=Path("."))) as host:
        host.subscribe(print)
        await anyio.sleep_forever()
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeAlias

import anyio

from mcpvisor.core.config import Config
from mcpvisor.core.errors import ConfigError
from mcpvisor.core.events import Listeners, McpEvent, synchronous
from mcpvisor.core.lifecycle import StackOwner, running
from mcpvisor.host import paths
from mcpvisor.host.approvals import ApprovalStore, is_gated
from mcpvisor.host.decisions import Decided, Verdict, check_verdict, decide
from mcpvisor.host.hot_reload import (
    DesiredState,
    HotReloadEvent,
    McpPendingApprovalChanged,
    PendingAnnouncements,
    compute_desired_state,
    register_mcp_hot_reload,
    reload_now,
    strictly_promptable,
)
from mcpvisor.host.limits import max_message_bytes_of
from mcpvisor.host.lsp.events import LspPendingApprovalChanged, LspServerChanged
from mcpvisor.host.lsp.session import LspSession, touches_lsp, untrusted_warning
from mcpvisor.host.oauth import SignedIn, TokenStore, check_sign_in, sign_ins, unreadable
from mcpvisor.host.oauth_login import DEFAULT_LOGIN_TIMEOUT_S, login
from mcpvisor.host.options import HostOptions, SettingsSource
from mcpvisor.host.pin_review import Change, changes_since_approval
from mcpvisor.host.pins import DEFAULT_PIN_MODE, PinGate, PinMode, PinStore, pin_mode_of, unread_pins
from mcpvisor.host.settings.loader import Settings, SettingsError, load_settings
from mcpvisor.host.settings.lsp_servers import load_lsp_file
from mcpvisor.host.settings.mcp_servers import TopTier, kept_entries, load_top_tier
from mcpvisor.host.settings.scopes import TRUST_SCOPES
from mcpvisor.host.settings.servers import name_written_otherwise
from mcpvisor.host.status import ServerView, describe_servers, event_as_said_here, fix_commands, live_connections
from mcpvisor.host.watcher import RestartRequired, SettingsChanged, SettingsOk, SettingsWatcher, read_store_states

__all__ = ["Host", "HostEvent", "HostOptions", "Ready", "SettingsSource", "SettingsWarning"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Ready:
    """The first discovery is over."""


@dataclass(frozen=True, slots=True)
class SettingsWarning:
    message: str


HostEvent: TypeAlias = (
    McpEvent
    | HotReloadEvent
    | SettingsError
    | SettingsOk
    | RestartRequired
    | Ready
    | SettingsWarning
    | LspServerChanged
    | LspPendingApprovalChanged
)


class Host(StackOwner):
    """A running session that follows its settings files (SPEC §0): enter it (``async with``) to load the
    settings, start what they admit and watch them; every save reconciles only what changed. Read it
    through :attr:`config` (registries, calls), :attr:`state`, :meth:`server_views` and :attr:`lsp`;
    :meth:`subscribe` to hear what happens; decide on gated servers with :meth:`decide`. Runs once."""

    def __init__(self, options: HostOptions) -> None:
        self.options = options
        self._listeners: Listeners[Callable[[HostEvent], None]] = Listeners("host event listener")
        self._stack: AsyncExitStack | None = None
        self._settings: Settings | None = None
        self._config: Config | None = None
        self._approvals: ApprovalStore | None = None
        self._top_tier: TopTier | None = None
        self._state: DesiredState | None = None
        self._warned: set[str] = set()
        self._pin_mode: PinMode = DEFAULT_PIN_MODE
        self.pins = options.pins or PinStore(paths.pins_path(options.env))
        self.watcher: SettingsWatcher | None = None
        self._lsp: LspSession | None = None
        self._pending = PendingAnnouncements()
        self._signed = SignedIn()

    # -- accessors ---------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return running(self._settings, "host")

    @property
    def config(self) -> Config:
        """The running session's :class:`Config` (live: edits to the settings files reach it); before ``async with``
        and after it, :class:`NotRunningError`."""
        config = self._config
        return running(config if config is not None and config.is_running else None, "host")  # none once it exited

    @property
    def approvals(self) -> ApprovalStore:
        return running(self._approvals, "host")

    @property
    def state(self) -> DesiredState:
        return running(self._state, "host")

    @property
    def lsp(self) -> LspSession:
        """The language servers of this session (:mod:`mcpvisor.host.lsp`)."""
        return running(self._lsp, "host")

    @property
    def root(self) -> Path:
        return self.settings.root

    def subscribe(self, listener: Callable[[HostEvent], None]) -> Callable[[], None]:
        """``listener(event)`` hears every :data:`HostEvent` (synchronously: it must not block); returns
        the function that removes it."""
        return self._listeners.add(synchronous(listener, "host event listener"))

    def emit(self, event: HostEvent) -> None:
        self._listeners.tell(event)

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Host:
        self._enter_once()
        opts = self.options
        env = opts.env
        async with AsyncExitStack() as stack:
            self._settings = load_settings(env, opts.workspace)
            if not self._settings.root.is_dir():  # (the commands check --workspace as they parse it)
                raise ConfigError(f"the workspace {self._settings.root} is no folder: pass an existing one")
            if opts.settings_source is not None:
                opts.settings_source.prime(self._settings)
            # The stores as they are before they are read: one written before the watcher starts is announced.
            stores = read_store_states(self._settings) if opts.watch else None
            self._approvals = opts.approvals or ApprovalStore(paths.approvals_path(env))
            self._approvals.load()
            self.tokens = opts.tokens or TokenStore(paths.oauth_tokens_path(env))
            await stack.enter_async_context(self.tokens.in_use(lambda m: self._warn_once(SettingsWarning(m))))
            self._pin_mode, _ = pin_mode_of(self._settings)
            self._top_tier = load_top_tier(opts.mcp_config, env, opts.session_servers)
            lsp_files = [load_lsp_file(Path(p), env) for p in opts.lsp_config]
            for error in (*(f.error for f in self._top_tier.mcp_config), *(f.error for f in lsp_files)):
                if error is not None:
                    raise ConfigError(str(error))
            approve, login = fix_commands(self._settings.root, self._approvals.decided_with, env)
            self._config = Config(
                allowed_mcp_server_names=opts.allowed_mcp_server_names,
                trusted_folder=self._settings.trusted,
                options=opts.connections(self._settings, self.tokens, login, self.defined_in),
                pool=opts.pool,
                session_id=opts.session_id,
                definition_gate=PinGate(self.pins, self._settings.root, lambda: self._pin_mode),
                pass_wait_s=opts.startup_wait_s,  # the first pass's and each later one's (an edit's, a decision's)
            )
            await stack.enter_async_context(self._config)
            self._config.set_reason_refiner(lambda name, reason: self.refine_reason(name, reason) or reason)
            self._config.approve_command = approve
            config = self._config  # not self.config: its servers' last events come while it stops
            approvals = self._approvals
            config.approvals_unreadable = lambda: approvals.error is not None
            config.invalid_entries = lambda: {
                n: f"in {s.path or s.scope} is invalid — {s.problem}" for n, s in self.state.assembled.skipped.items()
            }
            config.events.subscribe(lambda event: self.emit(event_as_said_here(config, event)))
            self._lsp = await stack.enter_async_context(
                LspSession(
                    self._settings,
                    self._approvals,
                    self._config,
                    log_dir=opts.log_dir or paths.log_dir(env),
                    emit=self.emit,  # type: ignore[arg-type]
                    cli_allowed=opts.allowed_lsp_server_names,
                    cli_files=lsp_files,
                    max_message_bytes=self._config.options.max_message_bytes,
                )
            )
            self._report_problems()
            if not self._settings.trusted:
                self.emit(SettingsWarning(untrusted_warning(self.root, self.lsp.manager.configured())))
            # The first discovery is a reconcile like any other.
            state = self._remember(compute_desired_state(self._settings, self._config, self._approvals, self._top_tier))
            self._config.set_mcp_gating(state.gating)
            self._config.set_mcp_servers(state.assembled.servers)
            await self._config.initialize()
            promptable = strictly_promptable(state, self._approvals, self.root)
            if self._pending.changed(state, promptable) and promptable:
                self.emit(McpPendingApprovalChanged(promptable))
            self.emit(Ready())
            if opts.watch:
                reloads = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(reloads.cancel_scope.cancel)  # on exit, abandon reloads still running
                self.watcher = SettingsWatcher(self._settings, scopes=opts.watched_scopes, store_states=stores)
                register_mcp_hot_reload(
                    self.watcher,
                    self._settings,
                    self._config,
                    self._top_tier,
                    approvals=self._approvals,
                    emit=self.emit,
                    on_state=self._remember,
                    current=lambda: self._state,
                    task_group=reloads,
                    pending=self._pending,
                    signed_in=lambda: self._signed.follow(  # a new sign-in reconnects what needs it
                        self.tokens,
                        self.state.assembled.servers,
                        self.config.manager.clients(),
                    ),
                )

                async def follow_lsp(event: SettingsChanged) -> None:
                    if touches_lsp(event.scope, event.paths):
                        if event.scope == "approvals":
                            self.approvals.reload()
                        reloads.start_soon(self._reload_lsp)

                async def follow_trust(event: SettingsChanged) -> None:
                    # A user or system file that did not parse at start left trust undecided (fail closed);
                    # fixed, trust is decided as /reload decides it, and the folder's servers follow.
                    settings = self.settings
                    if event.scope in TRUST_SCOPES and settings.trust_undecided:
                        if not any(scope in settings.errors for scope in TRUST_SCOPES):
                            reloads.start_soon(self.reload)

                self.watcher.add_change_listener(follow_lsp)
                self.watcher.add_change_listener(follow_trust)
                self.watcher.add_change_listener(self._on_settings_changed)
                self.watcher.add_error_listener(self._on_settings_error)
                self.watcher.add_ok_listener(self._pass_on)
                self.watcher.add_warning_listener(self._on_settings_warning)
                self.watcher.add_restart_listener(self._pass_on)
                await stack.enter_async_context(self.watcher)
                watcher = self.watcher

                def decisions_changed() -> None:  # decided elsewhere (a fleet's store): as if its file changed
                    reloads.start_soon(watcher.announce, SettingsChanged("approvals", ()))

                stack.callback(self._approvals.on_external_change(decisions_changed))

                def pins_changed() -> None:  # pinned elsewhere (a fleet's store): definitions are checked again
                    reloads.start_soon(watcher.announce, SettingsChanged("pins", ()))

                stack.callback(self.pins.on_external_change(pins_changed))

                def signed_in() -> None:  # a sign-in stored elsewhere (a fleet's store): reconnect what needs it
                    reloads.start_soon(watcher.announce, SettingsChanged("tokens", ()))

                stack.callback(self.tokens.on_external_change(signed_in))
            if opts.settings_source is not None:
                stack.callback(opts.settings_source.follow(self))
            self._stack = stack.pop_all()
        return self

    def _remember(self, state: DesiredState) -> DesiredState:
        self._state = state
        self._signed.note(self.tokens, state.assembled.servers)  # (a server configured since: its sign-in too)
        mode, _ = pin_mode_of(self.settings)
        if mode != self._pin_mode:
            self._pin_mode = mode
            if self._config is not None:
                self._config.refresh_definitions()
        self._report_problems()
        return state

    def _report_problems(self) -> None:
        settings = self.settings
        for error in settings.errors.values():
            self._warn_once(error)
        messages = [*settings.warnings, *pin_mode_of(settings)[1], *max_message_bytes_of(settings)[1]]
        if self._lsp is not None:
            messages += self._lsp.warnings()
        if self._state is not None:
            messages += [*self._state.assembled.warnings]
            cfgs = self._state.assembled.servers  # (a sign-in needed, tools held: why, when a store is unread)
            messages += filter(None, [unreadable(self.tokens, cfgs), unread_pins(self.pins, self._pin_mode, cfgs)])
            for error in self._state.assembled.errors:
                self._warn_once(error)
        if self._approvals is not None and self._approvals.error:
            messages.append(self._approvals.error)
        for message in messages:
            self._warn_once(SettingsWarning(message))

    def _warn_once(self, event: SettingsError | SettingsWarning) -> None:
        key = str(event) if isinstance(event, SettingsError) else event.message
        if key not in self._warned:
            self._warned.add(key)
            self.emit(event)

    async def _on_settings_changed(self, event: SettingsChanged) -> None:
        if event.scope == "tokens":  # (a store that became unreadable is said, also when nothing reconnects)
            self._report_problems()
        if event.scope in ("user", "workspace", "project") and event.scope in self.options.watched_scopes:
            path = self.settings.paths.of(event.scope)
            if not await anyio.Path(path).exists():
                self.emit(SettingsWarning(f"{path} was deleted: what it configured is gone (its servers are removed)"))

    async def _pass_on(self, event: SettingsOk | RestartRequired) -> None:
        self.emit(event)

    async def _on_settings_error(self, error: SettingsError) -> None:
        self._warned.discard(str(error))
        self._warn_once(error)

    async def _on_settings_warning(self, message: str) -> None:
        self._warned.discard(message)  # said again on every such save
        self._warn_once(SettingsWarning(message))

    # -- actions -----------------------------------------------------------------------------

    async def reload(self) -> DesiredState:
        """Re-read every settings file and reconcile the MCP servers and the language servers (``/reload``); a server
        that is down is started again, as a tool call of it says (its executable installed since, its service up)."""
        running(self._stack, "host")
        # Read in a worker thread, applied here at once: the loop never sees a half-loaded state. A scope
        # changed in memory meanwhile (the watcher applied a newer save, the app wrote) is read again.
        while True:
            generations = self.settings.generations()
            read = await anyio.to_thread.run_sync(self.settings.read_files)
            if self.settings.generations() == generations:
                break
        self.settings.load(read)
        self.approvals.reload()
        trusted = self.settings.trusted
        trust_changed = trusted != self.config.is_trusted_folder()
        if trust_changed:  # trusted (or no longer) since: the reconcile follows, even if nothing else changed
            self.config.set_trusted_folder(trusted)
            if self.watcher is not None:
                self.watcher.retarget()  # the folder's own settings files are watched, or no longer
            if not trusted:
                stopping = "its MCP servers and language servers stop"
                self.emit(SettingsWarning(f"folder {self.root} is no longer trusted: {stopping}"))
        down = any(c.status == "disconnected" for c in self.config.manager.clients().values())
        state = await self._reconcile(force=trust_changed or down)
        self.lsp.set_trusted(trusted)  # the language servers follow the same decision in their reconcile
        await self._reload_lsp(retry=True)  # and one given up after crashing too often starts again on demand
        return state

    async def _reload_lsp(self, *, retry: bool = False) -> None:
        await self.lsp.reload(retry=retry)
        self._report_problems()

    async def _reconcile(self, *, force: bool = False) -> DesiredState:
        """One reconcile over the settings as they are in memory (``force``: also reconnect what is down)."""
        return await reload_now(
            self.settings,
            self.config,
            self._top_tier,
            approvals=self.approvals,
            emit=self.emit,
            on_state=self._remember,
            previous=self._state,
            force=force,
            pending=self._pending,
        )

    def held_changes(self, name: str) -> list[Change]:
        """The definitions of ``name`` held since approval, against the approved ones (``/approve`` shows them)."""
        cfg = self.state.assembled.servers.get(name)
        if cfg is None:
            return []
        try:
            return changes_since_approval(self.pins, self.root, name, cfg, self._pin_mode)
        except ConfigError:
            return []

    async def decide(
        self,
        name: str,
        decision: Verdict,
        *,
        shown_hash: str | None = None,
        shown_stamp: str | None = None,
        shown_changes: Sequence[Change] | None = None,
        on_decided: Callable[[Decided], None] | None = None,
    ) -> Decided:
        """Approve or reject a server (:func:`mcpvisor.host.decisions.decide`: ``shown_hash`` is the approval hash
        of the configuration the person saw, ``shown_changes`` the held definitions they saw), then follow it:
        accepted definitions are served at once, a recorded verdict is reconciled (approving connects the server).
        ``on_decided`` hears the outcome once it is written, before the reconcile says what it did."""
        check_verdict(decision, name)
        state = self.state
        cfg = state.assembled.servers.get(name)
        if cfg is None:
            but = f", but {meant}" if (meant := name_written_otherwise(name, state.assembled.servers)) else ""
            raise ConfigError(f"cannot {decision} server {name!r}: no such server is configured{but}")
        decided = await anyio.to_thread.run_sync(
            partial(
                decide,
                self.approvals,
                self.pins,
                self.root,
                name,
                cfg,
                decision,
                pin_mode=self._pin_mode,
                shown_hash=shown_hash,
                shown_stamp=shown_stamp,
                shown_changes=shown_changes,
                source=state.assembled.sources[name].label,
                approve_command=self.config.approve_command,
            )
        )
        if on_decided is not None:
            on_decided(decided)
        if decided.accepted:
            self.config.refresh_definitions()
        if decided.recorded:
            await self._reconcile()
        return decided

    async def sign_in(
        self,
        name: str,
        *,
        open_url: Callable[[str], bool],
        announce: Callable[[str], None],
        timeout_s: float = DEFAULT_LOGIN_TIMEOUT_S,
    ) -> int:
        """Sign in to remote server ``name`` (``/login``), then connect it; returns how many tools it offers.

        Refused, naming the fix, for a server that is not configured, runs a command, or is a project or workspace
        server the user has not approved. Connecting does not wait for the watcher to see the token store change
        (a host may run without one)."""
        state = self.state
        cfg = state.assembled.servers.get(name)
        if cfg is None:
            known = ", ".join(sorted(state.assembled.servers)) or "none"
            raise ConfigError(f"cannot sign in to server {name!r}: no such server is configured (configured: {known})")
        approval = self.approvals.get_state(self.root, name, cfg) if is_gated(cfg) else None
        label = state.assembled.sources[name].label
        check_sign_in(name, cfg, label=label, approval=approval, approve_command=self.config.approve_command)
        tools = await login(
            self.tokens,
            name,
            cfg,
            open_url=open_url,
            announce=announce,
            timeout_s=timeout_s,
            log_dir=self.options.log_dir or paths.log_dir(self.options.env),
            defined_in=state.assembled.sources[name].path,
            login_command=self.config.options.login_command,
        )
        await self._reconcile(force=True)
        return tools

    # -- views -------------------------------------------------------------------------------

    def defined_in(self, name: str) -> Path | None:
        """The file that defines server ``name`` now (None: none does, or it is not a file's)."""
        source = self._state.assembled.sources.get(name) if self._state is not None else None
        return source.path if source is not None else None

    def refine_reason(self, name: str, reason: str | None) -> str | None:
        """A core gating reason as people read it: ``pending_approval`` of a server the user
        rejected is ``rejected`` (the core does not know the approval store)."""
        if reason == "pending_approval" and self._state is not None and name in self._state.rejected:
            return "rejected"
        return reason

    def server_views(self, sign_in_command: str | None = None) -> list[ServerView]:
        """The status rows; ``sign_in_command``: how a sign-in says to sign in (``{name}``; None: the host's
        login command), e.g. the shell's ``/login {name}``."""
        login, assembled = self.config.options.login_command, self.state.assembled
        return describe_servers(
            assembled,
            self.config.get_mcp_gating(),
            self.approvals,
            self.root,
            live=live_connections(self.config),
            trusted=self.settings.trusted,
            sign_ins=sign_ins(self.tokens, assembled.servers, login, sign_in_command=sign_in_command),
            kept=kept_entries(self.settings, assembled),
        )
