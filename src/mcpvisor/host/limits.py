"""Resource limits read from the settings files: ``mcp.maxMessageBytes``.

A limit protects the user's machine, so the user's own settings (and the system's) set it and a
workspace's settings may only lower it: a repository can never make its servers' messages cost more
memory than the user allows.
"""

from __future__ import annotations

from mcpvisor.core.server_config import DEFAULT_MAX_MESSAGE_BYTES, MIN_MESSAGE_BYTES
from mcpvisor.host.settings.loader import Settings
from mcpvisor.host.settings.mcp_section import mcp_values

__all__ = ["max_message_bytes_of"]


def max_message_bytes_of(settings: Settings) -> tuple[int | None, tuple[str, ...]]:
    """The effective ``mcp.maxMessageBytes`` (``None``: the built-in default) and any problems reading it.

    System defaults, user and system settings set it (the later wins); the workspace's settings may only
    lower it. An invalid value is ignored, with a problem naming the file and the fix."""
    limit: int | None = None
    lower: int | None = None
    problems: list[str] = []
    for scope, value in mcp_values(settings, "maxMessageBytes"):
        if not isinstance(value, int) or isinstance(value, bool) or value < MIN_MESSAGE_BYTES:
            problems.append(
                f"invalid mcp.maxMessageBytes in {settings.paths.of(scope)}: expected a number of bytes, at least "
                f"{MIN_MESSAGE_BYTES}; ignored"
            )
            continue
        if scope == "workspace":
            lower = value
        else:
            limit = value
    if lower is not None and lower < (limit or DEFAULT_MAX_MESSAGE_BYTES):
        return lower, tuple(problems)
    return limit, tuple(problems)
