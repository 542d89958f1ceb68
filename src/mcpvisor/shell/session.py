"""The interactive session behind ``mcpvisor shell`` (SPEC §0 item 2, §9).

One :class:`~mcpvisor.host.host.Host` runs underneath; its events are printed as they happen
(above the prompt on a terminal). Lines are read one at a time and each runs to completion before
the next is read; Ctrl-C (delivered through ``interrupts``) cancels a running command, or, at the
prompt, cancels the line, and twice in a row leaves. End of input leaves too.

The approval dialog: on start and on every ``McpPendingApprovalChanged`` the queue is recomputed
from the live server map and the approvals store (servers already decided never come back); the
first waiting server's details are shown and the next line answers it. A ``/command`` typed while
the dialog is open runs as usual, then the question is asked again.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.abc
from rich.console import Console
from rich.text import Text

from mcpvisor.core.errors import NotRunningError, own_error
from mcpvisor.core.events import PromptsChanged, ReconcileFinished
from mcpvisor.host.approvals import is_gated
from mcpvisor.host.host import Host, HostEvent, HostOptions
from mcpvisor.host.hot_reload import McpPendingApprovalChanged, McpPromptsChanged
from mcpvisor.host.lsp.config import LSP_KEY_PREFIX
from mcpvisor.host.lsp.events import LspPendingApprovalChanged
from mcpvisor.host.oauth_login import open_in_browser
from mcpvisor.host.oauth_store import sign_ins
from mcpvisor.host.paths import user_dir
from mcpvisor.host.status import error_as_said_here, plural
from mcpvisor.shell.commands import (
    ALIASES,
    BUILTIN_COMMANDS,
    ArgumentError,
    parse_command,
    parse_json_object,
    parse_prompt_arguments,
    render_help,
    server_name,
    split_name,
)
from mcpvisor.shell.consoles import new_console
from mcpvisor.shell.dialog import ApprovalDialog
from mcpvisor.shell.narration import HumanOutput
from mcpvisor.shell.render import first_line, render_call_result, render_prompt_result, render_prompts, render_tools
from mcpvisor.shell.terminal import Screen, stdin_is_terminal, stdin_lines, wants_line_editor
from mcpvisor.shell.views import render_mcp_view

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "ShellSession", "run_shell"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

EXIT_OK = 0
EXIT_INTERRUPTED = 130
"""Left with Ctrl-C twice (128 + SIGINT, the shell convention)."""
EXIT_FAILED = 1
"""A command failed (or a tool reported an error) in a session whose input was no terminal (a script)."""

SLOW_CALL_NOTICE_S = 1.0
"""A call or prompt still running after this long says that Ctrl-C cancels it."""

PROMPT = "mcp> "
ANSWER_PROMPT = "[a/A/r/s]> "
HELP_HINT = "Type /help for commands, /quit (or Ctrl-D) to leave."

_CALL_EXAMPLE = '/call mcp__server__tool {"text": "hi"}'
_PROMPT_EXAMPLE = '/prompt NAME {"topic": "hi"}'


async def run_shell(
    options: HostOptions,
    *,
    console: Console | None = None,
    input_lines: AsyncIterator[str] | None = None,
    interrupts: AsyncIterable[object] | None = None,
    open_url: Callable[[str], bool] | None = None,
) -> int:
    """Run the interactive shell until ``/quit``, end of input, or Ctrl-C twice; returns the exit code.

    ``input_lines`` defaults to standard input, read in a daemon thread. ``interrupts`` yields one
    item per Ctrl-C; signals belong to ``cli/main.py``, which passes
    ``anyio.open_signal_receiver(signal.SIGINT)`` here. Without it, Ctrl-C is Python's default.
    ``open_url`` opens a sign-in page for ``/login`` (default: the user's browser; False when none opened).
    A settings problem that prevents start-up raises :class:`~mcpvisor.core.errors.ConfigError`.
    """
    if console is None:
        console = new_console(highlight=False, on_closed=lambda: session.output_closed())
    session = ShellSession(Host(options), console, open_url=open_url)
    return await session.run(input_lines, interrupts)


class ShellSession:
    """The shell's state and behaviour over one running host; :meth:`on_event` is its host listener."""

    def __init__(self, host: Host, console: Console, *, open_url: Callable[[str], bool] | None = None) -> None:
        self.host = host
        self.console = console
        self._open_url = open_url if open_url is not None else open_in_browser
        self.screen = Screen(console, prompt=lambda: ANSWER_PROMPT if self.dialog.asked is not None else PROMPT)
        # Its lines name its own commands, which decide in this session's workspace and home.
        self._output = HumanOutput(
            host, console, on_ready=self._on_ready, approve_command="/approve {name}", login_command="/login {name}"
        )
        self._ready = False
        self._started = False
        self._gated: dict[str, str] = {}
        self.dialog = ApprovalDialog(host, console, self._gated)
        self._seen: tuple[tuple[str, str], ...] | None = None
        """The dialog's question when the line being read was begun, at the line editor (see ``dialog.shown``)."""
        self._taken: tuple[tuple[str, str], ...] = ()
        """The dialog's question when the last line was taken (Enter): a line typed ahead was begun then or later."""
        self._reconciles = 0
        self._prompt_commands: tuple[str, ...] = ()
        self._interrupts = 0
        self._exit_code = EXIT_OK
        self._failed = self._scripted = False
        self._typed_ahead: Callable[[], bool] | None = None
        """At a terminal without the line editor: whether the next line was typed before its prompt."""
        self._command_scope: anyio.CancelScope | None = None
        self._session_scope: anyio.CancelScope | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._handlers: dict[str, Callable[[str], Awaitable[bool]]] = {
            "mcp": self._cmd_mcp,
            "tools": self._cmd_tools,
            "prompts": self._cmd_prompts,
            "call": self._cmd_call,
            "prompt": self._cmd_prompt,
            "reload": self._cmd_reload,
            "approve": self._cmd_approve,
            "reject": self._cmd_reject,
            "login": self._cmd_login,
            "help": self._cmd_help,
            "quit": self._cmd_quit,
        }

    @property
    def prompt_commands(self) -> tuple[str, ...]:
        """MCP prompts offered as ``/<name>`` (builtin command names win)."""
        return self._prompt_commands

    # -- host events -------------------------------------------------------------------------

    def on_event(self, event: HostEvent) -> None:
        with self.screen.above():
            if isinstance(event, McpPendingApprovalChanged):
                self.dialog.refresh(announced=event.servers)
                return
            if isinstance(event, LspPendingApprovalChanged):
                self.dialog.refresh(announced=[f"{LSP_KEY_PREFIX}{name}" for name in event.servers])
                return
            if isinstance(event, ReconcileFinished):
                self._reconciles += 1
                event = self._with_new_gating_only(event)
            self._output(event)
            if isinstance(event, ReconcileFinished):
                self.dialog.refresh()
            elif isinstance(event, McpPromptsChanged | PromptsChanged):
                self._reload_prompt_commands()

    def _on_ready(self) -> None:
        self._ready = True
        self.dialog.open()
        # From the moment the prompt's hint shows, Ctrl-C asks before leaving (the host may still be
        # arming its watcher, but the session is up).
        self._started = True
        self.console.print(Text(HELP_HINT, style="dim"))
        self._reload_prompt_commands()
        self.dialog.refresh(announced=None)

    def _with_new_gating_only(self, event: ReconcileFinished) -> ReconcileFinished:
        """Every reconcile lists every gated server; people only need to hear about changes."""
        refined = {n: self.host.refine_reason(n, r) or r for n, r in event.gated.items()}
        fresh = {n: event.gated[n] for n, r in refined.items() if self._gated.get(n) != r}
        self._gated.clear()
        self._gated.update(refined)
        return dataclasses.replace(event, gated=fresh)

    def _reload_prompt_commands(self) -> None:
        try:
            registered = self.host.config.prompt_registry.names()
        except NotRunningError:  # the session is ending (Ctrl-C while it connects): no command to complete
            return
        names = tuple(sorted(n for n in registered if n not in BUILTIN_COMMANDS and n not in ALIASES and " " not in n))
        if names == self._prompt_commands:
            return
        self._prompt_commands = names
        if self._ready:
            listed = " ".join(f"/{n}" for n in names) if names else "none"
            self.console.print(Text(f"prompt commands: {listed}", style="dim"))

    # -- the input loop ----------------------------------------------------------------------

    async def run(
        self, input_lines: AsyncIterator[str] | None = None, interrupts: AsyncIterable[object] | None = None
    ) -> int:
        """Start the host, read and run lines until the session ends, stop the host; returns the exit code.

        Ctrl-C while the host starts leaves at once. An error starting the host is raised as is.
        """
        failure: Exception | None = None
        async with anyio.create_task_group() as tg:
            self._tg = tg
            if interrupts is not None:
                tg.start_soon(self._watch_interrupts, interrupts)
            with anyio.CancelScope() as scope:
                self._session_scope = scope
                try:
                    await self._run_host(input_lines)
                except Exception as exc:  # re-raised below, outside the task group, so it is not wrapped
                    failure = exc
            self._session_scope = None
            self.screen.leave()
            tg.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return EXIT_FAILED if self._exit_code == EXIT_OK and self._failed and self._scripted else self._exit_code

    async def _run_host(self, input_lines: AsyncIterator[str] | None) -> None:
        unsubscribe = self.host.subscribe(self.on_event)
        # Starting waits for the admitted servers (a few seconds at most for the slow ones): say so, and the way out.
        self.console.print(Text("Connecting to the admitted servers… (Ctrl-C leaves)", style="dim"))
        try:
            async with self.host:
                try:
                    self._started = True
                    if input_lines is not None:
                        self._scripted = self.screen.prompt_not_drawn = True
                        await self._read_eval(input_lines)
                    elif wants_line_editor(self.console.is_terminal):
                        from mcpvisor.shell.line_editor import HISTORY_FILENAME, edited_lines

                        self.screen.prompt_not_drawn = True
                        async with edited_lines(
                            message=self.screen.prompt_text,
                            candidates=self.completion_candidates,
                            history=user_dir(self.host.options.env) / HISTORY_FILENAME,
                            on_interrupt=self._interrupted,
                            on_typing=self._typing,
                        ) as lines:
                            await self._read_eval(lines)
                    else:
                        self._scripted = self.screen.prompt_not_drawn = not stdin_is_terminal()
                        async with stdin_lines() as lines:
                            self._typed_ahead = None if self._scripted else lines.waiting
                            await self._read_eval(lines)
                finally:
                    unsubscribe()  # shutting the servers down is not news
        finally:
            unsubscribe()

    async def _read_eval(self, lines: AsyncIterator[str]) -> None:
        while True:
            self.screen.show_prompt()
            # The line editor tells when a line is begun; one typed without it (TERM=dumb) answers the question open
            # when its prompt was drawn, if one was (typed ahead: when the line before was taken); lines from a pipe or
            # a file answer as they come.
            ahead = self._typed_ahead
            self._seen = None if ahead is None else self._taken if ahead() else self.dialog.shown() or None
            try:
                line = await anext(lines)
            except StopAsyncIteration:
                return
            self.screen.prompt_answered()
            self._taken = self.dialog.shown()
            self._interrupts = 0
            self.dialog.question_shown = False
            with anyio.CancelScope() as scope:
                self._command_scope = scope
                try:
                    leave = await self._handle(line)
                finally:
                    self._command_scope = None
            if scope.cancelled_caught:
                self.console.print(Text("cancelled", style="yellow"))
            elif leave:
                return
            if self.dialog.asked is not None and not self.dialog.question_shown:
                self.dialog.ask_next(force=True)  # the dialog is still open: ask again below the command's output

    def _typing(self, ahead: bool) -> None:
        """A line is begun at the line editor: an answer in it answers the dialog's question as it is now, or, typed
        ahead while the line before ran, as it was when that line was taken (the earliest it can have been begun)."""
        self._seen = self._taken if ahead else self.dialog.shown()

    def output_closed(self) -> None:
        """Standard output is gone (a pipe whose reader left: ``| head``, or a ``| tee`` that Ctrl-C ended): the
        session ends as at the end of its input, with exit code 1."""
        self._exit_code = EXIT_FAILED
        if self._session_scope is not None:
            self._session_scope.cancel()

    async def _watch_interrupts(self, interrupts: AsyncIterable[object]) -> None:
        async for _ in interrupts:
            self.screen.interrupted()
            self._interrupted()

    def _interrupted(self) -> None:
        """Ctrl-C: cancels a running command; at the prompt, the line, and twice in a row leaves."""
        if self._session_scope is None:
            return  # leaving already: the host's shutdown is bounded
        if self._command_scope is not None:
            self._command_scope.cancel()
            return
        self._interrupts += 1
        if self._interrupts >= 2 or not self._started:
            self._exit_code = EXIT_INTERRUPTED
            self._session_scope.cancel()
            return
        with self.screen.above():
            self.console.print(Text("(press Ctrl-C again to leave, or type /quit)", style="dim"))

    def completion_candidates(self, command: str) -> dict[str, str]:
        """What Tab offers after ``/command `` (``""``: the commands themselves), name -> description."""
        if command == "":
            offered = {name: description for name, (_, description) in BUILTIN_COMMANDS.items()}
            offered.update((alias, f"same as /{name}") for alias, name in ALIASES.items())
            offered.update((name, "MCP prompt") for name in self._prompt_commands)
            return offered
        command = ALIASES.get(command, command)
        config = self.host.config
        if command in ("tools", "prompts"):
            return {name: cfg.transport for name, cfg in self.host.state.assembled.servers.items()}
        if command == "call":
            return {tool.name: first_line(tool.tool.description) for tool in config.tool_registry.get_all_tools()}
        if command == "prompt":
            return {p.name: first_line(p.prompt.description) for p in config.prompt_registry.get_all_prompts()}
        servers = self.host.state.assembled.servers
        if command in ("approve", "reject"):
            approvals, root = self.host.approvals, self.host.root
            offered = {name: approvals.get_state(root, name, cfg) for name, cfg in servers.items() if is_gated(cfg)}
            lsp = self.host.lsp.state
            offered.update(
                (f"{LSP_KEY_PREFIX}{name}", "language server") for name, cfg in lsp.servers.items() if is_gated(cfg)
            )
            return offered
        if command == "login":
            # (the state, and the shell's own command; the logout an unreadable one needs: the host's, to paste)
            login = self.host.config.options.login_command
            signed_in = sign_ins(self.host.tokens, servers, login, sign_in_command="/login {name}")
            return {name: signed_in.get(name, "") for name, cfg in servers.items() if cfg.transport != "stdio"}
        return {}

    async def _handle(self, line: str) -> bool:
        """Run one line; True means leave."""
        command = parse_command(line)
        leave = False
        if self.dialog.asked is not None and command is None:
            await self._guarded("answer", self.dialog.answer(line, seen=self._seen))
        elif command is None:
            if line.strip():
                self.console.print("Commands start with '/'; type /help for the list.")
            return False
        elif (handler := self._handlers.get(command.name)) is not None:
            leave = await self._guarded(f"/{command.name}", handler(command.argument))
        elif command.name in self._prompt_commands:
            leave = await self._guarded(f"/{command.name}", self._run_prompt(command.name, command.argument))
        else:
            self._failed = True
            self.console.print(Text(f"✗ unknown command /{command.name}; type /help for the list", style="red"))
        return leave

    async def _guarded(self, what: str, action: Awaitable[bool | None]) -> bool:
        """Run one command; its failure is reported and the session goes on."""
        try:
            return bool(await action)
        except Exception as exc:  # mcpvisor's own, also one a task group wrapped (a sign-in that did not come)
            own = exc if isinstance(exc, ArgumentError) else own_error(exc)
            if own is None:
                logger.exception("shell command %s failed", what)
                self.console.print(Text(f"✗ {what} failed unexpectedly: {exc!r}", style="red"))
            else:  # (a sign-in it asks for: the shell's /login)
                said = error_as_said_here(self.host.config, own, "/login {name}")
                self.console.print(Text(f"✗ {said}", style="red"))
        self._failed = True
        return False

    async def _waiting(self, what: str, action: Awaitable[T]) -> T:
        """Await ``action``; if it takes a while, say so once (and how to cancel it)."""
        notice = anyio.CancelScope()
        if self._tg is not None:
            self._tg.start_soon(self._slow_notice, notice, what)
        try:
            return await action
        finally:
            notice.cancel()

    async def _slow_notice(self, scope: anyio.CancelScope, what: str) -> None:
        with scope:
            await anyio.sleep(SLOW_CALL_NOTICE_S)
            self.console.print(Text(f"… still waiting for {what} (Ctrl-C cancels)", style="dim"))

    # -- commands ----------------------------------------------------------------------------

    async def _cmd_mcp(self, argument: str) -> bool:
        if argument:
            raise ArgumentError("/mcp takes no argument: it shows every server (/tools SERVER lists one's tools)")
        render_mcp_view(self.console, self.host)
        return False

    async def _cmd_tools(self, argument: str) -> bool:
        render_tools(self.console, self.host.config.tool_registry.get_all_tools(), server=server_name(argument))
        return False

    async def _cmd_prompts(self, argument: str) -> bool:
        render_prompts(self.console, self.host.config.prompt_registry.get_all_prompts(), server=server_name(argument))
        return False

    async def _cmd_call(self, argument: str) -> bool:
        name, rest = split_name(argument)
        if not name:
            raise ArgumentError(f"usage: /call NAME [JSON], e.g. {_CALL_EXAMPLE}")
        arguments = parse_json_object(rest, example=_CALL_EXAMPLE)
        result = await self._waiting(name, self.host.config.call_tool(name, arguments))
        render_call_result(self.console, result)
        self._failed = self._failed or result.is_error
        return False

    async def _cmd_prompt(self, argument: str) -> bool:
        name, rest = split_name(argument)
        if not name:
            raise ArgumentError(f"usage: /prompt NAME [JSON], e.g. {_PROMPT_EXAMPLE}")
        await self._run_prompt(name, rest)
        return False

    async def _run_prompt(self, name: str, text: str) -> bool:
        entry = self.host.config.find_prompt(name)
        names = [a.name for a in entry.prompt.arguments or ()] if entry is not None else []
        arguments = parse_prompt_arguments(text, names, example=_PROMPT_EXAMPLE)
        result = await self._waiting(f"prompt {name}", self.host.config.get_prompt(name, arguments))
        render_prompt_result(self.console, result)
        return False

    async def _cmd_reload(self, argument: str) -> bool:
        before = self._reconciles
        self._output.forget_failures()  # (it starts a failed server again: asked for, its failure is said)
        await self.host.reload()
        changed = "" if self._reconciles > before else " — no MCP changes"
        if self.host.settings.errors:  # said above, with where: the last good configuration stays in force
            self.console.print(Text(f"✗ settings re-read, but a file does not parse{changed}", style="red"))
        else:
            self.console.print(Text(f"✓ settings re-read{changed}", style="green"))
        return False

    async def _cmd_approve(self, argument: str) -> bool:
        await self.dialog.decide_by_command("approve", argument)
        return False

    async def _cmd_reject(self, argument: str) -> bool:
        await self.dialog.decide_by_command("reject", argument)
        return False

    async def _cmd_login(self, argument: str) -> bool:
        name, rest = split_name(argument)
        if not name or rest:
            raise ArgumentError("usage: /login NAME")

        def announce(text: str) -> None:
            with self.screen.above():
                self.console.print(Text(text), soft_wrap=True)
                self.console.print(Text("(waiting for the sign-in; Ctrl-C cancels)", style="dim"))

        tools = await self.host.sign_in(name, open_url=self._open_url, announce=announce)
        self.console.print(Text(f"✓ signed in to {name} ({plural(tools, 'tool')})", style="green"))
        return False

    async def _cmd_help(self, argument: str) -> bool:
        render_help(self.console, self._prompt_commands)
        return False

    async def _cmd_quit(self, argument: str) -> bool:
        return True
