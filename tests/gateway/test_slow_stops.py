"""A server slow to stop (it ignores the end of its input and SIGTERM, with a child that does the same: it runs until
it is killed) while a running host follows settings edits with the real watcher and real files, and a gateway
client watches: what it served goes at once, and nothing else waits for its process to be gone."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from mcpvisor.core import processes
from tests.gateway.test_gateway import Notices, running, save, server, text_of, tool_names
from tests.helpers import marker_pids, pid_alive


@pytest.fixture(autouse=True)
def slow_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SIGTERM the slow server ignores is followed by SIGKILL only after 15 s: what is checked while it stops
    is checked well within that on a slow machine."""
    monkeypatch.setattr(processes, "TERMINATE_GRACE_S", 15.0)


async def test_a_server_excluded_while_slow_to_stop_has_its_tools_withdrawn_at_once(tmp_path: Path) -> None:
    marker = tmp_path / "x.pids"
    user = {"mcpServers": {"x": server("x", "--stubborn", "--marker", str(marker)), "r": server("r")}}
    notices = Notices()
    async with (
        running(tmp_path, user=user, processes=True) as r,
        Client(r.gateway.server, mode="legacy", message_handler=notices) as client,
    ):
        assert await tool_names(client) == {"mcp__x__echo", "mcp__r__echo"}
        stubborn = marker_pids(marker)  # the server and a child of its group that ignores SIGTERM too
        save(r.layout.paths.user, {**user, "mcp": {"excluded": ["x"]}})
        await notices.wait_for(tools=1)
        assert all(pid_alive(pid) for pid in stubborn)  # still stopping: its tools did not wait for it
        assert await tool_names(client) == {"mcp__r__echo"}
        assert text_of(await client.call_tool("mcp__r__echo", {"text": "hi"})) == "r:echo:hi"
