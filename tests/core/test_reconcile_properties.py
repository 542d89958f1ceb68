"""Random edit sequences against real servers: after every reconcile the live set is exactly the
admitted desired set, and the registry holds exactly the filtered tools of live servers."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from mcpvisor.examples.in_memory import light_servers_in_memory
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


def check(config: Config, state: dict[str, tuple[int, bool]], excluded: list[str], allowed: list[str] | None) -> None:
    """The oracle is the test's own model of the edits (never the code under test): a server is admitted
    when configured, not excluded and allowed (``None``: no allow-list; ``[]`` denies all); each admitted
    server runs its latest arguments (its prompt carries the version) and shows ``y`` unless it is hidden."""
    admitted = {name for name in state if name not in excluded and (allowed is None or name in allowed)}
    live = {name: client for name, client in config.manager.clients().items() if client.status == "connected"}
    assert set(live) == admitted
    for name in admitted:
        version, hide_y = state[name]
        assert [prompt.name for prompt in live[name].prompts] == [f"p{version}"], name
    expected = {f"mcp__{name}__x" for name in admitted} | {f"mcp__{name}__y" for name in admitted if not state[name][1]}
    assert set(config.tool_registry.names()) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(edit, min_size=1, max_size=8))
async def test_random_edit_sequences_keep_live_state_equal_to_the_admitted_config(
    edits: list[tuple[str, object]],
) -> None:
    state: dict[str, tuple[int, bool]] = {}
    excluded: list[str] = []
    allowed: list[str] | None = None
    with tempfile.TemporaryDirectory() as logs:
        async with Config(options=ConnectionOptions(log_dir=Path(logs), in_memory=light_servers_in_memory)) as config:
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
                    excluded = list(arg)
                    config.set_excluded_mcp_servers(arg or None)
                elif kind == "allow":
                    allowed = list(arg) if isinstance(arg, list) else None
                    config.set_allowed_mcp_servers(allowed)
                servers = {name: build(name, version, hide) for name, (version, hide) in state.items()}
                await config.reinitialize_mcp_servers(servers)
                check(config, state, excluded, allowed)
