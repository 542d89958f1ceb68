"""What clients may cost the HTTP gateway, whatever they do: the bounds and their defaults.

Kept apart from the HTTP machinery so that the command line can show the defaults without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_HTTP_LIMITS",
    "DEFAULT_NAME_BUDGET",
    "MIN_NAME_BUDGET",
    "BODY_TIMEOUT_S",
    "HEADER_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "MAX_HEADER_BYTES",
    "MAX_SESSIONS",
    "SESSION_IDLE_TIMEOUT_S",
    "HttpLimits",
]

MAX_SESSIONS = 1000
"""Handshake-era sessions per gateway, across workspaces (``serve --max-sessions``)."""
SESSION_IDLE_TIMEOUT_S = 600.0
"""A session with nothing in flight for this long ends (``serve --session-idle-timeout``)."""
MAX_CONNECTIONS = 2000
"""Open TCP connections at most (``serve --max-connections``); one more is closed as it arrives."""
HEADER_TIMEOUT_S = 10.0
"""How long a client may take to send a request's headers before its connection is closed."""
BODY_TIMEOUT_S = 30.0
"""How long a client may take to send a request's body once its headers came before it is answered 408 and its
connection closed (a body is 4 MiB at most)."""
WRITE_STALL_S = 30.0
"""How long a client may leave unread what the gateway sends it (its socket full, it reads nothing) before its
connection is closed: a stream it stopped reading held every answer of its session behind it."""
MAX_HEADER_BYTES = 64 * 1024
"""A request's head (its target and headers), in bytes, at most once it spans reads: a longer one is answered 431
and its connection closed (read before the token is checked: without a bound any local program could fill the
gateway's memory)."""
DEFAULT_NAME_BUDGET = 64 - len("mcp__mcpvisor__")
"""49: the longest tool or prompt name served (``serve --name-budget``): what is left of a model API's
64-character limit once a client put ``mcp__mcpvisor__`` in front (see :mod:`mcpvisor.gateway.names`)."""
MIN_NAME_BUDGET = 20
"""Below this a shortened name would be little more than its hash."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What clients may cost the HTTP gateway, whatever they do."""

    max_sessions: int = MAX_SESSIONS
    session_idle_timeout_s: float = SESSION_IDLE_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    header_timeout_s: float = HEADER_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.max_sessions < 1 or self.max_connections < 1:
            raise ValueError("max_sessions and max_connections must be at least 1")
        if not (self.session_idle_timeout_s > 0 and self.header_timeout_s > 0):
            raise ValueError("session_idle_timeout_s and header_timeout_s must be positive numbers of seconds")


DEFAULT_HTTP_LIMITS = HttpLimits()
