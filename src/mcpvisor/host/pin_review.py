"""Reviewing and accepting held tool and prompt definitions (:mod:`mcpvisor.host.pins`): what changed against
what was approved, as a diff, and the acceptance that pins what a server offers now."""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcpvisor.core.errors import ConfigError, name_word
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.pins import KINDS, Kind, PinMode, PinStore, is_pinned, pin_scope
from mcpvisor.host.status import APPROVE_HINT

__all__ = ["Change", "HeldChangedSinceShown", "accept_held", "changes_since_approval", "diff_lines", "held_changes"]


@dataclass(frozen=True, slots=True)
class Change:
    """One held definition against the pinned one (``before`` is None for a new tool or prompt)."""

    kind: Kind
    name: str
    before: Mapping[str, Any] | None
    after: Mapping[str, Any]


def held_changes(record: Mapping[str, Any] | None, cfg: McpServerConfig) -> list[Change]:
    if record is None or record.get("config") != cfg.approval_hash:
        return []
    changes: list[Change] = []
    for kind, held_key in KINDS:
        pinned = record.get(kind, {})
        for name, entry in sorted(record.get(held_key, {}).items()):
            before = pinned.get(name, {}).get("definition") if isinstance(pinned.get(name), dict) else None
            changes.append(Change(kind, name, before, entry.get("definition", {})))  # type: ignore[arg-type]
    return changes


def changes_since_approval(
    store: PinStore, root: str | os.PathLike[str], name: str, cfg: McpServerConfig, mode: PinMode
) -> list[Change]:
    """What ``store`` holds of server ``name`` against what was approved (none when it is not pinned).
    :class:`ConfigError` when the store cannot be read."""
    if not is_pinned(mode, cfg):
        return []
    return held_changes(store.record(pin_scope(root, cfg), name), cfg)


def diff_lines(change: Change) -> list[str]:
    """A unified diff of the pinned definition against the held one, as indented JSON."""
    before = json.dumps(change.before, indent=2, sort_keys=True).splitlines() if change.before is not None else []
    after = json.dumps(change.after, indent=2, sort_keys=True).splitlines()
    label = f"{change.kind[:-1]} {change.name}"
    return list(
        difflib.unified_diff(
            before, after, f"{label} (approved)" if before else "/dev/null", f"{label} (now)", lineterm="", n=2
        )
    )[2:]


class HeldChangedSinceShown(ConfigError):
    """The definitions held for a server are not the ones that were shown: nothing was accepted."""

    def __init__(self, name: str, approve_command: str = APPROVE_HINT) -> None:
        super().__init__(
            f"nothing was accepted: what {name} offers changed after it was shown; look at it again "
            f"({approve_command.format(name=name_word(name))})"
        )
        self.name = name


def accept_held(
    store: PinStore,
    root: str | os.PathLike[str],
    name: str,
    cfg: McpServerConfig,
    *,
    shown: Sequence[Change] | None = None,
    approve_command: str = APPROVE_HINT,
) -> list[Change]:
    """Pin what server ``name`` now offers in place of its held definitions; returns what was accepted.
    ``shown``: the changes the person was shown (None: accept as they are); when the held ones differ by the
    time of the write, nothing is accepted (:class:`HeldChangedSinceShown`, saying ``approve_command``:
    ``{name}``, :func:`~mcpvisor.host.status.fix_commands`)."""
    scope = pin_scope(root, cfg)
    accepted: list[Change] = []

    def change(records: dict[str, Any]) -> None:
        accepted.clear()  # a transaction tried again (a fleet's store) starts afresh
        record = records.get(scope, {}).get(name)
        held = held_changes(record, cfg)
        if shown is not None and held != list(shown):  # checked under the store's lock, beside the write
            raise HeldChangedSinceShown(name, approve_command)
        accepted.extend(held)
        if not accepted or record is None:
            return
        for kind, held_key in KINDS:
            record.setdefault(kind, {}).update(record.pop(held_key, {}))

    store.mutate(change)
    return accepted
