"""``mcp.<key>`` as each settings file sets it, for the settings the user's own files set and a workspace's may only
tighten (``mcp.maxMessageBytes``, ``mcp.pinTools``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from mcpvisor.host.settings.loader import Settings
from mcpvisor.host.settings.scopes import FileScope

__all__ = ["mcp_values"]

_ORDER: tuple[FileScope, ...] = ("system_defaults", "user", "system", "workspace")


def mcp_values(settings: Settings, key: str) -> Iterator[tuple[FileScope, object]]:
    """``(scope, value)`` of each active settings file that sets ``mcp.<key>``: the user's own first (system
    defaults, user, system: the later wins), the workspace's last."""
    for scope in _ORDER:
        if not settings.is_active(scope):
            continue
        section = settings.data(scope).get("mcp")
        value = section.get(key) if isinstance(section, Mapping) else None
        if value is not None:
            yield scope, value
