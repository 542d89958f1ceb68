"""What people see about servers, as data and text: the rows of the ``/mcp`` view and ``mcp list`` (SPEC §9).

:func:`describe_servers` is pure: it turns the assembled map, the gating lists, the approval
store and (optionally) the live connections into :class:`ServerView` rows; :func:`state_text`
says each row's state in words. Drawing them is the terminal's job (``mcpvisor.shell.views``).
Secrets (env values, headers) are never part of a row.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mcpvisor.core.errors import name_word
from mcpvisor.core.events import ReconcileFinished, ServerStateChanged
from mcpvisor.core.exposure import exposure_of
from mcpvisor.core.gating import McpGating
from mcpvisor.host.approvals import ApprovalStore, is_gated
from mcpvisor.host.paths import named_home
from mcpvisor.host.settings.mcp_servers import SOURCE_LABELS, SOURCE_ORDER, AssembledServers

if TYPE_CHECKING:
    from mcpvisor.core.config import Config

__all__ = [
    "APPROVE_HINT",
    "LOGIN_HINT",
    "ONCE_PINS_READABLE",
    "ONCE_READABLE",
    "LiveConnection",
    "as_said_here",
    "ServerState",
    "ServerView",
    "describe_servers",
    "error_as_said_here",
    "event_as_said_here",
    "fill_hint",
    "fix_commands",
    "held_text",
    "invalid_entry_text",
    "live_connections",
    "log_hint",
    "lsp_hint",
    "plural",
    "short_command",
    "short_path",
    "state_text",
    "trust_hint",
    "with_options",
]

ServerState = Literal[
    "disabled",
    "not_allowed",
    "rejected",
    "needs_approval",
    "needs_auth",
    "connected",
    "connecting",
    "disconnected",
    "untrusted",
    "invalid",
]


@dataclass(frozen=True, slots=True)
class LiveConnection:
    """What a running host knows about one connection."""

    status: str
    tools: int
    prompts: int
    error: str | None
    log_path: str | None = None
    needs_auth: bool = False
    held_tools: tuple[str, ...] = ()
    held_prompts: tuple[str, ...] = ()
    held_why: str | None = None
    warning: str | None = None
    """What is wrong with a connected server that still serves (its latest listing not taken)."""


def as_said_here(config: Config, server: str, text: str, login_command: str | None = None) -> str:
    """``text`` of server ``server``'s connection as ``config``'s session says it: a connection shared between
    sessions (a pool's) says to sign in with the pool's command, which names no workspace; the session's own
    (``config.options.login_command``: its workspace and home) finds the server pasted in any folder.
    ``login_command``: a view's own (``{name}``), e.g. the shell's ``/login {name}``; None: the session's."""
    client = config.manager.get_client(server)
    said = text if client is None else client.said_to(config.options.login_command, text)
    if login_command is None:
        return said
    return said.replace(fill_hint(config.options.login_command, server), fill_hint(login_command, server))


def error_as_said_here(config: Config, exc: Exception, login_command: str | None = None) -> str:
    """``exc``'s message as ``config``'s session (or a view of it that signs in with ``login_command``) says it: of
    the server it names, if it names one (:func:`as_said_here`)."""
    server = getattr(exc, "server", None)
    return as_said_here(config, server, str(exc), login_command) if isinstance(server, str) else str(exc)


def event_as_said_here(config: Config, event: Any, login_command: str | None = None) -> Any:
    """``event`` of ``config``'s connections with the errors in it as that session (or a view of it that signs in
    with ``login_command``) says them (:func:`as_said_here`)."""
    if isinstance(event, ServerStateChanged) and event.error:
        return replace(event, error=as_said_here(config, event.server, event.error, login_command))
    if isinstance(event, ReconcileFinished) and event.failed:
        failed = {name: as_said_here(config, name, why, login_command) for name, why in event.failed.items()}
        return replace(event, failed=failed)
    return event


def live_connections(config: Config) -> dict[str, LiveConnection]:
    """What a running host's ``config`` knows about each of its connections."""
    live: dict[str, LiveConnection] = {}
    # A start waiting its turn (a start slot, the SDK's loading), its connection made or not yet: on its way.
    configured = config.get_mcp_servers()
    waiting = {name for name in configured if config.manager.starting(name)}
    for name, client in config.manager.clients().items():
        held = config.manager.held(name)
        unstarted = client.status == "disconnected" and not client.last_error and name in waiting
        live[name] = LiveConnection(
            status="connecting" if unstarted else client.status,
            tools=len(config.tool_registry.tools_of(name)),
            prompts=len(config.prompt_registry.prompts_of(name)),
            error=as_said_here(config, name, client.last_error) if client.last_error else None,
            log_path=str(client.log_path),
            needs_auth=client.needs_auth,
            held_tools=tuple(held.held_tools) if held else (),
            held_prompts=tuple(held.held_prompts) if held else (),
            held_why=held.why if held else None,
            warning=client.warning(exposure_of(cfg))
            if (cfg := configured.get(name)) and client.status == "connected"
            else None,
        )
    for name in waiting - live.keys():
        live[name] = LiveConnection(status="connecting", tools=0, prompts=0, error=None)
    return live


@dataclass(frozen=True, slots=True)
class ServerView:
    name: str
    source: str
    """The status-view group: User, Project .mcp.json, Workspace, System, Extensions, Command line."""
    file: str | None
    scope: str | None
    transport: str
    target: str
    """The command line or URL (never env values or headers)."""
    state: ServerState
    reason: str | None
    """``excluded``, ``not_allowed`` (``error`` says which list leaves it out and the fix), ``pending_approval``,
    ``rejected``, ``invalid`` (its entry is not valid: no server runs for it, ``error`` says why and the fix) or
    None."""
    approval: str | None
    """For gated servers: ``approved``, ``pending`` or ``rejected``; None when not gated."""
    tools: int = 0
    prompts: int = 0
    error: str | None = None
    log_path: str | None = None
    sign_in: str | None = None
    """A remote server's stored OAuth sign-in, e.g. ``signed in (expires in 52 min)``; never a token."""
    held_tools: tuple[str, ...] = ()
    """Tools whose definition changed since approval, held back until ``mcp approve`` (names on the server)."""
    held_prompts: tuple[str, ...] = ()
    held_why: str | None = None
    """Why they are held when their definitions did not change (their pins could not be saved, and the fix)."""
    kept: str | None = None
    """Its entry was made invalid by an edit, and its last good configuration runs on: the notice saying so."""
    warning: str | None = None
    """What is wrong with it while it is connected and serving (its latest listing not taken)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


APPROVE_HINT = "mcpvisor mcp approve {name}"
LOGIN_HINT = "mcpvisor mcp login {name}"
ONCE_READABLE = ", once the approvals store can be read again (see above)"
"""After an approve hint while the approvals store cannot be read: approving waits for its fix."""
ONCE_PINS_READABLE = ", once the tool pin store can be read again (see above)"
"""After an approve hint while the tool pin store cannot be read: every tool of a pinned server is held till then."""


def command_hints(
    root: str | os.PathLike[str], *, approvals_error: str | None = None, options: str = "", home: str | None = None
) -> tuple[str, str]:
    """The approve and login hints (``{name}`` in each, filled by :func:`fill_hint`) that work where they are
    printed: with ``--workspace ROOT`` unless ``root`` is the current directory (run elsewhere, they would name
    another workspace), ``options`` (a fleet's ``--fleet URL``), and after ``MCPVISOR_HOME=HOME`` when the command
    ran with one (``home``: pasted without it, they would decide in another store). With ``approvals_error`` (the
    approvals store cannot be read), approving waits for its fix."""
    try:
        here = Path.cwd().resolve() == Path(root).resolve()
    except OSError:
        here = False
    workspace = ("" if here else f" --workspace {shlex.quote(str(root))}") + options
    approve = in_home(with_options(APPROVE_HINT, workspace), home)
    if approvals_error is not None:
        approve += ONCE_READABLE
    return approve, in_home(with_options(LOGIN_HINT, workspace), home)


def fix_commands(root: str | os.PathLike[str], options: str, env: Mapping[str, str]) -> tuple[str, str]:
    """The approve and login commands (``{name}`` in each) a running host gives, to paste in any folder: with
    ``--workspace ROOT``, ``options`` (a fleet's ``--fleet URL``), and after ``MCPVISOR_HOME=HOME`` when the host
    runs with one (:func:`~mcpvisor.host.paths.named_home`)."""
    words, home = f" --workspace {shlex.quote(str(root))}{options}", named_home(env)
    return in_home(with_options(APPROVE_HINT, words), home), in_home(with_options(LOGIN_HINT, words), home)


def in_home(hint: str, home: str | None) -> str:
    """``hint`` (a template: braces doubled) after ``MCPVISOR_HOME=home``, when there is one to name
    (:func:`~mcpvisor.host.paths.named_home`)."""
    return home_words(home).replace("{", "{{").replace("}", "}}") + hint


def home_words(home: str | None) -> str:
    """``MCPVISOR_HOME=home `` to put before a command to paste, or nothing (no ``home`` to name)."""
    return f"MCPVISOR_HOME={shlex.quote(home)} " if home else ""


def with_options(hint: str, options: str) -> str:
    """``hint`` with ``options`` (command-line words) before its ``{name}``: a name after ``--`` comes last."""
    return hint.replace(" {name}", options.replace("{", "{{").replace("}", "}}") + " {name}", 1)


def trust_hint(approve_hint: str) -> str:
    """The command that trusts the folder, made for the place the approve hint was (:func:`command_hints`: with its
    ``--workspace ROOT`` when that is not the current directory, and what comes before its ``mcpvisor``, such as
    ``MCPVISOR_HOME=HOME``; the hint is a template, its braces doubled)."""
    workspace = re.search(r" --workspace (?:'[^']*'(?:\"'\"'[^']*')*|\S+)", approve_hint)
    words = workspace.group(0) if workspace else ""
    env = approve_hint.partition("mcpvisor mcp approve")[0] if "mcpvisor mcp approve" in approve_hint else ""
    return (env + "mcpvisor mcp trust" + words).replace("{{", "{").replace("}}", "}")


def fill_hint(hint: str, name: str) -> str:
    """``hint`` with server ``name`` as one word: quoted for a shell (:func:`name_word`), or for the shell's own
    ``/command`` (``/approve 'a b'``)."""
    return hint.format(name=shlex.quote(name) if hint.startswith("/") else name_word(name))


def lsp_hint(hint: str) -> str:
    """An MCP server's approve hint (``{name}`` in it) as the one of a language server: ``lsp approve``."""
    return hint.replace(" mcp approve ", " lsp approve ", 1)


def lsp_approve_hint(root: str | os.PathLike[str], name: str, options: str = "", home: str | None = None) -> str:
    """The command that approves language server ``name``, working where it is printed (:func:`command_hints`;
    ``options``: a fleet's ``--fleet URL``; ``home``: the ``MCPVISOR_HOME`` to name, as an MCP server's hint does)."""
    return fill_hint(lsp_hint(command_hints(root, options=options, home=home)[0]), name)


def describe_servers(
    assembled: AssembledServers,
    gating: McpGating,
    approvals: ApprovalStore,
    root: str | os.PathLike[str],
    *,
    live: Mapping[str, LiveConnection] | None = None,
    trusted: bool = True,
    sign_ins: Mapping[str, str] | None = None,
    held: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] | None = None,
    kept: Mapping[str, str] | None = None,
) -> list[ServerView]:
    """One row per configured server, and one per invalid entry no server runs for, in source-group order then by
    name. ``held``: held tools and prompts of servers that are not live (a live server's come with it); ``kept``:
    the notice of each server whose invalid entry gave way to its last good one."""
    rows: list[ServerView] = []
    order: dict[str, int] = {label: i for i, label in enumerate(SOURCE_ORDER)}
    for bad in assembled.skipped.values():
        label = SOURCE_LABELS[bad.scope]
        file = str(bad.path) if bad.path is not None else None
        rows.append(ServerView(bad.name, label, file, bad.scope, "", "", "invalid", "invalid", None, error=bad.problem))
    for name in sorted(assembled.servers, key=lambda n: (order.get(assembled.sources[n].label, 99), n)):
        cfg = assembled.servers[name]
        source = assembled.sources[name]
        approval = approvals.get_state(root, name, cfg) if is_gated(cfg) else None
        reason: str | None = None
        state: ServerState
        if not trusted:
            state = "untrusted"
        elif gating.is_excluded(name):
            state, reason = "disabled", "excluded"
        elif not gating.is_allowed(name):
            state, reason = "not_allowed", "not_allowed"
        elif approval == "rejected":
            state, reason = "rejected", "rejected"
        elif gating.is_pending(name) or approval == "pending":
            state, reason = "needs_approval", "pending_approval"
        else:
            conn = live.get(name) if live is not None else None
            state = conn.status if conn is not None else "disconnected"  # type: ignore[assignment]
            if conn is not None and conn.needs_auth and conn.status == "disconnected":
                state = "needs_auth"
        conn = live.get(name) if live is not None else None
        error = conn.error if conn is not None and reason is None else None
        rows.append(
            ServerView(
                name=name,
                source=source.label,
                file=str(source.path) if source.path is not None else None,
                scope=cfg.scope or source.scope,
                transport=cfg.transport,
                target=cfg.target(),
                state=state,
                reason=reason,
                approval=approval,
                tools=conn.tools if conn is not None and reason is None else 0,
                prompts=conn.prompts if conn is not None and reason is None else 0,
                error=gating.left_out_by(name, reason) or error,
                log_path=conn.log_path if conn is not None else None,
                sign_in=(sign_ins or {}).get(name),
                held_tools=conn.held_tools if conn is not None else (held or {}).get(name, ((), ()))[0],
                held_prompts=conn.held_prompts if conn is not None else (held or {}).get(name, ((), ()))[1],
                held_why=conn.held_why if conn is not None else None,
                kept=(kept or {}).get(name),
                warning=conn.warning if conn is not None and reason is None else None,
            )
        )
    return sorted(rows, key=lambda row: (order.get(row.source, 99), row.file or "", row.name))  # a file's together


def held_text(row: ServerView, approve_hint: str = APPROVE_HINT) -> str | None:
    """``2 tools changed since approval — run: mcpvisor mcp approve NAME``, or None when nothing is held."""
    kinds = ((row.held_tools, "tool"), (row.held_prompts, "prompt"))
    parts = [plural(len(names), word) for names, word in kinds if names]
    if not parts:
        return None
    if row.held_why:
        return f"{' and '.join(parts)} held — {row.held_why}"
    since = "since approval" if row.approval is not None else "since first use"
    return f"{' and '.join(parts)} changed {since} — run: {fill_hint(approve_hint, row.name)}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def state_text(
    row: ServerView,
    *,
    live: bool = True,
    approve_hint: str = APPROVE_HINT,
    login_hint: str = LOGIN_HINT,
    trust: str | None = None,
) -> tuple[str, str, str]:
    """(icon, text, style) for one row, in SPEC §9 priority order; the hints are the commands that fix a
    waiting approval or sign-in (the shell's own ``/approve`` and ``/login`` in the shell), ``trust`` the one that
    trusts the folder (by default made from the approve hint: :func:`trust_hint`)."""
    if row.state == "invalid":
        return "✗", invalid_entry_text(row.file, row.error), "red"
    if row.state == "untrusted":
        return "○", f"untrusted folder — run: {trust or trust_hint(approve_hint)}", "yellow"
    if row.state == "disabled":
        return "○", f"disabled{f' — {row.error}' if row.error else ' (in mcp.excluded)'}", "dim"
    if row.state == "not_allowed":
        why = f" — {row.error}" if row.error else " (not in mcp.allowed or --allowed-mcp-server-names)"
        return "○", f"not allowed{why}", "dim"
    if row.state == "rejected":
        return "✗", "rejected — edit config to re-approve", "red"
    if row.state == "needs_approval":
        return "?", f"needs approval — run: {fill_hint(approve_hint, row.name)}", "yellow"
    if row.state == "needs_auth":
        return "🔒", f"needs authentication — run: {fill_hint(login_hint, row.name)}", "yellow"
    signed = f" · {row.sign_in}" if row.sign_in else ""
    held = held_text(row, approve_hint)
    if not live:
        allowed = ("allowed (approved)" if row.approval == "approved" else "allowed") + signed
        return ("!", f"{allowed} · {held}", "yellow") if held else ("✓", allowed, "green")
    if row.state == "connected":
        connected = f"connected ({plural(row.tools, 'tool')}, {plural(row.prompts, 'prompt')}){signed}"
        notes = [note for note in (held, row.warning and f"! {row.warning}") if note]
        return ("●", " · ".join((connected, *notes)), "yellow") if notes else ("●", connected, "green")
    if row.state == "connecting":
        return "◌", "connecting…", "cyan"
    if row.error:
        return "✗", f"disconnected — {row.error}{log_hint(row.error, row.log_path, row.transport)}", "red"
    return "○", "disconnected", "dim"


def invalid_entry_text(file: str | None, problem: str | None) -> str:
    """What a status row says of an entry that is not valid, so no server runs for it: where, why and the fix."""
    return f"invalid entry{f' in {file}' if file else ''}, not started — {problem}"


def log_hint(error: str, log_path: str | None, transport: str) -> str:
    """``; see error logs: PATH`` after a stdio server's ``error`` when its log holds something the error does
    not name already; else nothing."""
    if not log_path or transport != "stdio" or log_path in error or not _has_content(log_path):
        return ""
    return f"; see error logs: {log_path}"


def _has_content(path: str) -> bool:
    """Whether the server's log holds anything (a server that never started left it empty)."""
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def short_command(target: str) -> str:
    """A command line with this interpreter's path shortened to ``python``."""
    exe = sys.executable
    return "python" + target[len(exe) :] if target.startswith(exe + " ") else target


def short_path(path: str | None) -> str:
    if path is None:
        return ""
    home = str(Path.home())
    return "~" + path[len(home) :] if path.startswith(home + os.sep) else path
