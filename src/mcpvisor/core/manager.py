"""McpClientManager: applies reconcile plans to live connections (SPEC §5.3, §5.4).

It owns the connections of one session. Every change goes through :meth:`discover_all_mcp_tools_incremental`:
removals and gated tear-downs beside concurrent (re)connects bounded by a capacity limiter; unchanged servers
are never touched. A server that dies reconnects with bounded exponential backoff, and so does a remote one that
could not be reached at its start (:mod:`mcpvisor.core.reconnects`); a deliberate stop never respawns."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from mcpvisor.core.errors import ConnectError
from mcpvisor.core.events import (
    EventBus,
    McpClientUpdate,
    PromptsChanged,
    ReconcileFinished,
    ServerStateChanged,
    ServerStates,
    ToolsChanged,
)
from mcpvisor.core.exposure import exposure_of
from mcpvisor.core.lifecycle import Background, Stopping
from mcpvisor.core.pool import PooledStartFailed, as_said_to, release
from mcpvisor.core.processes import SpawnedAhead, loading_sdk
from mcpvisor.core.reconcile import DesiredServers, LiveServer, ReconcilePlan, admitted, plan_for
from mcpvisor.core.reconnects import Reconnects, Recovery
from mcpvisor.core.registry import (
    Admitted,
    DefinitionGate,
    PromptRegistry,
    ToolRegistry,
    admit,
    mcp_tool_name,
    server_state,
)
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig, connection_id_of
from mcpvisor.core.start_slots import StartSlots

if TYPE_CHECKING:
    from mcp_types import Prompt, Tool

    from mcpvisor.core.client import McpClient
    from mcpvisor.core.pool import McpConnectionPool

__all__ = ["McpClientManager"]

logger = logging.getLogger(__name__)
_CLIENT_MODULE = "mcpvisor.core.client"

EARLIER_STARTS_WAIT_S = 2.0
"""A reconcile waits for its own starts (until another one is asked for), then this long for starts an earlier one
left handshaking (a usual start ends within it: a sign-in's reconnect, an approval's start); one still handshaking
then (a hang, a download) is reported as starting and holds up no edit's report or approval prompt."""


class McpClientManager:
    """The live connections of one session and the incremental reconcile that keeps them in line with the
    desired servers (SPEC §5.3): only what changed is stopped, started or re-filtered; a failing server
    never takes the others down; lost ones reconnect with back-off."""

    def __init__(
        self,
        config: DesiredServers,
        tg: anyio.abc.TaskGroup,
        *,
        events: EventBus,
        tools: ToolRegistry,
        prompts: PromptRegistry,
        options: ConnectionOptions | None = None,
        pool: McpConnectionPool | None = None,
        session_id: str = "default",
        definition_gate: DefinitionGate | None = None,
    ) -> None:
        self._config = config
        self._options = options or ConnectionOptions()
        self._gate, self._held = definition_gate, dict[str, Admitted]()
        self._pool, self._session_id = pool, session_id
        self._tg, self._events, self._tools, self._prompts = tg, events, tools, prompts
        self._slots = StartSlots(self._options.max_concurrent_starts)
        self._clients: dict[str, McpClient] = {}
        self._failed: set[str] = set()  # whose last start failed (started again by the next pass: a retry)
        self._configs: dict[str, McpServerConfig] = {}
        self._states = ServerStates(events)
        self._reconnects = Reconnects(
            tg,
            clients=self._clients,
            configs=self._configs,
            reopen=self._reopen,
            said=partial(as_said_to, login_command=self._options.login_command),
            publish=self._publish_state,
        )
        self._handshaking: dict[str, McpClient] = {}  # in place, waiting for the handshake: a pass may take them on
        self._acquiring: Counter[str] = Counter()  # with a pool: waiting for its connection (a start, or two)
        self._decided: dict[str, int] = {}  # per server, how many passes decided about it: a job of an older one stops
        self._planned: dict[str, tuple[int, McpServerConfig]] = {}  # per server, the latest start job's (decided, cfg)
        self._another_pass, self._background = anyio.Event(), Background(tg)
        self._stops, self._stopping = Background(tg), Stopping()  # a pass's removals and gated tear-downs; closes
        self._closed = False
        self._unsaid: dict[str, tuple[bool, bool]] = {}  # restarting: whether its tools, prompts went untold so far
        self.connect_count = self.disconnect_count = 0  # connections opened and closed (tests, benchmarks)

    # -- reading -----------------------------------------------------------------------------

    def get_client(self, name: str) -> McpClient | None:
        return self._clients.get(name)

    def clients(self) -> dict[str, McpClient]:
        return dict(self._clients)

    def restart_untold(self, name: str) -> bool:
        """Whether ``name`` is being restarted and its clients not told yet (they are once its new start is over)."""
        return name in self._unsaid

    def recovery(self, name: str) -> Recovery | None:
        """Whether ``name``, down by itself, is being started again or was left down (see :class:`Recovery`)."""
        return self._reconnects.recovery(name)

    # -- the reconcile -----------------------------------------------------------------------

    def plan(self) -> ReconcilePlan:
        live = {
            name: LiveServer(client.connection_id, exposure_of(self._configs[name]), client.status != "disconnected")
            for name, client in self._clients.items()
        }
        # A start waiting for its name's old process to stop, or for its pooled connection, is live: a pass keeps it.
        waiting = self._stopping.names() | self._acquiring.keys()
        for name, (decided, cfg) in self._planned.items():
            if name not in live and name in waiting and self._decided.get(name) == decided:
                live[name] = LiveServer(connection_id_of(name, cfg), exposure_of(cfg), connected=True)
        return plan_for(self._config, live, known=self._states.snapshot())  # (a gated one, never live, too)

    async def discover_all_mcp_tools_incremental(self, wait_s: float | None = None) -> ReconcileFinished:
        """Bring the live connections in line with the config, touching only what changed. With a pool (SPEC §5.5)
        the same plan applies, gating first: an excluded or pending server never reaches ``acquire``. ``wait_s``:
        the most it waits for its starts, as if another pass were asked for then (None: each start's timeout)."""
        self._another_pass = anyio.Event()
        return await self._apply_plan(wait_s)

    async def _apply_plan(self, wait_s: float | None, restarting: frozenset[str] = frozenset()) -> ReconcileFinished:
        """The reconcile; ``restarting``: servers stopped for a restart, whose start it reports as one."""
        # Nothing runs in an untrusted folder: a pass there only stops what trust, since revoked, had started.
        if self._closed or (not self._config.is_trusted_folder() and not self._clients):
            return ReconcileFinished()
        started_at, asked = time.perf_counter(), self._asked_for_another(wait_s)
        self._events.emit(McpClientUpdate(in_progress=True))
        plan = self.plan()
        desired = self._config.get_mcp_servers()
        # The layer above words the reasons (a pending server the user rejected reads ``rejected``).
        refine = self._config.refined_reason
        plan = replace(
            plan,
            gate_stop={n: refine(n, r) for n, r in plan.gate_stop.items()},
            gate_skip={n: refine(n, r) for n, r in plan.gate_skip.items()},
        )
        for name in {*plan.remove, *plan.gate_stop, *plan.start, *plan.restart}:  # what a job left by a pass before
            self._decided[name] = self._decided.get(name, 0) + 1  # this one was to do about them is this one's now
        self._states.keep_only({*self._config.get_merged_mcp_servers(), *self._clients})  # (a gated one too)
        for name, reason in plan.gate_skip.items():
            self._publish_state(name, reason=reason)

        for name in plan.refilter:
            self._configs[name] = desired[name]
            if name in self._planned:  # (a start still waiting for the old process: it starts re-filtered)
                self._planned[name] = (self._planned[name][0], desired[name])
            self._sync_registry(name)
            logger.info("server %r: tool filters changed; re-filtered in place", name)

        # A server that went down with its configuration unchanged: its reconnect loop starts it after its pause
        # (a save meanwhile must not skip the pause of one crashing in a loop; the loop starts once the lost
        # connection's teardown is over); without one, it is a retry.
        lost = {
            n for n in plan.start if (c := self._clients.get(n)) and c.connection_id == connection_id_of(n, desired[n])
        }
        waiting = tuple(n for n in plan.start if n in lost and (n in self._reconnects or self._clients[n].ending))
        self._reconnects.held_while_ending.update(n for n in waiting if self._clients[n].ending)
        plan = replace(plan, start=tuple(n for n in plan.start if n not in waiting), keep=(*plan.keep, *waiting))
        retried = tuple(n for n in plan.start if n in self._failed or n in lost)  # started again
        changed = tuple(n for n in plan.start if (n in self._clients and n not in lost) or n in restarting)
        # A restarted server's old tools and prompts go before anything new is discovered (told with what it brings).
        for name in plan.restart:
            self._purge(name, restarting=True)
        failed: dict[str, str] = {}
        jobs = {n: partial(self._connect_one, n, desired[n], failed, self._decided[n]) for n in plan.start}
        jobs |= {n: partial(self._restart_one, n, desired[n], failed, self._decided[n]) for n in plan.restart}
        self._planned |= {n: (self._decided[n], desired[n]) for n in jobs}
        # Removals (and gated tear-downs, their tools gone at once) beside the starts: one slow to exit delays no
        # other server, only the pass's end, and that only until another pass is asked for (it starts meanwhile).
        stops = {n: partial(self.remove_server, n) for n in plan.remove}
        stops |= {n: partial(self._stop, n, reason=reason) for n, reason in plan.gate_stop.items()}
        own_stops = self._stops.start(stops)  # (not an earlier pass's stop of the same name, still running)
        own_starts = self._background.start(jobs)  # also waited for: starts an earlier pass left running
        starting = await self._background.wait(partial(self._detachable, own_starts, asked))
        await self._stops.wait(partial(self._stops.over, own_stops, asked))
        up = {n for n, c in self._clients.items() if c.status == "connected"}  # (came up while the stops ended)
        starting = (starting & self._background.running.keys()) - up

        self._failed = (
            self._failed - set(plan.remove) - set(plan.gate_stop) - set(plan.start) - set(plan.restart)
        ) | set(failed)
        summary = plan.finished(retried, changed, failed, starting, (time.perf_counter() - started_at) * 1000)
        self._events.emit(McpClientUpdate(in_progress=False))
        self._events.emit(summary)
        return summary

    def starting(self, name: str) -> bool:  # a pass's start of it runs (a restart's: while the old one stops)
        return name in self._background.running

    def ask_another_pass(self) -> None:  # another reconcile waits: a slow handshake must not hold it up
        self._another_pass.set()

    def _asked_for_another(self, wait_s: float | None) -> Callable[[], bool]:  # or the pass waited wait_s
        event, deadline = self._another_pass, time.perf_counter() + (float("inf") if wait_s is None else wait_s)
        return lambda: event.is_set() or time.perf_counter() >= deadline

    async def _detachable(self, mine: frozenset[int], asked: Callable[[], bool]) -> None:  # see EARLIER_STARTS_WAIT_S
        await self._background.over(mine, asked)
        with anyio.move_on_after(EARLIER_STARTS_WAIT_S):
            await self._background.over(None, asked)
        while self._background.running.keys() - {*self._handshaking, *self._acquiring, *self._stopping.names()}:  # noqa: ASYNC110 - a few ms at most
            await anyio.sleep(0.01)

    async def restart_mcp_servers(
        self, names: Iterable[str] | None = None, wait_s: float | None = None
    ) -> ReconcileFinished:
        """Stop and reconnect ``names`` of those connected (all: a full wipe, an explicit request or a baseline);
        ``wait_s`` as for :meth:`discover_all_mcp_tools_incremental`."""
        self._another_pass = anyio.Event()  # before the stops: a pass asked for while they run is heard
        stopped = frozenset(self._clients if names is None else self._clients.keys() & set(names))
        async with anyio.create_task_group() as tg:
            for name in stopped:
                tg.start_soon(partial(self._stop, name, reason=None, restarting=True))
        summary = await self._apply_plan(wait_s, restarting=stopped)
        for name in stopped - self._background.running.keys():  # not started again (gated meanwhile): say they went
            self._announce(name)
        return summary

    async def remove_server(self, name: str) -> None:
        """Disconnect ``name``, drop its tools and prompts, forget its status."""
        await self._stop(name, reason=None, forget=True)

    async def aclose(self) -> None:
        self._closed = True
        self._reconnects.close()
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for name in list(self._clients):
                    tg.start_soon(partial(self._stop, name, reason=None))
        self._tg.cancel_scope.cancel()  # what is left ends too (a pooled start a pass stopped waiting for)

    async def _restart_one(self, name: str, cfg: McpServerConfig, failed: dict[str, str], decided: int) -> None:
        """The old process goes first (a stateful server may hold a port or a lock), then the new one."""
        await self._stop(name, reason=None, restarting=True)
        await self._connect_one(name, cfg, failed, decided)

    def _superseded(self, name: str, decided: int | None) -> bool:  # a later pass decided (None: no pass's job)
        return decided is not None and self._decided.get(name) != decided

    # -- single servers ----------------------------------------------------------------------

    async def _connect_one(self, name: str, cfg: McpServerConfig, failed: dict[str, str], decided: int) -> None:
        try:
            await self._connect(name, cfg, failed, decided)
        finally:
            self._announce(name)  # a restart's that ended with no new tools: its old ones went all the same

    async def _connect(self, name: str, cfg: McpServerConfig, failed: dict[str, str], decided: int) -> None:
        if self._superseded(name, decided):
            return  # a later pass took it on while this job waited (to stop the old process): that pass starts it
        self._reconnects.cancel(name)
        current = self._clients.get(name)
        if current is not None:  # planned while down: a reconnect may have run since
            if current.status == "connected" and current.connection_id == connection_id_of(name, cfg):
                self._configs[name] = cfg  # it brought this very connection up: keep it
                self._sync_registry(name)
                return
            if self._pool is None:  # a start replaces the old client: close it, never leave it running unowned
                del self._clients[name]
                await self._close(current)
        await self._stopping.over(name)  # an old process of the name (a pass left it stopping) goes first
        if (planned := self._planned.get(name)) is not None and planned[0] == decided:
            cfg = planned[1]  # as a pass re-filtered it meanwhile
        try:
            await self._open(name, cfg, decided)
        except ConnectError as exc:
            if self._superseded(name, decided):
                return  # stopped for a later pass's start: not a failure
            if isinstance(exc, PooledStartFailed) and name in self._configs and not self._closed:
                self._clients[name] = exc.client  # kept, down with its error, as a start of its own is
                self._sync_registry(name)
            failed[name] = str(exc)
            self._failed.add(name)  # also when it failed after its pass was over
            logger.warning("%s", as_said_to(exc, self._options.login_command))  # its workspace: pasted, it works
            down = self._clients.get(name)  # a remote server may come up later: tried again, for as long as it runs
            if down and cfg.transport != "stdio" and down.connection_id == connection_id_of(name, cfg):
                if down.status == "disconnected" and not down.needs_auth and not self._closed:
                    self._reconnects.retry(name, down, attempts=None)

    async def _open(self, name: str, cfg: McpServerConfig, decided: int | None = None) -> None:
        """Start (or, with a pool, acquire) a connection for ``name`` unless a later pass took it on (ConnectError)."""
        spawnable, logs = partial(self._spawnable, name), self._options.log_dir
        async with loading_sdk(_CLIENT_MODULE, self._slots, name, cfg, spawnable, logs) as ahead:
            await self._start(name, cfg, decided, ahead)

    def _spawnable(self, name: str) -> bool:  # asked in its start slot, right before: the gating may have changed
        return self._pool is None and self._options.in_memory is None and self._still_admitted(name, say=False)

    async def _start(self, name: str, cfg: McpServerConfig, decided: int | None, ahead: SpawnedAhead | None) -> None:
        from mcpvisor.core.client import McpClient  # loaded by now (see _open)

        if self._superseded(name, decided):
            return
        self._configs[name] = cfg
        if self._pool is not None:
            if not self._still_admitted(name):
                self._forget_unstarted(name)
                return
            self.connect_count += 1
            self._acquiring[name] += 1  # a pass may leave it to finish, as it leaves a handshake
            try:
                client = await self._pool.acquire(
                    self._session_id, name, cfg, on_change=self._on_client_change, on_lost=self._on_lost
                )
            finally:
                self._acquiring -= Counter((name,))  # (a newer start of the name may still wait)
            now = self._configs.get(name)  # a re-filter meanwhile changes the config, not the connection
            if now is None or connection_id_of(name, now) != client.connection_id or self._closed:
                await self._pool.release(self._session_id, client)  # superseded while acquiring
                return
            if not self._still_admitted(name):
                await self._pool.release(self._session_id, client)
                self._forget_unstarted(name)
                return
            self._clients[name] = client
            self._reconnects.up(name)
            self._sync_registry(name)
            return
        client = McpClient(
            name, cfg, options=self._options, on_change=self._on_client_change, on_lost=self._on_lost, ahead=ahead
        )
        self._clients[name] = self._handshaking[name] = client
        try:
            async with self._slots.hold() as slot:
                slot.watch(client)
                if self._clients.get(name) is not client:
                    return  # superseded while waiting for a start slot
                if not self._still_admitted(name):
                    return  # left unstarted (disconnected) for the next pass to remove or gate
                self.connect_count += 1
                await client.start(self._tg)
                self._reconnects.up(name)
        finally:
            if self._handshaking.get(name) is client:
                del self._handshaking[name]

    def _still_admitted(self, name: str, *, say: bool = True) -> bool:
        """Whether ``name`` may still start: a start waits (for a slot, a pass, a backoff) and the gating may
        have changed meanwhile — a rejection made elsewhere must stop a start already planned, not follow
        it. A start it stops is the next pass's (the gating change asked for one): that pass says why."""
        if admitted(self._config, name):
            return True
        if say:
            logger.info("server %r: not started, no longer admitted", name)
        return False

    def _forget_unstarted(self, name: str) -> None:
        """A start that did not happen leaves no config behind, unless a client is held (the next pass stops it)."""
        if name not in self._clients:
            self._configs.pop(name, None)
            if name in self._config.get_merged_mcp_servers():
                self._publish_state(name)  # down (its old client was stopped): the next pass says why
            else:
                self._states.removed(name)

    async def _close(self, client: McpClient, gated: str | None = None) -> None:
        with self._stopping.of(client.name):
            await release(self._pool, self._session_id, client, ending=self._closed, gated=gated)

    async def _stop(self, name: str, *, reason: str | None, forget: bool = False, restarting: bool = False) -> None:
        """Stop ``name``: its tools and prompts go at once (its process may take seconds to stop), and so does its
        state (``reason``: why it is down; ``forget``: none is kept; ``restarting``: it reads as connecting), before a
        later pass says anything of it."""
        self._reconnects.forget(name)  # a deliberate stop or restart starts the count afresh
        client = self._clients.pop(name, None)
        self._configs.pop(name, None)
        self._purge(name, restarting=restarting)
        if forget:
            self._states.removed(name)
        elif reason is not None or restarting:
            self._publish_state(name, reason=reason, restarting=restarting)
        if client is not None:
            self.disconnect_count += 1
            await self._close(client, "removed" if forget else self._config.get_mcp_gating().with_why(name, reason))
            logger.info("server %r disconnected%s", name, f" ({reason})" if reason else "")

    def _purge(self, name: str, *, restarting: bool = False) -> None:
        """Drop ``name``'s tools and prompts. ``restarting``: their going is told with what its new start brings
        (one list-changed notice for the restart, sent once the new tools are callable), not before."""
        self._held.pop(name, None)
        tools_changed = self._tools.remove_mcp_tools_by_server(name)
        prompts_changed = self._prompts.remove_prompts_by_server(name)
        if restarting:
            self._untold(name, tools=tools_changed, prompts=prompts_changed)
        else:
            self._announce(name, tools=tools_changed, prompts=prompts_changed)

    def _untold(self, name: str, *, tools: bool, prompts: bool) -> None:
        tools_unsaid, prompts_unsaid = self._unsaid.get(name, (False, False))
        self._unsaid[name] = (tools_unsaid or tools, prompts_unsaid or prompts)

    def _announce(self, name: str, *, tools: bool = False, prompts: bool = False) -> None:
        """Emit what changed of ``name``'s tools and prompts, with what a restart's stop left untold."""
        tools_unsaid, prompts_unsaid = self._unsaid.pop(name, (False, False))
        if tools or tools_unsaid:
            self._events.emit(ToolsChanged())
        if prompts or prompts_unsaid:
            self._events.emit(PromptsChanged())

    # -- client callbacks --------------------------------------------------------------------

    def _on_client_change(self, client: McpClient) -> None:
        if self._clients.get(client.name) is not client:
            return  # a client being replaced or removed: its fate is already decided
        self._sync_registry(client.name)
        self._events.emit(McpClientUpdate(server=client.name))
        self._publish_state(client.name)

    def _sync_registry(self, name: str) -> None:
        if (client := self._clients.get(name)) is None:
            return
        cfg = self._configs[name]
        tools: Sequence[Tool] = client.tools if client.status == "connected" else []
        prompts: Sequence[Prompt] = client.prompts if client.status == "connected" else []
        self._held.pop(name, None)
        if self._gate is not None and client.status == "connected":
            admitted = admit(self._gate, name, cfg, tools, prompts)
            tools, prompts = admitted.tools, admitted.prompts
            if admitted.held_tools or admitted.held_prompts or admitted.why:
                self._held[name] = admitted
        tools_changed = self._tools.set_server_tools(name, tools, exposure_of(cfg))
        prompts_changed = self._prompts.set_server_prompts(name, prompts)
        if client.status == "connecting" and name in self._unsaid:  # a restart's start: told once it is over
            self._untold(name, tools=tools_changed, prompts=prompts_changed)
        else:
            self._announce(name, tools=tools_changed, prompts=prompts_changed)
        self._publish_state(name)

    def held(self, name: str) -> Admitted | None:
        """What the definition gate holds back of ``name``'s tools and prompts, and why (None: nothing, no why)."""
        return self._held.get(name)

    def held_tool_names(self) -> set[str]:
        """The registered names (``mcp__<server>__<tool>``) of the connected servers' tools held back."""
        return {
            mcp_tool_name(server, tool)
            for server in self._clients
            if (admitted := self._held.get(server)) is not None
            for tool in admitted.held_tools
        }

    def refresh_definitions(self) -> None:
        """Ask the definition gate again for every connected server (e.g. after definitions were accepted)."""
        for name in list(self._clients):
            self._sync_registry(name)

    def _on_lost(self, client: McpClient) -> None:
        if not self._closed and self._clients.get(client.name) is client:
            self._reconnects.lost(client)

    async def _reopen(self, name: str, cfg: McpServerConfig, dead: McpClient) -> None:
        """A reconnect's start of ``name`` in place of its ``dead`` client."""
        if self._pool is not None:
            # Drop our hold on the dead connection; the dead client stays (disconnected) until a new one.
            await self._pool.release(self._session_id, dead)
        await self._open(name, cfg)

    # -- visible state -----------------------------------------------------------------------

    def _publish_state(self, name: str, *, reason: str | None = None, restarting: bool = False) -> None:
        for renamed in self._tools.take_renamed() - {name}:  # their tools renamed by this one's coming
            self._publish_state(renamed)
        client = self._clients.get(name)
        status, error = (client.status, client.last_error) if client else (None, None)
        warning = client.warning(exposure_of(self._configs[name])) if client and name in self._configs else None
        if restarting and client is None:  # its new connection comes once the old one is gone
            status = "connecting"
        state = server_state(name, status, error, self._tools, self._prompts, self._held.get(name), reason=reason)
        self._states.say(replace(state, warning=warning) if status == "connected" else state)  # (what it lists)

    def snapshot(self) -> Mapping[str, ServerStateChanged]:
        return self._states.snapshot()
