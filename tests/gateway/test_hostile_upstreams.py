"""The gateway and its host against upstream servers that break the protocol while connected: the gateway keeps
serving, and the status view says what is wrong with which server."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from mcp import Client
from rich.console import Console

from mcpvisor.core.errors import ToolNotFoundError
from mcpvisor.shell.views import render_status
from tests.core.test_hostile_servers import SPOILING_SERVER, TWICE_NAMED_SERVER
from tests.gateway.test_gateway import ERAS, running, save, server, text_of, tool_names
from tests.helpers import raw_server, wait_until
from tests.layout import replace_text


async def test_a_listing_that_turns_invalid_is_said_in_the_status_view_while_the_server_serves_its_earlier_one(
    tmp_path: Path,
) -> None:
    script, pids = tmp_path / "spoiling.py", tmp_path / "pids"
    script.write_text(SPOILING_SERVER)
    user = {
        "mcpServers": {
            "spoiling": {"command": sys.executable, "args": [str(script), str(pids)]},
            "good": server("good"),
        }
    }
    async with running(tmp_path, user=user, processes=True) as r, Client(r.gateway.server) as client:
        await wait_until(lambda: "mcp__spoiling__ok" in r.host.config.tool_registry.names())
        assert text_of(await client.call_tool("mcp__spoiling__ok", {})) == "ok"  # (it announces a change: invalid)

        def row_text() -> str:
            console = Console(record=True, width=300, file=io.StringIO())
            render_status(console, [row for row in r.host.server_views() if row.name == "spoiling"])
            return console.export_text()

        await wait_until(lambda: "not valid MCP" in row_text(), what="the status view to say the listing is invalid")
        assert (
            "spoiling · ● connected (1 tool, 0 prompts) · ! its new listing is not valid MCP "
            "(tools.1.inputSchema.type: Input should be 'object'); the one before is served"
        ) in row_text()
        assert text_of(await client.call_tool("mcp__good__echo", {"text": "hi"})) == "good:echo:hi"
        assert len(pids.read_text().split()) == 1


async def test_a_tool_a_server_lists_twice_is_said_in_the_status_view_and_served_once(tmp_path: Path) -> None:
    script = tmp_path / "twice.py"
    script.write_text(TWICE_NAMED_SERVER)
    user = {"mcpServers": {"twice": {"command": sys.executable, "args": [str(script)]}, "good": server("good")}}
    async with running(tmp_path, user=user, processes=True) as r, Client(r.gateway.server) as client:
        await wait_until(lambda: "mcp__twice__same" in r.host.config.tool_registry.names())
        console = Console(record=True, width=300, file=io.StringIO())
        render_status(console, [row for row in r.host.server_views() if row.name == "twice"])
        assert (
            "twice · ● connected (2 tools, 0 prompts) · ! it lists tool 'same' more than once; the first is served"
        ) in console.export_text()
        listed = [tool.name for tool in (await client.list_tools()).tools]
        assert listed.count("mcp__twice__same") == 1
        assert text_of(await client.call_tool("mcp__twice__same", {})) == "same"


REFUSING_LATER_SERVER = raw_server(
    "refusing",
    """
    listings = []
    def answer(method, params):
        if method == "tools/list":
            listings.append(method)
            if len(listings) > 1:  # its listing after announcing a change is an error
                send({"id": msg["id"], "error": {"code": -32603, "message": "the catalogue is down"}})
                return None
            return {"tools": [{"name": "ok", "inputSchema": {"type": "object"}}]}
        send({"method": "notifications/tools/list_changed"})
        return {"content": [{"type": "text", "text": "ok"}]}
    """,
    capabilities={"tools": {"listChanged": True}},
)


async def test_a_listing_refused_after_a_change_is_said_in_the_status_view_while_the_earlier_one_is_served(
    tmp_path: Path,
) -> None:
    script = tmp_path / "refusing.py"
    script.write_text(REFUSING_LATER_SERVER)
    user = {"mcpServers": {"refusing": {"command": sys.executable, "args": [str(script)]}}}
    async with running(tmp_path, user=user, processes=True) as r, Client(r.gateway.server) as client:
        await wait_until(lambda: "mcp__refusing__ok" in r.host.config.tool_registry.names())
        assert text_of(await client.call_tool("mcp__refusing__ok", {})) == "ok"

        def row_text() -> str:
            console = Console(record=True, width=300, file=io.StringIO())
            render_status(console, r.host.server_views())
            return console.export_text()

        await wait_until(lambda: "catalogue" in row_text(), what="the status view to say the listing failed")
        assert (
            "refusing · ● connected (1 tool, 0 prompts) · ! listing it again failed: the catalogue is down "
            "(code -32603); the one before is served"
        ) in row_text()
        assert text_of(await client.call_tool("mcp__refusing__ok", {})) == "ok"


UNUSABLE_TOOLS = {  # (schemas a handshake-era listing may carry: the SDK refuses the whole listing for others)
    "bad": {"inputSchema": {"type": "object", "properties": {"n": {"type": "nonsense"}}}},
    "props": {"inputSchema": {"type": "object", "$defs": 5}},
    "out": {"outputSchema": {"type": "object", "additionalProperties": "no"}},
    "blank": {"name": ""},
}


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_no_client_could_use_are_withheld_and_their_server_row_says_which_and_why(
    tmp_path: Path, mode: str
) -> None:
    """Before: served as listed (a tool of an invalid JSON Schema makes many clients refuse the whole tool list, and
    one of an empty name was registered as ``mcp__w__``); they are neither registered nor served, and said."""
    described = tmp_path / "described.json"
    replace_text(described, json.dumps(UNUSABLE_TOOLS))
    entry = server("w", "--tools", "echo,bad,props,out,blank", "--control", "--descriptions", str(described))
    async with (
        running(tmp_path, user={"mcpServers": {"w": entry}}, processes=True) as r,
        Client(r.gateway.server, mode=mode) as client,
    ):
        await wait_until(lambda: "mcp__w__echo" in r.host.config.tool_registry.names())
        served = await tool_names(client)
        assert {"mcp__w__echo", "mcp__w__pid"} <= served
        assert not served & {"mcp__w__bad", "mcp__w__props", "mcp__w__out", "mcp__w__", "mcp__w__blank"}, served
        assert not {"bad", "props", "out", ""} & {t.tool.name for t in r.host.config.tool_registry.tools_of("w")}
        assert text_of(await client.call_tool("mcp__w__echo", {"text": "hi"})) == "w:echo:hi"
        console = Console(record=True, width=400, file=io.StringIO())
        render_status(console, [row for row in r.host.server_views() if row.name == "w"])
        count = len(r.host.config.tool_registry.tools_of("w"))
        assert (
            f"w · ● connected ({count} tools, 0 prompts) · ! tool 'bad' is withheld: its inputSchema is not a valid "
            "JSON Schema ($.properties.n.type: 'nonsense' is not valid under any of the given schemas); the server "
            "needs fixing (and 3 more tools withheld)"
        ) in console.export_text()
        replace_text(described, json.dumps({"out": UNUSABLE_TOOLS["out"]}))  # three fixed, one left
        await client.call_tool("mcp__w__set_tools", {"names": "echo,bad,props,out,blank"})
        await wait_until(lambda: "mcp__w__bad" in r.host.config.tool_registry.names(), what="the fixed tools served")
        assert {"mcp__w__bad", "mcp__w__props", "mcp__w__blank"} <= await tool_names(client)
        [w] = [row for row in r.host.server_views() if row.name == "w"]
        assert w.warning == (
            "tool 'out' is withheld: its outputSchema is not a valid JSON Schema ($.additionalProperties: 'no' is not "
            "of type 'object', 'boolean'); the server needs fixing"
        )
        assert "mcp__w__out" not in await tool_names(client)


async def test_a_call_of_a_withheld_tool_says_it_is_withheld_and_why(tmp_path: Path) -> None:
    """Before: told that the server does not provide it, as for a name it never listed."""
    described = tmp_path / "described.json"
    replace_text(described, json.dumps(UNUSABLE_TOOLS))
    entry = server("w", "--tools", "echo,bad,blank", "--descriptions", str(described))
    async with (
        running(tmp_path, user={"mcpServers": {"w": entry}}, processes=True) as r,
        Client(r.gateway.server) as client,
    ):
        await wait_until(lambda: "mcp__w__echo" in r.host.config.tool_registry.names())
        said = text_of(await client.call_tool("mcp__w__bad", {"n": 1}))
        assert said == (
            "tool 'mcp__w__bad' is withheld: server 'w' lists it, but its inputSchema is not a valid JSON Schema "
            "($.properties.n.type: 'nonsense' is not valid under any of the given schemas); the server needs fixing"
        )
        with pytest.raises(ToolNotFoundError, match="server 'w' lists it, but its name is empty") as caught:
            await r.host.config.call_tool("mcp__w__", {})
        assert caught.value.reason == "withheld"


async def test_a_withheld_tool_the_servers_filters_hide_is_not_said_nor_called_withheld(tmp_path: Path) -> None:
    """Before: excluding the tool (the user's only way to quiet the warning until the server is fixed) left the row
    saying it was withheld and the server needed fixing."""
    described = tmp_path / "described.json"
    replace_text(described, json.dumps(UNUSABLE_TOOLS))
    entry = server("w", "--tools", "echo,bad,blank", "--descriptions", str(described))
    async with running(tmp_path, user={"mcpServers": {"w": entry}}, processes=True) as r:
        await wait_until(lambda: "mcp__w__echo" in r.host.config.tool_registry.names())

        def warning() -> str | None:
            return next(row.warning for row in r.host.server_views() if row.name == "w")

        assert (warning() or "").startswith("tool 'bad' is withheld"), warning()
        pid = r.host.config.manager.get_client("w")
        save(r.layout.paths.user, {"mcpServers": {"w": {**entry, "excludeTools": ["bad"]}}})
        await wait_until(lambda: (warning() or "").startswith("tool '' is withheld"), what="'bad' no longer said")
        assert warning() == "tool '' is withheld: its name is empty; the server needs fixing"
        assert r.host.config.manager.get_client("w") is pid  # re-filtered in place, not restarted
        with pytest.raises(ToolNotFoundError, match="does not provide it") as caught:
            await r.host.config.call_tool("mcp__w__bad", {"n": 1})
        assert caught.value.reason != "withheld"
        save(r.layout.paths.user, {"mcpServers": {"w": {**entry, "excludeTools": ["bad", ""]}}})
        await wait_until(lambda: warning() is None, what="the row to warn of nothing")
