"""A server slow to stop (it ignores the end of its input and SIGTERM, with a child that does the same: it runs until
it is killed) while a running host follows settings edits with the real watcher and real files, and a gateway
client watches: what it served goes at once, and nothing else waits for its process to be gone."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from mcpvisor.core import processes
from tests.gateway.test_gateway import Notices, running, save, server, text_of, tool_names
from tests.helpers import marker_pids, pid_alive, wait_until


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


def x_server(marker: Path, *args: str) -> dict[str, object]:
    return server("x", "--stubborn", "--marker", str(marker), *args)


@pytest.mark.parametrize(
    ("edit", "then"),
    [("removed", "a save adds n"), ("changed", "a save adds n"), ("removed", "n is approved")],
)
async def test_what_follows_an_edit_of_a_server_slow_to_stop_does_not_wait_for_it(
    tmp_path: Path, edit: str, then: str
) -> None:
    """x is removed or changed (its old process goes first, then the new one starts); a save that adds n, or an
    approval of n, right after: n is served while x's old process still stops, and r is never disturbed. x's tools
    go at once either way; a change (a restart) is told once, when x's new process serves its tools."""
    marker = tmp_path / "x.pids"
    user = {"mcpServers": {"x": x_server(marker), "r": server("r")}}
    project = {"mcpServers": {"n": server("n")}} if then == "n is approved" else None
    notices = Notices()
    async with (
        running(tmp_path, user=user, project=project, processes=True) as r,
        Client(r.gateway.server, mode="legacy", message_handler=notices) as client,
    ):
        stubborn = marker_pids(marker)  # the server and a child of its group that ignores SIGTERM too
        edited = (
            {"r": server("r")}
            if edit == "removed"
            else {"x": x_server(marker, "--tools", "echo,more"), "r": server("r")}
        )
        save(r.layout.paths.user, {"mcpServers": edited})
        if edit == "removed":
            await notices.wait_for(tools=1)  # x's tools went at once
        else:
            await wait_until(lambda: "mcp__x__echo" not in r.host.config.tool_registry.names(), what="x's tools to go")
        assert await tool_names(client) == {"mcp__r__echo"}
        if then == "n is approved":
            await r.host.decide("n", "approve")
        else:
            save(r.layout.paths.user, {"mcpServers": {**edited, "n": server("n")}})
        await wait_until(lambda: "mcp__n__echo" in r.host.config.tool_registry.names(), what="n's tools")
        assert all(pid_alive(pid) for pid in stubborn)  # still stopping: n did not wait for it
        assert text_of(await client.call_tool("mcp__n__echo", {"text": "hi"})) == "n:echo:hi"
        assert text_of(await client.call_tool("mcp__r__echo", {"text": "hi"})) == "r:echo:hi"
        if edit == "changed":
            await wait_until(lambda: "mcp__x__more" in r.host.config.tool_registry.names(), what="x's new process")
            assert not any(pid_alive(pid) for pid in stubborn)  # the old process went first
            await notices.wait_for(tools=2)  # n's, then x's restart's
            assert "mcp__x__more" in await tool_names(client)


async def test_a_server_removed_and_added_back_while_slow_to_stop_starts_once_its_old_process_is_gone(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "x.pids"
    user = {"mcpServers": {"x": x_server(marker), "r": server("r")}}
    notices = Notices()
    async with (
        running(tmp_path, user=user, processes=True) as r,
        Client(r.gateway.server, mode="legacy", message_handler=notices) as client,
    ):
        stubborn = marker_pids(marker)
        save(r.layout.paths.user, {"mcpServers": {"r": server("r")}})
        await notices.wait_for(tools=1)
        save(r.layout.paths.user, user)
        await notices.wait_for(tools=2)
        assert not any(pid_alive(pid) for pid in stubborn)  # the old process went first (it may hold a port)
        assert text_of(await client.call_tool("mcp__x__echo", {"text": "hi"})) == "x:echo:hi"
