"""Pinned tool and prompt definitions: trust beyond the configuration.

An approval binds a project server's *configuration*; a server whose configuration never changes can
still change what its tools say (a tool description that starts telling the agent to send files
somewhere). So the first time a pinned server connects, the SHA-256 of each tool's definition (name,
title, description, input and output schemas, annotations, execution, icons, ``_meta``) and each
prompt's (name, title, description, arguments, icons, ``_meta``) is recorded with its configuration's
approval hash. From then on, a listing that brings a changed or new definition registers the unchanged
ones and **holds** the others: not in the registry, not served by the gateway, not callable. A name
offered twice with two definitions is held too, until all its copies are accepted (either may be served). An
approved change of the configuration keeps what was pinned: what the server offers under it is held
where it differs (an approval shows the configuration, never the tools). ``mcpvisor mcp approve NAME``
(or the shell's ``/approve NAME``) shows what changed and accepts it.

Which servers are pinned is ``mcp.pinTools``: ``gated`` (the default: project and workspace servers),
``all`` (every server; the user's own ones are pinned on first use) or ``off``. The user's own scopes
set it; the workspace's settings can only make it stricter, never turn it off for their own servers.

The store is one private file (``$MCPVISOR_HOME/tool-pins.json``) like the approvals store::

    { "<project root>" | "user": { "<server>": {
        "config": "<approval hash>", "format": 2,
        "tools": {"<name>": {"sha256": "…", "definition": {…}}}, "prompts": {…},
        "heldTools": {…}, "heldPrompts": {…} } } }

A corrupt store fails closed: every definition of a pinned server is held until it is fixed or deleted.
A record of format 1 pinned fewer keys; a definition whose format-1 keys are unchanged is pinned again with
all of them, once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from mcpvisor.core.errors import ConfigError, name_word
from mcpvisor.core.registry import Admitted
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import is_gated, root_key
from mcpvisor.host.private_files import PrivateJsonStore
from mcpvisor.host.settings.mcp_section import mcp_values

if TYPE_CHECKING:
    from mcp_types import Prompt, Tool

    from mcpvisor.host.settings.loader import Settings

__all__ = [
    "KINDS",
    "Kind",
    "DEFAULT_PIN_MODE",
    "PinGate",
    "PinMode",
    "PinStore",
    "compared_note",
    "definition_digest",
    "held_names",
    "is_pinned",
    "unread_pins",
    "pin_scope",
    "pin_mode_of",
    "pinned_before",
    "prompt_definition",
    "tool_definition",
    "unnoted_changes",
    "unsaved_pins",
]

logger = logging.getLogger(__name__)

PinMode = Literal["off", "gated", "all"]
"""In order of strictness."""
DEFAULT_PIN_MODE: Final[PinMode] = "gated"
GATE_LOCK_TIMEOUT_S: Final = 2.0
"""How long a running host waits for the store's lock when it pins or notes held definitions."""

_TOOL_KEYS: Final = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "execution",
    "icons",
    "_meta",
)
_PROMPT_KEYS: Final = ("name", "title", "description", "arguments", "icons", "_meta")
_FORMAT_1_KEYS: Final = {
    "tools": ("name", "description", "inputSchema", "annotations"),
    "prompts": ("name", "description", "arguments"),
}
PIN_FORMAT: Final = 2
KINDS: Final = (("tools", "heldTools"), ("prompts", "heldPrompts"))
Kind = Literal["tools", "prompts"]


# --- definitions ------------------------------------------------------------------------------


def _definition(item: Any, keys: Sequence[str]) -> dict[str, Any]:
    dumped = item.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {key: dumped[key] for key in keys if key in dumped}


def tool_definition(tool: Tool) -> dict[str, Any]:
    """What is pinned of a tool: what the model reads and what it sends."""
    return _definition(tool, _TOOL_KEYS)


def prompt_definition(prompt: Prompt) -> dict[str, Any]:
    return _definition(prompt, _PROMPT_KEYS)


def definition_digest(definition: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces) of a definition."""
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _entries(definitions: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: {"sha256": definition_digest(d), "definition": dict(d)} for name, d in definitions.items()}


# --- which servers, where ---------------------------------------------------------------------


def pin_mode_of(settings: Settings) -> tuple[PinMode, tuple[str, ...]]:
    """The effective ``mcp.pinTools`` and any problems reading it.

    System defaults, user and system settings set it (the later wins); the workspace's settings may
    only make it stricter. An invalid value fails closed (``all``)."""
    modes: tuple[PinMode, ...] = get_args(PinMode)
    mode: PinMode = DEFAULT_PIN_MODE
    stricter: PinMode = "off"
    problems: list[str] = []
    for scope, value in mcp_values(settings, "pinTools"):
        read: PinMode = "all"
        for known in modes:
            if value == known:
                read = known
                break
        else:
            problems.append(
                f"invalid mcp.pinTools in {settings.paths.of(scope)}: expected one of "
                f"{', '.join(repr(m) for m in modes)}; treated as 'all'"
            )
        if scope == "workspace":
            stricter = read
        else:
            mode = read
    return max(mode, stricter, key=modes.index), tuple(problems)


def unread_pins(store: PinStore, mode: PinMode, servers: Mapping[str, McpServerConfig]) -> str | None:
    """Why the store cannot be read (its file, the reason, the fix), when one of ``servers`` is pinned in it: every
    tool and prompt of those is held meanwhile."""
    if not any(is_pinned(mode, cfg) for cfg in servers.values()):
        return None
    return store.read_error()


def is_pinned(mode: PinMode, cfg: McpServerConfig) -> bool:
    return mode == "all" or (mode == "gated" and is_gated(cfg))


def pin_scope(root: str | os.PathLike[str], cfg: McpServerConfig) -> str:
    """Project and workspace servers are pinned per project root; the user's own servers once."""
    return root_key(root) if is_gated(cfg) else "user"


# --- the store --------------------------------------------------------------------------------


class PinStore(PrivateJsonStore):
    what = "the tool pin store"
    consequence = (
        "every tool and prompt of a pinned server is held until it is fixed or deleted "
        "(deleting it pins what the servers offer next)"
    )

    def record(self, scope: str, name: str) -> dict[str, Any] | None:
        """One server's record; :class:`ConfigError` when the store cannot be read."""
        record = self.read().get(scope, {}).get(name)
        return record if isinstance(record, dict) else None

    def on_external_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """``listener()`` hears pins changed other than through this store's file (a fleet's store:
        :mod:`mcpvisor.fleet`); returns the function that removes it. The file store has none: the
        settings watcher sees its file change."""
        return lambda: None

    def create(
        self, scope: str, name: str, record: Mapping[str, Any], *, timeout_s: float = 10.0
    ) -> dict[str, Any] | None:
        """Pin ``record`` (a configuration's first use) unless a record exists: one for the same configuration
        (another process pinned it first) is returned and nothing is written; one for an earlier configuration
        has its pinned definitions carried over to this one (written, and returned): what a changed
        configuration offers is compared with what was pinned. ``None``: ``record`` was written."""
        winner: list[dict[str, Any]] = []

        def change(records: dict[str, Any]) -> None:
            winner.clear()  # a transaction tried again (a fleet's store) starts afresh
            existing = records.get(scope, {}).get(name)
            if isinstance(existing, dict) and existing.get("config") == record.get("config"):
                winner.append(existing)
                return
            if isinstance(existing, dict):
                carried = {key: existing[key] for key in ("tools", "prompts", "format") if key in existing}
                winner.append({**carried, "config": record.get("config")})
            records.setdefault(scope, {})[name] = dict(winner[0] if winner else record)

        self.mutate(change, timeout_s=timeout_s)
        return winner[0] if winner else None

    def note_held(
        self,
        scope: str,
        name: str,
        config: str,
        held: Mapping[str, Mapping[str, Any]],
        mine: Mapping[str, Mapping[str, str]],
        *,
        timeout_s: float = 10.0,
    ) -> None:
        """Note in the record of ``name``'s configuration ``config`` what a gate holds (held key -> name -> entry),
        changing only held entries that gate noted before (``mine``: held key -> name -> digest), on the record as
        it is at the write: another copy's note is left alone, and a definition pinned meanwhile (accepted) is
        neither noted as held nor written back over the acceptance."""

        def change(records: dict[str, Any]) -> None:
            record = records.get(scope, {}).get(name)
            if not isinstance(record, dict) or record.get("config") != config:
                return  # another configuration's record now: its own gate notes what it holds
            for key, noted in _held_notes(record, held, mine).items():
                record.pop(key, None)
                record.update({key: noted} if noted else {})

        self.mutate(change, timeout_s=timeout_s)

    def put(self, scope: str, name: str, record: Mapping[str, Any] | None, *, timeout_s: float = 10.0) -> None:
        def change(records: dict[str, Any]) -> None:
            servers = records.setdefault(scope, {})
            if record is None:
                servers.pop(name, None)
            else:
                servers[name] = dict(record)
            if not servers:
                records.pop(scope, None)

        self.mutate(change, timeout_s=timeout_s)


def unsaved_pins(name: str, exc: Exception) -> str:
    """Why server ``name``'s tools and prompts are held when their first pins could not be saved (``exc``)."""
    return (
        f"the tool pins of server {name!r} could not be saved, so its tools and prompts are held (never served "
        f"unpinned): {exc}; once that is fixed, they are pinned on /reload in the shell, at the next save of a "
        "settings file, or when mcpvisor restarts"
    )


def unnoted_changes(name: str, exc: Exception, *, held: bool = True) -> str:
    """Why server ``name``'s changed tools and prompts cannot be accepted when noting them as held failed (``exc``);
    with nothing ``held`` now (the server went back to what was pinned), why the store still lists them."""
    if not held:
        return (
            f"the tool pins of server {name!r} could not be saved, so they still list as changed the tools and "
            f"prompts it offers as pinned again (those are served): {exc}; once that is fixed, the list is put "
            "right on /reload in the shell, at the next save of a settings file, or when mcpvisor restarts"
        )
    return (
        f"the tool pins of server {name!r} could not be saved, so what changed since it was pinned stays held and "
        f"cannot be accepted yet: {exc}; once that is fixed, it can be accepted after /reload in the shell, the next "
        "save of a settings file, or a restart of mcpvisor"
    )


def compared_note(name: str, approve_command: str) -> str:
    """What approving an edit of server ``name`` means for its definitions pinned before (:func:`pinned_before`);
    ``approve_command``: the command that accepts them, as it is to be pasted (its ``{name}`` filled here)."""
    return (
        "What it offers is compared with the tools and prompts approved before: any that changed are held until you "
        f"accept them ({approve_command.format(name=name_word(name))} again, once it ran)."
    )


def pinned_before(store: PinStore, root: str | os.PathLike[str], name: str, cfg: McpServerConfig) -> bool:
    """Whether ``name`` has definitions pinned under an earlier configuration (an approved edit keeps them)."""
    try:
        record = store.record(pin_scope(root, cfg), name)
    except ConfigError:
        return False
    return record is not None and record.get("config") != cfg.approval_hash


def held_names(
    store: PinStore, root: str | os.PathLike[str], servers: Mapping[str, McpServerConfig], mode: PinMode
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Server -> (held tools, held prompts) as the store says, for views that connect nothing.
    :class:`ConfigError` when the store cannot be read."""
    records = store.read()
    held: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for name, cfg in servers.items():
        record = records.get(pin_scope(root, cfg), {}).get(name) if is_pinned(mode, cfg) else None
        if isinstance(record, dict) and record.get("config") == cfg.approval_hash:
            tools, prompts = tuple(record.get("heldTools", {})), tuple(record.get("heldPrompts", {}))
            if tools or prompts:
                held[name] = (tools, prompts)
    return held


# --- the gate a host installs -----------------------------------------------------------------


class PinGate:
    """The core's :data:`~mcpvisor.core.registry.DefinitionGate` for one workspace root."""

    def __init__(self, store: PinStore, root: str | os.PathLike[str], mode: Callable[[], PinMode]) -> None:
        self._store = store
        self._root = root
        self._mode = mode
        self._warned: str | None = None
        self._noted: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
        """(scope, server) -> held key -> definition name -> digest this gate found held on its last pass."""

    def __call__(self, name: str, cfg: McpServerConfig, tools: Sequence[Tool], prompts: Sequence[Prompt]) -> Admitted:
        if not is_pinned(self._mode(), cfg):
            return Admitted(tools, prompts)
        scope = pin_scope(self._root, cfg)
        (tool_defs, twice_tools), (prompt_defs, twice_prompts) = _by_name(tools, _TOOL_KEYS), _by_name(prompts)
        current = {"tools": tool_defs, "prompts": prompt_defs}
        twice = {"heldTools": twice_tools, "heldPrompts": twice_prompts}
        try:
            record = self._store.record(scope, name)
        except ConfigError as exc:
            if str(exc) != self._warned:
                self._warned = str(exc)
                logger.warning("%s", exc)
            # (said as why they are held: nothing changed, so nothing is there to accept)
            return Admitted((), (), tuple(t.name for t in tools), tuple(p.name for p in prompts), str(exc))
        if record is None or record.get("config") != cfg.approval_hash:
            # First use of this configuration (approved just now, or a user server first seen): pin it, unless
            # another process (a fleet's other replica) pinned it first, or an earlier configuration pinned
            # definitions: then compare with those.
            fresh: dict[str, Any] = {"config": cfg.approval_hash, "format": PIN_FORMAT}
            for kind, held_key in KINDS:
                fresh[kind] = {n: e for n, e in _entries(current[kind]).items() if n not in twice[held_key]}
            try:
                record = self._store.create(scope, name, fresh, timeout_s=GATE_LOCK_TIMEOUT_S)
            except (ConfigError, OSError) as exc:  # nothing pinned: nothing admitted unpinned either
                why = unsaved_pins(name, exc)
                logger.warning("%s", why)
                return Admitted((), (), tuple(t.name for t in tools), tuple(p.name for p in prompts), why)
            if record is None and not any(twice.values()):
                return Admitted(tools, prompts)
            record = record or fresh
        if record.get("format") != PIN_FORMAT:
            record = self._upgraded(scope, name, record, current)
        held: dict[str, dict[str, Any]] = {}
        for kind, held_key in KINDS:
            pinned = record.get(kind, {})
            held[held_key] = {
                n: entry for n, entry in _entries(current[kind]).items() if _digest(pinned.get(n)) != entry["sha256"]
            }
        # Held definitions are added to the record; one is taken off, or written over, only by the gate that noted
        # it (accepting takes them all off): copies of one server that say different things (a fleet's replicas)
        # then leave each other's alone instead of writing over each other for ever, and a server that went back
        # to what was approved no longer reads as changed.
        mine = self._noted.get((scope, name), {})
        unnoted = None  # (an acceptance reads the held definitions from the store: unnoted, they cannot be accepted)
        if _held_notes(record, held, mine) != {key: record.get(key, {}) for _, key in KINDS}:
            try:
                self._store.note_held(scope, name, cfg.approval_hash, held, mine, timeout_s=GATE_LOCK_TIMEOUT_S)
            except (ConfigError, OSError) as exc:
                # What it noted before stays its own to take off (the store still has it) once it can be saved.
                unnoted = unnoted_changes(name, exc, held=any(held.values()))
                logger.warning("%s", unnoted)
                return _admitted(tools, prompts, held, unnoted)
        self._noted[(scope, name)] = {key: {n: e["sha256"] for n, e in held[key].items()} for _, key in KINDS}
        return _admitted(tools, prompts, held, unnoted)

    def _upgraded(
        self, scope: str, name: str, record: Mapping[str, Any], current: Mapping[str, Mapping[str, dict[str, Any]]]
    ) -> dict[str, Any]:
        """A format-1 record pinned again with every key of the definitions whose format-1 keys are unchanged
        (written); the others keep their entries, and are held."""
        upgraded = {**record, "format": PIN_FORMAT}
        for kind, _ in KINDS:
            pinned = dict(record.get(kind, {}))
            for n, definition in current[kind].items():
                old = {key: definition[key] for key in _FORMAT_1_KEYS[kind] if key in definition}
                if n in pinned and _digest(pinned[n]) == definition_digest(old):
                    pinned[n] = {"sha256": definition_digest(definition), "definition": definition}
            upgraded[kind] = pinned
        self._write(scope, name, upgraded)
        return upgraded

    def _write(self, scope: str, name: str, record: Mapping[str, Any]) -> None:
        try:
            self._store.put(scope, name, record, timeout_s=GATE_LOCK_TIMEOUT_S)
        except (ConfigError, OSError) as exc:
            logger.warning("could not record the tool definitions of server %r: %s", name, exc)


def _admitted(
    tools: Sequence[Tool], prompts: Sequence[Prompt], held: Mapping[str, Mapping[str, Any]], why: str | None
) -> Admitted:
    return Admitted(
        [t for t in tools if t.name not in held["heldTools"]],
        [p for p in prompts if p.name not in held["heldPrompts"]],
        tuple(held["heldTools"]),
        tuple(held["heldPrompts"]),
        why,
    )


def _by_name(
    items: Sequence[Tool] | Sequence[Prompt], keys: Sequence[str] = _PROMPT_KEYS
) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Each name's definition, and the names offered twice with different definitions: theirs is every copy
    (``{"name": ..., "offeredTwice": [...]}``), so that what is held, shown and accepted is all of them."""
    copies: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        definition = _definition(item, keys)
        if definition not in (seen := copies.setdefault(item.name, [])):
            seen.append(definition)
    twice = {name for name, found in copies.items() if len(found) > 1}
    return {n: found[0] if n not in twice else {"name": n, "offeredTwice": found} for n, found in copies.items()}, twice


def _digest(entry: Any) -> str | None:
    """A pinned or held record entry's digest (None: no entry, or not one)."""
    return entry.get("sha256") if isinstance(entry, dict) else None


def _held_notes(
    record: Mapping[str, Any], held: Mapping[str, Mapping[str, Any]], mine: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, Any]]:
    """``record``'s held notes (held key -> name -> entry) once a gate that holds ``held`` and noted ``mine`` before
    (held key -> name -> digest) has noted it: its notes of what it no longer holds go, and what it holds is noted
    unless another copy of the server noted that name otherwise (theirs) or it is pinned as it is (accepted)."""
    notes: dict[str, dict[str, Any]] = {}
    for kind, key in KINDS:
        noted, pinned, before = dict(record.get(key, {})), record.get(kind, {}), mine.get(key, {})
        for n, digest in before.items():
            if n not in held[key] and _digest(noted.get(n)) == digest:
                del noted[n]
        for n, entry in held[key].items():
            ours = n not in noted or _digest(noted[n]) == before.get(n)
            if ours and _digest(pinned.get(n)) != entry["sha256"]:
                noted[n] = entry
        notes[key] = noted
    return notes
