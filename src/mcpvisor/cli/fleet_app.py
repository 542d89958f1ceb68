"""``mcpvisor fleet ...``: look at a fleet of gateway replicas, and acknowledge a store reset."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import typer

from mcpvisor.cli.fleet import FleetNameOpt, FleetOpt, fleet_store
from mcpvisor.cli.options import JsonOpt, reported, setup_logging
from mcpvisor.core.errors import ConfigError
from mcpvisor.shell.consoles import new_console

__all__ = ["fleet_app"]

fleet_app = typer.Typer(
    help="Look at the replicas of a fleet (mcpvisor serve --fleet URL) and acknowledge a store reset.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@fleet_app.callback()
def _fleet_root() -> None:
    """Look at the replicas of a fleet (mcpvisor serve --fleet URL) and acknowledge a store reset."""
    setup_logging(0, narrated=True)


def _store() -> Any:
    store = fleet_store(os.environ)
    if store is None:
        raise ConfigError("no fleet named: pass --fleet URL or set MCPVISOR_FLEET")
    store.ping()
    return store


@fleet_app.command("status")
def fleet_status(fleet: FleetOpt = None, fleet_name: FleetNameOpt = None, as_json: JsonOpt = False) -> None:
    """List the live replicas: address, settings generation applied and its lag, decisions revision, the
    settings publisher, and any replica that holds its gated servers (store unreachable or rewound).
    Exits 1 when no replica is running (a --fleet-name the store does not know is said so, with the names it
    knows), a replica reports a problem, one lags behind the published settings, or the store's settings
    generation is below what one applied (the store lost them); each such row says what to do next."""
    with reported(json_problems=as_json):
        store = _store()
        replicas = store.replicas()
        gen = store.settings_generation()
        rev = store.revision()
        publisher = store.publisher()
        fleets = None if replicas else store.fleet_names()  # none running: is it a fleet this store knows at all?
    unknown = _unknown_fleet(store, fleets)
    now = time.time()
    rows = []
    for r in replicas:
        row = {
            "id": r["id"],
            "address": r.get("addr", ""),
            "settings_generation": int(r.get("gen") or 0),
            "lag": gen - int(r.get("gen") or 0),
            "revision": int(r.get("rev") or 0),
            "publisher": r["id"] == publisher,
            "seen_s_ago": round(now - float(r.get("seen") or now), 1),
            "up_s": round(now - float(r.get("started") or now)),
            "problem": r.get("error") or None,
        }
        row["settings"] = "up to date" if row["lag"] == 0 else "behind" if row["lag"] > 0 else "ahead of the store"
        row["next_step"] = _next_step(row)
        rows.append(row)
    if as_json:
        out = {"fleet": store.keys.fleet, "settings_generation": gen, "revision": rev, "replicas": rows}
        out |= {"known": unknown is None, "fleets_in_store": fleets} | ({"error": unknown} if unknown else {})
        typer.echo(json.dumps(out, indent=2))
    elif unknown:
        new_console(highlight=False).print(unknown, soft_wrap=True, markup=False)
    else:
        console = new_console(highlight=False)
        console.print(
            f"fleet {store.keys.fleet}: settings generation {gen}, decisions revision {rev}, {len(rows)} replica(s)",
            soft_wrap=True,
        )
        for row in rows:
            role = " (publisher)" if row["publisher"] else ""
            lag = {"up to date": "up to date", "behind": f"{row['lag']} generation(s) behind"}.get(
                row["settings"], f"the store's generation {gen} is below it"
            )
            console.print(
                f"  {row['id']}{role}  {row['address'] or '-'}  settings {row['settings_generation']} ({lag})  "
                f"revision {row['revision']}  up {row['up_s']} s",
                soft_wrap=True,
            )
            if row["problem"]:
                console.print(f"    [red]! {row['problem']}[/]", soft_wrap=True)
            if row["next_step"]:
                console.print(f"    ! {row['next_step']}", style="red", soft_wrap=True, markup=False)
        if not rows:
            console.print(f"  no replica of fleet {store.keys.fleet} is running (is --fleet-name right?)")
    if not rows or any(row["problem"] or row["lag"] for row in rows):
        raise typer.Exit(1)


def _unknown_fleet(store: Any, fleets: list[str] | None) -> str | None:
    """What to say of a fleet name the store holds no key of (``fleets``: the names it holds; ``None``: not
    looked up, a replica runs), else ``None``."""
    from mcpvisor.fleet.failures import redact

    if fleets is None or store.keys.fleet in fleets:
        return None
    held = f"the fleets it knows: {', '.join(fleets)}" if fleets else "it knows no fleet yet (no replica ran with it)"
    return (
        f"no fleet named {store.keys.fleet!r} is known in the fleet store {redact(store.url)}: {held} "
        "(pick one with --fleet-name, or MCPVISOR_FLEET_NAME)"
    )


def _next_step(row: dict[str, Any]) -> str | None:
    """What to do about a replica's row: where to look, and what makes it catch up (``None``: nothing)."""
    from mcpvisor.fleet.replica import HEARTBEAT_S, REGISTRY_TTL_MS

    if row["lag"] == 0:
        return None
    if row["lag"] < 0:
        return (
            "the store lost the published settings (restarted without its data, or restored from an older copy): "
            "their publisher publishes them again within seconds (the others leave it the lease while it is listed, "
            f"and for {REGISTRY_TTL_MS // 1000} s after); if it is gone, the next publisher's own files are the "
            "fleet's; check again then"
        )
    base = row["address"].removesuffix("/mcp")
    readyz = f"GET {base}/readyz" if base else "its GET /readyz"
    silent = (
        f"not heard from for {row['seen_s_ago']:g} s (it is stopped or stuck); "
        if row["seen_s_ago"] > 2 * HEARTBEAT_S
        else ""
    )
    return (
        f"{silent}it has not applied the newest settings: look at its log (the standard error of its mcpvisor "
        f"serve) for why, and {readyz} for the generation it applied; restart it if it stays behind"
    )


@fleet_app.command("ack-reset")
def fleet_ack_reset(fleet: FleetOpt = None, fleet_name: FleetNameOpt = None) -> None:
    """Trust the fleet store's decisions as they are now, after it lost some (a failover, a restore): the
    replicas that hold every gated server because its revision went backwards follow it again. Check
    the decisions first (mcpvisor mcp list --fleet URL)."""
    with reported():
        rev = _store().ack_reset()
    new_console(highlight=False).print(f"fleet store acknowledged at revision {rev}: replicas follow it again")
