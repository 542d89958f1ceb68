"""A gateway's clients learn of the project servers waiting for the user's approval: in the instructions of
a session (both eras), and, for a server that starts waiting mid-session, in a log message to each handshake-era
client (SPEC §7, §9). Real settings files, the real watcher, the SDK's own client, in memory and over stdio."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcpvisor.gateway.waiting import INSTRUCTIONS
from tests.gateway.test_gateway import ERAS, running, save, server, tool_names
from tests.helpers import wait_woken
from tests.layout import make_layout


class Logs:
    """A handshake-era client's message handler: the log messages it is sent."""

    def __init__(self) -> None:
        self.messages: list[types.LoggingMessageNotificationParams] = []
        self._arrived = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.LoggingMessageNotification):
            self.messages.append(message.params)
            self._arrived.set()
            self._arrived = anyio.Event()

    async def wait_for(self, count: int) -> None:
        await wait_woken(lambda: len(self.messages) >= count, lambda: self._arrived, seen=lambda: repr(self.messages))


@pytest.mark.parametrize("mode", ERAS)
async def test_a_sessions_instructions_name_the_server_waiting_for_approval_and_the_command(
    tmp_path: Path, mode: str
) -> None:
    project = {"mcpServers": {"proj": server("proj"), "other": server("other")}}
    async with running(tmp_path, user={"mcpServers": {"a": server("a")}}, project=project) as r:
        root = r.layout.root
        await r.host.decide("other", "reject")  # rejected: the user decided; nothing to tell
        async with Client(r.gateway.server, mode=mode) as client:
            assert await tool_names(client) == {"mcp__a__echo"}
            said = client.instructions
            assert said is not None
            assert said.startswith(INSTRUCTIONS)
            assert "the server 'proj' waits for the user's approval before it starts" in said
            assert f"mcpvisor mcp approve --workspace {root} proj." in said
            assert "'other'" not in said
        await r.host.decide("proj", "approve")
        async with Client(r.gateway.server, mode=mode) as client:
            assert client.instructions == INSTRUCTIONS  # read as it stands when a session begins


async def test_a_server_that_starts_waiting_mid_session_is_told_to_handshake_era_clients_in_a_log_message(
    tmp_path: Path,
) -> None:
    logs = Logs()
    async with (
        running(tmp_path, user={"mcpServers": {"a": server("a")}}) as r,
        Client(r.gateway.server, mode="legacy", message_handler=logs) as client,
    ):
        assert client.instructions == INSTRUCTIONS
        save(r.layout.paths.project, {"mcpServers": {"proj": server("proj")}})
        await logs.wait_for(1)
        [message] = logs.messages
        assert (message.level, message.logger) == ("warning", "mcpvisor")
        assert message.data == (
            "In this workspace's project configuration the server 'proj' waits for your approval before it starts: "
            f"mcpvisor mcp approve --workspace {r.layout.root} proj"
        )
        assert await tool_names(client) == {"mcp__a__echo"}
        save(r.layout.paths.project, {"mcpServers": {"proj": server("proj"), "q": server("q"), "s": server("s")}})
        await logs.wait_for(2)  # only what waits since: q and s, not proj again
        assert isinstance(logs.messages[1].data, str)
        assert logs.messages[1].data.startswith(
            "In this workspace's project configuration 2 servers wait for your approval before they start: "
            f"'q': mcpvisor mcp approve --workspace {r.layout.root} q; 's': "
        )


async def test_a_stdio_client_of_mcpvisor_serve_is_told_which_project_server_waits_for_approval(
    tmp_path: Path,
) -> None:
    """What a desktop client running ``mcpvisor serve`` sees: no tools, and instructions saying why."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.project, {"mcpServers": {"repo-tools": server("repo")}})
    argv = ["-m", "mcpvisor", "serve", "--workspace", str(layout.root)]
    params = StdioServerParameters(command=sys.executable, args=argv, env={**os.environ, **layout.env})
    with (tmp_path / "stderr.txt").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            assert await tool_names(client) == set()
            assert client.instructions is not None
            assert "the server 'repo-tools' waits for the user's approval" in client.instructions
            assert f"mcpvisor mcp approve --workspace {layout.root} repo-tools" in client.instructions


async def test_a_server_waiting_while_the_approvals_store_cannot_be_read_is_not_said_to_need_only_the_command(
    tmp_path: Path,
) -> None:
    """An approvals store that cannot be read holds every project server, and `mcp approve` refuses to write over it
    (a fleet's store that does not answer holds the approved ones too): the client is told so, not only the command."""
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.project, {"mcpServers": {"repo-tools": server("repo")}})
    layout.paths.approvals.parent.mkdir(parents=True, exist_ok=True)
    layout.paths.approvals.write_text("{not json")
    argv = ["-m", "mcpvisor", "serve", "--workspace", str(layout.root)]
    params = StdioServerParameters(command=sys.executable, args=argv, env={**os.environ, **layout.env})
    with (tmp_path / "stderr.txt").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            assert await tool_names(client) == set()
            said = client.instructions
            assert said is not None
            assert "the server 'repo-tools' waits for the user's approval" in said
            assert "mcpvisor cannot read the approvals store now (its log says why)" in said
            assert "not json" not in said  # what the store holds stays in the log
