"""Tool and prompt naming rules (SPEC §5.2)."""

from __future__ import annotations

import re
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp_types import Prompt, Tool

from mcpvisor.core import registry
from mcpvisor.core.exposure import Exposure
from mcpvisor.core.registry import PromptRegistry, ToolRegistry, fnv1a_base36, mcp_tool_name

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


def test_a_name_two_servers_make_alike_is_the_longer_server_names_whichever_registered_first() -> None:
    # Server a's b__c and server a__b's c both make mcp__a__b__c: it used to go to the first to connect, so the
    # same name called the other server's tool in the next session (or after a restart) when they came in the
    # other order.
    for order in (["a", "a__b"], ["a__b", "a"]):
        reg = ToolRegistry()
        offers = {"a": [tool("b__c"), tool("d")], "a__b": [tool("c")]}
        for server in order:
            reg.set_server_tools(server, offers[server], Exposure())
        longer, shorter = reg.tools_of("a__b")[0], reg.tools_of("a")[0]
        assert (longer.name, longer.tool.name) == ("mcp__a__b__c", "c"), order
        assert shorter.name == f"mcp__a__b__c_{fnv1a_base36('a' + chr(0) + 'b__c')}", order
        assert reg.get_tool(shorter.name) == shorter
        assert reg.get_tool("mcp__a__b__c") == longer
        assert reg.get_tool("mcp__a__d") is not None
        assert reg.take_renamed() == ({"a"} if order[0] == "a" else set())  # a's tool moved aside for a__b's
        reg.remove_mcp_tools_by_server("a__b")  # down or removed: its name is nobody else's meanwhile
        reg.set_server_tools("a", [tool("b__c")], Exposure())  # a's list changes meanwhile
        assert reg.get_tool("mcp__a__b__c") is None
        assert [t.name for t in reg.tools_of("a")] == [shorter.name]
        reg.set_server_tools("a__b", [tool("c")], Exposure())
        assert reg.get_tool("mcp__a__b__c") == longer
        assert reg.take_renamed() == set()


@given(
    st.dictionaries(
        st.text("ab_", min_size=1, max_size=5), st.lists(st.text("ab_", min_size=1, max_size=5), max_size=3), max_size=5
    ),
    st.randoms(use_true_random=False),
)
def test_registered_names_depend_on_the_servers_offering_tools_never_on_their_order(
    offers: dict[str, list[str]], rnd: Random
) -> None:
    def registered(reg: ToolRegistry) -> dict[tuple[str, str], str]:
        assert len({e.name for e in reg.get_all_tools()}) == len(reg.get_all_tools())  # every name one tool's
        return {(e.server, e.tool.name): e.name for e in reg.get_all_tools()}

    order = list(offers)
    first, again = ToolRegistry(), ToolRegistry()
    for server in order:
        first.set_server_tools(server, [tool(t) for t in offers[server]], Exposure())
    rnd.shuffle(order)
    for server in order:
        again.set_server_tools(server, [tool(t) for t in offers[server]], Exposure())
    assert registered(first) == registered(again)
    if order:  # a server gone (down, removed) leaves the others' names as they were: none takes one of its own
        had = {e.name for e in again.tools_of(order[0])}
        again.remove_mcp_tools_by_server(order[0])
        assert registered(again) == {k: v for k, v in registered(first).items() if k[0] != order[0]}
        for server in order[1:]:  # nor when they list their tools again
            again.set_server_tools(server, [tool(t) for t in reversed(offers[server])], Exposure())
        assert not had & again.names()


def test_a_prompts_qualified_name_that_another_servers_makes_too_is_the_longer_server_names_and_stays_so() -> None:
    reg = PromptRegistry()
    reg.set_server_prompts("a", [Prompt(name="b__p")])
    reg.set_server_prompts("a__b", [Prompt(name="p")])
    [shorter], [longer] = reg.prompts_of("a"), reg.prompts_of("a__b")
    assert reg.qualified_name(longer) == "mcp__a__b__p"
    assert reg.qualified_name(shorter) == f"mcp__a__b__p_{fnv1a_base36('a' + chr(0) + 'b__p')}"
    reg.remove_prompts_by_server("a__b")  # down or removed: its name is nobody else's meanwhile
    assert reg.qualified_name(reg.prompts_of("a")[0]) == reg.qualified_name(shorter)


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


def test_a_server_inventing_names_keeps_only_its_latest_former_names_and_a_forgotten_one_goes_back_to_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every name a server ever listed used to stay claimed while the registry lived: a server listing new names at
    # every listing grew it without bound.
    monkeypatch.setattr(registry, "FORMER_NAMES_KEPT", 2, raising=False)
    reg, prompts = ToolRegistry(), PromptRegistry()
    reg.set_server_tools("a", [tool("b__c")], Exposure())
    reg.set_server_tools("a__b", [tool("c")], Exposure())
    hashed = reg.tools_of("a")[0].name
    assert hashed != "mcp__a__b__c"
    reg.take_renamed()
    for n in range(2):  # a__b moves on: c is a former name, still its own
        reg.set_server_tools("a__b", [tool(f"n{n}")], Exposure())
        assert reg.tools_of("a")[0].name == hashed
    assert reg.take_renamed() == set()
    for n in range(2, 50):
        reg.set_server_tools("a__b", [tool(f"n{n}")], Exposure())
        prompts.set_server_prompts("a__b", [Prompt(name=f"p{n}")])
    assert len(reg._claims) <= 1 + 1 + 2  # a's, a__b's listed one and its two latest former ones
    assert len(prompts._claims) <= 1 + 2
    assert [t.name for t in reg.tools_of("a")] == ["mcp__a__b__c"]  # a__b's c forgotten: a's b__c has its name
    assert reg.take_renamed() == {"a"}
    reg.set_server_tools("a__b", [tool("n48"), tool("n49")], Exposure())  # listed again: still its own
    assert [t.name for t in reg.tools_of("a__b")] == ["mcp__a__b__n48", "mcp__a__b__n49"]
