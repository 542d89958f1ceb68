"""A running session with two example servers, shared by the framework adapter tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions
from mcpvisor.examples.in_memory import light_servers_in_memory
from tests.helpers import light


@pytest.fixture
async def config(tmp_path: Path) -> AsyncIterator[Config]:
    """Servers ``a`` (tool ``echo``) and ``b`` (tools ``x``, ``y``), connected."""
    async with Config(
        mcp_servers={"a": light("a"), "b": light("b", "--tools", "x,y")},
        options=ConnectionOptions(log_dir=tmp_path / "logs", in_memory=light_servers_in_memory),
    ) as cfg:
        await cfg.initialize()
        yield cfg
