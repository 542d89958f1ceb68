"""Random edit sequences against real servers: after every reconcile the live set is exactly the
admitted desired set, and the registry holds exactly the filtered tools of live servers."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpvisor.core.config import Config
from mcpvisor.core.connection import ConnectionOptions
from mcpvisor.core.registry import mcp_tool_name
from mcpvisor.core.server_config import McpServerConfig, connection_id_of, exposure_of
from tests.helpers import light

NAMES = ("a", "b", "c")
TOOLS = ("x", "y")

edit = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(NAMES)),
    st.tuples(st.just("remove"), st.sampled_from(NAMES)),
    st.tuples(st.just("args"), st.sampled_from(NAMES)),
    st.tuples(st.just("exposure"), st.sampled_from(NAMES)),
    st.tuples(st.just("exclude"), st.lists(st.sampled_from(NAMES), max_size=2, unique=True)),
    st.tuples(st.just("allow"), st.none() | st.lists(st.sampled_from(NAMES), max_size=3, unique=True)),
)


def build(name: str, version: int, hide_y: bool) -> McpServerConfig:
    return light(
        name, "--tools", ",".join(TOOLS), "--prompts", f"p{version}", **({"excludeTools": ["y"]} if hide_y else {})
    )


def check(config: Config) -> None:
    gating = config.get_mcp_gating()
    admitted = {
        name: connection_id_of(name, cfg)
        for name, cfg in config.get_mcp_servers().items()
        if not gating.is_excluded(name) and not gating.is_pending(name)
    }
    live = {name: c.connection_id for name, c in config.manager.clients().items() if c.status == "connected"}
    assert live == admitted
    expected_tools = {
        mcp_tool_name(name, t)
        for name, cfg in config.get_mcp_servers().items()
        if name in live
        for t in TOOLS
        if exposure_of(cfg).admits(t)
    }
    assert set(config.tool_registry.names()) == expected_tools


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(edit, min_size=1, max_size=8))
async def test_random_edit_sequences_keep_live_state_equal_to_the_admitted_config(
    edits: list[tuple[str, object]],
) -> None:
    state: dict[str, tuple[int, bool]] = {}
    with tempfile.TemporaryDirectory() as logs:
        async with Config(options=ConnectionOptions(log_dir=Path(logs))) as config:
            await config.initialize()
            for kind, arg in edits:
                if kind == "add" and isinstance(arg, str):
                    state.setdefault(arg, (0, False))
                elif kind == "remove" and isinstance(arg, str):
                    state.pop(arg, None)
                elif kind == "args" and isinstance(arg, str) and arg in state:
                    state[arg] = (state[arg][0] + 1, state[arg][1])
                elif kind == "exposure" and isinstance(arg, str) and arg in state:
                    state[arg] = (state[arg][0], not state[arg][1])
                elif kind == "exclude" and isinstance(arg, list):
                    config.set_excluded_mcp_servers(arg or None)
                elif kind == "allow":
                    config.set_allowed_mcp_servers(arg if isinstance(arg, list) else None)
                servers = {name: build(name, version, hide) for name, (version, hide) in state.items()}
                await config.reinitialize_mcp_servers(servers)
                check(config)
