"""The language servers of one session: which run, which file goes to which, and what an edit changes
(SPEC §10; LSP.md §6.3–§6.5).

:meth:`LspManager.apply` takes a :class:`~mcpvisor.host.lsp.desired.LspDesiredState` and changes only what
the plan says: a server whose process-defining fields changed restarts (re-opening the documents it had
open), one whose ``settings`` changed is told live, one whose extension map or policy changed takes it in
place, every other keeps its process. A server that is not admitted (pending approval, rejected, excluded,
not allowed, or the folder untrusted) never starts. Servers start lazily on the first call for one of
their files (or at once with ``lsp.startup: eager``), stop after ``lsp.idleStopSeconds`` unused, and a
crashed one restarts with doubling pauses while ``restartOnCrash`` and ``maxRestarts`` allow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from mcpvisor.core.errors import McpvisorError
from mcpvisor.host.lsp.config import LspServerConfig
from mcpvisor.host.lsp.desired import LspDesiredState, LspPlan, plan_lsp_reconcile
from mcpvisor.host.settings.lsp_servers import SkippedLsp
from mcpvisor.host.status import APPROVE_HINT, fill_hint, lsp_hint, trust_hint

if TYPE_CHECKING:
    from mcpvisor.host.lsp.server import LanguageServer

__all__ = ["BACKOFF_INITIAL_S", "LspManager", "Unroutable"]

logger = logging.getLogger(__name__)

BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 30.0
"""A server that ran this long before it crashed starts its restart count afresh."""
IDLE_CHECK_S = 5.0
FAILED_START_REPORT_S = 2.0
"""Past its startupTimeout, how long a call waits for a server that did not answer ``initialize`` to be
killed and reported failed (rather than answer "starting" for a server that is about to fail)."""


RESTARTED = "its configuration changed: it restarts with the new one"
REMOVED = "its configuration changed or it was removed"
"""Why an edit stopped a server, as the requests it cut short say it (a retry goes to what the edit made)."""


class Unroutable(McpvisorError):
    """No running language server can answer for a file; ``str()`` says why and what to do."""


class LspManager:
    """Every language server of one workspace. Enter it (``async with``), then :meth:`apply` states."""

    def __init__(
        self,
        root: Path,
        *,
        log_dir: Path,
        trusted: bool = True,
        max_message_bytes: int | None = None,
        on_change: Callable[[LanguageServer], None] | None = None,
    ) -> None:
        self.root = root
        self.trusted = trusted
        self.approve_options = ""
        """What an approve command needs besides the name (a fleet's ``--fleet URL``)."""
        self.approve_home: str | None = None
        """The ``MCPVISOR_HOME`` an approve command is run with (:func:`~mcpvisor.host.paths.named_home`)."""
        self.approve_command = APPROVE_HINT
        """How the host says to approve an MCP server (``{name}``; :func:`~mcpvisor.host.status.fix_commands`): the
        fixes :meth:`why_not` gives, which reach clients in any folder, are made from it."""
        self.state = LspDesiredState()
        self.unreadable: Callable[[], list[str]] = list
        """The configuration files of language servers that do not parse now, each with where and why (its
        :class:`~mcpvisor.host.lsp.session.LspSession` reads them from the settings)."""
        self._log_dir = log_dir
        self._max_message_bytes = max_message_bytes
        self._on_change = on_change
        self._servers: dict[str, LanguageServer] = {}
        self._retiring: set[LanguageServer] = set()
        self._started_at: dict[LanguageServer, float] = {}
        self._idle: set[str] = set()
        """Servers stopped for being idle (they start again on the next call)."""
        self._passed_over: dict[LanguageServer, bool] = {}
        """Failed servers a call passes over while another server of their files answers (true once a call said
        so), until they start again: after their crash's pause, when their entry is saved, or on ``/reload``."""
        self._restart_at: dict[LanguageServer, float] = {}
        """When (``time.monotonic()``) each crashed server's pause ends and it starts again."""
        self._tg: anyio.abc.TaskGroup | None = None
        self.last_plan = LspPlan()

    async def __aenter__(self) -> LspManager:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._idle_loop)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._tg is not None
        with anyio.CancelScope(shield=True):
            await self._stop_all([*self._servers.values(), *self._retiring])
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        self._tg = None

    # -- views ------------------------------------------------------------------------------------

    def servers(self) -> dict[str, LanguageServer]:
        """The admitted servers by name (running or not)."""
        return dict(self._servers)

    def redact(self, text: str) -> str:
        """``text`` with every configured server's command and arguments as written and its env values hidden."""
        for server in [*self._servers.values(), *self._retiring]:
            text = server.config.redact(text)
        return text

    def is_idle(self, name: str) -> bool:
        return name in self._idle

    def configured(self) -> bool:
        """Whether any language server is configured that is not excluded or not allowed, or any entry is invalid
        (the tools show: a call says why a server cannot answer, and the fix)."""
        shown = any(self.state.reason(n) not in ("excluded", "not_allowed") for n in self.state.servers)
        return shown or bool(self.state.assembled.skipped)

    # -- reconcile ----------------------------------------------------------------------------------

    def apply(self, state: LspDesiredState) -> LspPlan:
        """Follow ``state`` (see the module). Quick: stops and starts run in the background."""
        assert self._tg is not None, "enter the manager first"
        self.state = state
        admitted = state.admitted() if self.trusted else {}
        plan = plan_lsp_reconcile({n: s.config for n, s in self._servers.items()}, admitted)
        for name in plan.remove:
            self._retire(self._servers.pop(name), REMOVED)
            self._idle.discard(name)
        for name in plan.restart:
            old = self._servers.pop(name)
            reopen = old.documents.paths() if old.state in ("starting", "ready") else []
            running = old.state in ("starting", "ready")
            self._retire(old, RESTARTED)
            self._servers[name] = server = self._new(name, admitted[name], reopen)
            if running or state.startup == "eager":
                self._start(server)
        for name in (*plan.reconfigure, *plan.update):
            self._tg.start_soon(self._servers[name].reconfigure, admitted[name])
        for name in plan.add:
            self._servers[name] = server = self._new(name, admitted[name], [])
            if state.startup == "eager":
                self._start(server)
        if state.startup == "eager":
            for name in plan.keep:
                if self._servers[name].state == "stopped" and name not in self._idle:
                    self._start(self._servers[name])
        self.last_plan = plan
        if any((plan.add, plan.remove, plan.restart, plan.reconfigure, plan.update)):
            logger.info(
                "language servers: %s",
                ", ".join(
                    f"{what} {', '.join(names)}"
                    for what, names in (
                        ("added", plan.add),
                        ("removed", plan.remove),
                        ("restarted", plan.restart),
                        ("reconfigured", plan.reconfigure),
                        ("updated", plan.update),
                    )
                    if names
                ),
            )
        return plan

    def _new(self, name: str, config: LspServerConfig, reopen: list[Path]) -> LanguageServer:
        # Imported with the first server: a host without language servers keeps neither the client nor its
        # modules in memory (about 1 MB).
        from mcpvisor.host.lsp.server import LanguageServer

        return LanguageServer(
            name,
            config,
            root=self.root,
            log_dir=self._log_dir,
            on_change=self._changed,
            max_message_bytes=self._max_message_bytes,
            reopen=reopen,
        )

    def _retire(self, server: LanguageServer, why: str) -> None:
        assert self._tg is not None
        self._started_at.pop(server, None)  # (the last reference to a replaced server and its documents)
        if server.state in ("starting", "ready", "stopping"):
            self._retiring.add(server)
            self._tg.start_soon(self._stop_retired, server, why)
        self._changed(server)

    async def _stop_retired(self, server: LanguageServer, why: str) -> None:
        try:
            await server.stop(why)
        finally:
            self._retiring.discard(server)

    async def _stop_all(self, servers: list[LanguageServer]) -> None:
        async with anyio.create_task_group() as tg:
            for server in servers:
                if server.state in ("starting", "ready", "stopping"):
                    tg.start_soon(server.stop)

    def _start(self, server: LanguageServer) -> None:
        assert self._tg is not None
        self._idle.discard(server.name)
        self._passed_over.pop(server, None)
        self._restart_at.pop(server, None)
        self._started_at[server] = time.monotonic()
        server.start(self._tg)

    # -- routing ------------------------------------------------------------------------------------

    def candidates(self, path: Path) -> list[LanguageServer]:
        """The admitted servers for ``path`` by its extension, by name (a call goes to the first that can answer
        it); :class:`Unroutable` explains when there is none."""
        ext = path.suffix.lower()
        matching = sorted(n for n, cfg in self.state.servers.items() if ext in cfg.extension_to_language)
        admitted = [self._servers[n] for n in matching if n in self._servers]
        if admitted:
            return admitted
        invalid = [bad for bad in self.state.assembled.skipped.values() if ext and ext in bad.extensions]
        if not matching and invalid:  # (what the user meant to answer it: its entry says why not and the fix)
            raise Unroutable(_invalid(invalid[0], ext))
        if not matching:
            shown = (n for n in self.state.servers if self.state.reason(n) not in ("excluded", "not_allowed"))
            known = sorted({e for n in shown for e in self.state.servers[n].extension_to_language})
            hint = f" (configured for: {', '.join(known)})" if known else ""
            bad = "".join(f"; {_invalid(b)}" for b in self.state.assembled.skipped.values()) if not known else ""
            raise Unroutable(f"no language server for {ext or 'extensionless'!r} files{hint}{bad}")
        raise Unroutable(self.why_not(matching[0]))

    def held_back(self, path: Path | None, *, language: str | None = None) -> list[str]:
        """Why each server configured for ``path``'s extension (None: any; ``language``: for it) that is not
        admitted cannot answer (waiting for approval, rejected, untrusted folder), with the fix; an excluded or not
        allowed one is the user's choice."""
        ext = path.suffix.lower() if path is not None else None
        names = sorted(
            n
            for n, cfg in self.state.servers.items()
            if (ext is None or ext in cfg.extension_to_language)
            and (language is None or language.lower() in (lang.lower() for lang in cfg.languages()))
        )
        held = (n for n in names if n not in self._servers)
        invalid = [b for b in self.state.assembled.skipped.values() if ext in (None, *b.extensions) and not language]
        return [
            *(self.why_not(n) for n in held if self.state.reason(n) not in ("excluded", "not_allowed")),
            *(_invalid(bad) for bad in invalid),
        ]

    def why_not(self, name: str) -> str:
        """Why the configured server ``name`` cannot answer, with the fix."""
        if not self.trusted:
            return (
                f"language server {name!r} does not start: the folder {self.root} is not trusted; "
                f"run: {trust_hint(self.approve_command)}"
            )
        reason = self.state.reason(name)
        if reason == "pending_approval":
            return f"language server {name!r} needs approval — run: {fill_hint(lsp_hint(self.approve_command), name)}"
        if reason == "rejected":
            return (
                f"language server {name!r} was rejected — edit its configuration to be asked again, or run: "
                f"{fill_hint(lsp_hint(self.approve_command), name)}"
            )
        if reason == "excluded":
            why = self.state.gating.why_excluded(name) or "remove it from lsp.excluded in your settings"
            return f"language server {name!r} is excluded: {why}"
        if reason == "not_allowed":
            why = self.state.gating.why_not_allowed(name) or "add it to lsp.allowed in your settings"
            return f"language server {name!r} is not allowed: {why}"
        return f"language server {name!r} is not configured"

    GIVEN_UP_FIX = "it starts again when its entry is saved (or on /reload in the shell)"
    """What starts a server again that crashed too often in a row for a call to start it."""

    @staticmethod
    def given_up(server: LanguageServer) -> bool:
        """Whether ``server`` crashed too often in a row to be started by a call (until its entry is saved)."""
        return server.state == "failed" and server.crashes > max(server.config.restarts_allowed, 1)

    def retry_given_up(self) -> None:
        """Let the next call start each server given up after crashing too often in a row, and each failed one
        passed over for another (``/reload``)."""
        self._passed_over.clear()
        for server in self._servers.values():
            if self.given_up(server):
                server.crashes = 0

    def passed_over(self, server: LanguageServer) -> bool:
        """Whether ``server`` failed and waits to be started again (its crash's pause, a save of its entry,
        ``/reload``): a call goes to another server of its files meanwhile, rather than fail on it again."""
        return server.state == "failed" and server in self._passed_over

    def answering_for(self, server: LanguageServer) -> list[str]:
        """The other servers, by name, that answer for files of ``server`` while it is passed over (none: it is
        not, or no other that has not failed takes one of its extensions)."""
        if not self.passed_over(server):
            return []
        extensions = server.config.extension_to_language.keys()
        return sorted(
            name
            for name, other in self._servers.items()
            if other is not server and other.state != "failed" and extensions & other.config.extension_to_language
        )

    def restarts_in(self, server: LanguageServer) -> float | None:
        """Seconds until the crashed ``server``'s pause ends and it starts again (None: no restart is coming; a save
        of its entry or ``/reload`` starts it)."""
        at = self._restart_at.get(server)
        return None if at is None or server.state != "failed" else max(at - time.monotonic(), 0.0)

    def fallback_notice(self, failed: LanguageServer, answered: LanguageServer) -> str | None:
        """What a call answered by ``answered`` says of ``failed``, passed over: once per failure (else None)."""
        if self._passed_over.get(failed, True):
            return None
        self._passed_over[failed] = True
        pause = failed.crashes <= failed.config.restarts_allowed  # (else a save of its entry or /reload starts it)
        again = "after a pause" if pause else self.GIVEN_UP_FIX.removeprefix("it starts again ")
        return (
            f"language server {failed.name!r} failed — {failed.last_error}; {answered.name!r} answers for its files "
            f"until it starts again {again}"
        )

    async def ready(self, server: LanguageServer) -> None:
        """Start ``server`` if it is not running and wait until it answers, up to its ``startupTimeout``.
        Raises :class:`Unroutable` saying it is starting, or why it failed."""
        await server.wait_stopped()  # a call right after an idle stop (or a crash) began: once it ended
        if self.given_up(server):
            raise Unroutable(
                f"language server {server.name!r} failed {server.crashes} times in a row — {server.last_error}; "
                f"{self.GIVEN_UP_FIX}"
            )
        if server.state in ("stopped", "failed"):
            self._start(server)
        if not await server.wait_ready(server.config.startup_timeout_s + FAILED_START_REPORT_S):
            if server.state == "starting":
                raise Unroutable(f"server {server.name!r} is starting (indexing); retry in a few seconds")
            raise Unroutable(f"language server {server.name!r} failed — {server.last_error}")

    # -- crashes and idleness ------------------------------------------------------------------------

    def _changed(self, server: LanguageServer) -> None:
        if server.state == "failed" and self._servers.get(server.name) is server:
            self._passed_over.setdefault(server, False)
            started = self._started_at.pop(server, None)
            stable = started is not None and time.monotonic() - started >= STABLE_AFTER_S
            server.crashes = 1 if stable else server.crashes + 1
            if server.crashes <= server.config.restarts_allowed and self._tg is not None:
                pause = min(BACKOFF_INITIAL_S * 2 ** (server.crashes - 1), BACKOFF_MAX_S)
                logger.info("language server %r crashed; restarting in %g s", server.name, pause)
                self._restart_at[server] = time.monotonic() + pause
                self._tg.start_soon(self._restart_later, server, pause, server.crashes)
        elif server.state == "ready" and self._servers.get(server.name) is server:
            self._started_at.setdefault(server, time.monotonic())
        if self._on_change is not None:
            self._on_change(server)

    async def _restart_later(self, server: LanguageServer, pause: float, crashes: int) -> None:
        """Start ``server`` again after ``pause``, unless it was started meanwhile (a call starts it at once): a
        later crash decides for itself, and one past ``maxRestarts`` is not undone by this earlier one's pause."""
        await anyio.sleep(pause)
        if self._servers.get(server.name) is server and server.state == "failed" and server.crashes == crashes:
            self._start(server)
        elif server.crashes == crashes:  # (not after a later crash: that one's pause stands)
            self._restart_at.pop(server, None)

    async def _idle_loop(self) -> None:
        while True:
            await anyio.sleep(IDLE_CHECK_S)
            limit = self.state.idle_stop_s
            if not limit:
                continue
            now = time.monotonic()
            for name, server in list(self._servers.items()):
                if server.state == "ready" and not server.busy() and now - server.last_used >= limit:
                    logger.info("language server %r idle for %.0f s: stopping it", name, limit)
                    self._idle.add(name)
                    await server.stop(
                        f"it was unused for {limit:g} s: stopped as idle, it starts again on the next call"
                    )
                    self._changed(server)


def _invalid(bad: SkippedLsp, ext: str | None = None) -> str:
    """Why the language server of an invalid entry does not answer (``ext``: for those files), with the fix."""
    where = f" in {bad.path}" if bad.path is not None else ""
    files = f" for {ext!r} files" if ext else ""
    return f"language server {bad.name!r}{files} is not started: its entry{where} is invalid — {bad.problem}"
