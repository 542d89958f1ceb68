"""Mistakes a program makes with :class:`HostOptions` are said plainly, before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcpvisor.core.errors import ConfigError
from mcpvisor.host.host import Host, HostOptions
from tests.layout import make_layout


@pytest.mark.parametrize("name", ["mcp_config", "lsp_config", "allowed_mcp_server_names", "allowed_lsp_server_names"])
def test_one_string_where_a_list_is_taken_is_refused(name: str) -> None:
    """Before, ``mcp_config="ws/.mcp.json"`` was read one character at a time: "invalid settings file /: is a
    directory"."""
    given: dict[str, Any] = {name: "ws/.mcp.json"}
    with pytest.raises(TypeError) as refused:
        HostOptions(env={}, **given)
    assert str(refused.value) == f"HostOptions.{name} takes a list, not one str: {name}=['ws/.mcp.json']"
    with pytest.raises(TypeError, match=f"HostOptions.{name} takes a list, not one PosixPath"):
        HostOptions(env={}, **{**given, name: Path("ws/.mcp.json")})
    HostOptions(env={}, **{**given, name: ["ws/.mcp.json"]})  # a list is taken


async def test_a_workspace_that_is_no_folder_is_refused(tmp_path: Path) -> None:
    """Before, a mistyped workspace started an empty session without a word."""
    layout = make_layout(tmp_path)
    missing = tmp_path / "does-not-exist"
    with pytest.raises(ConfigError) as refused:
        async with Host(HostOptions(env=layout.env, workspace=missing, watch=False)):
            pass
    assert str(refused.value) == f"the workspace {missing} is no folder: pass an existing one"
