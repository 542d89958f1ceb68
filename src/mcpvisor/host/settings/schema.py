"""The settings schema (SPEC §6): every known key, whether a change needs a restart, and a JSON Schema export.

A key is a dotted path (``mcp.allowed``). :func:`is_restart_required_key` decides a changed path by the
longest schema key that is equal to it or a prefix of it, so a leaf's flag wins over its parent's:
``mcp.allowed`` is hot-reloadable although ``mcp`` is not. A path no schema key covers is not
restart-required. Unknown keys are reported by :func:`unknown_keys` (warned about, never fatal).

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpvisor.host.oauth_settings import GRANTS, SIGNING_ALGORITHMS, TOKEN_ENDPOINT_AUTH_METHODS

__all__ = [
    "SETTINGS_SCHEMA",
    "SERVER_ENTRY_JSON_SCHEMA",
    "SettingDefinition",
    "SettingType",
    "flatten_schema",
    "is_restart_required_key",
    "settings_json_schema",
    "type_mismatches",
    "unknown_keys",
]

SettingType = Literal["object", "array", "string", "boolean", "integer", "number"]


@dataclass(frozen=True, slots=True)
class SettingDefinition:
    """One settings key.

    ``properties`` lists the known children of an object; ``values`` describes every value of an
    object whose keys are free (``mcpServers``: name -> server entry) as a JSON Schema fragment;
    ``items`` is the JSON type of an array's elements.
    """

    type: SettingType
    description: str
    requires_restart: bool
    show_in_dialog: bool
    default: Any = None
    properties: Mapping[str, SettingDefinition] = field(default_factory=dict)
    values: Mapping[str, Any] | None = None
    items: SettingType | None = None
    enum: tuple[str, ...] | None = None


_STRING_LIST: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
_STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}

SERVER_ENTRY_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One MCP server: 'command' (stdio), 'url' (SSE) or 'httpUrl' (streamable HTTP).",
    "properties": {
        "type": {"enum": ["stdio", "sse", "http", "streamable-http"]},
        "command": {"type": "string", "description": "Executable of a stdio server."},
        "args": _STRING_LIST,
        "env": {**_STRING_MAP, "description": "Extra environment; '${VAR}' forwards a variable."},
        "cwd": {"type": "string"},
        "url": {"type": "string", "description": "SSE endpoint (or HTTP endpoint with type 'http')."},
        "httpUrl": {"type": "string", "description": "Streamable HTTP endpoint."},
        "http_url": {"type": "string"},
        "headers": _STRING_MAP,
        "timeout": {
            "type": "integer",
            "exclusiveMinimum": 0,
            "description": "Per-request timeout in milliseconds (60000: a minute; under 1000 is warned about).",
        },
        "discoveryTimeoutMs": {"type": "integer", "exclusiveMinimum": 0},
        "trust": {"type": "boolean"},
        "description": {"type": "string"},
        "includeTools": _STRING_LIST,
        "excludeTools": _STRING_LIST,
        "shared": {"type": "boolean", "description": "false: one connection per session in daemon mode."},
        "oauth": {
            "type": "object",
            "description": "Signing in to a remote server (mcpvisor mcp login NAME, or by itself for a "
            "machine-to-machine grant).",
            "properties": {
                "clientId": {"type": "string", "description": "A pre-registered client (else registered)."},
                "clientSecret": {"type": "string", "description": "Its secret; '${VAR}' keeps it out of the file."},
                "scopes": {
                    "anyOf": [{"type": "string"}, _STRING_LIST],
                    "description": "Scopes to ask for besides what the server asks.",
                },
                "callbackPort": {"type": "integer", "description": "A fixed loopback port for the redirect."},
                "tokenEndpointAuthMethod": {
                    "enum": list(TOKEN_ENDPOINT_AUTH_METHODS),
                    "description": "Force how the secret is sent (default: what the server lists, else Basic).",
                },
                "clientMetadataUrl": {
                    "type": "string",
                    "description": "An https URL of your client ID metadata document, used as client_id where the "
                    "server supports it.",
                },
                "grant": {
                    "enum": list(GRANTS),
                    "description": "authorization_code: a person signs in (default); the others: no login.",
                },
                "privateKeyFile": {"type": "string", "description": "client_credentials with private_key_jwt."},
                "signingAlgorithm": {"enum": list(SIGNING_ALGORITHMS)},
                "issuer": {"type": "string", "description": "The authorization server a machine client belongs to."},
                "idp": {
                    "type": "object",
                    "description": "identity_assertion: the identity provider's tokenEndpoint, clientId, idToken.",
                    "properties": {
                        "tokenEndpoint": {"type": "string"},
                        "clientId": {"type": "string"},
                        "idToken": {"type": "string"},
                    },
                },
            },
        },
        "maxMessageBytes": {
            "type": "integer",
            "minimum": 1024,
            "description": "The largest message the server may send, in bytes (default 67108864, 64 MiB); a "
            "larger one drops the connection, which restarts.",
        },
    },
    "anyOf": [
        {"required": ["command"]},
        {"required": ["url"]},
        {"required": ["httpUrl"]},
        {"required": ["http_url"]},
    ],
}


LSP_ENTRY_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One language server (the .lsp.json entry format of Claude Code and Qwen Code).",
    "properties": {
        "command": {"type": "string", "description": "Executable of the server (stdio)."},
        "args": _STRING_LIST,
        "extensionToLanguage": {
            **_STRING_MAP,
            "description": "Required: the file extensions it answers for and their language ids, "
            'e.g. {".py": "python"}.',
        },
        "transport": {
            "enum": ["stdio", "socket", "tcp"],
            "description": "stdio (default); socket and tcp only in your own settings.",
        },
        "socket": {"description": 'For transport socket or tcp: {"host": ..., "port": ...}, {"path": ...} or a path.'},
        "env": {
            **_STRING_MAP,
            "description": "Extra environment; a repository may not set LD_*, DYLD_*, NODE_OPTIONS, PYTHONSTARTUP "
            "or PYTHONPATH.",
        },
        "initializationOptions": {"description": "Sent in 'initialize' (a change restarts the server)."},
        "settings": {"description": "Sent with workspace/didChangeConfiguration (a change applies live)."},
        "workspaceFolder": {
            "type": "string",
            "description": "The server's root and working folder, inside the workspace (default: the workspace).",
        },
        "startupTimeout": {"type": "integer", "exclusiveMinimum": 0, "description": "Milliseconds (default 30000)."},
        "shutdownTimeout": {"type": "integer", "exclusiveMinimum": 0, "description": "Milliseconds (default 5000)."},
        "restartOnCrash": {"type": "boolean", "description": "Restart the server when it crashes (default false)."},
        "maxRestarts": {"type": "integer", "minimum": 0, "description": "Crash restarts in a row (default 3)."},
    },
    "required": ["extensionToLanguage"],
}


def _obj(description: str, *, restart: bool, dialog: bool = False, **props: SettingDefinition) -> SettingDefinition:
    return SettingDefinition("object", description, restart, dialog, properties=props)


SETTINGS_SCHEMA: Mapping[str, SettingDefinition] = {
    "$schema": SettingDefinition("string", "JSON Schema of this file, for editors.", False, False),
    "mcpServers": SettingDefinition(
        "object",
        "MCP servers by name. Hot-reloaded: only the servers that changed are restarted.",
        requires_restart=False,
        show_in_dialog=False,
        default={},
        values=SERVER_ENTRY_JSON_SCHEMA,
    ),
    "mcp": _obj(
        "MCP admission and start-up settings.",
        restart=True,
        allowed=SettingDefinition(
            "array",
            "Glob patterns of the servers allowed to run; every scope that sets a list narrows it.",
            requires_restart=False,
            show_in_dialog=False,
            items="string",
        ),
        excluded=SettingDefinition(
            "array",
            "Glob patterns of servers never to run (united across scopes; wins over 'allowed').",
            requires_restart=False,
            show_in_dialog=False,
            items="string",
        ),
        serverCommand=SettingDefinition(
            "string",
            "Command that starts an MCP server for the session (read at start-up).",
            requires_restart=True,
            show_in_dialog=False,
        ),
        pinTools=SettingDefinition(
            "string",
            "Pin tool and prompt definitions: 'gated' (project and workspace servers, the default), 'all' or "
            "'off'. A changed definition is held until approved; workspace settings can only make it stricter.",
            requires_restart=False,
            show_in_dialog=False,
            default="gated",
        ),
        maxConcurrentStarts=SettingDefinition(
            "integer",
            "How many servers may start at the same time while they use the CPU (one that waits — for a download, for "
            "its handshake — lets the next one start; read at start-up).",
            requires_restart=True,
            show_in_dialog=False,
        ),
        maxMessageBytes=SettingDefinition(
            "integer",
            "The largest message a server may send, in bytes, for servers that set no maxMessageBytes of their "
            "own (default 67108864, 64 MiB; read at start-up).",
            requires_restart=True,
            show_in_dialog=False,
        ),
    ),
    "lspServers": SettingDefinition(
        "object",
        "Language servers by name (the .lsp.json entry format). Hot-reloaded: only the servers that changed "
        "restart; workspace servers wait for approval.",
        requires_restart=False,
        show_in_dialog=False,
        default={},
        values=LSP_ENTRY_JSON_SCHEMA,
    ),
    "lsp": _obj(
        "Language server admission and life cycle (mcpvisor's own: never in .lsp.json).",
        restart=False,
        allowed=SettingDefinition(
            "array",
            "Glob patterns of the language servers allowed to run; every scope that sets a list narrows it.",
            requires_restart=False,
            show_in_dialog=False,
            items="string",
        ),
        excluded=SettingDefinition(
            "array",
            "Glob patterns of language servers never to run (united across scopes; wins over 'allowed').",
            requires_restart=False,
            show_in_dialog=False,
            items="string",
        ),
        startup=SettingDefinition(
            "string",
            "'lazy' (default): a server starts on the first call for one of its files; 'eager': at start-up.",
            requires_restart=False,
            show_in_dialog=False,
            default="lazy",
            enum=("lazy", "eager"),
        ),
        idleStopSeconds=SettingDefinition(
            "integer",
            "Stop a language server nobody asked anything for this long (absent or 0: never).",
            requires_restart=False,
            show_in_dialog=False,
        ),
    ),
    "security": _obj(
        "Security settings.",
        restart=True,
        folderTrust=_obj(
            "Folder trust: untrusted folders load no workspace settings and start no servers.",
            restart=True,
            enabled=SettingDefinition(
                "boolean",
                "Ask before trusting a folder (read from user and system settings only).",
                requires_restart=True,
                show_in_dialog=True,
                default=False,
            ),
        ),
    ),
    "fleet": _obj(
        "The fleet this host's gateway and commands join (replicas sharing one Redis), read from user and "
        "enforced (system) settings only: a workspace can never name it. --fleet and MCPVISOR_FLEET win.",
        restart=True,
        url=SettingDefinition(
            "string", "redis://HOST:PORT/DB, rediss://... or unix:///PATH.", requires_restart=True, show_in_dialog=False
        ),
        name=SettingDefinition(
            "string", "Which fleet in that Redis (default 'default').", requires_restart=True, show_in_dialog=False
        ),
    ),
    "ui": _obj(
        "Terminal user interface.",
        restart=False,
        dialog=True,
        theme=SettingDefinition("string", "Colour theme of the shell.", False, True, default="default"),
        hideBanner=SettingDefinition("boolean", "Hide the start-up banner.", False, True, default=False),
    ),
    "general": _obj(
        "General settings.",
        restart=False,
        dialog=True,
        debugMode=SettingDefinition(
            "boolean", "Verbose logs (logging is configured at start-up).", True, True, default=False
        ),
    ),
}


def flatten_schema(
    schema: Mapping[str, SettingDefinition] = SETTINGS_SCHEMA, prefix: str = ""
) -> dict[str, SettingDefinition]:
    """Every key of the schema by dotted path, parents before children."""
    flat: dict[str, SettingDefinition] = {}
    for key, definition in schema.items():
        path = f"{prefix}{key}"
        flat[path] = definition
        flat.update(flatten_schema(definition.properties, f"{path}."))
    return flat


_FLAT = flatten_schema()


def _definition_for(path: str) -> SettingDefinition | None:
    """The definition of the longest schema key equal to ``path`` or a dotted prefix of it."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        found = _FLAT.get(".".join(parts[:end]))
        if found is not None:
            return found
    return None


def is_restart_required_key(path: str) -> bool:
    """Whether a change at ``path`` needs a restart: the longest covering schema key decides (leaf wins).

    >>> is_restart_required_key("mcp.allowed"), is_restart_required_key("mcp.serverCommand")
    (False, True)
    """
    definition = _definition_for(path)
    return definition is not None and definition.requires_restart


def _walk_unknown(data: Mapping[str, Any], schema: Mapping[str, SettingDefinition], prefix: str) -> Iterator[str]:
    for key, value in data.items():
        path = f"{prefix}{key}"
        definition = schema.get(key)
        if definition is None:
            yield path
        elif definition.properties and isinstance(value, Mapping):
            yield from _walk_unknown(value, definition.properties, f"{path}.")


def unknown_keys(data: Mapping[str, Any]) -> list[str]:
    """Dotted paths of keys the schema does not know (the values of ``mcpServers`` are free-form)."""
    return list(_walk_unknown(data, SETTINGS_SCHEMA, ""))


_PY_TYPES: dict[SettingType, tuple[type, ...]] = {
    "object": (Mapping,),
    "array": (list, tuple),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def _is_type(value: Any, kind: SettingType) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _PY_TYPES[kind])


_ONE_PATTERN_LISTS = frozenset({"mcp.allowed", "mcp.excluded", "lsp.allowed", "lsp.excluded"})
"""Pattern lists where a lone string is taken as a list of that one pattern."""


def _walk_types(
    data: Mapping[str, Any], schema: Mapping[str, SettingDefinition], prefix: str, said: AbstractSet[str]
) -> Iterator[str]:
    for key, value in data.items():
        definition = schema.get(key)
        if definition is None:
            continue
        path = f"{prefix}{key}"
        if not _is_type(value, definition.type):
            taken = f"; taken as [{json.dumps(value)}]" if path in _ONE_PATTERN_LISTS and isinstance(value, str) else ""
            if taken or path not in said:
                yield f"{path} should be {definition.type}, got {_json_type(value)}{taken}"
        elif definition.items is not None and not all(_is_type(item, definition.items) for item in value):
            if path not in said:
                yield f"{path} should be an array of {definition.items}s"
        elif definition.properties:
            yield from _walk_types(value, definition.properties, f"{path}.", said)


def type_mismatches(data: Mapping[str, Any], *, said_when_read: AbstractSet[str] = frozenset()) -> list[str]:
    """Human-readable problems with the types of known keys (``mcp.allowed should be array, got string``).

    ``said_when_read``: keys whose reader says itself what it does with a value of the wrong type (a lone string
    taken as a list of one pattern is still said here): their problem is not said twice."""
    return list(_walk_types(data, SETTINGS_SCHEMA, "", said_when_read))


_TYPE_ORDER: tuple[SettingType, ...] = ("boolean", "integer", "number", "string", "array", "object")


def _json_type(value: Any) -> str:
    for name in _TYPE_ORDER:
        if _is_type(value, name):
            return name
    return "null" if value is None else type(value).__name__


def _to_json_schema(definition: SettingDefinition) -> dict[str, Any]:
    out: dict[str, Any] = {"type": definition.type, "description": definition.description}
    if definition.default is not None:
        out["default"] = definition.default
    if definition.enum is not None:
        out["enum"] = list(definition.enum)
    if definition.items is not None:
        out["items"] = {"type": definition.items}
    if definition.properties:
        out["properties"] = {key: _to_json_schema(child) for key, child in definition.properties.items()}
    if definition.values is not None:
        out["additionalProperties"] = definition.values
    return out


def settings_json_schema() -> dict[str, Any]:
    """The schema as JSON Schema (draft 2020-12), for editors validating settings files.

    Unknown keys stay valid (mcpvisor only warns about them), so ``additionalProperties`` is not
    restricted at the top level.
    """
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "mcpvisor settings",
        "type": "object",
        "properties": {key: _to_json_schema(definition) for key, definition in SETTINGS_SCHEMA.items()},
    }
