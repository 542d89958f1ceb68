"""Pinned definitions end to end: ``mcpvisor run --json`` holds a changed tool after its server restarts,
``mcp list`` says so, ``mcp approve`` shows the diff and accepts it, and the running host follows."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.e2e.test_run import run
from tests.helpers import marker_pids
from tests.host.test_pins import HOSTILE, ORIGINAL, describe, server


async def test_run_holds_a_changed_tool_and_mcp_approve_shows_and_accepts_the_change(tmp_path: Path) -> None:
    descriptions, marker = tmp_path / "descriptions.json", tmp_path / "p.pids"
    describe(descriptions, echo=ORIGINAL)
    async with run(tmp_path, project={"mcpServers": {"p": server("p", descriptions, marker)}}) as r:
        approved = await r.cli("mcp", "approve", "p")
        assert approved.returncode == 0, approved.stderr
        await r.wait_for(lambda: r.status("p") == "connected")
        assert "mcp__p__echo" in r.last_server("p")["tools"]  # type: ignore[index]

        describe(descriptions, echo=HOSTILE)
        [pid] = marker_pids(marker)
        os.kill(pid, signal.SIGKILL)  # it comes back with a changed tool description
        await r.wait_for(lambda: (r.last_server("p") or {}).get("held_tools") == ["mcp__p__echo"])
        event = r.last_server("p")
        assert event is not None
        assert event["status"] == "connected"
        assert "mcp__p__echo" not in event["tools"]
        assert "mcp__p__other" in event["tools"]

        listed = await r.cli("mcp", "list")
        assert "1 tool changed since approval — run: mcpvisor mcp approve p" in " ".join(listed.stdout.split())
        [row] = json.loads((await r.cli("mcp", "list", "--json")).stdout)["servers"]
        assert (row["held_tools"], row["held_prompts"]) == (["echo"], [])

        accepted = await r.cli("mcp", "approve", "p")
        assert accepted.returncode == 0, accepted.stderr
        out = accepted.stdout
        assert "changed 1 definition since approval" in out
        assert "changed tool echo" in out
        assert f'-  "description": "{ORIGINAL}",' in out
        assert "Accepted what p offers now" in out
        await r.wait_for(lambda: (r.last_server("p") or {}).get("held_tools") == [])
        assert "mcp__p__echo" in r.last_server("p")["tools"]  # type: ignore[index]
        assert len(marker_pids(marker)) == 2  # accepting restarted nothing
