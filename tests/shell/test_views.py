"""The /mcp status view (SPEC §9): states in priority order, grouped by source, no secrets."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from mcpvisor.core.gating import McpGating
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.settings.mcp_servers import AssembledServers, ServerSource
from mcpvisor.host.status import LiveConnection, ServerView, describe_servers
from mcpvisor.shell.views import render_status


def cfg(name: str, scope: str | None = None, **fields: object) -> McpServerConfig:
    return McpServerConfig.model_validate({"command": "srv", "args": [name], "scope": scope, **fields})


def render(rows: list[ServerView], live: bool = True) -> str:
    console = Console(record=True, width=240, file=io.StringIO())
    render_status(console, rows, live=live)
    return console.export_text()


def test_every_state_reads_as_its_reason_in_priority_order(tmp_path: Path) -> None:
    user = tmp_path / "settings.json"
    project = tmp_path / ".mcp.json"
    servers = {
        "ok": cfg("ok", env={"TOKEN": "hunter2"}),
        "broken": cfg("broken"),
        "gone": cfg("gone"),
        "off": cfg("off"),
        "denied": cfg("denied"),
        "new": cfg("new", "project"),
        "nope": cfg("nope", "project"),
    }
    sources = {
        n: ServerSource("Project .mcp.json", "project", project) if s.scope else ServerSource("User", "user", user)
        for n, s in servers.items()
    }
    store = ApprovalStore(tmp_path / "approvals.json")
    store.reject(tmp_path / "ws", "nope", servers["nope"])
    gating = McpGating(
        excluded=("off",), allowed=("ok", "broken", "gone", "off", "new", "nope"), pending=("new", "nope")
    )
    broken_log, gone_log = tmp_path / "broken.log", tmp_path / "gone.log"
    broken_log.write_text("Traceback (most recent call last):\n")
    gone_log.write_text("")  # it never started: nothing to see there
    live = {
        "ok": LiveConnection("connected", 3, 1, None, "/logs/ok.log"),
        "broken": LiveConnection("disconnected", 0, 0, "process exited with code 1", str(broken_log)),
        "gone": LiveConnection("disconnected", 0, 0, "executable 'gone' not found", str(gone_log)),
    }
    rows = describe_servers(AssembledServers(servers, sources), gating, store, tmp_path / "ws", live=live)
    text = render(rows)
    assert text.splitlines() == [
        f"User ({user})",
        f"  broken · ✗ disconnected — process exited with code 1; see error logs: {broken_log}",
        "  denied · ○ not allowed (not in mcp.allowed or --allowed-mcp-server-names)",
        "  gone · ✗ disconnected — executable 'gone' not found",
        "  off · ○ disabled (in mcp.excluded)",
        "  ok · ● connected (3 tools, 1 prompt)",
        f"Project .mcp.json ({project})",
        "  new · ? needs approval — run: mcpvisor mcp approve new",
        "  nope · ✗ rejected — edit config to re-approve",
    ]
    assert "hunter2" not in text
    assert "see error logs" not in "\n".join(line for line in text.splitlines() if "approval" in line)


def test_a_server_that_wants_credentials_reads_needs_authentication(tmp_path: Path) -> None:
    servers = {"r": McpServerConfig(http_url="https://example.com/mcp")}
    sources = {"r": ServerSource("User", "user", tmp_path / "s.json")}
    live = {"r": LiveConnection("disconnected", 0, 0, "the server needs authentication", None, needs_auth=True)}
    rows = describe_servers(
        AssembledServers(servers, sources), McpGating(), ApprovalStore(tmp_path / "a.json"), tmp_path, live=live
    )
    assert "r · 🔒 needs authentication — run: mcpvisor mcp login r" in render(rows)


def test_no_servers_says_so() -> None:
    assert render([]).strip() == "No MCP servers configured."


def test_no_servers_read_from_a_file_that_did_not_parse_is_no_news_that_none_is_configured() -> None:
    console = Console(record=True, width=200)
    render_status(console, [], unreadable=True)
    assert (
        console.export_text().strip() == "No MCP servers to show: a settings file did not parse (fix it as said above)."
    )


def test_an_untrusted_folder_says_how_to_trust_it(tmp_path: Path) -> None:
    servers = {"a": cfg("a")}
    sources = {"a": ServerSource("User", "user", tmp_path / "s.json")}
    rows = describe_servers(
        AssembledServers(servers, sources), McpGating(), ApprovalStore(tmp_path / "a.json"), tmp_path, trusted=False
    )
    assert "untrusted folder — run: mcpvisor mcp trust" in render(rows)


def test_the_trust_hint_names_the_folder_as_one_word_whatever_its_name(tmp_path: Path) -> None:
    """It is taken from the approve hint, a template whose braces are doubled: a folder named with braces was
    named with doubled ones, and the pasted command named a folder that does not exist."""
    import shlex

    from mcpvisor.host.status import command_hints, trust_hint

    for name in ("ws", "a{b} c", "it's {x}", "{name}"):
        root = tmp_path / name
        words = shlex.split(trust_hint(command_hints(root)[0]))
        assert words == ["mcpvisor", "mcp", "trust", "--workspace", str(root)], name
