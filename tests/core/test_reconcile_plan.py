"""The pure reconcile planner (SPEC §5.3)."""

from __future__ import annotations

from mcpvisor.core.exposure import exposure_of
from mcpvisor.core.gating import McpGating
from mcpvisor.core.reconcile import LiveServer, plan_reconcile
from mcpvisor.core.server_config import McpServerConfig, connection_id_of


def cfg(*args: str, **fields: object) -> McpServerConfig:
    return McpServerConfig.model_validate({"command": "srv", "args": list(args), **fields})


def live(name: str, c: McpServerConfig, connected: bool = True) -> LiveServer:
    return LiveServer(connection_id_of(name, c), exposure_of(c), connected)


def test_unchanged_servers_are_kept() -> None:
    a = cfg("1")
    plan = plan_reconcile({"a": live("a", a)}, {"a": a}, McpGating())
    assert plan.keep == ("a",)
    assert plan.is_noop


def test_each_kind_of_change_gets_its_own_action() -> None:
    a, b, c, d = cfg("a"), cfg("b"), cfg("c"), cfg("d")
    running = {"a": live("a", a), "b": live("b", b), "c": live("c", c), "gone": live("gone", cfg("x"))}
    desired = {"a": a, "b": cfg("b2"), "c": cfg("c", excludeTools=["t"]), "d": d}
    plan = plan_reconcile(running, desired, McpGating())
    assert plan.remove == ("gone",)
    assert plan.restart == ("b",)
    assert plan.refilter == ("c",)
    assert plan.start == ("d",)
    assert plan.keep == ("a",)


def test_a_disconnected_server_is_started_again() -> None:
    a = cfg("a")
    assert plan_reconcile({"a": live("a", a, connected=False)}, {"a": a}, McpGating()).start == ("a",)


def test_gating_stops_live_servers_and_skips_others_with_their_reason() -> None:
    a, b, c = cfg("a"), cfg("b"), cfg("c")
    gating = McpGating(excluded=("a",), pending=("b", "c"))
    plan = plan_reconcile({"a": live("a", a), "b": live("b", b)}, {"a": a, "b": b, "c": c}, gating)
    assert plan.gate_stop == {"a": "excluded", "b": "pending_approval"}
    assert plan.gate_skip == {"c": "pending_approval"}
    assert not plan.start


def test_servers_filtered_by_the_allow_list_read_as_not_allowed_not_removed() -> None:
    a = cfg("a")
    plan = plan_reconcile({"a": live("a", a)}, {}, McpGating(allowed=()), not_allowed={"a": a})
    assert plan.remove == ()
    assert plan.gate_stop == {"a": "not_allowed"}


def test_a_known_server_no_longer_configured_reads_as_removed_whether_it_ran_or_not() -> None:
    a, b = cfg("a"), cfg("b")
    plan = plan_reconcile({"a": live("a", a)}, {"b": b}, McpGating(excluded=("b",)), known=("a", "b", "g", "f"))
    assert (plan.remove, plan.unconfigured) == (("a",), ("f", "g"))
    assert plan.finished((), (), {}, (), 0.0).removed == ("a", "f", "g")
    assert plan.gate_skip == {"b": "excluded"}


def test_gating_matches_plain_names_and_globs_alike() -> None:
    gating = McpGating(excluded=("x", "tmp-*"), allowed=("a", "b?", "[cd]*"), pending=("p",))
    assert gating.is_excluded("x")
    assert gating.is_excluded("tmp-1")
    assert not gating.is_excluded("tmp")
    assert [n for n in ("a", "b1", "b12", "cat", "dog", "e") if gating.is_allowed(n)] == ["a", "b1", "cat", "dog"]
    assert gating.is_pending("p")
    assert not gating.is_pending("q")
    assert McpGating(allowed=()).is_allowed("a") is False
    assert McpGating().is_allowed("anything")
    assert McpGating(excluded=("a",)) == McpGating(excluded=("a",))
