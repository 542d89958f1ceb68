"""Pinned definitions end to end: ``mcpvisor run --json`` holds a changed tool after its server restarts,
``mcp list`` says so, ``mcp approve`` shows the diff and accepts it, and the running host follows."""

from __future__ import annotations

import json
import os
import pty
import signal
from collections.abc import Callable
from pathlib import Path

import anyio
import mcp_types as types

from mcpvisor.host import paths
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.pins import PinGate, PinStore
from tests.e2e.test_run import Run, run
from tests.helpers import WAIT_S, marker_pids, mcpvisor_command, paste_elsewhere
from tests.host.test_pins import HOSTILE, ORIGINAL, describe, server
from tests.layout import Layout, make_layout, write_json


async def answer_at_a_terminal(
    r: Run | Layout, answer: str, *args: str, meanwhile: Callable[[], None] | None = None, code: int = 0
) -> str:
    """Run the CLI with a pseudo-terminal for stdin and stdout, type ``answer`` once it asks (after ``meanwhile``,
    what happens while the person reads); its output (it exits with ``code``)."""
    layout = r if isinstance(r, Layout) else r.layout
    main, side = pty.openpty()
    process = await anyio.open_process(
        [mcpvisor_command(), *args, "--workspace", str(layout.root)],
        stdin=side,
        stdout=side,
        stderr=side,
        env={**os.environ, **layout.env, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    os.close(side)
    output = b""
    try:
        with anyio.fail_after(WAIT_S):
            while b"[y/N]" not in output:
                await anyio.wait_readable(main)
                output += os.read(main, 65536)
            if meanwhile is not None:
                meanwhile()
            os.write(main, answer.encode())
            while True:
                await anyio.wait_readable(main)
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the terminal closed: the process is done
                    break
                if not chunk:
                    break
                output += chunk
    finally:
        os.close(main)
        with anyio.fail_after(WAIT_S):
            await process.wait()
    assert process.returncode == code, output.decode(errors="replace")
    return output.decode(errors="replace")


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
        said = " ".join(listed.stdout.split())
        assert f"1 tool changed since approval — run: mcpvisor mcp approve --workspace {r.layout.root} p" in said
        [row] = json.loads((await r.cli("mcp", "list", "--json")).stdout)["servers"]
        assert (row["held_tools"], row["held_prompts"]) == (["echo"], [])

        # Without a terminal to ask at, the diff is shown and nothing is accepted.
        shown = await r.cli("mcp", "approve", "p")
        assert shown.returncode == 1
        assert "changed 1 definition since approval" in shown.stdout
        assert f'-  "description": "{ORIGINAL}",' in shown.stdout
        assert "nothing was changed: p's changed definitions stay held (--yes accepts them)" in shown.stderr
        [row] = json.loads((await r.cli("mcp", "list", "--json")).stdout)["servers"]
        assert row["held_tools"] == ["echo"]

        # At a terminal, the diff comes first, then the question; "y" accepts.
        asked = await answer_at_a_terminal(r, "y\n", "mcp", "approve", "p")
        assert asked.index("changed tool echo") < asked.index("Accept what p offers now?")
        assert "Accepted what p offers now" in asked
        await r.wait_for(lambda: bool(r.of("definitions_accepted")))
        [served] = r.of("definitions_accepted")
        assert served == {"event": "definitions_accepted", "server": "p", "tools": ["mcp__p__echo"], "prompts": []}

        accepted = await r.cli("mcp", "approve", "p", "--yes")  # nothing held any more: the approval stands
        assert accepted.returncode == 0, accepted.stderr
        await r.wait_for(lambda: (r.last_server("p") or {}).get("held_tools") == [])
        assert "mcp__p__echo" in r.last_server("p")["tools"]  # type: ignore[index]
        assert len(marker_pids(marker)) == 2  # accepting restarted nothing


async def test_a_refused_acceptance_says_an_approve_command_that_works_pasted_in_another_folder(tmp_path: Path) -> None:
    """``mcp approve --workspace WS p`` run elsewhere, when what p offers changed again while the diff was read: it
    said to look again with ``mcpvisor mcp approve p``; pasted, that found no such server. It names the workspace."""
    layout = make_layout(tmp_path)
    write_json(layout.paths.project, {"mcpServers": {"p": server("p", tmp_path / "descriptions.json")}})
    cfg = layout.settings().project.servers["p"].config
    ApprovalStore(layout.paths.approvals).approve(layout.root, "p", cfg)
    gate = PinGate(PinStore(paths.pins_path(layout.env)), layout.root, lambda: "gated")

    def offered(description: str) -> None:
        gate("p", cfg, [types.Tool(name="echo", description=description, inputSchema={"type": "object"})], [])

    offered(ORIGINAL)  # pinned at first use
    offered(HOSTILE)  # held
    asked = await answer_at_a_terminal(
        layout, "y\n", "mcp", "approve", "p", meanwhile=lambda: offered(HOSTILE + " Now."), code=1
    )
    said = " ".join(asked.split())
    assert "nothing was accepted: what p offers changed after it was shown" in said
    command = said.split("look at it again (", 1)[1].split(")", 1)[0]
    pasted = await paste_elsewhere(command, layout.env, tmp_path / "elsewhere")
    assert "changed 1 definition since approval" in " ".join(pasted.stdout.decode().split()), (command, pasted)
