"""A call a language server's stop cuts short says why it stopped and what to do, with the real pylsp: the server
crashed, was stopped as hung, or was idle."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import anyio
import psutil
import pytest

from mcpvisor.host.lsp import manager as lsp_manager
from mcpvisor.host.lsp import tools
from tests.host.lsp.test_lsp_host import hover_cut_short, pylsp, session, text


async def test_a_call_a_crash_cuts_short_says_the_server_ended_before_it_answered_and_to_retry(tmp_path: Path) -> None:
    """Before, it said only "exited with code 137", as if the call itself had been refused for good; the server was
    killed by SIGKILL, and that is what it says."""

    async def crash(process: psutil.Process) -> None:
        process.kill()

    async with session(tmp_path, user={"lspServers": {"python": pylsp()}}, watch=False) as s:
        result = await hover_cut_short(s, crash)
        assert result.is_error
        assert text(result) == (
            "textDocument/hover failed: language server 'python' ended before it answered (was killed by SIGKILL "
            "(signal 9)); "
            "retry the call"
        )
        again = await s.ok("hover", file="service.py", line=3, character=6)  # the retry starts it again
        assert "make_user" in again["contents"]


async def test_a_call_cut_short_when_its_server_is_stopped_as_hung_says_why_and_to_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a call in flight when two others timed out in a row (the server stopped as hung) said only that the
    server "was stopped before it answered"."""

    async def hang(process: psutil.Process) -> None:
        monkeypatch.setattr(tools, "REQUEST_TIMEOUT_S", 0.5)  # (the call in flight keeps its own)
        for _ in range(2):
            assert (await s.call("hover", file="service.py", line=3, character=6)).is_error

    entry = pylsp(shutdownTimeout=500)  # (it is suspended: its shutdown is never answered)
    async with session(tmp_path, user={"lspServers": {"python": entry}}, watch=False) as s:
        result = await hover_cut_short(s, hang)
        assert result.is_error
        assert text(result) == (
            "textDocument/hover failed: language server 'python' was stopped before it answered (it did not answer 2 "
            "requests in a row in time: stopped as hung, it starts again on the next call); retry the call"
        )
        monkeypatch.setattr(tools, "REQUEST_TIMEOUT_S", 60.0)
        again = await s.ok("hover", file="service.py", line=3, character=6)
        assert "make_user" in again["contents"]


async def test_a_server_busy_answering_a_call_longer_than_the_idle_stop_is_not_stopped_as_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a call that took longer than lsp.idleStopSeconds (a slow search on a large repository) had its
    server stopped under it as idle, and was told only that it "was stopped before it answered"."""
    ahead = 0.0  # how far the idle check's clock is ahead: a server asked long ago reads as unused that long
    looked = anyio.Event()

    def monotonic() -> float:
        if ahead:
            looked.set()
        return time.monotonic() + ahead

    monkeypatch.setattr(lsp_manager, "time", SimpleNamespace(monotonic=monotonic))
    monkeypatch.setattr(lsp_manager, "IDLE_CHECK_S", 0.05)

    async def outlast_the_idle_stop(process: psutil.Process) -> None:
        nonlocal ahead, looked
        ahead = 3600.0
        for _ in range(2):  # the idle check looked at it (at least once since its request)
            await looked.wait()
            looked = anyio.Event()
        ahead = 0.0
        process.resume()  # it answers now

    user = {"lspServers": {"python": pylsp(shutdownTimeout=500)}, "lsp": {"idleStopSeconds": 1}}
    async with session(tmp_path, user=user, watch=False) as s:
        result = await hover_cut_short(s, outlast_the_idle_stop)
        assert not result.is_error, text(result)
        assert "make_user" in (result.structured_content or {})["contents"]
        assert s.host.lsp.manager.servers()["python"].state == "ready"
