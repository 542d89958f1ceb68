"""Log messages a caller wants to hear from the server it calls, while its call runs.

The 2026-07-28 era made log messages a per-request opt-in: a client asks for them in a request's
``_meta`` (``io.modelcontextprotocol/logLevel``) and hears them on that request's stream. A caller
that passes such requests on (the gateway) wraps the call in :func:`hearing`; the connection then
asks the server for them - in the request's ``_meta`` for a 2026-07-28 server, with
``logging/setLevel`` for a handshake-era one - and hands each message from that level up to the
caller while the call runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import mcp_types as types

__all__ = ["LOG_LEVELS", "CallLog", "current", "hearing", "rank"]

LOG_LEVELS: tuple[types.LoggingLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
"""MCP's log levels, least severe first."""


def rank(level: types.LoggingLevel) -> int:
    return LOG_LEVELS.index(level)


@dataclass(frozen=True)
class CallLog:
    """Hear the called server's log messages from ``level`` up: ``hear(server, params)``."""

    level: types.LoggingLevel
    hear: Callable[[str, types.LoggingMessageNotificationParams], Awaitable[None]]
    ask_only: bool = False
    """Only ask a 2026-07-28 server for its messages (in the request's ``_meta``): the caller hears them as it hears
    any server's, through the connection's listeners (``hear`` is not called)."""


_call_log: ContextVar[CallLog | None] = ContextVar("mcpvisor_call_log", default=None)


@contextmanager
def hearing(log: CallLog) -> Iterator[None]:
    """Calls made inside this block (in this task and the tasks it starts) hand their server's log
    messages to ``log``."""
    token = _call_log.set(log)
    try:
        yield
    finally:
        _call_log.reset(token)


def current() -> CallLog | None:
    return _call_log.get()
