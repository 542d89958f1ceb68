"""Gate cost at scale: deciding "nothing to do" with 1,000 configured servers, and planning one change.

**The gate** (SPEC §8 step 3). A user settings file holds N servers (stdio, with ``env``, ``timeout``
and some ``includeTools``) and ``mcp.excluded`` listing all but a few of them by name. Each repeat
parses two versions of it afresh — identical but for ``theme``, a key no MCP code reads — exactly as
the reload path does (``parse_settings_text`` -> ``build_server_entries`` -> ``recompute_mcp_gating``),
then times ``mcp_servers_equal(old, new) and mcp_gating_equal(old_gating, new_gating)``
(target: <= 5 ms). Parsing and gating are timed too, for context: they run before the gate on every
edit of the file.

**Planning** one server's change at N = 1,000 in a running ``Config`` (5 light servers live, the rest
excluded): ``config.manager.plan()`` and the whole ``reinitialize_mcp_servers`` call, side by side
with the same edit in a ``Config`` holding only the 5 live servers (the floor), and with the
995 exclusions written as one glob instead of 995 names.

Run: ``.venv/bin/python benchmarks/gate_cost.py [--servers 1000] [--repeats 20]``
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from _common import LIGHT_MODULE, Stats, Table, light, print_header, run, stats_cells, temp_log_dir, verdict

from mcpvisor.core.config import Config
from mcpvisor.core.gating import McpGating
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.gating import mcp_gating_equal, mcp_servers_equal, recompute_mcp_gating
from mcpvisor.host.hot_reload import touches_mcp
from mcpvisor.host.settings.loader import build_server_entries, parse_settings_text
from mcpvisor.host.watcher import SettingsChanged

LIVE = 5
GATE_TARGET_MS = 5.0
ENV = {"HOME": "/home/bench", "BENCH_TOKEN": "secret"}
SETTINGS_PATH = Path("/bench/.mcpvisor/settings.json")
T = TypeVar("T")


def _names(n: int) -> list[str]:
    """:data:`LIVE` servers that run, then ``n - LIVE`` that are excluded."""
    return [f"live-{i}" for i in range(LIVE)] + [f"bulk-{i:04d}" for i in range(LIVE, n)]


def settings_text(n: int, *, theme: str, changed: str | None = None) -> str:
    """A user settings file with ``n`` servers, all but :data:`LIVE` of them excluded by name."""
    servers: dict[str, Any] = {}
    for i, name in enumerate(_names(n)):
        entry: dict[str, Any] = {
            "command": sys.executable,
            "args": ["-m", LIGHT_MODULE, "--name", name, "--tools", "echo,search,fetch"],
            "env": {"API_TOKEN": "${BENCH_TOKEN}", "LOG_LEVEL": "info"},
            "timeout": 30000,
        }
        if i % 3 == 0:
            entry["includeTools"] = ["echo", "search"]
        if name == changed:
            entry["args"] = [*entry["args"], "--prompts", "changed"]
        servers[name] = entry
    data = {
        "theme": theme,
        "mcpServers": servers,
        "mcp": {"excluded": _names(n)[LIVE:]},
    }
    return "// user settings\n" + json.dumps(data, indent=2)


def parse_text(text: str) -> dict[str, Any]:
    """The loader's parser: JSON with comments and trailing commas (pyjson5; json5 only to explain errors)."""
    return parse_settings_text(text, SETTINGS_PATH)


def build(data: Mapping[str, Any]) -> tuple[dict[str, McpServerConfig], list[str]]:
    """Fresh config objects from parsed data, as the loader builds them (hash, then ``$VAR`` expansion)."""
    entries, warnings, _ = build_server_entries(
        data["mcpServers"], path=SETTINGS_PATH, scope="user", stamp=None, env=ENV
    )
    if warnings:
        raise SystemExit(f"unexpected warnings: {warnings[:3]}")
    return {name: entry.config for name, entry in entries.items()}, list(data["mcp"]["excluded"])


def _ms(fn: Callable[[], T]) -> tuple[float, T]:
    t0 = time.perf_counter()
    value = fn()
    return (time.perf_counter() - t0) * 1000, value


def bench_gate(n: int, repeats: int, parse_repeats: int, store: ApprovalStore, root: Path) -> Table:
    json5_ms: list[float] = []
    json_ms: list[float] = []
    build_ms: list[float] = []
    gating_ms: list[float] = []
    gate_ms: list[float] = []
    gate_changed_ms: list[float] = []
    wrong: list[str] = []

    def gating(servers: Mapping[str, McpServerConfig], excluded: Sequence[str]) -> McpGating:
        return recompute_mcp_gating(
            allowed_lists={},
            excluded={"settings.json": excluded},
            cli_allowed=None,
            servers=servers,
            approvals=store,
            root=root,
        )

    old_text = settings_text(n, theme="dark")
    new_text = settings_text(n, theme="light")
    changed_text = settings_text(n, theme="dark", changed=_names(n)[-1])
    # The parser is slow at this size: time it a few times, side by side with the stdlib's json
    # on the same text without its comment line; build every repeat's configs from its result.
    body = new_text.split("\n", 1)[1]
    new_data = parse_text(new_text)
    for _ in range(parse_repeats):
        elapsed, new_data = _ms(lambda: parse_text(new_text))
        json5_ms.append(elapsed)
        elapsed, plain = _ms(lambda: json.loads(body))
        json_ms.append(elapsed)
        if plain != new_data:
            wrong.append("json and json5 disagree on the settings text")
    old_data = parse_text(old_text)
    changed_data = parse_text(changed_text)

    for r in range(repeats):
        old_servers, old_excluded = build(copy.deepcopy(old_data))
        old_gating = gating(old_servers, old_excluded)
        fresh = copy.deepcopy(new_data)
        elapsed, (new_servers, new_excluded) = _ms(lambda: build(fresh))  # noqa: B023 - called at once
        build_ms.append(elapsed)
        elapsed, new_gating = _ms(lambda: gating(new_servers, new_excluded))  # noqa: B023
        gating_ms.append(elapsed)

        elapsed, same = _ms(
            lambda: mcp_servers_equal(old_servers, new_servers) and mcp_gating_equal(old_gating, new_gating)  # noqa: B023
        )
        gate_ms.append(elapsed)
        if same is not True:
            wrong.append(f"repeat {r}: a theme-only edit was not gated out")

        changed_servers, _ = build(copy.deepcopy(changed_data))
        elapsed, same = _ms(
            lambda: mcp_servers_equal(old_servers, changed_servers) and mcp_gating_equal(old_gating, new_gating)  # noqa: B023
        )
        gate_changed_ms.append(elapsed)
        if same is not False:
            wrong.append(f"repeat {r}: a server change was gated out")

    size_kb = len(new_text.encode()) / 1024
    table = Table(
        f"Gate: N = {n} servers ({n - LIVE} excluded by name), settings file {size_kb:.0f} KB; "
        f"{repeats} repeats on fresh config objects (parsing: {parse_repeats} repeats)",
        ["step (ms)", "median", "min", "max", "target / verdict"],
    )
    table.add("parse settings text (loader)", *stats_cells(json5_ms, 1), "context: runs on every edit")
    table.add("  same text with stdlib json.loads", *stats_cells(json_ms, 1), "comparison only")
    table.add("build configs (pydantic, hashes, $VAR)", *stats_cells(build_ms, 1), "context: runs on every edit")
    table.add("recompute_mcp_gating", *stats_cells(gating_ms, 2), "context")
    med = Stats.of(gate_ms).median
    table.add(
        "gate, theme-only edit -> nothing to do",
        *stats_cells(gate_ms, 2),
        f"<= {GATE_TARGET_MS:g} ms: {verdict(med <= GATE_TARGET_MS, 'mcp_servers_equal dumps every config')}",
    )
    theme_event = SettingsChanged("user", ("ui.theme",))
    path_ms = [_ms(lambda: touches_mcp(theme_event))[0] for _ in range(repeats)]
    table.add("path gate: theme edit never reaches it", *stats_cells(path_ms, 4), "what a theme edit really costs")
    table.add("gate, last server changed -> reconcile", *stats_cells(gate_changed_ms, 2), "context (worst order)")
    for line in wrong:
        print(f"PROBLEM: {line}")
    return table


async def bench_plan(n: int, repeats: int) -> Table:
    names = _names(n)
    live = names[:LIVE]
    variants: dict[str, tuple[dict[str, McpServerConfig], tuple[str, ...] | None]] = {
        f"N = {LIVE} (floor: only the live servers)": ({name: light(name) for name in live}, None),
        f"N = {n}, {n - LIVE} excluded by name": ({name: light(name) for name in names}, tuple(names[LIVE:])),
        f"N = {n}, {n - LIVE} excluded by one glob": ({name: light(name) for name in names}, ("bulk-*",)),
    }
    plan_ms: dict[str, list[float]] = {label: [] for label in variants}
    reconcile_ms: dict[str, list[float]] = {label: [] for label in variants}
    problems: list[str] = []

    with temp_log_dir() as logs:
        configs: dict[str, Config] = {}
        servers_of: dict[str, dict[str, McpServerConfig]] = {}
        try:
            for label, (servers, excluded) in variants.items():
                config = Config(mcp_servers=servers, options=ConnectionOptions(log_dir=logs))
                await config.__aenter__()
                configs[label] = config
                config.set_excluded_mcp_servers(excluded)
                first = await config.initialize()
                connected = sorted(config.manager.clients())
                if first is None or first.failed or connected != live:
                    raise SystemExit(f"{label}: expected {live} live, got {connected}")
                servers_of[label] = dict(servers)

            for r in range(repeats):
                target = live[r % LIVE]
                for label, config in configs.items():
                    servers = servers_of[label]
                    servers[target] = light(target, "--tools", f"echo,r{r}")
                    config.set_mcp_servers(servers)
                    elapsed, plan = _ms(config.manager.plan)
                    plan_ms[label].append(elapsed)
                    if plan.restart != (target,):
                        problems.append(f"{label}: plan for {target} was {plan}")
                    t0 = time.perf_counter()
                    await config.reinitialize_mcp_servers(servers)
                    reconcile_ms[label].append((time.perf_counter() - t0) * 1000)
        finally:
            for config in reversed(configs.values()):
                await config.__aexit__(None, None, None)

    floor = next(iter(variants))
    table = Table(
        f"Planning one server's change ({LIVE} servers live), {repeats} repeats; reconcile includes "
        "stopping and starting that light server",
        ["configuration", "plan() ms med", "min", "max", "reinitialize ms med", "min", "max", "median over floor"],
        note_last=False,
    )
    floor_med = Stats.of(reconcile_ms[floor]).median
    for label in variants:
        med = Stats.of(reconcile_ms[label]).median
        table.add(
            label,
            *stats_cells(plan_ms[label], 2),
            *stats_cells(reconcile_ms[label], 1),
            "-" if label == floor else f"{med - floor_med:+.1f} ms",
        )
    for line in problems:
        print(f"PROBLEM: {line}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=1000, help="configured servers (default 1000)")
    parser.add_argument("--repeats", type=int, default=20, help="repeats (default 20)")
    parser.add_argument("--parse-repeats", type=int, default=3, help="repeats of the slow parse (default 3)")
    args = parser.parse_args()
    print_header("gate cost", f"servers: {args.servers} configured, {LIVE} live light servers; repeats: {args.repeats}")

    async def go() -> None:
        with tempfile.TemporaryDirectory(prefix="mcpvisor-bench-") as tmp:
            store = ApprovalStore(Path(tmp) / "home" / "mcp-approvals.json")
            root = Path(tmp) / "project"
            root.mkdir()
            bench_gate(args.servers, args.repeats, args.parse_repeats, store, root).print()
        (await bench_plan(args.servers, max(5, args.repeats // 2))).print()

    run(go)


if __name__ == "__main__":
    main()
