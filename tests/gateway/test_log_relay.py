"""Servers' log messages to the clients that asked for them, when a server logs faster than a client reads:
the client loses what is over its queue's bound and is told how many, the gateway never holds more."""

from __future__ import annotations

import warnings
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from mcpvisor.gateway.log_relay import QUEUE_MESSAGES
from tests.gateway.test_gateway import running, server, text_of
from tests.helpers import wait_until

FLOOD = 3000
TRANSPORT_BUFFER = 1500
"""More than the in-memory transport between the gateway and an SDK client holds (about 750 messages)."""


class Heard:
    """What one client heard: the servers' messages, and how many the gateway said it dropped."""

    def __init__(self, *, hold: anyio.Event | None = None) -> None:
        self.messages: list[str] = []
        self.dropped = 0
        self._hold = hold

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        if params.logger == "mcpvisor":
            self.dropped += int(str(params.data).split()[0])
        else:
            self.messages.append(str(params.data))
        if self._hold is not None:
            await self._hold.wait()  # a client that stops reading

    def accounted(self) -> int:
        return len(self.messages) + self.dropped


async def test_a_client_that_reads_slower_than_a_server_logs_loses_the_excess_and_is_told_how_many(
    tmp_path: Path,
) -> None:
    release = anyio.Event()
    stuck, quick = Heard(hold=release), Heard()
    user = {"mcpServers": {"a": server("a", "--control")}}
    async with (
        running(tmp_path, user=user) as r,
        Client(r.gateway.server, mode="legacy", logging_callback=stuck) as slow_client,
        Client(r.gateway.server, mode="legacy", logging_callback=quick) as quick_client,
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await slow_client.set_logging_level("info")
            await quick_client.set_logging_level("info")
        sent = await quick_client.call_tool("mcp__a__log", {"level": "info", "text": "m", "count": FLOOD})
        assert text_of(sent) == "sent"
        await wait_until(lambda: quick.accounted() == FLOOD, what=f"the quick client to account for {FLOOD} messages")
        numbers = [int(m.removeprefix("m #")) for m in quick.messages]
        assert numbers == sorted(numbers)  # in the order the server sent them
        release.set()
        await wait_until(lambda: stuck.accounted() == FLOOD, what=f"the stuck client to account for {FLOOD} messages")
        # What reached it: its queue in the gateway, and what the transport to it buffers; the rest was
        # dropped and counted (a gateway keeping them all would have held every one of the FLOOD).
        assert stuck.dropped >= FLOOD - QUEUE_MESSAGES - TRANSPORT_BUFFER
        assert stuck.messages[0] == "m #1"
