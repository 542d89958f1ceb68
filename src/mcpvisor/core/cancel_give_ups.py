"""The SDK's word that a cancel could not reach a server: once per burst and server, not once per call.

When a call is cancelled (or times out) the SDK tells the server (``notifications/cancelled``, a courtesy); when
the server reads nothing, it gives up on that write after 5 s and logs one WARNING line per call: a client that
cancelled a thousand calls to a server that stopped reading its input filled the gateway's stderr with a thousand
lines. :class:`CancelGiveUps`, a filter on the SDK's dispatcher logger, lets the first of a burst through, naming
the server (the SDK's line names only the request), and counts the others: their number is logged as one line
every :data:`BURST_S` while they come. The server is the one whose request is being made in the task
that logs (:func:`requesting`, around each request :class:`~mcpvisor.core.client.McpClient` makes).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from mcpvisor.core.log_bursts import BurstCount

__all__ = ["BURST_S", "DISPATCHER_LOGGER", "CancelGiveUps", "requesting"]

BURST_S = 2.0
"""How long the give-ups after a burst's first are counted before their number is said."""
DISPATCHER_LOGGER = "mcp.shared.jsonrpc_dispatcher"
"""The SDK's logger that says a final write gave up."""
_GAVE_UP = "%s gave up: transport write blocked"
"""The SDK's message (``describe`` is ``courtesy cancel for ... request <id>``)."""

_server: ContextVar[str | None] = ContextVar("mcpvisor_requesting_server", default=None)


@contextmanager
def requesting(server: str) -> Iterator[None]:
    """What the SDK logs in this block (in this task) is about a request to ``server``."""
    token = _server.set(server)
    try:
        yield
    finally:
        _server.reset(token)


class CancelGiveUps(BurstCount[str | None], logging.Filter):
    """A filter for :data:`DISPATCHER_LOGGER`: its courtesy cancels that gave up, once per burst per server."""

    def __init__(self, burst_s: float = BURST_S) -> None:
        super().__init__()
        self._burst_s = burst_s

    def burst_s(self) -> float:
        return self._burst_s

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        describe = args[0] if isinstance(args, tuple) and len(args) == 1 else None
        if record.msg != _GAVE_UP or not (isinstance(describe, str) and describe.startswith("courtesy cancel")):
            return True  # (another line, or another final write: an error response, at shutdown)
        server = _server.get()
        if not self.starts_burst(record.name, server):
            return False
        if server is not None:
            record.msg = "%s to server %r gave up: transport write blocked (the others of this burst are counted)"
            record.args = (describe, server)
        return True

    def say_more(self, name: str, key: str | None, count: int) -> None:
        to = f" to server {key!r}" if key is not None else ""
        logging.getLogger(name).warning("%d more courtesy cancels%s gave up: transport write blocked", count, to)
