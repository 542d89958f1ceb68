"""How a language server's state reads to people (status tool, ``mcpvisor status``, ``/mcp``)."""

from __future__ import annotations

import math
import os
import shutil
from typing import TYPE_CHECKING

from mcpvisor.core.gating import McpGating
from mcpvisor.core.processes import on_host_path
from mcpvisor.core.server_config import arguments_hint
from mcpvisor.host.lsp.config import GATED_LSP_SCOPES, LspServerConfig
from mcpvisor.host.status import command_hints, lsp_approve_hint, trust_hint

if TYPE_CHECKING:
    from mcpvisor.host.lsp.manager import LspManager
    from mcpvisor.host.lsp.server import LanguageServer

__all__ = ["describe_state", "left_out_state", "missing_command", "nothing_open", "untrusted_state"]


def left_out_state(gating: McpGating, name: str, reason: str | None) -> str | None:
    """``disabled — …`` or ``not allowed — …``: which list leaves language server ``name`` out and the fix, when
    that is gating's ``reason`` and known."""
    if (why := gating.left_out_by(name, reason)) is None:
        return None
    return f"{'disabled' if reason == 'excluded' else 'not allowed'} — {why}"


def untrusted_state(root: str | os.PathLike[str], options: str = "", home: str | None = None) -> str:
    """What a language server of an untrusted folder reads as, with the command that trusts it (as an MCP server's
    row gives it: ``--workspace ROOT`` unless ``root`` is the current directory)."""
    trust = trust_hint(command_hints(root, options=options, home=home)[0])
    return f"not started: the folder is not trusted — run: {trust}"


def describe_state(
    manager: LspManager,
    name: str,
    server: LanguageServer | None,
    reason: str | None,
    cfg: LspServerConfig | None = None,
) -> str:
    """One language server's state as people read it (``cfg``: its entry, to tell a command that is not
    there before its first use fails on it)."""
    if reason == "untrusted":
        return untrusted_state(manager.root, manager.approve_options, manager.approve_home)
    if reason == "pending_approval":
        hint = lsp_approve_hint(manager.root, name, manager.approve_options, manager.approve_home)
        return f"needs approval — run: {hint}"
    if reason == "rejected":
        return "rejected — edit config to re-approve"
    if reason in ("excluded", "not_allowed"):
        fallback = "disabled (in lsp.excluded)" if reason == "excluded" else "not allowed"
        return left_out_state(manager.state.gating, name, reason) or fallback
    if cfg is not None and (server is None or server.state == "stopped") and (missing := missing_command(name, cfg)):
        return f"stopped — {missing}"
    if server is None:
        return "stopped"
    if server.state == "ready":
        return "ready"
    if server.state == "starting":
        return "starting"
    if manager.given_up(server):  # a call does not start it as it would another failed one
        answering = _answering(manager.answering_for(server))
        return f"failed {server.crashes} times in a row; {manager.GIVEN_UP_FIX}" + (
            f"; {answering} meanwhile" if answering else ""
        )
    if answering := _answering(manager.answering_for(server)):  # passed over: calls go to the others
        pause = manager.restarts_in(server)
        fix = manager.GIVEN_UP_FIX.removeprefix("it starts again ")  # (a save of its entry, /reload)
        again = f"in {max(math.ceil(pause), 1)} s" if pause is not None else fix
        return f"failed — {answering} until it starts again {again}"
    if server.state in ("failed", "stopping"):
        return server.state
    return "idle" if manager.is_idle(name) else "stopped (starts on first use)"


def _answering(names: list[str]) -> str:
    """``'beta' answers for its files`` (empty: no server answers in a failed one's place)."""
    if not names:
        return ""
    who = ", ".join(repr(name) for name in names)
    return f"{who} {'answers' if len(names) == 1 else 'answer'} for its files"


def nothing_open(idle: list[str], named: object = None) -> str:
    """Why a ``diagnostics`` call that names no file has nothing to check: no document is open, or (``idle``: the
    servers stopped as idle; ``named``: the one the call names) its server was stopped while idle."""
    stopped = [name for name in sorted(idle) if named in (None, name)]
    if not stopped:
        return "no document is open yet: name the 'files' to check"
    who = ", ".join(repr(name) for name in stopped)
    were = f"language server {who} was" if len(stopped) == 1 else f"language servers {who} were"
    return (
        f"{were} stopped while idle (lsp.idleStopSeconds), so no document is open: name the 'files' to check; "
        f"naming them, or any call for a file, starts {'it' if len(stopped) == 1 else 'them'} again"
    )


def missing_command(name: str, cfg: LspServerConfig) -> str | None:
    """What to say of the server ``name`` when its command cannot be found (None: it can, or it is not for here
    to say), with the fix."""
    if not _command_missing(cfg):
        return None
    written = cfg.approved_value("command")  # as written: a ${VAR} in it may stand for a secret
    shown = written if isinstance(written, str) else cfg.redact(cfg.command or "")
    fix = cfg.field(name, "command")
    return f"its command {shown!r} is not found, so its first use will fail: fix {fix}{arguments_hint(written)}"


def _command_missing(cfg: LspServerConfig) -> bool:
    """Whether the server's command cannot be found: a bare name on the PATH it would be looked up on (the
    host's for a repository's server, else its own ``env.PATH`` or the host's), an absolute path that is no
    executable file. A relative path is the server's folder's business: never said missing."""
    command = cfg.command
    if not command:
        return False
    if os.sep in command:
        return os.path.isabs(command) and not os.access(command, os.X_OK)
    if cfg.scope in GATED_LSP_SCOPES:
        try:
            on_host_path(command)
        except FileNotFoundError:
            return True
        return False
    path = (cfg.env or {}).get("PATH") or os.environ.get("PATH", os.defpath)
    return shutil.which(command, path=path) is None
