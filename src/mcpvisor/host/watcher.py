"""SettingsWatcher (SPEC §6): file edits in, one debounced, diffed event per scope out.

Watched by default: the user and workspace settings files, the workspace ``.mcp.json`` and the
approvals store. How:

- **Folders, not files**, non-recursively: an editor's write-then-rename replaces the file's inode,
  and a Kubernetes ConfigMap mount swaps a ``..data`` symlink while ``settings.json`` itself never
  changes. Any event in a scope's folder re-reads that scope's file and compares its content
  (except a store's own files — e.g. ``mcp-approvals.json``, ``.lock``, ``.tmp*`` — which belong to
  that store only, though they share the user folder). Paths are made absolute (the OS watch reports
  absolute ones).
- **Missing files and folders**: the nearest existing ancestor is watched; when a folder on the way
  appears (or a watched one vanishes) the watch is re-armed and the affected scopes re-checked.
- **Debounce, without paying it on every save**: a scope is read :data:`SETTLE_S` after its last
  file event; a save that parses is acted on at once, and what follows within :data:`DEBOUNCE_S` of a
  reload that changed something is coalesced into at most one more reload at the window's end, so a
  burst of saves costs one extra reconcile at most; a read that finds nothing new (between the two
  steps of a write-then-rename) opens no window. A save that does not parse, or a file gone, is read
  again a full :data:`DEBOUNCE_S` after the last event before it is acted on (a later event, sooner).
- **Reload and diff** through :class:`Settings` (the in-memory state the app reads):
  no change → nothing (this swallows the app's own writes, which update memory first, and
  formatting-only saves); a parse error (an empty file from a non-atomic save included) → the
  previous state is kept and the :class:`SettingsError` goes to the error listeners; every changed
  path restart-required → a :class:`RestartRequired` notice and no event; otherwise one
  :class:`SettingsChanged` event. A store (approvals, tokens, pins) is not diffed: when its file is
  written (even back to the same bytes: the app may have acted on what was there in between) the
  event is ``SettingsChanged("approvals", ())`` and the store re-reads itself. What a store's file is
  compared with is what the app read at its start (``store_states``), not what it was when the watch began.

Listeners are async callables, run concurrently under a timeout; one that fails or times out is
logged and never stops the watcher. Use it as ``async with SettingsWatcher(settings) as watcher``
or run :meth:`SettingsWatcher.run` in a task group (``await tg.start(watcher.run)``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import anyio
import anyio.abc
from watchfiles import Change, awatch

from mcpvisor.core.events import Listeners, listener_name
from mcpvisor.host.settings.loader import SETTINGS_SCOPES, FileScope, Settings, SettingsError
from mcpvisor.host.settings.schema import is_restart_required_key
from mcpvisor.host.watched_files import (
    STORE_SCOPES,
    FileState,
    FolderIdentity,
    WatchScope,
    classify_batch,
    classify_change,
    folder_identities,
    is_approvals_file,
    nearest_existing_dir,
    read_file_state,
    read_store_states,
    store_files,
    watch_folders,
)

__all__ = [
    "DEBOUNCE_S",
    "DEFAULT_WATCHED_SCOPES",
    "SETTLE_S",
    "LISTENER_TIMEOUT_S",
    "RestartRequired",
    "SettingsChanged",
    "SettingsOk",
    "SettingsWatcher",
    "WatchScope",
    "classify_change",
    "is_approvals_file",
    "nearest_existing_dir",
    "read_store_states",
]

logger = logging.getLogger(__name__)

DEFAULT_WATCHED_SCOPES: tuple[WatchScope, ...] = ("user", "workspace", "project", "lsp_project", *STORE_SCOPES)

DEBOUNCE_S = 0.3
"""The coalescing window per scope (see the module): saves after a reload within it wait for its end."""
SETTLE_S = 0.01
"""How long a scope's file must be quiet before it is read (a read between a save's steps does nothing)."""
LISTENER_TIMEOUT_S = 60.0
"""A listener still running after this long is cancelled and logged."""
WATCHFILES_DEBOUNCE_MS = 10
WATCHFILES_STEP_MS = 2
REARM_RETRY_S = 0.1
"""Pause before re-arming after the watch could not be set up (a folder vanished meanwhile)."""
FAILED_WATCH_RETRY_S = 5.0
"""Pause before trying again when even a polling watch could not be set up."""
FOLDER_CHECK_S = 5.0
"""How often the watched folders are checked to still be the ones watched (see ``_check_folders``)."""


@dataclass(frozen=True, slots=True)
class SettingsChanged:
    """One scope's file changed.

    ``paths`` are the changed dotted paths (objects recurse: ``mcpServers.a.args``; empty for the
    ``approvals`` scope); ``restart_required`` is the subset that only takes effect after a restart
    (also announced by a :class:`RestartRequired` notice).
    """

    scope: WatchScope
    paths: tuple[str, ...]
    restart_required: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SettingsOk:
    """A file whose last save did not parse (or was invalid) parses again; its content is applied."""

    scope: WatchScope
    path: Path

    def __str__(self) -> str:
        return f"{self.path} is valid again — applied"


@dataclass(frozen=True, slots=True)
class RestartRequired:
    """Settings changed that take effect only after a restart."""

    scope: FileScope
    paths: tuple[str, ...]


E = TypeVar("E")
Listener = Callable[[E], Awaitable[None]]


class SettingsWatcher:
    """Watches settings files and turns edits into :class:`SettingsChanged` events.

    ``settings`` is the in-memory state the watcher reloads and diffs against (the hot-reload
    subscriber re-merges from :attr:`settings`). The constructor does no I/O.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        scopes: Iterable[WatchScope] = DEFAULT_WATCHED_SCOPES,
        debounce_s: float = DEBOUNCE_S,
        listener_timeout_s: float = LISTENER_TIMEOUT_S,
        force_polling: bool | None = None,
        store_states: Mapping[WatchScope, FileState | None] | None = None,
    ) -> None:
        self._settings = settings
        self._scopes = tuple(dict.fromkeys(scopes))
        self._debounce_s = debounce_s
        self._listener_timeout_s = listener_timeout_s
        self._force_polling = force_polling
        self._change_listeners: Listeners[Listener[SettingsChanged]] = Listeners()
        self._error_listeners: Listeners[Listener[SettingsError]] = Listeners()
        self._ok_listeners: Listeners[Listener[SettingsOk]] = Listeners()
        self._broken: set[WatchScope] = set()
        """Scopes whose last read was reported as an error (their fix is announced)."""
        self._told: dict[WatchScope, tuple[FileState | None, SettingsError | None, tuple[str, ...] | None]] = {}
        """Per scope with a problem: its file, error and kept entries' notices as last told (told again on change)."""
        self._restart_listeners: Listeners[Listener[RestartRequired]] = Listeners()
        self._warning_listeners: Listeners[Listener[str]] = Listeners()
        self._targets: dict[WatchScope, Path] = {}
        self._due: dict[WatchScope, float] = {}
        self._last_event: dict[WatchScope, float] = {}
        self._quiet_until: dict[WatchScope, float] = {}
        """Per scope: the end of the window after its last reload that did something (events coalesce there)."""
        self._confirming: set[WatchScope] = set()
        """Scopes whose last read did not parse, read again once the whole window passed."""
        self._wake = anyio.Event()
        self._awatch_stop = anyio.Event()
        self._closing = False
        self._run_scope: anyio.CancelScope | None = None
        self._store_states: dict[WatchScope, FileState | None] = dict(store_states or {})
        """Per store: its file as last announced (or as the app read it: :func:`read_store_states`)."""
        self._exit_stack: AsyncExitStack | None = None

    def _target_of(self, scope: WatchScope) -> Path | None:
        """The file watched for ``scope``: a store's file, or an active settings scope's file (else None);
        absolute, as the OS watch reports its events."""
        if scope == "approvals" or scope == "tokens" or scope == "pins":  # STORE_SCOPES, spelled out for mypy
            return store_files(self._settings.paths)[scope].absolute()
        return self._settings.paths.of(scope).absolute() if self._settings.is_active(scope) else None

    def retarget(self) -> None:
        """Choose the watched files (again: the folder's trust changed, so its workspace settings and
        ``.mcp.json`` are watched, or no longer) and re-arm; every scope is re-read against memory."""
        self._targets = {scope: path for scope in self._scopes if (path := self._target_of(scope)) is not None}
        self._awatch_stop.set()

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def targets(self) -> Mapping[WatchScope, Path]:
        """The file watched for each scope (set when :meth:`run` starts)."""
        return dict(self._targets)

    # -- listeners

    def add_change_listener(self, fn: Listener[SettingsChanged]) -> Callable[[], None]:
        """Call ``await fn(event)`` for every :class:`SettingsChanged`; returns an unsubscribe function."""
        return self._change_listeners.add(fn)

    def add_ok_listener(self, fn: Listener[SettingsOk]) -> Callable[[], None]:
        """``fn`` hears when a file reported broken parses again (and was applied)."""
        return self._ok_listeners.add(fn)

    def add_error_listener(self, fn: Listener[SettingsError]) -> Callable[[], None]:
        """Call ``await fn(error)`` when a watched file fails to read or parse (file, line, column, message)."""
        return self._error_listeners.add(fn)

    def add_restart_listener(self, fn: Listener[RestartRequired]) -> Callable[[], None]:
        """Call ``await fn(notice)`` when changed settings need a restart to take effect."""
        return self._restart_listeners.add(fn)

    def add_warning_listener(self, fn: Listener[str]) -> Callable[[], None]:
        """Call ``await fn(message)`` on every save that keeps an invalid server entry's last good
        configuration (the file parsed; that one entry did not validate)."""
        return self._warning_listeners.add(fn)

    async def announce(self, event: SettingsChanged) -> None:
        """Tell the change listeners about a change that did not come through a watched file (settings
        applied from elsewhere, a store kept in a fleet): they act on it as on an edit."""
        await self._dispatch(self._change_listeners, event)

    # -- lifecycle

    async def __aenter__(self) -> SettingsWatcher:
        async with AsyncExitStack() as stack:
            tg = await stack.enter_async_context(anyio.create_task_group())
            await tg.start(self.run)
            self._exit_stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self.stop()
        stack, self._exit_stack = self._exit_stack, None
        if stack is None:
            return None
        return await stack.__aexit__(exc_type, exc, tb)

    def stop(self) -> None:
        """Stop a running watcher: the watch thread is told first, then :meth:`run` is cancelled."""
        self._closing = True
        self._awatch_stop.set()
        if self._run_scope is not None:
            self._run_scope.cancel()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled or :meth:`stop`-ped. Reports started once the first watch is armed."""
        if self._run_scope is not None:
            raise RuntimeError("this SettingsWatcher is already running")
        self._closing = False
        self.retarget()
        for store in STORE_SCOPES:
            if store in self._targets and store not in self._store_states:
                self._store_states[store] = await anyio.to_thread.run_sync(read_file_state, self._targets[store])
        for broken, error in self._settings.errors.items():  # the app told these when it loaded its settings
            if broken in self._targets:
                self._broken.add(broken)
                self._told[broken] = (
                    await anyio.to_thread.run_sync(read_file_state, self._targets[broken]),
                    error,
                    None,
                )
        with anyio.CancelScope() as scope:
            self._run_scope = scope
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._process_loop)
                    try:
                        await tg.start(self._watch_loop)
                        task_status.started()
                        await anyio.sleep_forever()
                    finally:
                        # Tell the watch thread before the cancellation reaches it (watchfiles
                        # otherwise waits for its timeout); see MCP-SDK-2.md pitfall 13.
                        self._closing = True
                        self._awatch_stop.set()
            finally:
                self._run_scope = None

    # -- watching

    def _watch_dirs(self) -> dict[WatchScope, tuple[Path, ...]]:
        return watch_folders(self._targets)

    async def _watch_loop(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        while not self._closing:
            current = self._watch_dirs()
            armed = folder_identities(folder for folders in current.values() for folder in folders)
            stop = anyio.Event()
            self._awatch_stop = stop
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._consume, current, stop)
                tg.start_soon(self._check_folders, armed, stop)
                # The consumer arms the OS watch in its first step, before it first suspends.
                await anyio.lowlevel.checkpoint()
                # A folder created between choosing the folders and arming the watch (another process's
                # `mkdir -p` before its write) sends the armed watch no event: choose again at once.
                if self._watch_dirs() != current:
                    stop.set()
                # Whatever changed while no watch was armed (before the first one, or events lost
                # while re-arming) is caught by re-reading every scope and comparing content.
                self._mark(current)
                if not started:
                    started = True
                    task_status.started()

    async def _check_folders(self, armed: Mapping[Path, FolderIdentity | None], stop: anyio.Event) -> None:
        """Re-arm when a watched folder is no longer the one watched: a folder symlink pointed elsewhere, or
        a folder above it renamed, sends the watch on the old folder nothing."""
        while not stop.is_set():
            with anyio.move_on_after(FOLDER_CHECK_S):
                await stop.wait()
            if not stop.is_set() and folder_identities(armed) != armed:
                logger.debug("a watched folder was replaced; re-arming")
                stop.set()

    async def _consume(self, current: dict[WatchScope, tuple[Path, ...]], stop: anyio.Event) -> None:
        try:
            await self._watch(current, stop)
        finally:
            stop.set()  # the watch ended: so does the check of its folders

    async def _watch(self, current: dict[WatchScope, tuple[Path, ...]], stop: anyio.Event) -> None:
        folders = sorted({folder for scope_folders in current.values() for folder in scope_folders})
        logger.debug("watching %s", ", ".join(map(str, folders)))
        try:
            watch = awatch(
                *folders,
                watch_filter=None,
                debounce=WATCHFILES_DEBOUNCE_MS,
                step=WATCHFILES_STEP_MS,
                stop_event=stop,
                recursive=False,
                force_polling=self._force_polling,
            )
            async with aclosing(watch) as batches:
                async for batch in batches:
                    if self._on_batch(batch, current):
                        stop.set()
                        return
        except FileNotFoundError as exc:
            if self._closing:
                return
            # A folder vanished between choosing it and arming the watch: choose again.
            logger.debug("could not watch %s (%s); re-arming", ", ".join(map(str, folders)), exc)
            await anyio.sleep(REARM_RETRY_S)
        except Exception as exc:
            if self._closing:
                return
            if not self._force_polling:
                # E.g. the inotify watch limit is reached: polling still works.
                logger.warning("cannot watch settings folders (%s); falling back to polling", exc)
                self._force_polling = True
            else:
                logger.warning("cannot watch settings folders (%s); retrying", exc)
                await anyio.sleep(FAILED_WATCH_RETRY_S)

    def _on_batch(self, batch: set[tuple[Change, str]], current: Mapping[WatchScope, tuple[Path, ...]]) -> bool:
        """Mark the scopes the events concern; return whether the watch must be re-armed."""
        scopes, rearm = classify_batch((raw for _change, raw in batch), self._targets)
        self._mark(scopes)
        return rearm or self._watch_dirs() != current

    def _mark(self, scopes: Iterable[WatchScope]) -> None:
        now = anyio.current_time()
        marked = False
        for scope in scopes:
            self._last_event[scope] = now
            self._confirming.discard(scope)
            quiet = self._quiet_until.get(scope, 0.0)
            self._due[scope] = quiet if quiet > now else now + min(SETTLE_S, self._debounce_s)
            marked = True
        if marked:
            self._wake.set()

    # -- reloading

    async def _process_loop(self) -> None:
        while True:
            if not self._due:
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            now = anyio.current_time()
            ready = sorted((scope for scope, due in self._due.items() if due <= now), key=self._due.__getitem__)
            if not ready:
                with anyio.move_on_after(min(self._due.values()) - now):
                    await self._wake.wait()
                if self._wake.is_set():
                    self._wake = anyio.Event()
                continue
            for scope in ready:
                del self._due[scope]
            for scope in ready:
                try:
                    await self._process(scope)
                except Exception:
                    logger.exception("reloading the %s settings failed", scope)

    async def _process(self, scope: WatchScope) -> None:
        if scope == "approvals" or scope == "tokens" or scope == "pins":  # STORE_SCOPES, spelled out for mypy
            state = await anyio.to_thread.run_sync(read_file_state, self._targets[scope])
            if state != self._store_states.get(scope):
                self._store_states[scope] = state
                logger.info("%s store changed: %s", scope, self._targets[scope])
                await self._dispatch(self._change_listeners, SettingsChanged(scope, ()))
            return
        generation = self._settings.generation(scope)
        read = await anyio.to_thread.run_sync(self._settings.read_scope, scope)
        if self._settings.generation(scope) != generation:
            self._mark([scope])  # written meanwhile (e.g. by the app): read again
            return
        gone = read.error is None and read.data is None and bool(self._settings.data(scope))
        if (read.error is not None or gone) and scope not in self._confirming:
            # Half a save (or one by rename, the new file not there yet)? Read it again after the whole window.
            self._confirming.add(scope)
            self._due[scope] = self._last_event.get(scope, anyio.current_time()) + self._debounce_s
            self._wake.set()
            return
        self._confirming.discard(scope)
        result = self._settings.apply(read)
        if result.changed or result.error is not None or result.kept:  # (else no window: see the module)
            self._quiet_until[scope] = quiet = anyio.current_time() + self._debounce_s
            if scope in self._due:  # a save heard while this read ran follows this reload: it waits for the window too
                self._due[scope] = max(self._due[scope], quiet)
        had_kept = bool((self._told.get(scope) or (None, None, ()))[2])  # (entries said invalid at its last read)
        told = kept_told = False
        if result.error is not None or result.kept:
            state = await anyio.to_thread.run_sync(read_file_state, self._targets[scope])
            last = self._told.get(scope)
            told = last is not None and last[0] == state and last[1] == result.error
            kept_told = told and last is not None and last[2] == tuple(result.kept)
            self._told[scope] = (state, result.error, tuple(result.kept))
        else:
            self._told.pop(scope, None)
        if result.error is not None:
            if told:
                logger.debug("%s settings re-read: still broken as told", scope)
                return
            logger.warning("%s; keeping the previous %s settings", result.error, scope)
            self._broken.add(scope)
            await self._dispatch(self._error_listeners, result.error)
            return
        if scope in self._broken or (had_kept and not result.kept):  # (a fix of its invalid entries too)
            self._broken.discard(scope)
            if read.data is not None:  # a broken file deleted is no file valid again (its removal is what applies)
                ok = SettingsOk(scope, self._targets[scope])
                logger.info("%s", ok)
                await self._dispatch(self._ok_listeners, ok)
        for notice in () if kept_told else result.kept:
            logger.warning("%s", notice)
            await self._dispatch(self._warning_listeners, notice)
        if not result.changed:
            logger.debug("%s settings re-read: no change", scope)
            return
        # Only settings files have restart-required keys (a server named "mcp" in .lsp.json is no setting).
        restart = tuple(p for p in result.changed if is_restart_required_key(p)) if scope in SETTINGS_SCOPES else ()
        if restart:
            logger.info("settings changed that need a restart (%s): %s", scope, ", ".join(restart))
            await self._dispatch(self._restart_listeners, RestartRequired(scope, restart))
        if len(restart) == len(result.changed):
            return
        logger.info("settings changed (%s): %s", scope, ", ".join(result.changed))
        await self._dispatch(self._change_listeners, SettingsChanged(scope, result.changed, restart))

    async def _dispatch(self, listeners: Listeners[Listener[E]], event: E) -> None:
        if not listeners:
            return
        async with anyio.create_task_group() as tg:
            for fn in listeners:
                tg.start_soon(self._call, fn, event)

    async def _call(self, fn: Listener[E], event: E) -> None:
        try:
            with anyio.fail_after(self._listener_timeout_s):
                await fn(event)
        except TimeoutError:
            logger.warning("settings listener %s timed out after %.0f s", listener_name(fn), self._listener_timeout_s)
        except Exception:
            logger.exception("settings listener %s failed", listener_name(fn))
