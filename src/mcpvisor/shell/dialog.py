"""The approval dialog: asks about each project or workspace server waiting for a decision, at start-up
or mid-session, and persists the answer (SPEC §7, §9 "Approval dialog").

The queue is recomputed from the live server map and the approvals store (never from names alone):
a server whose configuration changed after it was shown is asked about again, with the new details, and an answer
begun before that decides nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rich.console import Console
from rich.text import Text

from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import is_gated
from mcpvisor.host.decisions import ChangedSinceShown, Decided, DecidedSinceShown, Verdict
from mcpvisor.host.host import Host
from mcpvisor.host.hot_reload import strictly_promptable
from mcpvisor.host.lsp.config import LSP_KEY_PREFIX
from mcpvisor.host.pin_review import Change, HeldChangedSinceShown
from mcpvisor.host.status import plural
from mcpvisor.shell.approval import (
    ApprovalQueue,
    ApprovalRequest,
    QueueChange,
    approval_request,
    lsp_approval_request,
    parse_choice,
    render_approval_request,
    render_question,
    shown_name,
)
from mcpvisor.shell.commands import ArgumentError, split_name
from mcpvisor.shell.views import render_definition_changes

__all__ = ["ApprovalDialog"]


class ApprovalDialog:
    """The dialog's state over one host. ``gated`` is the session's map of servers it already told
    the user are gated (a rejection said here is not repeated by the reconcile summary)."""

    def __init__(self, host: Host, console: Console, gated: dict[str, str]) -> None:
        self.host = host
        self.console = console
        self._gated = gated
        self._queue = ApprovalQueue()
        self._stamps: dict[str, str] = {}
        self._ready = False
        self.asked: str | None = None
        """The server whose question is open (answers go to :meth:`answer`)."""
        self.question_shown = False
        """Whether the open question is the last thing on screen."""
        self._deciding: frozenset[str] = frozenset()
        """The servers an answer is deciding on now: their leaving the queue is the answer's, said by it."""

    def open(self) -> None:
        """The first discovery is shown: from now on waiting servers are asked about."""
        self._ready = True

    def promptable(self) -> dict[str, str]:
        """Strictly promptable servers now (name -> approval hash), from the live map and the store."""
        if not self.host.settings.trusted:
            return {}  # nothing starts in an untrusted folder: asking would promise what cannot happen
        state = self.host.state
        names = strictly_promptable(state, self.host.approvals, self.host.root, self.host.config.get_mcp_gating())
        waiting = {name: state.assembled.servers[name].approval_hash for name in names}
        lsp = self.host.lsp.state
        waiting.update({f"{LSP_KEY_PREFIX}{n}": lsp.servers[n].approval_hash for n in lsp.promptable()})
        return waiting

    def refresh(self, announced: Collection[str] | None = ()) -> None:
        """Recompute the queue; ``announced=None`` announces every promptable server (start-up)."""
        if not self._ready:
            return  # the dialog opens once the first discovery is shown
        promptable = self.promptable()
        change = self._queue.refresh(promptable, promptable if announced is None else announced)
        self._present(change, promptable)

    def _present(self, change: QueueChange, promptable: Collection[str]) -> None:
        for name in change.dropped:
            if name in self._deciding:
                continue
            why = (
                "it was removed from the configuration"
                if self._configured(name) is None
                else "its configuration changed"
                if name in promptable
                else "it was decided elsewhere or is no longer admitted"
            )
            self.console.print(Text(f"  no decision needed for {shown_name(name)} any more: {why}", style="dim"))
            if name == self.asked:
                self.asked = None
        for name in change.added:
            render_approval_request(self.console, self.request(name))
        if not self._deciding:  # else the answer asks next, once it is done
            self.ask_next(force=bool(change.added))  # new details pushed the question out of sight

    def ask_next(self, *, force: bool = False) -> None:
        """Ask about the first waiting server, unless that question is already the open one."""
        head = self._queue.head
        if head is None:
            self.asked = None
            return
        if head[0] == self.asked and not force:
            return
        self.asked = head[0]
        for waiting, _ in self._queue.snapshot():  # the decisions as shown: one made meanwhile is not overwritten
            if not waiting.startswith(LSP_KEY_PREFIX):
                self._stamps[waiting] = self.host.approvals.stamp(self.host.root, waiting)
        render_question(self.console, head[0], waiting=len(self._queue))
        self.question_shown = True

    def shown(self) -> tuple[tuple[str, str], ...]:
        """What the dialog asks about now: each waiting server with the hash of the configuration shown for it, the
        first the one asked about (an answer begun now is an answer to this)."""
        return self._queue.snapshot()

    async def answer(self, line: str, seen: Sequence[tuple[str, str]] | None = None) -> None:
        """Answer the open question; ``seen``: what the dialog asked when the answer was begun (:meth:`shown`). An
        answer begun before the question changed (its server's configuration changed, another server came first, or,
        for approve all, the servers waiting changed) decides nothing: the question is asked again."""
        head = self._queue.head
        if head is None:
            self.asked = None
            return
        name, shown = head
        choice = parse_choice(line)
        if choice is None:
            self.console.print(
                Text(f"  answer a (approve {name}), A (approve all), r (reject) or s (skip) — or run a /command"),
            )
            return
        if seen is not None and (tuple(seen) != self.shown() if choice == "approve_all" else seen[:1] != (head,)):
            self.console.print(
                Text("✗ not answered: the question changed while the answer was typed; answer again", style="yellow")
            )
            return
        if choice == "skip":
            self._queue.skip(name)
            self.console.print(Text(f"  skipped {name}: it stays pending; /approve {name} when ready", style="dim"))
        elif choice == "approve_all":
            waiting = self._queue.snapshot()
            self._deciding = frozenset(key for key, _ in waiting)
            try:
                for key, waiting_hash in waiting:
                    stamp = self._stamps.pop(key, None)
                    await self.decide(key, "approve", shown_hash=waiting_hash, shown_stamp=stamp, shown_changes=())
            finally:
                self._deciding = frozenset()
        else:  # the dialog shows no held definitions: approving here accepts none (/approve NAME shows them)
            self._deciding = frozenset({name})
            try:
                await self.decide(
                    name, choice, shown_hash=shown, shown_stamp=self._stamps.pop(name, None), shown_changes=()
                )
            finally:
                self._deciding = frozenset()
        self.ask_next()

    async def decide_by_command(self, decision: Verdict, argument: str) -> None:
        """``/approve NAME`` or ``/reject NAME``: show what is decided on (a server's entry, the definitions it changed
        since approval), then decide for it as shown; ``lsp:NAME`` (or a name only a language server has) decides on
        a language server."""
        name, rest = split_name(argument)
        if not name or rest:
            raise ArgumentError(f"usage: /{decision} NAME (lsp:NAME for a language server)")
        state = self.host.state
        if (
            not name.startswith(LSP_KEY_PREFIX)
            and name not in state.assembled.servers
            and name in self.host.lsp.state.servers
        ):
            name = f"{LSP_KEY_PREFIX}{name}"  # only a language server has that name
        if name.startswith(LSP_KEY_PREFIX):
            if name.removeprefix(LSP_KEY_PREFIX) in self.host.lsp.state.servers:
                render_approval_request(self.console, self.request(name), intro=f"({decision})")
            await self.decide(name, decision)
            self.ask_next()
            return
        cfg = state.assembled.servers.get(name)
        changes = self.host.held_changes(name) if decision == "approve" else []
        if cfg is not None and changes:
            self.console.print(
                Text(f"{name} changed {plural(len(changes), 'definition')} since approval:", style="bold")
            )
            render_definition_changes(self.console, changes)
        if cfg is not None and is_gated(cfg) and not (changes and self._approved(name, cfg)):
            request = approval_request(name, cfg, state.assembled.sources[name])
            render_approval_request(self.console, request, intro=f"({decision})")
        shown_hash = cfg.approval_hash if cfg is not None else None
        await self.decide(name, decision, shown_hash=shown_hash, shown_changes=changes)
        self.ask_next()

    def _approved(self, name: str, cfg: McpServerConfig) -> bool:
        return self.host.approvals.get_state(self.host.root, name, cfg) == "approved"

    def _configured(self, key: str) -> object | None:
        if key.startswith(LSP_KEY_PREFIX):
            return self.host.lsp.state.servers.get(key.removeprefix(LSP_KEY_PREFIX))
        return self.host.state.assembled.servers.get(key)

    def request(self, key: str) -> ApprovalRequest:
        """What the dialog shows of a server waiting (``lsp:NAME`` for a language server)."""
        if key.startswith(LSP_KEY_PREFIX):
            name = key.removeprefix(LSP_KEY_PREFIX)
            lsp = self.host.lsp.state
            entry = lsp.assembled.sources[name]
            return lsp_approval_request(name, lsp.servers[name], entry.source, str(entry.path) if entry.path else None)
        state = self.host.state
        return approval_request(key, state.assembled.servers[key], state.assembled.sources[key])

    async def decide(
        self,
        name: str,
        decision: Verdict,
        *,
        shown_hash: str | None = None,
        shown_stamp: str | None = None,
        shown_changes: Sequence[Change] | None = None,
    ) -> None:
        """Persist a decision and reconcile, only for the configuration shown (``shown_hash``; None: as it
        is now), over the decision shown (``shown_stamp``; None: as it is now) and accepting only the held
        definitions shown (``shown_changes``; None: as they are). ``lsp:NAME`` decides on a language server."""
        if name.startswith(LSP_KEY_PREFIX):
            await self._decide_lsp(name, decision, shown_hash)
            return

        cfg = self.host.state.assembled.servers.get(name)
        approved = cfg is not None and self._approved(name, cfg)  # (approving again connects nothing)

        def said(decided: Decided) -> None:
            self._queue.discard(name)
            if decided.recorded and decision == "approve":
                self.console.print(
                    Text(
                        f"✓ {name} was approved already" if approved else f"✓ approved {name} — connecting",
                        style="green",
                    )
                )
            elif decided.recorded:
                self.console.print(
                    Text(f"✗ rejected {name} — it stays disconnected until its configuration changes", style="red")
                )
            else:
                self.console.print(Text(f"✓ accepted what {name} offers now", style="green"))

        before = self._gated.get(name)
        if decision == "reject":
            # Said here, before the store is written: a reconcile the watcher runs on seeing the write (it
            # may come first) must not say it too.
            self._gated[name] = "rejected"
        try:
            await self.host.decide(
                name,
                decision,
                shown_hash=shown_hash,
                shown_stamp=shown_stamp,
                shown_changes=shown_changes,
                on_decided=said,
            )
        except (ChangedSinceShown, DecidedSinceShown, HeldChangedSinceShown) as exc:
            self._restore_gated(name, before)
            self._queue.discard(name)
            self.console.print(Text(f"✗ {exc}", style="yellow"))
            self.refresh(announced=[name])  # show the new configuration, if it still waits
        except BaseException:
            self._restore_gated(name, before)
            raise

    def _restore_gated(self, name: str, before: str | None) -> None:
        if before is None:
            self._gated.pop(name, None)
        else:
            self._gated[name] = before

    async def _decide_lsp(self, key: str, decision: Verdict, shown_hash: str | None) -> None:
        name = key.removeprefix(LSP_KEY_PREFIX)
        cfg = self.host.lsp.state.servers.get(name)
        if cfg is not None and is_gated(cfg) and shown_hash is not None and cfg.approval_hash != shown_hash:
            self._queue.discard(key)
            self.console.print(
                Text(
                    f"✗ language server {name} not {decision}d: its configuration changed after it was shown",
                    style="yellow",
                )
            )
            self.refresh(announced=[key])
            return
        await self.host.lsp.decide(name, decision)  # raises ConfigError saying why it cannot be decided
        self._queue.discard(key)
        if decision == "approve":
            self.console.print(Text(f"✓ approved language server {name} — it starts on first use", style="green"))
        else:
            self.console.print(
                Text(
                    f"✗ rejected language server {name} — it never starts until its configuration changes", style="red"
                )
            )
