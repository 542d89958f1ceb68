"""Tool and prompt naming rules (SPEC §5.2)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp_types import Prompt, Tool

from mcpvisor.core.registry import PromptRegistry, ToolRegistry, fnv1a_base36, mcp_tool_name
from mcpvisor.core.server_config import Exposure

VALID = re.compile(r"^[A-Za-z0-9_-]{1,63}$")


def tool(name: str) -> Tool:
    return Tool(name=name, input_schema={"type": "object"})


def test_plain_names_get_the_prefix() -> None:
    assert mcp_tool_name("github", "create_issue") == "mcp__github__create_issue"


def test_fnv1a_hash_is_seven_base36_characters() -> None:
    assert fnv1a_base36("") == "0ztntfp"  # 0x811c9dc5, the FNV offset basis
    assert re.fullmatch(r"[0-9a-z]{7}", fnv1a_base36("mcp__a__b"))


def test_long_or_invalid_names_are_sanitised_truncated_and_hashed() -> None:
    long_name = mcp_tool_name("server", "t" * 80)
    assert len(long_name) == 63
    assert long_name.endswith("_" + fnv1a_base36("mcp__server__" + "t" * 80))
    dotted = mcp_tool_name("my.server", "do it")
    assert VALID.match(dotted)
    assert dotted.startswith("mcp__my_server__do_it_")


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80))
def test_names_are_always_valid_and_distinct_tools_stay_distinct(server: str, a: str, b: str) -> None:
    na, nb = mcp_tool_name(server, a), mcp_tool_name(server, b)
    assert VALID.match(na)
    if a != b:
        assert na != nb


def test_registry_filters_by_exposure_and_removes_by_server() -> None:
    reg = ToolRegistry()
    assert reg.set_server_tools("s", [tool("a"), tool("b")], Exposure(exclude_tools=("b",)))
    assert reg.set_server_tools("t", [tool("a")], Exposure())
    assert reg.names() == {"mcp__s__a", "mcp__t__a"}
    assert not reg.set_server_tools("s", [tool("a"), tool("b")], Exposure(exclude_tools=("b",)))
    assert reg.remove_mcp_tools_by_server("s")
    assert reg.names() == {"mcp__t__a"}
    assert not reg.remove_mcp_tools_by_server("s")


def test_prompt_clash_gives_the_later_one_a_server_prefix() -> None:
    reg = PromptRegistry()
    reg.set_server_prompts("a", [Prompt(name="review")])
    reg.set_server_prompts("b", [Prompt(name="review"), Prompt(name="other")])
    assert reg.names() == {"review", "b_review", "other"}
    assert reg.get_prompt("review") is not None
    assert reg.get_prompt("b_review") is not None
    reg.remove_prompts_by_server("b")
    assert reg.names() == {"review"}


def test_a_prompt_whose_prefixed_name_is_taken_too_gets_the_qualified_one_and_is_never_dropped() -> None:
    reg = PromptRegistry()
    reg.set_server_prompts("a", [Prompt(name="p"), Prompt(name="b_p")])
    reg.set_server_prompts("b", [Prompt(name="p"), Prompt(name="p")])  # the second p: the same name again
    assert {(e.name, e.server, e.prompt.name) for e in reg.get_all_prompts()} == {
        ("p", "a", "p"),
        ("b_p", "a", "b_p"),
        ("mcp__b__p", "b", "p"),
    }


def test_a_name_another_server_already_has_gets_the_hashed_form_instead() -> None:
    reg = ToolRegistry()
    reg.set_server_tools("a", [tool("b__c")], Exposure())
    reg.set_server_tools("a__b", [tool("c")], Exposure())
    first, second = reg.tools_of("a")[0], reg.tools_of("a__b")[0]
    assert first.name == "mcp__a__b__c"
    assert second.name != first.name
    assert VALID.match(second.name)
    assert reg.get_tool(second.name) == second
    reg.remove_mcp_tools_by_server("a")
    assert reg.tools_of("a__b") == [second]
    assert reg.get_tool(second.name) == second


def test_an_async_function_is_refused_as_an_event_listener_it_would_never_hear_anything() -> None:
    """Before, it was taken, called and never awaited: no event heard, a "never awaited" warning at most."""
    from mcpvisor.core.events import EventBus
    from mcpvisor.host.host import Host, HostOptions

    async def listener(event: object) -> None:
        pass

    class Callback:
        async def __call__(self, event: object) -> None:
            pass

    bus = EventBus()
    for fn in (listener, Callback()):
        with pytest.raises(TypeError, match="is an async function: listeners are called synchronously"):
            bus.subscribe(fn)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^host event listener <function .*listener.* is an async function"):
        Host(HostOptions(env={})).subscribe(listener)  # type: ignore[arg-type]
    removed = bus.subscribe(lambda event: None)  # a plain function is taken
    removed()
