"""Language servers through the installed command: ``mcpvisor serve`` serves a repository's pylsp as tools,
gated until ``mcpvisor lsp approve`` (another process), answering after it; nothing outlives the gateway,
not even after ``kill -9``; a per-client workspace never spawns before approval either."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
from mcp import Client

from mcpvisor.gateway.workspaces import WorkspaceGateway
from mcpvisor.host.host import HostOptions
from tests.gateway.test_gateway import text_of, wait_for_port
from tests.gateway.test_workspaces import client_for
from tests.helpers import WAIT_S, free_port, mcpvisor_command, wait_until
from tests.host.lsp.test_lsp_host import MODELS, SERVICE, language_server_processes, pylsp
from tests.layout import Layout, make_layout, replace_text


def project(tmp_path: Path) -> Layout:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    (layout.root / "models.py").write_text(MODELS)
    (layout.root / "service.py").write_text(SERVICE)
    replace_text(layout.root / ".lsp.json", json.dumps({"python": pylsp()}))
    return layout


@asynccontextmanager
async def serving(layout: Layout) -> AsyncIterator[tuple[anyio.abc.Process, str]]:
    port = free_port()
    command = [mcpvisor_command(), "serve", "--http", f"127.0.0.1:{port}", "--no-auth"]
    with (layout.home.parent / "serve.log").open("w") as err:
        process = await anyio.open_process(
            [*command, "--workspace", str(layout.root)], env={**os.environ, **layout.env}, stderr=err
        )
    async with process:
        try:
            await wait_for_port(port)
            yield process, f"http://127.0.0.1:{port}/mcp"
        finally:
            # Stopped as a user stops it, so that it stops its servers: one that ignores the end of its stdin, as the
            # npm reference server does while its timer runs, would outlive a gateway killed.
            if process.returncode is None:
                process.terminate()
                with anyio.CancelScope(shield=True), anyio.move_on_after(WAIT_S):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()


async def test_mcpvisor_serve_serves_a_repositorys_language_server_once_approved(tmp_path: Path) -> None:
    layout = project(tmp_path)
    async with serving(layout) as (process, url), Client(url) as client:
        args = {"file": "service.py", "line": 3, "character": 6}
        refused = await client.call_tool("mcp__lsp__go_to_definition", args)
        assert refused.is_error
        assert text_of(refused).startswith(
            f"language server 'python' needs approval — run: mcpvisor lsp approve --workspace {layout.root} python"
        )
        assert not language_server_processes(layout.root)

        approve = await anyio.run_process(
            [mcpvisor_command(), "lsp", "approve", "python", "--workspace", str(layout.root)],
            env={**os.environ, **layout.env},
            check=False,
        )
        assert approve.returncode == 0, approve.stderr.decode()
        assert "runs code from this workspace" in approve.stdout.decode()
        with anyio.fail_after(WAIT_S):  # the gateway follows the approvals store through its watcher
            while (await client.call_tool("mcp__lsp__go_to_definition", args)).is_error:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        found = await client.call_tool("mcp__lsp__go_to_definition", args)
        assert found.structured_content is not None
        [loc] = found.structured_content["locations"]
        assert (loc["file"], loc["line"]) == ("models.py", 9)
        assert "1 definition:\n  models.py:9:5" in text_of(found)
        refs = await client.call_tool("mcp__lsp__find_references", {"file": "models.py", "symbol": "make_user"})
        assert not refs.is_error
        bad = layout.root / "bad.py"
        bad.write_text("x = undefined_name\n")
        diagnostics = await client.call_tool("mcp__lsp__diagnostics", {"files": ["bad.py"]})
        assert "undefined name 'undefined_name'" in text_of(diagnostics)
        bad.write_text("x = 1\n")
        clean = await client.call_tool("mcp__lsp__diagnostics", {"files": ["bad.py"]})
        assert clean.structured_content == {
            "files": [{"file": "bad.py", "server": "python", "fresh": True, "diagnostics": [], "problem": None}]
        }
        assert language_server_processes(layout.root)
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT_S):
            assert await process.wait() == 0
    await wait_until(lambda: not language_server_processes(layout.root), what="no language server after the gateway")


async def test_nothing_outlives_a_gateway_killed_with_sigkill(tmp_path: Path) -> None:
    layout = project(tmp_path)
    (layout.root / ".lsp.json").unlink()
    replace_text(layout.paths.user, json.dumps({"lspServers": {"python": pylsp()}}))  # the user's own: no approval
    async with serving(layout) as (process, url):
        async with Client(url) as client:
            result = await client.call_tool("mcp__lsp__document_symbols", {"file": "models.py"})
            assert not result.is_error, text_of(result)
        assert language_server_processes(layout.root)
        process.send_signal(signal.SIGKILL)
        await process.wait()
    await wait_until(
        lambda: not language_server_processes(layout.root), what="the language server to die with its host"
    )


async def test_a_per_client_workspace_never_spawns_a_language_server_before_approval(tmp_path: Path) -> None:
    default = make_layout(tmp_path / "default", MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    other = default.home / "other"
    other.mkdir(parents=True)
    (other / "models.py").write_text(MODELS)
    replace_text(other / ".lsp.json", json.dumps({"python": pylsp()}))
    options = HostOptions(env=default.env, workspace=default.root)
    async with WorkspaceGateway(options) as gateway, anyio.create_task_group() as tg:
        url: str = await tg.start(gateway.serve_http)
        async with client_for(url, other) as client:
            result = await client.call_tool("mcp__lsp__document_symbols", {"file": "models.py"})
            assert result.is_error
            assert f"needs approval — run: mcpvisor lsp approve --workspace {other} python" in text_of(result)
        assert not language_server_processes(other)
        tg.cancel_scope.cancel()
