"""The shell's approval dialog (SPEC §7, §9): what it shows, what it accepts, what is waiting.

Pure parts only: :func:`approval_request` describes one server for people (the exact command and
arguments or URL, the source file, and the *names* of env variables and headers, never their
values); :func:`parse_choice` reads an answer; :class:`ApprovalQueue` keeps the servers waiting
for a decision, each bound to the configuration hash that was shown, so an answer can never
approve a configuration the user has not seen. The session (``session.py``) drives it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console
from rich.text import Text

from mcpvisor.core.server_config import CODE_LOADING_ENV, McpServerConfig, is_secret_name, redact_text
from mcpvisor.core.spellings import file_name
from mcpvisor.host.lsp.config import LSP_KEY_PREFIX, RUNS_WORKSPACE_CODE, LspServerConfig
from mcpvisor.host.settings.expand import variables_in
from mcpvisor.host.settings.mcp_servers import ServerSource
from mcpvisor.shell.views import indented

__all__ = [
    "CHOICES_TEXT",
    "ApprovalQueue",
    "ApprovalRequest",
    "Choice",
    "approval_lines",
    "approval_request",
    "copied_variables",
    "lsp_approval_request",
    "parse_choice",
    "render_approval_request",
    "render_question",
    "shown_name",
]

Choice = Literal["approve", "approve_all", "reject", "skip"]

CHOICES_TEXT = "[a]pprove / approve [A]ll / [r]eject / [s]kip"

_ANSWERS: Mapping[str, Choice] = {
    "a": "approve",
    "approve": "approve",
    "A": "approve_all",
    "all": "approve_all",
    "approve all": "approve_all",
    "r": "reject",
    "reject": "reject",
    "s": "skip",
    "skip": "skip",
}


def parse_choice(text: str) -> Choice | None:
    """The choice an answer names, or None. Single letters are case-sensitive (``a`` one, ``A`` all)."""
    answer = " ".join(text.split())
    if answer in _ANSWERS:
        return _ANSWERS[answer]
    return _ANSWERS.get(answer.lower()) if answer.lower() != "a" else None


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One server as the dialog shows it, as its entry wrote it (before ``${VAR}`` expansion). Never holds a
    header value, nor an env value but those that decide what code runs (``code_env``: ``NODE_OPTIONS=--require
    ./x.js`` is what is approved)."""

    name: str
    hash: str
    source: str
    """The status-view group, e.g. ``Project .mcp.json``."""
    file: str | None
    transport: str
    command: str | None
    args: tuple[str, ...]
    cwd: str | None
    url: str | None
    env_keys: tuple[str, ...]
    """The env variables whose values are not shown (they may hold secrets)."""
    header_keys: tuple[str, ...]
    code_env: tuple[tuple[str, str], ...] = ()
    cwd_name: str = "cwd"
    """The working folder's field as the entry spelled it (``workingDirectory``)."""
    reads: tuple[str, ...] = ()
    """What the server is given of the environment of the mcpvisor that runs it: ``${GITHUB_TOKEN} -> env
    FOO`` (names only: an env value or a header that copies a variable may carry a secret off the machine)."""
    files: tuple[str, ...] = ()
    """A language server's extensions (empty for an MCP server)."""
    details: tuple[tuple[str, str], ...] = ()
    """More of the entry that decides what runs, in full: a language server's initialization options and
    settings (either can make it run a program)."""
    notes: tuple[str, ...] = ()
    """What approving means, said plainly (language servers run workspace code; ``${VAR}`` is filled in)."""


FROM_ENVIRONMENT = "${…} is filled in from the environment of the mcpvisor that runs it"
_VARIABLE = re.compile(r"\$(\{|[A-Za-z_])")


def names_variables(*values: object) -> bool:
    """Whether any of ``values`` (as written) names an environment variable: ``${VAR}`` or ``$VAR``."""
    return any(_VARIABLE.search(str(value)) for value in values if value)


def copied_variables(**written: object) -> tuple[str, ...]:
    """``${VAR} -> env FOO`` for each variable that a value of the mappings in ``written`` (``env=...``,
    ``header=...``; as written) copies from the environment; ``${VAR} -> oauth.clientSecret`` for one in a
    value nested deeper (``oauth={...}``)."""
    copies: list[str] = []
    for kind, values in written.items():
        if isinstance(values, Mapping) and kind in ("env", "header"):
            for key, value in sorted(values.items()):
                copies.extend(f"${{{name}}} -> {kind} {key}" for name in variables_in(str(value)))
        else:
            copies.extend(
                f"${{{name}}} -> {where}" for where, text in _strings(values, kind) for name in variables_in(text)
            )
    return tuple(copies)


def _strings(value: object, where: str) -> list[tuple[str, str]]:
    """Every string inside ``value`` with its dotted place (``oauth.idp.idToken``)."""
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, Mapping):
        return [found for key, item in value.items() for found in _strings(item, f"{where}.{key}")]
    if isinstance(value, list | tuple):
        return [found for item in value for found in _strings(item, where)]
    return []


def _only_variables(value: object) -> bool:
    """Whether ``value`` as written is nothing but ``${VAR}`` references (shown as written, it tells no secret)."""
    return isinstance(value, str) and bool(variables_in(value)) and not _VARIABLES.sub("", value).strip()


_VARIABLES = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")
"""A reference without a default: ``${S:-written}`` holds a literal, which may be a secret."""


def _shown(value: Any, name: str = "") -> Any:
    """``value`` as an approval shows it: a secret's (by its name) hidden unless it is only ``${VAR}``, URLs
    without their credentials and query values."""
    if name and is_secret_name(name) and not _only_variables(value) and not _is_url(value):
        return "(hidden)"
    if isinstance(value, Mapping):
        return {key: _shown(item, str(key)) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_shown(item) for item in value]
    return redact_text(value) if isinstance(value, str) else value


def _is_url(value: object) -> bool:
    """Whether ``value`` is a URL: where something is sent is shown (without credentials and query values)."""
    return isinstance(value, str) and "://" in value and not any(c.isspace() for c in value.strip())


def _env_parts(written: Mapping[str, Any]) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """An entry's env as an approval shows it: what decides the code that runs, with its values (but a secret's,
    by its name: ``NPM_CONFIG__AUTHTOKEN``; URLs without credentials); the names of the others (their values may
    be secrets, which no output shows)."""
    code = tuple(
        (key, str(_shown(value, key))) for key, value in sorted(written.items()) if CODE_LOADING_ENV.match(key)
    )
    return code, tuple(sorted(key for key in written if not CODE_LOADING_ENV.match(key)))


_APART: frozenset[str] = frozenset(
    {"command", "args", "cwd", "url", "http_url", "env", "headers", "scope", "extension_name", "description"}
)
"""Keys of an MCP server's entry an approval shows on lines of their own, or not at all (not approved)."""


def approval_request(name: str, cfg: McpServerConfig, source: ServerSource) -> ApprovalRequest:
    """An MCP server as the dialog shows it: as its entry wrote it (before ``${VAR}`` expansion), as approved."""
    shown = cfg.approved_value
    command, args, cwd = shown("command"), tuple(shown("args") or ()), shown("cwd")
    url = (shown("http_url") or shown("url")) if cfg.command is None else None
    written = cfg.written_entry()
    rest = {key: value for key, value in sorted(written.items()) if key not in _APART}
    reads = copied_variables(env=shown("env"), header=shown("headers"), **rest)
    env = shown("env")
    code_env, env_hidden = _env_parts(env if isinstance(env, Mapping) else {})
    return ApprovalRequest(
        name=name,
        hash=cfg.approval_hash,
        source=source.label,
        file=str(source.path) if source.path is not None else None,
        transport=cfg.transport,
        command=command,
        args=args,
        cwd=cwd,
        cwd_name=cfg.written_name("cwd") or "cwd",
        url=url,
        env_keys=env_hidden,
        header_keys=tuple(sorted(cfg.headers or {})),
        code_env=code_env,
        reads=reads,
        details=tuple(
            (cfg.written_name(key) or file_name(key), json.dumps(_shown(value, key), ensure_ascii=False))
            for key, value in rest.items()
        ),
        notes=(FROM_ENVIRONMENT,) if reads or names_variables(command, *args, cwd, url) else (),
    )


def lsp_approval_request(name: str, cfg: LspServerConfig, source: str, path: str | None) -> ApprovalRequest:
    """A language server as the dialog shows it (keyed ``lsp:NAME`` in the queue): its whole entry as written
    but the values of env variables that decide no code."""
    shown = cfg.approved_value
    command, args, env = shown("command"), tuple(map(str, shown("args") or ())), shown("env")
    written_env = env if isinstance(env, Mapping) else {}
    socket = shown("socket")
    details = tuple(
        (label, json.dumps(value, ensure_ascii=False))
        for label, value in (("init", shown("initialization_options")), ("settings", shown("settings")))
        if value is not None
    )
    reads = copied_variables(env=written_env)
    code_env, env_hidden = _env_parts(written_env)
    variables = reads or names_variables(command, *args, shown("workspace_folder"), *(v for _, v in details), socket)
    return ApprovalRequest(
        name=f"{LSP_KEY_PREFIX}{name}",
        hash=cfg.approval_hash,
        source="Project .lsp.json" if source == "project" else "Workspace settings (lspServers)",
        file=path,
        transport=cfg.transport,
        command=command if isinstance(command, str) else None,
        args=args,
        cwd=shown("workspace_folder"),
        url=None if cfg.transport == "stdio" else json.dumps(socket),
        env_keys=env_hidden,
        header_keys=(),
        code_env=code_env,
        reads=reads,
        files=tuple(f"{ext} ({lang})" for ext, lang in sorted(cfg.extension_to_language.items())),
        details=details,
        notes=(RUNS_WORKSPACE_CODE, *((FROM_ENVIRONMENT,) if variables else ())),
    )


def shown_name(key: str) -> str:
    """A queue key as people read it: ``language server python`` for ``lsp:python``."""
    return f"language server {key.removeprefix(LSP_KEY_PREFIX)}" if key.startswith(LSP_KEY_PREFIX) else key


def approval_lines(request: ApprovalRequest) -> list[tuple[str, str]]:
    """``(label, value)`` for each line of what ``request`` shows, in order."""
    lines: list[tuple[str, str]] = []
    if request.command is not None:
        lines.append(("command", request.command))
        if request.args:
            lines.append(("args", json.dumps(list(request.args))))
        if request.cwd:
            lines.append((request.cwd_name, request.cwd))
    if request.url is not None:
        lines.append(("socket" if request.files else "url", f"{request.url} ({request.transport})"))
    for key, value in request.code_env:
        lines.append(("env", f"{key}={value} (decides what code runs)"))
    if request.env_keys:
        lines.append(("env", f"{', '.join(request.env_keys)} (values hidden)"))
    if request.header_keys:
        lines.append(("headers", f"{', '.join(request.header_keys)} (values hidden)"))
    if request.reads:
        lines.append(("reads", ", ".join(request.reads)))
    if request.files:
        lines.append(("files", ", ".join(request.files)))
    lines.extend(request.details)
    return lines


def render_approval_request(console: Console, request: ApprovalRequest, *, intro: str = "needs approval") -> None:
    """The server's details: what would run (or be reached) and where that was configured."""
    head = Text()
    head.append("? ", style="yellow bold")
    head.append(shown_name(request.name), style="bold")
    head.append(f" {intro} — {request.source}")
    if request.file:
        head.append(f" ({request.file})")
    console.print(head)
    for label, value in approval_lines(request):
        console.print(indented(Text(f"{label + ':':<8} {value}", overflow="fold"), 4))
    for note in request.notes:
        console.print(indented(Text(note, style="yellow"), 4))


def render_question(console: Console, name: str, *, waiting: int) -> None:
    """The line asking about ``name``; ``waiting`` counts the servers in the queue, ``name`` included."""
    line = Text()
    line.append("Approve ", style="yellow")
    line.append(shown_name(name), style="yellow bold")
    line.append("? ", style="yellow")
    line.append(CHOICES_TEXT)
    if waiting > 1:
        line.append(f"  ({waiting} waiting)", style="dim")
    console.print(indented(line, 2))


@dataclass(frozen=True, slots=True)
class QueueChange:
    added: tuple[str, ...]
    dropped: tuple[str, ...]


class ApprovalQueue:
    """Servers waiting for a decision, in arrival order, each with the approval hash it was shown with.

    :meth:`refresh` is fed the strictly promptable servers (name -> approval hash) recomputed from
    the live server map and the approvals store. A queued server whose hash changed, or that is no
    longer promptable (decided elsewhere, removed, excluded), is dropped; a server is only added
    when announced, and never while skipped for that same hash.
    """

    def __init__(self) -> None:
        self._waiting: dict[str, str] = {}
        self._skipped: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, name: object) -> bool:
        return name in self._waiting

    @property
    def head(self) -> tuple[str, str] | None:
        """The server asked about now and the hash shown for it."""
        return next(iter(self._waiting.items()), None)

    def snapshot(self) -> tuple[tuple[str, str], ...]:
        return tuple(self._waiting.items())

    def refresh(self, promptable: Mapping[str, str], announced: Collection[str] = ()) -> QueueChange:
        dropped = tuple(name for name, shown in self._waiting.items() if promptable.get(name) != shown)
        for name in dropped:
            del self._waiting[name]
        self._skipped = {name: h for name, h in self._skipped.items() if promptable.get(name) == h}
        added: list[str] = []
        for name, current in promptable.items():
            if name in announced and name not in self._waiting and self._skipped.get(name) != current:
                self._waiting[name] = current
                added.append(name)
        return QueueChange(tuple(added), dropped)

    def skip(self, name: str) -> None:
        """Stop asking about ``name`` until its configuration changes (it stays pending)."""
        shown = self._waiting.pop(name, None)
        if shown is not None:
            self._skipped[name] = shown

    def discard(self, name: str) -> None:
        """``name`` was decided: stop asking about it."""
        self._waiting.pop(name, None)
        self._skipped.pop(name, None)
