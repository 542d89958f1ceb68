"""Host events as short lines for people: ``mcpvisor run``, ``serve``'s notices and the shell (SPEC §9).

One line per change once the first discovery is over, the status table when it is; secrets never appear.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable

from rich.console import Console
from rich.markup import escape

from mcpvisor.core.errors import NotRunningError
from mcpvisor.core.events import ReconcileFinished, ServerStateChanged
from mcpvisor.core.server_config import CONNECTION_FIELDS, McpServerConfig
from mcpvisor.core.spellings import file_name
from mcpvisor.host.host import Host, HostEvent, Ready, SettingsWarning
from mcpvisor.host.hot_reload import McpDefinitionsAccepted, McpPendingApprovalChanged, McpReloadFailed
from mcpvisor.host.lsp.events import LspPendingApprovalChanged, LspServerChanged
from mcpvisor.host.paths import named_home
from mcpvisor.host.settings.loader import SettingsError
from mcpvisor.host.status import (
    APPROVE_HINT,
    LOGIN_HINT,
    event_as_said_here,
    fill_hint,
    in_home,
    log_hint,
    lsp_hint,
    plural,
    trust_hint,
    with_options,
)
from mcpvisor.host.watcher import RestartRequired, SettingsOk
from mcpvisor.shell.views import approving_waits, render_lsp_status, render_status

__all__ = ["HumanOutput", "changed_fields"]


def changed_fields(old: McpServerConfig | None, new: McpServerConfig | None) -> list[str]:
    if old is None or new is None:
        return []
    changed = [
        new.written_name(f) or old.written_name(f) or file_name(f)
        for f in CONNECTION_FIELDS
        if getattr(old, f) != getattr(new, f)
    ]
    return changed or ["connection settings"]


class HumanOutput:
    """Short lines per change; a status table once ready."""

    def __init__(
        self,
        host: Host,
        console: Console,
        *,
        on_ready: Callable[[], None] | None = None,
        approve_command: str | None = None,
        login_command: str | None = None,
        where: str | None = None,
    ) -> None:
        self._host = host
        self._console = console
        self._where = where
        """The workspace every line names (a gateway serving several), or None."""
        self._on_ready = on_ready
        self._approve_command_given = approve_command
        self._login_command_given = login_command
        """How its lines say to sign in (``{name}``), e.g. the shell's ``/login {name}``; None: the host's command."""
        self._ready = False
        self._servers: dict[str, McpServerConfig] = {}
        self._announced: set[str] = set()
        self._lsp_announced: set[str] = set()
        self._gated: dict[str, str] = {}
        """The gating reason last said per server: a reload that leaves it as it was says nothing."""
        self._failures: dict[str, str] = {}
        """The start failure last said per server: a retry that fails the same way says nothing."""
        self._starting: set[str] = set()
        """Servers a reconcile left starting (another change went first): their end is said when it comes."""
        self._said_starting: set[str] = set()  # of those, the ones said to be still starting
        self._starting_as: dict[str, str] = {}  # of those, the connection id each was starting with (when known)
        self._down: set[str] = set()
        """The servers said to have disconnected: their reconnect is said too."""
        self._unreached: set[str] = set()
        """Remote servers that failed to start (tried again by themselves): their coming up is said."""
        self._up: set[str] = set()
        """The servers connected since last said: only they can be said to have disconnected (a start that
        failed is said by the reconcile's 'failed to start')."""
        self._said_up: set[str] = set()
        """Down or unreached servers said to have come up: the pass that retried them does not say it again."""
        self._held_why: dict[str, str] = {}
        """Why each connected server's definitions are held, as last said (their pins could not be saved)."""
        self._listing_warning: dict[str, str] = {}
        """What is wrong with each connected server's latest listing, as last said (or shown in the status table)."""
        self._warned: set[str] = set()
        """The warnings said: a server's definitions held for one of them do not say it again."""

    @property
    def _approve_command(self) -> str:
        """The approve command to print (``{name}``): the shell's own ``/approve {name}`` when given one, else
        :attr:`_cli_approve_command`."""
        given = self._approve_command_given
        return given if given is not None and given.startswith("/") else self._cli_approve_command

    @property
    def _cli_approve_command(self) -> str:
        """The ``mcpvisor mcp approve`` command to paste in any terminal (``{name}``), deciding where the host's
        decisions are kept."""
        options = f" --workspace {shlex.quote(str(self._host.root))}{self._host.approvals.decided_with}"
        given = self._approve_command_given
        if given is None or given.startswith("/"):
            given = in_home(APPROVE_HINT, named_home(self._host.options.env))
        return with_options(given, options)

    @property
    def _login_command(self) -> str:
        """The login command to print (``{name}``), naming the workspace as the approve command does (and the
        home, the fleet the sign-ins are kept in), unless it was given one."""
        if self._login_command_given is not None:
            return self._login_command_given
        options = f" --workspace {shlex.quote(str(self._host.root))}{self._host.approvals.decided_with}"
        return in_home(with_options(LOGIN_HINT, options), named_home(self._host.options.env))

    def forget_failures(self) -> None:
        """An explicit retry follows (``/reload``): a start that fails again as before is said again."""
        self._failures.clear()

    def _say(self, line: str) -> None:  # soft-wrapped: a command in it stays one line to copy, however long
        self._console.print(f"[dim]{escape(self._where)}:[/] {line}" if self._where else line, soft_wrap=True)

    def _say_held_why(self, event: ServerStateChanged) -> None:
        """Why a connected server's definitions are held, once each time it changes (their pins could not be saved;
        changed definitions are said by the status view: that is not a change)."""
        if (
            event.held_why
            and self._held_why.get(event.server) != event.held_why
            and event.held_why not in self._warned  # (an unread pin store, said once for every server it holds)
            and event.held_why not in self._held_why.values()
        ):
            self._say(f"[yellow]! {escape(event.held_why)}[/]")
        if event.held_why:
            self._held_why[event.server] = event.held_why
        elif (gone := self._held_why.pop(event.server, None)) not in self._held_why.values():
            self._warned.discard(gone or "")  # fixed: said again if it comes back

    def _say_listing_warning(self, event: ServerStateChanged) -> None:
        """What is wrong with a connected server's latest listing, once each time it changes (the status table shown
        when ready says it of the first listings)."""
        if event.warning and self._listing_warning.get(event.server) != event.warning and self._ready:
            self._say(f"[yellow]! {escape(str(event.server))}: {escape(event.warning)}[/]")
        if event.warning:
            self._listing_warning[event.server] = event.warning
        else:
            self._listing_warning.pop(event.server, None)

    def _connection_of(self, name: str) -> str | None:
        try:
            client = self._host.config.manager.get_client(name)
        except NotRunningError:
            return None
        return client.connection_id if client is not None else None

    def _note_connections(self, names: Iterable[str]) -> None:
        for name in names:
            if (connection := self._connection_of(name)) is not None:
                self._starting_as[name] = connection
            else:
                self._starting_as.pop(name, None)

    def _started_again(self, name: str) -> bool:
        """Whether what came up of ``name`` is another connection than the start said to be still starting: a later
        pass restarted it (its configuration changed meanwhile), and says so itself."""
        before = self._starting_as.pop(name, None)
        return before is not None and before != self._connection_of(name)

    def __call__(self, event: HostEvent) -> None:
        if self._login_command_given is not None:  # its errors say to sign in as its other lines do
            try:
                event = event_as_said_here(self._host.config, event, self._login_command_given)
            except NotRunningError:  # a server's last words as the session stops
                pass
        if isinstance(event, ReconcileFinished):
            current = self._host.config.get_mcp_servers()
            self._said_starting &= self._starting  # (a start that ended since: the next one is said again)
            self._starting |= set(event.starting)  # (the first pass's: the status table shows them connecting)
            self._note_connections(event.starting)
            if self._ready:
                # (a failed server whose entry changed is retried and restarted: the restart's line says it)
                for name in (n for n in (*event.added, *event.retried) if n not in {*event.starting, *event.restarted}):
                    failed = event.failed.get(name)
                    if failed:
                        reason = failed.split(": ", 1)[-1]
                        if self._failures.get(name) != reason:
                            self._say(f"[red]✗ {escape(str(name))} failed to start:[/] {escape(str(reason))}")
                        self._failures[name] = reason
                    else:
                        self._failures.pop(name, None)
                        tools = len(self._host.config.tool_registry.tools_of(name))
                        verb = "connected" if name in event.retried else "added"
                        if name not in self._said_up:
                            self._say(f"[green]+ {verb} {escape(str(name))}[/] ({plural(tools, 'tool')})")
                for name in event.removed:
                    self._say(f"[yellow]- removed {escape(str(name))}[/]")
                for name in event.restarted:
                    fields = ", ".join(changed_fields(self._servers.get(name), current.get(name)))
                    if (failed := event.failed.get(name)) and name not in event.starting:
                        reason = failed.split(": ", 1)[-1]  # (said even as before: it is another configuration's)
                        self._failures[name] = reason
                        said = f"({escape(fields)} changed): {escape(reason)}"
                        self._say(f"[red]✗ {escape(str(name))} failed to restart[/] {said}")
                    else:
                        if name not in event.starting:
                            self._failures.pop(name, None)
                        self._say(f"[cyan]↻ restarted {escape(str(name))}[/] ({escape(fields)} changed)")
                for name in (n for n in event.starting if n not in self._said_starting):  # once, after its restart
                    if name in event.retried and name in self._failures:
                        continue  # a retry of a failed start: said if it ends otherwise (as one a pass sees end)
                    self._say(f"[dim]◌ {escape(str(name))} is still starting[/]")  # how it ends is said when it does
                self._said_starting |= set(event.starting)
                for name in event.refiltered:
                    self._say(f"[cyan]~ {escape(str(name))}: tool filters changed, re-filtered in place[/]")
                for name, reason in event.gated.items():
                    reason = self._host.refine_reason(name, reason) or reason
                    if self._gated.get(name) == reason:
                        continue  # said already; nothing changed for it
                    if reason == "excluded":
                        why = self._host.config.get_mcp_gating().why_excluded(name)
                        said = f" — {why}" if why else " (in mcp.excluded)"
                        self._say(f"[dim]○ {escape(str(name))} disabled{escape(said)}[/]")
                    elif reason == "not_allowed":
                        why = self._host.config.get_mcp_gating().why_not_allowed(name)
                        self._say(f"[dim]○ {escape(str(name))} not allowed{escape(f' — {why}' if why else '')}[/]")
                    elif reason == "rejected":
                        fix = fill_hint(self._approve_command, name)
                        self._say(
                            f"[red]✗ {escape(str(name))} rejected — edit its config to be asked again, "
                            f"or approve it after all: {escape(fix)}[/]",
                        )
            # A remote server that could not be reached is tried again by itself: its coming up is said (what this
            # pass started or stopped, it said).
            self._down -= {*event.added, *event.retried, *event.restarted, *event.removed}
            self._unreached -= {*event.added, *event.retried, *event.restarted, *event.removed}
            self._unreached |= {n for n in event.failed if (e := current.get(n)) is not None and e.transport != "stdio"}
            self._said_up -= {*event.added, *event.retried, *event.restarted, *event.removed, *event.starting}
            self._servers = current
            self._gated = {n: self._host.refine_reason(n, r) or r for n, r in event.gated.items()}
            for name in event.removed:
                self._failures.pop(name, None)
            self._announced &= {n for n, r in event.gated.items() if r == "pending_approval"}
        elif isinstance(event, McpPendingApprovalChanged):
            # People get one line per server each time it starts waiting, not one per reconcile.
            fresh = [name for name in event.servers if name not in self._announced]
            self._announced = set(event.servers)
            if not self._ready:
                return  # the status table shown when ready says it, with the command
            held = self._host.approvals.error  # decisions that cannot be read: held, whatever they say
            for name in fresh:
                if held is not None:
                    self._say(f"[yellow]? {escape(str(name))} is held until its decision can be read (see above)[/]")
                    continue
                fix = fill_hint(self._approve_command, name)
                self._say(f"[yellow]? {escape(str(name))} needs approval — run: {escape(str(fix))}[/]")
        elif isinstance(event, LspPendingApprovalChanged):
            fresh = [name for name in event.servers if name not in self._lsp_announced]
            self._lsp_announced = set(event.servers)
            if not self._ready:
                return  # the status table shown when ready says it
            for name in fresh:
                fix = fill_hint(lsp_hint(self._approve_command), name)
                self._say(f"[yellow]? language server {escape(str(name))} needs approval — run: {escape(fix)}[/]")
        elif isinstance(event, LspServerChanged) and self._ready:
            if event.state == "ready":
                self._say(
                    f"[green]● language server {escape(str(event.server))} ready[/] (pid {escape(str(event.pid))})"
                )
            elif event.state.startswith("failed") and event.error:  # or "failed 2 times in a row; …"
                self._say(f"[red]✗ language server {escape(str(event.server))} failed: {escape(str(event.error))}[/]")
            elif event.state == "removed":
                self._say(f"[yellow]- removed language server {escape(str(event.server))}[/]")
        elif isinstance(event, SettingsError):
            self._say(
                f"[red]✗ {escape(str(event))} — until it is fixed, its last good content (if any) stays in force[/]"
            )
        elif isinstance(event, SettingsOk):
            self._say(f"[green]✓ {escape(str(event))}[/]")
        elif isinstance(event, SettingsWarning):
            if event.message not in self._held_why.values():  # (said already as why definitions are held)
                self._say(f"[yellow]! {escape(str(event.message))}[/]")
            self._warned.add(event.message)
        elif isinstance(event, RestartRequired):
            where = escape(str(self._host.settings.paths.of(event.scope)))
            keys = escape(str(", ".join(event.paths)))
            self._say(f"[yellow]! {keys} in {where} take effect when mcpvisor restarts (other changes were applied)[/]")
        elif isinstance(event, McpReloadFailed):
            self._say(f"[red]✗ {escape(str(event.message))} ({escape(str(event.detail))})[/]")
        elif isinstance(event, McpDefinitionsAccepted) and self._ready:  # (accepted elsewhere: nothing else says it)
            parts = ((event.tools, "tool"), (event.prompts, "prompt"))
            served = " and ".join(plural(len(names), what) for names, what in parts if names)
            self._say(
                f"[green]✓ accepted the changed definitions of {escape(str(event.server))}:[/] {served} served again"
            )
        elif isinstance(event, ServerStateChanged) and event.server in self._starting and event.status != "connecting":
            self._starting.discard(event.server)
            if event.status == "connected":
                self._up.add(event.server)
                self._failures.pop(event.server, None)
                if not self._started_again(event.server):  # (a later pass's restart: that pass says it)
                    self._say(f"[green]+ connected {escape(str(event.server))}[/] ({plural(len(event.tools), 'tool')})")
                self._held_why.pop(event.server, None)  # (a start says it again)
                self._listing_warning.pop(event.server, None)
                self._say_held_why(event)
                self._say_listing_warning(event)
            elif event.error:
                if self._failures.get(event.server) != event.error:  # (a retry that fails the same way: nothing)
                    self._say(f"[red]✗ {escape(str(event.server))} failed to start:[/] {escape(str(event.error))}")
                self._failures[event.server] = event.error
                if (cfg := self._servers.get(event.server)) is not None and cfg.transport != "stdio":
                    self._unreached.add(event.server)  # tried again by itself: its coming up is said
        elif isinstance(event, ServerStateChanged) and event.status != "disconnected":
            if event.status == "connecting":  # starting again (a restart): a failure now is a start's, said as one
                self._up.discard(event.server)
            elif event.status == "connected":
                self._up.add(event.server)
                count = plural(len(event.tools), "tool")
                if event.server in self._down:  # back (its reconnect): the last word said of it must not be "lost"
                    self._down.discard(event.server)
                    self._said_up.add(event.server)
                    self._say(f"[green]+ {escape(str(event.server))} connected again[/] ({count})")
                elif event.server in self._unreached:  # up at last (tried again by itself, or by a pass)
                    self._unreached.discard(event.server)
                    self._said_up.add(event.server)
                    self._say(f"[green]+ connected {escape(str(event.server))}[/] ({count})")
                self._say_held_why(event)  # (a later listing's pins that could not be saved, as at its start)
                self._say_listing_warning(event)
        elif isinstance(event, ServerStateChanged) and self._ready and event.error and event.server in self._up:
            self._up.discard(event.server)
            self._said_up.discard(event.server)
            self._down.add(event.server)
            try:
                client = self._host.config.manager.clients().get(event.server)
            except NotRunningError:  # a server's last words as the session stops: its log is not named
                client = None
            cfg = self._servers.get(event.server)
            log = str(client.log_path) if client is not None else None
            said = event.error + log_hint(event.error, log, cfg.transport if cfg is not None else "stdio")
            self._say(f"[red]✗ {escape(str(event.server))} disconnected: {escape(said)}[/]")
        elif isinstance(event, Ready):
            self._ready = True
            hint = self._approve_command + approving_waits(self._host)
            title = f"MCP servers of {self._where}" if self._where else "MCP servers"
            unread = bool(self._host.settings.errors)
            render_status(
                self._console,
                self._host.server_views(),
                title=title,
                approve_hint=hint,
                login_hint=self._login_command,
                unreadable=unread,
                trust=trust_hint(self._cli_approve_command),  # (the shell has no command that trusts a folder)
            )
            render_lsp_status(self._console, self._host.lsp.views(), tools=self._host.lsp.tools_served_as())
            if self._on_ready is not None:
                self._on_ready()
