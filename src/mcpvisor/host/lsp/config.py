"""One language server's configuration, in the entry format Claude Code and Qwen Code share, and its
fingerprints (SPEC §10; LSP.md §6.1–§6.3).

Pure: no I/O. An entry comes from a ``.lsp.json`` (project scope, gated), ``lspServers`` in a settings
scope (workspace gated) or ``--lsp-config FILE``; servers are named by their key. Fingerprints decide
what an edit does to a running server:

- :attr:`LspServerConfig.connection_id` — command, args, env, transport, socket, workspace folder and
  initialization options: a change restarts the server;
- ``settings`` — sent live (``workspace/didChangeConfiguration``), no restart;
- ``extensionToLanguage`` — only re-routes files;
- timeouts and restart policy — take effect in place;
- :attr:`LspServerConfig.approval_hash` — everything a repository could use to run code (all of the
  above but the timeouts and the restart policy), over the literal entry before ``${VAR}``
  expansion, so an edit asks again while a rotated secret does not.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable, Iterator, Mapping
from pathlib import PurePath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from mcpvisor.core.redaction import passwords_hidden
from mcpvisor.core.server_config import CODE_LOADING_ENV, canonical_json, redact_values, repr_fields

__all__ = [
    "refused_in_a_repository",
    "GATED_LSP_SCOPES",
    "LSP_KEY_PREFIX",
    "RUNS_WORKSPACE_CODE",
    "camel_fields",
    "LspScope",
    "LspServerConfig",
    "lsp_approval_hash",
    "normalize_lsp_entry",
]


def leaves_the_workspace(folder: str) -> bool:
    """Whether a ``workspaceFolder`` leads out of the workspace by its spelling alone: absolute, from a home
    folder (``~``) or through ``..`` (a link inside the workspace is checked where it is followed)."""
    path = PurePath(folder)
    return path.is_absolute() or folder.startswith("~") or ".." in path.parts


RUNS_WORKSPACE_CODE = (
    "An approved language server runs code from this workspace (its build files, plugins and import hooks): "
    "approve only servers of a project you trust."
)
LSP_KEY_PREFIX = "lsp:"
"""How a language server is told apart from an MCP server of the same name where both are decided
(``/approve lsp:python``)."""

LspScope = Literal["project", "workspace", "system", "cli"]
"""Where an entry came from (``None``: the user's own settings or system defaults)."""
GATED_LSP_SCOPES = frozenset({"project", "workspace"})

DEFAULT_STARTUP_TIMEOUT_MS = 30_000
DEFAULT_SHUTDOWN_TIMEOUT_MS = 5_000
DEFAULT_MAX_RESTARTS = 3

_ALIASES = {
    "extensionToLanguage": "extension_to_language",
    "initializationOptions": "initialization_options",
    "workspaceFolder": "workspace_folder",
    "startupTimeout": "startup_timeout",
    "shutdownTimeout": "shutdown_timeout",
    "restartOnCrash": "restart_on_crash",
    "maxRestarts": "max_restarts",
}
_POLICY_KEYS = frozenset({"startup_timeout", "shutdown_timeout", "restart_on_crash", "max_restarts"})
_NOT_APPROVAL_KEYS = frozenset({"scope", *_POLICY_KEYS})
_CONNECTION_KEYS = ("command", "args", "env", "transport", "socket", "workspace_folder", "initialization_options")


def refused_in_a_repository(key: str) -> bool:
    """Whether a repository's entry may not set the environment variable ``key``: each of
    :data:`~mcpvisor.core.server_config.CODE_LOADING_ENV` makes the server run code of its choice, but
    ``PATH`` (the command itself is looked up on the host's PATH; what the server starts may need it)."""
    return CODE_LOADING_ENV.match(key) is not None and key.upper() != "PATH"


def normalize_lsp_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry with camelCase keys (``extensionToLanguage``) in canonical spelling; others unchanged."""
    return {_ALIASES.get(key, key): value for key, value in entry.items()}


def lsp_approval_hash(entry: Mapping[str, Any]) -> str:
    """SHA-256 over the literal entry minus ``scope``, the timeouts and the restart policy."""
    kept = {k: v for k, v in normalize_lsp_entry(entry).items() if k not in _NOT_APPROVAL_KEYS}
    return hashlib.sha256(canonical_json(kept).encode()).hexdigest()


class LspServerConfig(BaseModel):
    """How to run one language server and which files it answers for. Immutable; unknown keys are kept
    (they count for the approval hash) but otherwise ignored."""

    # An invalid value is never echoed in an error (an env value, a token in the initialization options).
    model_config = ConfigDict(frozen=True, extra="allow", hide_input_in_errors=True)

    command: str | None = None
    args: tuple[str, ...] = ()
    extension_to_language: dict[str, str] = Field(default_factory=dict)
    transport: Literal["stdio", "socket", "tcp"] = "stdio"
    socket: dict[str, Any] | str | None = None
    env: dict[str, str] | None = None
    initialization_options: Any = None
    settings: Any = None
    workspace_folder: str | None = None
    startup_timeout: int | None = None
    """Milliseconds for ``initialize`` and a cold server's first answer (default 30 s)."""
    shutdown_timeout: int | None = None
    """Milliseconds a stopping server may take after ``shutdown`` and ``exit`` (default 5 s)."""
    restart_on_crash: bool | None = None
    max_restarts: int | None = None
    scope: LspScope | None = None

    _approval_hash: str | None = PrivateAttr(default=None)
    _literal: dict[str, Any] | None = PrivateAttr(default=None)

    def field(self, name: str, key: str) -> str:
        """Where ``key`` of the entry ``name`` is written, for a fix: ``NAME.KEY`` in a ``.lsp.json`` (or a
        ``--lsp-config`` file), ``lspServers.NAME.KEY`` in a settings file."""
        return f"{name}.{key} in its .lsp.json" if self.scope in ("project", "cli") else f"lspServers.{name}.{key}"

    @model_validator(mode="before")
    @classmethod
    def _normalize(cls, data: Any) -> Any:
        return normalize_lsp_entry(data) if isinstance(data, Mapping) else data

    @field_validator("extension_to_language", mode="before")
    @classmethod
    def _extensions(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        out: dict[str, str] = {}
        for ext, language in value.items():
            if not isinstance(ext, str) or not ext.strip(".").strip() or not isinstance(language, str) or not language:
                raise ValueError("extensionToLanguage: map file extensions ('.py') to language ids ('python')")
            out["." + ext.strip().lstrip(".").lower()] = language
        return out

    @field_validator("env", mode="before")
    @classmethod
    def _stringify_env(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): v if isinstance(v, str) else canonical_json(v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _check(self) -> LspServerConfig:
        if not self.extension_to_language:
            raise ValueError('extensionToLanguage: required, e.g. {".py": "python"}: files are routed by extension')
        if self.transport == "stdio" and not self.command:
            raise ValueError("command: required for a stdio language server")
        if self.transport != "stdio":
            self.address()  # checked here: a server that cannot be reached is refused with its entry
        for name in ("startup_timeout", "shutdown_timeout"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{_camel(name)}: must be a positive number of milliseconds")
        if self.max_restarts is not None and self.max_restarts < 0:
            raise ValueError("maxRestarts: must be 0 or more")
        if self.scope in GATED_LSP_SCOPES:
            refused = sorted(k for k in self.env or {} if refused_in_a_repository(k))
            if refused:
                raise ValueError(
                    f"env: a repository may not set {', '.join(refused)} (it would make the server run code of "
                    "its choice); set it in your own settings if you need it"
                )
            if self.transport != "stdio":
                raise ValueError(f"transport: {self.transport!r} is allowed only in your own settings")
            if self.workspace_folder is not None and leaves_the_workspace(self.workspace_folder):
                raise ValueError(
                    "workspaceFolder: a repository's language server must stay inside the workspace; give a "
                    "folder relative to it, without '..' (or leave it out: the workspace itself)"
                )
        return self

    @classmethod
    def from_entry(
        cls, entry: Mapping[str, Any], *, expand: Callable[[Any], Any] | None = None, **overrides: Any
    ) -> LspServerConfig:
        """Build a config from a file's entry; the approval hash is taken over the literal entry, before
        ``expand`` substitutes ``${VAR}``. ``overrides`` (``scope=...``) apply after hashing, before validation."""
        literal = normalize_lsp_entry(entry)
        expanded = expand(literal) if expand is not None else literal
        cfg = cls.model_validate({**expanded, **overrides})
        cfg._approval_hash = lsp_approval_hash(literal)
        cfg._literal = literal
        return cfg

    def approved_value(self, key: str) -> Any:
        """``key``'s value as the entry wrote it, before ``${VAR}`` expansion: what an approval covers and shows
        (a ``${VAR}`` may stand for a secret)."""
        return self._literal.get(key) if self._literal is not None else getattr(self, key)

    def _written(self, key: Literal["command", "args"]) -> Any:
        """The command or the arguments as written, where the entry wrote them as they are run (a string; a
        list of as many strings)."""
        written, run = self.approved_value(key), getattr(self, key)
        if key == "command":
            return written if isinstance(written, str) else run
        ok = isinstance(written, list) and len(written) == len(run) and all(isinstance(a, str) for a in written)
        return tuple(written) if ok else run

    def written_args(self) -> list[str]:
        """The arguments as written, for people (a ``${VAR}`` in one may stand for a secret; a URL that holds a
        password is shown without it)."""
        return [passwords_hidden(arg) for arg in self._written("args")]

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        return repr_fields(
            super().__repr_args__(), {"command": self._written("command"), "args": tuple(self.written_args())}
        )

    def expansions(self) -> list[tuple[str, str]]:
        """``(value as run, as written)`` for the command and each argument that ``${VAR}`` expansion changed,
        longest first."""
        pairs = [(self.command, self._written("command")), *zip(self.args, self._written("args"), strict=True)]
        changed = {run: written for run, written in pairs if run and run != written}
        return sorted(changed.items(), key=lambda pair: -len(pair[0]))

    def redact(self, text: str) -> str:
        """``text`` fit to show people: the command and arguments as written, env values replaced by ``***``."""
        return redact_values(text, self.expansions(), (self.env or {}).values())

    # -- fingerprints ---------------------------------------------------------------------------

    @property
    def approval_hash(self) -> str:
        if self._approval_hash is None:
            self._approval_hash = lsp_approval_hash(self.entry())
        return self._approval_hash

    def entry(self) -> dict[str, Any]:
        """The fields that were set, in canonical spelling."""
        return self.model_dump(mode="json", exclude_unset=True)

    def connection_id(self, name: str) -> str:
        """``name::fp16`` over what defines the process: a change means a restart."""
        material = {key: _jsonable(getattr(self, key)) for key in _CONNECTION_KEYS}
        digest = hashlib.sha256(canonical_json(material).encode()).hexdigest()
        return f"{name}::{digest[:16]}"

    # -- derived values -------------------------------------------------------------------------

    @property
    def startup_timeout_s(self) -> float:
        return (self.startup_timeout or DEFAULT_STARTUP_TIMEOUT_MS) / 1000

    @property
    def shutdown_timeout_s(self) -> float:
        return (self.shutdown_timeout or DEFAULT_SHUTDOWN_TIMEOUT_MS) / 1000

    @property
    def restarts_allowed(self) -> int:
        """How many crash restarts in a row are allowed (0 when ``restartOnCrash`` is off)."""
        if not self.restart_on_crash:
            return 0
        return self.max_restarts if self.max_restarts is not None else DEFAULT_MAX_RESTARTS

    def target(self) -> str:
        """What this server runs or reaches, for people, as the entry wrote it (never env values; a ``${VAR}``
        may stand for a secret)."""
        command = self._written("command")
        if self.transport == "stdio":  # an argument with a space quoted: "--log-file 'my log.txt'" is two
            shown = (shlex.quote(a) if not a or any(c.isspace() for c in a) else a for a in self.written_args())
            return " ".join([command or "", *shown])
        socket = self.approved_value("socket")
        where = socket if isinstance(socket, str) else canonical_json(socket)
        return f"{self.transport} {where}" + (f" (started with {command})" if command else "")

    def address(self) -> tuple[str, int] | str:
        """Where a ``tcp`` or ``socket`` server listens: ``(host, port)``, or a Unix socket's path (relative:
        to the server's folder). Raises ``ValueError`` saying how to write ``socket``."""
        value = self.socket
        if isinstance(value, Mapping) and set(value) == {"path"}:
            value = value["path"]
        if isinstance(value, str):
            if not value.strip():
                raise ValueError("socket: the Unix socket's path is empty")
            return value
        if isinstance(value, Mapping) and "port" in value and set(value) <= {"host", "port"}:
            host, port = value.get("host", "127.0.0.1"), value["port"]
            if isinstance(host, str) and host.strip() and isinstance(port, int) and not isinstance(port, bool):
                if 0 < port < 65536:
                    return host.strip(), port
        raise ValueError(
            f"socket: required with transport {self.transport!r} and written as "
            '{"host": "127.0.0.1", "port": 2087} (host optional; port 1-65535) or {"path": "/run/lsp.sock"}'
        )

    def languages(self) -> list[str]:
        return sorted(set(self.extension_to_language.values()))


def camel_fields(problem: str) -> str:
    """A validation problem with its field names spelled as in the file (``extensionToLanguage: ...``)."""
    for camel, snake in _ALIASES.items():
        problem = problem.replace(f"{snake}:", f"{camel}:")
    return problem


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(sorted(value.items()))
    return value
