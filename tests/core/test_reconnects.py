"""What a call is told about a server that went down by itself, while it is started again and once that gave up
(SPEC §5.4, §9 "Tool not found"), with real crashing servers and the real reconnect loop."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mcpvisor.core import reconnects
from mcpvisor.core.config import Config
from mcpvisor.core.errors import ServerUnavailableError, ToolNotFoundError
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from tests.helpers import LIGHT, light, wait_until


@pytest.fixture
async def config(tmp_path: Path) -> AsyncIterator[Config]:
    async with Config(options=ConnectionOptions(log_dir=tmp_path / "logs")) as cfg:
        yield cfg


async def test_a_tool_of_a_crashed_server_says_it_is_being_restarted_and_works_once_it_is(
    config: Config, tmp_path: Path
) -> None:
    """It said "check its configuration: the next change to the settings starts it again (in the shell: /reload)"
    while the reconnect loop was about to start it again by itself."""
    await config.initialize()
    await config.reinitialize_mcp_servers(
        {"c": light("c", "--tools", "echo,boom", "--prompts", "p", "--crash-on-call", "boom")}
    )
    crashed = config.manager.get_client("c")
    with pytest.raises(ServerUnavailableError):
        await config.call_tool("mcp__c__boom")
    with pytest.raises(ToolNotFoundError) as down:  # its restart waits a pause (it stopped soon after it started)
        await config.call_tool("mcp__c__echo")
    said = str(down.value)
    assert down.value.reason == "disconnected", said
    assert f"its log: {tmp_path / 'logs' / 'c.log'}" in said, said
    assert f"it is being restarted (try 1 of {reconnects.MAX_RECONNECT_ATTEMPTS}); retry in a moment" in said, said
    assert "/reload" not in said, said
    prompt = config.not_found("mcp__c__p", "prompt")
    assert (prompt.reason, prompt.kind) == ("disconnected", "prompt")
    assert "it is being restarted (try 1 of" in str(prompt), str(prompt)
    await wait_until(
        lambda: (c := config.manager.get_client("c")) is not crashed and c is not None and c.status == "connected",
        what="the reconnect loop to bring it back",
    )
    result = await config.call_tool("mcp__c__echo", {"text": "back"})
    assert result.content[0].text == "c:echo:back"  # type: ignore[union-attr]


async def test_a_tool_of_a_server_whose_restarts_gave_up_says_so_and_what_to_do(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconnects, "BACKOFF_INITIAL_S", 0.05)
    monkeypatch.setattr(reconnects, "MAX_RECONNECT_ATTEMPTS", 2)
    started, refused = tmp_path / "started", tmp_path / "refused"
    script = tmp_path / "once.sh"  # starts once; every start after that fails
    script.write_text(
        f"#!/bin/sh\nif [ -e {started} ]; then echo x >> {refused}; echo 'refusing to start again' >&2; exit 5; fi\n"
        f"touch {started}\nexec {sys.executable} -m {LIGHT} --name once --tools echo,boom --crash-on-call boom\n"
    )
    script.chmod(0o755)
    await config.initialize()
    await config.reinitialize_mcp_servers({"once": McpServerConfig(command=str(script))})
    with pytest.raises(ServerUnavailableError):
        await config.call_tool("mcp__once__boom")
    manager = config.manager
    await wait_until(
        lambda: (
            refused.is_file()
            and len(refused.read_text().split()) == 2
            and (c := manager.get_client("once")) is not None
            and c.status == "disconnected"
            and "once" not in manager._reconnects
        ),
        what="its two restarts to fail and the reconnect loop to give up",
    )
    with pytest.raises(ToolNotFoundError) as down:
        await config.call_tool("mcp__once__echo")
    said = str(down.value)
    assert down.value.reason == "down", said
    assert "it was restarted 2 times and gave up" in said, said
    assert "check its configuration: the next change to the settings starts it again (in the shell: /reload)" in said
    assert "retry in a moment" not in said, said


async def test_a_server_crashing_on_every_call_says_how_many_of_its_restarts_are_used_up(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of its restarts succeeds, so each crash started a fresh reconnect loop: the message said "try 1 of 8"
    every time until it was left down after its eighth quick stop in a row."""
    monkeypatch.setattr(reconnects, "MAX_RECONNECT_ATTEMPTS", 3)
    await config.initialize()
    await config.reinitialize_mcp_servers({"c": light("c", "--tools", "echo,boom", "--crash-on-call", "boom")})
    manager = config.manager
    for stops in (1, 2, 3):
        crashed = manager.get_client("c")
        with pytest.raises(ServerUnavailableError):
            await config.call_tool("mcp__c__boom")
        said = str(config.not_found("mcp__c__echo", "tool"))  # right away (its teardown may be under way)
        assert f"it is being restarted (try {stops} of 3); retry in a moment" in said, said
        tries: set[int] = set()

        def back(crashed: object = crashed, tries: set[int] = tries) -> bool:
            if (recovery := manager.recovery("c")) is not None:
                tries.add(recovery.tries)  # in its reconnect loop's pause
            client = manager.get_client("c")
            return client is not crashed and client is not None and client.status == "connected"

        await wait_until(back, what=f"its restart after quick stop {stops}")
        assert tries <= {stops}, tries
    with pytest.raises(ServerUnavailableError):
        await config.call_tool("mcp__c__boom")
    await wait_until(lambda: (r := manager.recovery("c")) is not None and r.gave_up, what="it to be left down")
    down = config.not_found("mcp__c__echo", "tool")
    assert down.reason == "down", str(down)
    assert "it was restarted 3 times and gave up" in str(down), str(down)
