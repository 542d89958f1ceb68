"""How an MCP server entry's fields are spelled in a settings file: the spellings read (camelCase and others, onto
the canonical field names) and the one people are shown, the file's own (``excludeTools``, not ``exclude_tools``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ALIASES", "TYPE_TRANSPORTS", "file_name", "written_names"]

ALIASES: dict[str, str] = {
    "httpUrl": "http_url",
    "includeTools": "include_tools",
    "excludeTools": "exclude_tools",
    "discoveryTimeoutMs": "discovery_timeout_ms",
    "discoveryTimeout": "discovery_timeout_ms",
    "extensionName": "extension_name",
    "workingDirectory": "cwd",
    "maxMessageBytes": "max_message_bytes",
}
"""camelCase and other common spellings -> canonical field names."""

_ALSO_READ = ("discoveryTimeout", "workingDirectory")
"""Spellings read but never shown: the README's are ``discoveryTimeoutMs`` and ``cwd``."""

TYPE_TRANSPORTS: dict[str, str] = {
    "stdio": "stdio",
    "sse": "sse",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamablehttp": "http",
}
"""An entry's ``type`` (lower-cased: Claude's ``stdio``/``sse``/``http``, VS Code's ``streamable-http``) -> the
transport it names."""

_FILE_NAMES = {field: spelling for spelling, field in ALIASES.items() if spelling not in _ALSO_READ}
"""Canonical field names -> their spelling in a settings file (the README's); the others are spelled alike."""


def file_name(field: str) -> str:
    """A field's name as a settings file spells it, for people: ``excludeTools`` for ``exclude_tools``."""
    return _FILE_NAMES.get(field, field)


def written_names(entry: Mapping[str, Any], normalized: Mapping[str, Any]) -> dict[str, str]:
    """Canonical field names -> their spelling in ``entry`` (``cwd`` -> ``workingDirectory``), for the fields it
    sets; ``normalized`` is the entry in canonical spelling (a Claude-style ``type: "http"`` makes ``url`` its
    ``http_url``)."""
    names = {ALIASES.get(key, key): key for key in entry if isinstance(key, str)}
    if "http_url" in normalized and "http_url" not in names and "url" in names:
        names["http_url"] = names.pop("url")
    return names
