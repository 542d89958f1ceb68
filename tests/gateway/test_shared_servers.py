"""A server two workspaces share (per-client workspaces: one process, one connection in the pool) serves
each as if it were its own: one workspace's log level or unsubscribing never takes from the other what
it asked for. Real HTTP, the SDK's client, the light example server."""

from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path

from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from mcpvisor.core.client import McpClient
from mcpvisor.gateway.workspaces import WorkspaceGateway
from tests.gateway.test_gateway import save, server, text_of
from tests.gateway.test_log_relay import Heard
from tests.gateway.test_resources import subscribe, touch, unsubscribe, updated_uris
from tests.gateway.test_workspaces import Setup, approve, client_for, make_setup, serving, the_gateway
from tests.helpers import marker_pids, wait_until


async def test_a_shared_server_logs_from_the_lowest_level_any_workspace_asked_for(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    save(setup.layout.paths.user, {"mcpServers": {"common": server("common", "--control")}})
    in_a_heard, in_b_heard = Heard(), Heard()
    async with (
        serving(setup) as (_, url),
        client_for(url, setup.a, mode="legacy", logging_callback=in_a_heard) as in_a,
        client_for(url, setup.b, mode="legacy", logging_callback=in_b_heard) as in_b,
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await in_a.set_logging_level("debug")
            await in_b.set_logging_level("error")  # asked last, of the same server process
        assert text_of(await in_b.call_tool("mcp__common__log", {"level": "info", "text": "for-a"})) == "sent"
        assert text_of(await in_b.call_tool("mcp__common__log", {"level": "error", "text": "for-both"})) == "sent"
        await wait_until(
            lambda: "for-both" in in_a_heard.messages and "for-both" in in_b_heard.messages,
            what="both clients to hear the error",
        )
        assert in_a_heard.messages == ["for-a", "for-both"]  # the server still logs what A asked for
        assert in_b_heard.messages == ["for-both"]


async def test_one_workspace_unsubscribing_leaves_anothers_subscription_to_a_shared_server(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    user = {"mcpServers": {"common": server("common", "--resources", "note://c/1", "--control")}}
    save(setup.layout.paths.user, user)
    heard: list[object] = []

    async def on_message(message: object) -> None:
        heard.append(message)

    async with (
        serving(setup) as (_, url),
        client_for(url, setup.a, mode="legacy", message_handler=on_message) as in_a,
        client_for(url, setup.b, mode="legacy") as in_b,
    ):
        await subscribe(in_a, "note://c/1")
        await subscribe(in_b, "note://c/1")
        await unsubscribe(in_b, "note://c/1")
        assert await touch(in_b, "mcp__common__touch_resource", "note://c/1") == "notified"  # A still subscribes
        await wait_until(lambda: updated_uris(heard) == ["note://c/1"], what="A to hear the update")
        await unsubscribe(in_a, "note://c/1")
        assert await touch(in_b, "mcp__common__touch_resource", "note://c/1") == "not subscribed"


def approve_p_in(setup: Setup, args: dict[Path, tuple[str, ...]]) -> None:
    """An approved project server ``p`` in each workspace of ``args``, started with that workspace's args."""
    for root, extra in args.items():
        entry = server("p", *extra)
        save(root / ".mcp.json", {"mcpServers": {"p": entry}})
        approve(setup.layout, root, "p", entry)


async def call_p(*clients: Client) -> None:
    for client in clients:
        assert text_of(await client.call_tool("mcp__p__echo", {"text": "x"})) == "p:echo:x"


def status_of_p(gateway: WorkspaceGateway, root: Path) -> str | None:
    """``p``'s status in ``root``'s workspace (None while it has no connection: between two)."""
    client = the_gateway(gateway, root).config.manager.get_client("p")
    return client.status if client is not None else None


def client_of_p(gateway: WorkspaceGateway, root: Path) -> McpClient:
    client = the_gateway(gateway, root).config.manager.get_client("p")
    assert client is not None
    return client


async def test_two_workspaces_servers_of_one_name_write_two_logs(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    approve_p_in(setup, {setup.a: ("--stderr", "from-a"), setup.b: ("--stderr", "from-b")})
    async with (
        serving(setup) as (gateway, url),
        client_for(url, setup.a) as in_a,
        client_for(url, setup.b) as in_b,
    ):
        await call_p(in_a, in_b)
        logs = {root: client_of_p(gateway, root).log_path for root in (setup.a, setup.b)}
        assert logs[setup.a] != logs[setup.b]
        await wait_until(lambda: all(path.exists() and path.read_text().strip() for path in logs.values()))
        assert logs[setup.a].read_text().strip() == "from-a"  # never the other workspace's server's lines
        assert logs[setup.b].read_text().strip() == "from-b"
        assert {logs[setup.a].name, logs[setup.b].name} & {"p.log"}  # one of them keeps the plain name


async def test_a_servers_log_stays_its_own_across_a_restart(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    markers = {root: tmp_path / f"{root.name}.pids" for root in (setup.a, setup.b)}
    approve_p_in(setup, {root: ("--marker", str(marker)) for root, marker in markers.items()})
    async with (
        serving(setup) as (gateway, url),
        client_for(url, setup.a) as in_a,
        client_for(url, setup.b) as in_b,
    ):
        await call_p(in_a, in_b)
        before = {root: client_of_p(gateway, root).log_path for root in (setup.a, setup.b)}
        [pid] = marker_pids(markers[setup.a])
        os.kill(pid, signal.SIGKILL)  # A's server crashes and is started again
        await wait_until(lambda: len(marker_pids(markers[setup.a])) == 2, what="A's server to start again")
        await wait_until(lambda: status_of_p(gateway, setup.a) == "connected", what="A to reconnect")
        assert {root: client_of_p(gateway, root).log_path for root in (setup.a, setup.b)} == before


async def test_two_workspaces_language_servers_of_one_name_write_two_logs(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    save(
        setup.layout.paths.user,
        {"lspServers": {"python": {"command": "pylsp", "extensionToLanguage": {".py": "python"}}}},
    )
    async with (
        serving(setup) as (gateway, url),
        client_for(url, setup.a) as in_a,
        client_for(url, setup.b) as in_b,
        client_for(url, None) as in_default,
    ):
        for client in (in_a, in_b, in_default):
            await client.list_tools()
        logs = {root: host.lsp.manager.servers()["python"].log_path for root, host in gateway.workspaces().items()}
        assert set(logs) == {setup.default, setup.a, setup.b}
        assert len(set(logs.values())) == 3
        base = Path(setup.layout.env["MCPVISOR_LOG_DIR"])
        assert logs[setup.default] == base / "lsp-python.log"  # the gateway's own workspace: where it always was
        assert logs[setup.a].parent.parent == base / "workspaces"
        assert (base / "workspaces").stat().st_mode & 0o777 == 0o700  # it names the workspaces
        assert logs[setup.a].parent.name.startswith("a-")
