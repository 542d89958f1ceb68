"""One MCP server's configuration and its three fingerprints (SPEC §2.1, §3).

Everything here is pure: no I/O, no environment reads.

- :func:`connection_id_of` identifies a *connection*: a change means disconnect and reconnect.
- :func:`exposure_of` holds the settings that only filter what a connection exposes.
- :attr:`McpServerConfig.approval_hash` binds a user's approval to the exact configuration.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator, model_validator

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.redaction import passwords_hidden, redact_url, redact_urls, redact_values
from mcpvisor.core.spellings import ALIASES, TYPE_TRANSPORTS, written_names

__all__ = [
    "checked_servers",
    "CODE_LOADING_ENV",
    "CONNECTION_FIELDS",
    "ConnectionOptions",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MIN_MESSAGE_BYTES",
    "REPOSITORY_SCOPES",
    "HttpAuth",
    "InMemoryServers",
    "McpServerConfig",
    "Scope",
    "TransportKind",
    "approval_hash",
    "arguments_hint",
    "canonical_json",
    "connection_id_of",
    "is_secret_name",
    "normalize_server_entry",
    "redact_text",
    "redact_url",
    "redact_values",
]

Scope = Literal["project", "workspace", "system"]
REPOSITORY_SCOPES = frozenset({"project", "workspace"})
"""The scopes a repository writes (``.mcp.json``, ``.mcpvisor/settings.json``): its servers wait for approval, and
a bare ``command`` of theirs is looked up on the host's PATH, never on their own ``env.PATH``."""
TransportKind = Literal["stdio", "sse", "http"]

# Keys that never take part in the approval hash (SPEC §3.3).
_NOT_APPROVAL_KEYS = frozenset({"scope", "extension_name", "description"})

# Fields that define the connection (SPEC §3.1); auth settings arrive as unknown keys.
CONNECTION_FIELDS = ("command", "args", "cwd", "env", "url", "http_url", "headers", "timeout", "max_message_bytes")
_AUTH_KEYS = ("oauth", "auth", "auth_provider_type", "authProviderType")


DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""The largest message a server may send unless its config or the settings say otherwise (``maxMessageBytes``)."""
MIN_MESSAGE_BYTES = 1024
"""The smallest ``maxMessageBytes`` accepted: below it not even an ``initialize`` answer fits."""

HttpAuth = Callable[[str, "McpServerConfig"], Any]
"""``(server name, config) -> httpx2.Auth | None``: signs a remote server's requests (e.g. with OAuth
tokens kept by the layer above, which owns the files). Called once per connection attempt; what it
signs with is not part of the connection id, so a refreshed token never restarts anything. An auth
object may set ``step_up_scope`` (a string of scopes) when the server refused a request for want of
scope: the request then fails saying that a wider sign-in is needed, and the connection stays; and
``sign_in_refused`` (a sentence) when its sign-in was refused under a request: the request fails saying
that, and the connection ends; ``refreshing_at`` (an origin) while a refresh of its sign-in waits for the
authorization server: a start that times out then says so. One whose ``signs_in_by_itself`` is true (a
machine-to-machine grant) gets its credentials by itself: a 401 never marks its server as waiting for a
person's sign-in."""
InMemoryServers = Callable[[str, "McpServerConfig"], AbstractAsyncContextManager[Any] | None]
"""Serves a server entry inside this process instead of reaching it: called with the server's name and
entry, it returns a context whose entering yields the connection's two message streams (the SDK's
``TransportStreams``, as its ``InMemoryTransport`` does), or ``None`` to reach the server as configured."""


def normalize_server_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Map the common spellings of a server entry onto the canonical field names.

    Accepts camelCase (``httpUrl``), Claude-style ``type: "stdio" | "sse" | "http"`` with ``url``,
    and VS Code ``type: "streamable-http"``. Keys already canonical pass through unchanged.
    """
    out: dict[str, Any] = {}
    for key, value in entry.items():
        out[ALIASES.get(key, key)] = value
    kind = out.pop("type", None)
    if kind is None:
        return out
    if not isinstance(kind, str):
        raise ValueError(f"'type' must be a string, got {type(kind).__name__}")
    kind = kind.lower()
    if kind not in TYPE_TRANSPORTS:
        raise ValueError(f"unknown transport type {kind!r}; use 'stdio', 'sse' or 'http'")
    if not {"command", "url", "http_url"} & out.keys():  # the type says which one is missing (not "url is SSE")
        needed = (
            "'command' (the program to run)" if TYPE_TRANSPORTS[kind] == "stdio" else "'url' (the server's address)"
        )
        raise ValueError(f"no transport: type {kind!r} needs {needed}")
    if TYPE_TRANSPORTS[kind] == "http" and "url" in out and "http_url" not in out:
        out["http_url"] = out.pop("url")
    return out


class McpServerConfig(BaseModel):
    """How to reach one MCP server, and what of it to expose.

    Immutable. Unknown keys are kept (they count for the approval hash) but otherwise ignored.
    """

    # An invalid value is never echoed in an error (an env or header value, a URL with a token in it).
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True, hide_input_in_errors=True)

    # stdio
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None
    # SSE
    url: str | None = None
    # streamable HTTP
    http_url: str | None = None
    headers: dict[str, str] | None = None
    # common
    timeout: int | None = None
    """Per-request timeout in milliseconds."""
    discovery_timeout_ms: int | None = None
    trust: bool | None = None
    description: str | None = None
    include_tools: tuple[str, ...] | None = None
    exclude_tools: tuple[str, ...] | None = None
    scope: Scope | None = None
    extension_name: str | None = None
    shared: bool | None = None
    """``False`` asks the shared pool for one connection per session (stateful servers)."""
    max_message_bytes: int | None = None
    """The largest message the server may send (bytes); a larger one drops the connection."""

    _approval_hash: str | None = PrivateAttr(default=None)
    _content_key: str | None = PrivateAttr(default=None)
    _literal: dict[str, Any] | None = PrivateAttr(default=None)
    _names: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _normalize(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return normalize_server_entry(data)
        return data

    @field_validator("env", "headers", mode="before")
    @classmethod
    def _stringify_values(cls, value: Any) -> Any:
        """Numbers and booleans are written as JSON writes them (``1``, ``true``); null, an object or an array
        is refused: the text a server would get (``"null"``) is never what was meant."""
        if not isinstance(value, Mapping):
            return value
        for key, item in value.items():
            if item is None or isinstance(item, Mapping | list | tuple):
                kind = "null" if item is None else "an object" if isinstance(item, Mapping) else "an array"
                raise ValueError(f"the value of {key!r} is {kind}; write a string (or a number or true/false)")
        return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}

    @model_validator(mode="after")
    def _check_transport(self) -> McpServerConfig:
        if self.command is None and self.url is None and self.http_url is None:
            raise ValueError("no transport: set 'command' (stdio), 'url' (SSE) or 'httpUrl' (streamable HTTP)")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("'timeout' must be a positive number of milliseconds")
        if self.discovery_timeout_ms is not None and self.discovery_timeout_ms <= 0:
            raise ValueError("'discoveryTimeoutMs' must be a positive number of milliseconds")
        if self.max_message_bytes is not None and self.max_message_bytes < MIN_MESSAGE_BYTES:
            raise ValueError(f"'maxMessageBytes' must be a number of bytes, at least {MIN_MESSAGE_BYTES}")
        return self

    @classmethod
    def from_entry(
        cls,
        entry: Mapping[str, Any],
        *,
        expand: Callable[[Any], Any] | None = None,
        **overrides: Any,
    ) -> McpServerConfig:
        """Build a config from a settings-file entry.

        The approval hash is taken over the literal entry, *before* ``expand`` substitutes
        ``${VAR}`` references, so rotating a secret in the environment never re-prompts.
        ``overrides`` (e.g. ``scope="project"``) are applied after hashing.
        """
        literal = normalize_server_entry(entry)
        expanded = expand(literal) if expand is not None else literal
        cfg = cls.model_validate({**expanded, **overrides})
        cfg._approval_hash = approval_hash(literal)
        cfg._literal = literal
        cfg._names = written_names(entry, literal)
        return cfg

    def code_loading_env(self) -> tuple[tuple[str, str], ...]:
        """The env entries that decide what code the server runs (:data:`CODE_LOADING_ENV`), as written: an
        approval shows them with their values, which hold paths and flags rather than secrets."""
        env = self.approved_value("env") or {}
        return tuple((key, str(env[key])) for key in sorted(env) if CODE_LOADING_ENV.match(key))

    def approved_value(self, key: str) -> Any:
        """``key``'s value as the entry wrote it, before ``${VAR}`` expansion: what an approval covers (and shows:
        a ``${VAR}`` runs whatever the environment of the process that runs it says, and may hold a secret)."""
        return self._literal.get(key) if self._literal is not None else getattr(self, key)

    def written_name(self, field: str) -> str | None:
        """``field``'s name as the settings-file entry spelled it (``workingDirectory`` for ``cwd``), if it set it."""
        return self._names.get(field)

    def written_entry(self) -> dict[str, Any]:
        """The entry as written, before ``${VAR}`` expansion, in canonical spelling: what an approval covers."""
        return dict(self._literal) if self._literal is not None else self.entry()

    @property
    def transport(self) -> TransportKind:
        if self.command is not None:
            return "stdio"
        if self.http_url is not None:
            return "http"
        return "sse"

    @property
    def approval_hash(self) -> str:
        """SHA-256 over the configuration minus ``scope``, ``extension_name`` and ``description``."""
        if self._approval_hash is None:
            self._approval_hash = approval_hash(self.entry())
        return self._approval_hash

    @property
    def content_key(self) -> str:
        """Everything that was set (canonical JSON of :meth:`entry`), plus the approval hash: two configs
        with the same key are the same configuration. Computed once (the model is frozen)."""
        if self._content_key is None:
            self._content_key = canonical_json([self.entry(), self.approval_hash])
        return self._content_key

    def entry(self) -> dict[str, Any]:
        """The fields that were set, in canonical spelling (``null`` kept where it was given)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def target(self) -> str:
        """What this server runs or reaches, for people: command line or URL, as the entry wrote them (a
        ``${VAR}`` in them may stand for a secret). Never secrets: env and header values are left out, and a
        URL loses its credentials and query values, also one in the command line that holds a password."""
        if self.command is not None:
            command = self.approved_value("command")
            words = [command if isinstance(command, str) else self.command, *self._written_args()]
            return " ".join(passwords_hidden(str(word)) for word in words)
        for key in ("http_url", "url"):
            if (url := getattr(self, key)) is not None:
                written_url = self.approved_value(key)
                return redact_url(written_url if isinstance(written_url, str) else url)
        return ""

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        written = {key: self.approved_value(key) for key in ("command", "cwd", "url", "http_url")}
        args = tuple(passwords_hidden(arg) if isinstance(arg, str) else arg for arg in self._written_args())
        return repr_fields(super().__repr_args__(), {**written, "args": args})

    def _written_args(self) -> Sequence[Any]:
        """The arguments as the entry wrote them (before ``${VAR}`` expansion), one for each argument run."""
        written = self.approved_value("args")
        return written if isinstance(written, list) and len(written) == len(self.args) else self.args

    def expansions(self) -> list[tuple[str, str]]:
        """``(value as run, as written)`` for the command, each argument, the URL and the working folder that
        ``${VAR}`` expansion changed, longest first: what :func:`redact_text` puts back as written."""
        pairs = [(self.command, self.approved_value("command")), (self.http_url, self.approved_value("http_url"))]
        pairs.append((self.url, self.approved_value("url")))
        pairs.append((self.cwd, self.approved_value("cwd")))
        pairs.extend(zip(self.args, self._written_args(), strict=True))
        changed = {run: str(written) for run, written in pairs if run and isinstance(written, str) and run != written}
        return sorted(changed.items(), key=lambda pair: -len(pair[0]))


def repr_fields(
    fields: Iterable[tuple[str | None, Any]], written: Mapping[str, Any]
) -> Iterator[tuple[str | None, Any]]:
    """A configuration's repr fit for a log (a repr reaches one through ``%r``, a debugger or a traceback): the
    ``written`` fields as the entry wrote them (a ``${VAR}`` in them may stand for a secret), env and header values
    as ``***``, URLs without credentials or query values, and whatever a key named like a secret holds as ``***``
    (an ``oauth`` block's ``clientSecret``)."""
    for key, value in fields:
        if key is not None and key in written:
            value = written[key]
        if key in ("env", "headers") and isinstance(value, Mapping):
            value = dict.fromkeys(value, "***")
        elif key in ("url", "http_url") and isinstance(value, str):
            value = redact_url(value)
        yield key, _secret_keys_hidden(value)


def _secret_keys_hidden(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: "***" if is_secret_name(str(k)) else _secret_keys_hidden(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_secret_keys_hidden(item) for item in value)
    return value


def arguments_hint(command: Any) -> str:
    """For a command that was not found and holds spaces (``"pylsp --stdio"``): where its arguments go. Give it
    the command as written (a ``${VAR}`` in it may stand for a secret)."""
    if not isinstance(command, str) or " " not in command.strip() or command.startswith(("/", "~", ".")):
        return ""
    program, *rest = command.split()
    return f' (its arguments go in args: "command": "{program}", "args": {json.dumps(rest)})'


CODE_LOADING_ENV = re.compile(
    r"^(LD_.*|DYLD_.*|GLIBC_TUNABLES|PATH|NODE_OPTIONS|NODE_PATH|NODE_REPL_EXTERNAL_MODULE|PYTHONSTARTUP|PYTHONPATH"
    r"|PYTHONHOME|PYTHONUSERBASE|PYTHONWARNINGS|PYTHONBREAKPOINT|PYTHONEXECUTABLE|VIRTUAL_ENV|BASH_ENV|ENV|ZDOTDIR"
    r"|HOME|XDG_CONFIG_HOME|GCONV_PATH|OPENSSL_CONF|CLASSPATH|JAVA_HOME|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS"
    r"|JDK_JAVA_OPTIONS|MAVEN_OPTS|GRADLE_OPTS|PERL5OPT|PERL5LIB|PERLLIB|PERL5DB|RUBYOPT|RUBYLIB|GEM_HOME|GEM_PATH"
    r"|BUNDLE_GEMFILE|PHPRC|PHP_INI_SCAN_DIR|GIT_CONFIG.*|GIT_SSH.*|GIT_EXEC_PATH|GIT_EXTERNAL_DIFF|GIT_PAGER"
    r"|GIT_EDITOR|GIT_SEQUENCE_EDITOR|GIT_PROXY_COMMAND|GIT_TEMPLATE_DIR|GIT_DIR|GIT_WORK_TREE|.*ASKPASS|EDITOR"
    r"|VISUAL|PAGER|LESSOPEN|LESSCLOSE|BROWSER|SHELL|PROMPT_COMMAND|PS4|NPM_CONFIG_.*|YARN_.*|COREPACK_.*|BUN_.*"
    r"|DENO_.*|PIP_.*|UV_.*|PIPX_.*|POETRY_.*|DOTNET_STARTUP_HOOKS|GOFLAGS|GOPROXY|GOTOOLCHAIN|GOROOT|GOPATH"
    r"|RUSTC_WRAPPER|RUSTC|CARGO_HOME|CARGO_BUILD_RUSTC.*|LUA_INIT.*|LUA_PATH.*|LUA_CPATH.*|R_PROFILE.*|TCLLIBPATH"
    r"|ERL_.*FLAGS|ELECTRON_RUN_AS_NODE|KUBECONFIG|AWS_CONFIG_FILE|NODE_TLS_REJECT_UNAUTHORIZED|NODE_EXTRA_CA_CERTS"
    r"|SSL_CERT_.*|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|(HTTPS?|ALL)_PROXY)$",
    re.IGNORECASE,
)
"""Environment variables that make a process load code of their value's choosing (a preloaded library, a
module path, a start-up script, interpreter flags, a home or configuration folder whose files run code, a
program run for a password, an editor or a pager), choose the programs a bare command name runs (``PATH``:
also the interpreter of a ``#!/usr/bin/env node`` script such as ``npx``), or choose where a package runner
(``npx``, ``uvx``, ``pipx``…) fetches the package, or whom it trusts while fetching it."""

_SECRET_WORDS = frozenset(
    {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD", "PASSPHRASE", "KEY", "APIKEY", "CREDENTIAL", "CREDENTIALS"}
    | {"AUTH", "AUTHTOKEN", "AUTHORIZATION", "COOKIE", "SESSION", "PRIVATE", "PAT", "SIGNATURE", "BEARER", "JWT", "DSN"}
)
_NAMING_TAILS = frozenset(
    {"FILE", "PATH", "DIR", "ENDPOINT", "URL", "URI", "METHOD", "TIMEOUT", "TYPE", "NAME", "SERVER", "HEADER", "TTL"}
)
"""The last word of a name that says what its value is, not that it is a secret: ``tokenEndpoint`` is where a
token goes (an approval must show it), ``privateKeyFile`` where a key is."""


def is_secret_name(name: str) -> bool:
    """Whether a variable, header or field named ``name`` looks as if it carries a secret (``GITHUB_TOKEN``,
    ``X-Api-Key``, ``clientSecret``): its value is not shown, even as written."""
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).upper().replace("-", "_").split("_")
    if words[-1] in _NAMING_TAILS:
        return False
    return any(word in _SECRET_WORDS for word in words) or name.upper().endswith(("PASSWORD", "TOKEN", "SECRET"))


def redact_text(text: str, cfg: McpServerConfig | None = None) -> str:
    """``text`` fit to show people: ``cfg``'s command, arguments and URL as written wherever ``${VAR}``
    expansion changed them, every URL redacted (:func:`redact_url`), and the values of ``cfg``'s env and
    headers replaced by ``***`` wherever they appear."""
    if cfg is None:
        return redact_urls(text)
    return redact_values(text, cfg.expansions(), (*(cfg.env or {}).values(), *(cfg.headers or {}).values()))


def canonical_json(value: Any) -> str:
    """JSON with keys sorted recursively, array order kept, no whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, tuple | frozenset | set):
        return list(value) if isinstance(value, tuple) else sorted(value)
    raise TypeError(f"cannot hash a value of type {type(value).__name__}")


def approval_hash(entry: Mapping[str, Any]) -> str:
    """Full SHA-256 of a server entry for approval records (SPEC §3.3)."""
    kept = {k: v for k, v in normalize_server_entry(entry).items() if k not in _NOT_APPROVAL_KEYS}
    return hashlib.sha256(canonical_json(kept).encode()).hexdigest()


def connection_id_of(name: str, cfg: McpServerConfig) -> str:
    """``name::fp16`` over the fields that define the connection (SPEC §3.1)."""
    extra = cfg.model_extra or {}
    material: dict[str, Any] = {
        "transport": cfg.transport,
        "command": cfg.command,
        "args": list(cfg.args),
        "cwd": cfg.cwd,
        "env": sorted((cfg.env or {}).items()),
        "url": cfg.url,
        "http_url": cfg.http_url,
        "headers": sorted((cfg.headers or {}).items()),
        "timeout": cfg.timeout,
        "auth": {k: extra[k] for k in _AUTH_KEYS if k in extra},
    }
    if cfg.max_message_bytes is not None:  # only when set: the ids of every other config stay as they were
        material["max_message_bytes"] = cfg.max_message_bytes
    digest = hashlib.sha256(canonical_json(material).encode()).hexdigest()
    return f"{name}::{digest[:16]}"


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """How a session (or a pool) makes its connections, the same for every server: one value passed
    down from the host to each connection."""

    log_dir: Path | None = None
    """Where each stdio server's stderr is written (``<name>.log``); default: a temporary folder."""
    max_concurrent_starts: int | None = None
    """How many servers start at once (default: :func:`~mcpvisor.core.start_slots.default_max_starts`)."""
    http_auth: HttpAuth | None = None
    """Signs a remote server's requests (OAuth), by server name and entry."""
    client_requests: bool = False
    """Offer servers sampling, elicitation and roots, passed to the caller whose call caused the request
    (:mod:`mcpvisor.core.client_requests`)."""
    max_message_bytes: int | None = None
    """The largest message a server may send when its entry sets no ``maxMessageBytes``; a larger one
    drops the connection (:class:`~mcpvisor.core.errors.MessageTooLargeError`)."""
    in_memory: InMemoryServers | None = None
    """Servers served inside this process rather than spawned or reached (protocol-level tests, embedding):
    :func:`mcpvisor.examples.in_memory.light_servers_in_memory` serves the light example server so."""
    login_command: str = "mcpvisor mcp login {name}"
    """How a connection's errors say to sign in to a server (``{name}``, braces doubled elsewhere): the host names
    its workspace and home in it, so that it works pasted in any folder."""

    def __post_init__(self) -> None:
        if self.log_dir is not None and not isinstance(self.log_dir, Path):
            object.__setattr__(self, "log_dir", Path(self.log_dir))  # a str is a folder's name too
        if self.max_concurrent_starts is not None and self.max_concurrent_starts < 1:
            raise ValueError(
                f"max_concurrent_starts must be at least 1 (None: the default), not {self.max_concurrent_starts}"
            )
        if self.max_message_bytes is not None and self.max_message_bytes < MIN_MESSAGE_BYTES:
            raise ValueError(
                f"max_message_bytes must be at least {MIN_MESSAGE_BYTES} (None: the default), "
                f"not {self.max_message_bytes}"
            )


def checked_servers(servers: Mapping[str, McpServerConfig]) -> dict[str, McpServerConfig]:
    """``servers`` as a dict, once each is known to be an :class:`McpServerConfig` (a plain settings-file entry
    would only fail at connect time, deep in a task group)."""
    for name, cfg in servers.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"a server's name must be a non-blank string, not {name!r}: its tools are mcp__NAME__*")
        if not isinstance(cfg, McpServerConfig):
            raise TypeError(
                f"server {name!r} is a {type(cfg).__name__}, not an McpServerConfig: build it with "
                f"McpServerConfig(command=...) or, from a settings-file entry, McpServerConfig.from_entry(entry)"
            )
    return dict(servers)
