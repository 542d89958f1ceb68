"""Gating lists and the hot-reload gate's equality helpers (SPEC §8 steps 2-3). Pure.

:func:`recompute_mcp_gating` is the *only* place the admission lists are computed: start-up and
every hot reload both call it, so boot and reload can never disagree about which servers may run.
:func:`mcp_servers_equal` and :func:`mcp_gating_equal` decide whether a reload changed anything the
MCP layer cares about.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace

from mcpvisor.core.gating import McpGating, NameList, escape_glob, matches_any
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import ApprovalStore

__all__ = [
    "allow_lists",
    "mcp_gating_equal",
    "mcp_servers_equal",
    "recompute_mcp_gating",
    "resolve_allowed",
    "resolve_excluded",
]


def resolve_excluded(excluded: Sequence[str] | None) -> tuple[str, ...] | None:
    """The merged ``mcp.excluded`` list, duplicates dropped; empty means ``None``."""
    if not excluded:
        return None
    return tuple(dict.fromkeys(excluded))


def resolve_allowed(
    allowed_lists: Sequence[Sequence[str]],
    cli_allowed: Sequence[str] | None,
    names: Iterable[str],
) -> tuple[str, ...] | None:
    """Combine every allow-list into one; a name is admitted only if it matches each of them.

    ``allowed_lists`` holds the ``mcp.allowed`` of each settings scope that sets one; ``cli_allowed``
    is the start-up ``--allowed-mcp-server-names`` ceiling (``None``: no flag).

    - no list at all -> ``None`` (admit all);
    - exactly one list -> that list as it is, globs kept (``[]`` admits none);
    - several lists -> the concrete ``names`` matching every one, sorted and glob-escaped (settings
      narrow the flag and each other, never widen them: a server *named* ``db*`` must not become
      a pattern that admits every ``db...``).
    """
    lists = [tuple(lst) for lst in allowed_lists]
    if cli_allowed is not None:
        lists.append(tuple(cli_allowed))
    if not lists:
        return None
    if len(lists) == 1:
        return lists[0]
    admitted = sorted({name for name in names if all(matches_any(name, lst) for lst in lists)})
    return tuple(escape_glob(name) for name in admitted)


def allow_lists(
    by_file: Mapping[str, Sequence[str]],
    cli_allowed: Sequence[str] | None = None,
    *,
    key: str,
    flag: str = "",
    invalid: Collection[tuple[str, str]] = (),
) -> tuple[NameList, ...]:
    """The allow-lists (or exclude-lists) to name when one leaves a server out: the settings ``key`` of each file
    that sets it (``by_file``), then the start-up ``flag`` when it was given. ``invalid``: the ``(key, file)`` whose
    value is no list of patterns (read as deny all or exclude all)."""
    files = (NameList(key, tuple(patterns), file, (key, file) in invalid) for file, patterns in by_file.items())
    return (*files, *([NameList(flag, tuple(cli_allowed))] if cli_allowed is not None else []))


def recompute_mcp_gating(
    *,
    allowed_lists: Mapping[str, Sequence[str]],
    excluded: Mapping[str, Sequence[str]],
    cli_allowed: Sequence[str] | None,
    servers: Mapping[str, McpServerConfig],
    approvals: ApprovalStore,
    root: str | os.PathLike[str],
    extra_names: Iterable[str] = (),
    invalid_lists: Collection[tuple[str, str]] = (),
) -> McpGating:
    """The gating lists for the desired server map ``servers``.

    Used both at start-up and on every reload. ``allowed_lists`` and ``excluded``: the ``mcp.allowed`` and
    ``mcp.excluded`` of each file that sets them, by file (a server left out is said to be left out by that file's).
    ``invalid_lists``: the ``(key, file)`` of those whose value is no list of patterns. ``extra_names`` are further
    server names that the allow-lists must be resolved against when several lists combine (extension or runtime
    servers).
    ``pending`` holds the gated servers not approved for ``root`` (rejected included).
    """
    names = {*servers, *extra_names}
    pending = approvals.get_pending_gated_mcp_servers(servers, root)
    return McpGating(
        excluded=resolve_excluded([pattern for patterns in excluded.values() for pattern in patterns]),
        allowed=resolve_allowed(list(allowed_lists.values()), cli_allowed, names),
        pending=pending or None,
        allowed_by=allow_lists(
            allowed_lists, cli_allowed, key="mcp.allowed", flag="--allowed-mcp-server-names", invalid=invalid_lists
        ),
        excluded_by=allow_lists(excluded, key="mcp.excluded", invalid=invalid_lists),
    )


def _content(cfg: McpServerConfig) -> str:
    # entry() holds every field that was set (extras included, null kept distinct from absent, scope
    # too); the approval hash (taken over the literal, pre-expansion entry) completes it. Cached.
    return cfg.content_key


def mcp_servers_equal(
    a: Mapping[str, McpServerConfig] | None,
    b: Mapping[str, McpServerConfig] | None,
) -> bool:
    """Whether two server maps are the same: key order irrelevant, array order significant, ``None`` == ``{}``."""
    left = a or {}
    right = b or {}
    if left.keys() != right.keys():
        return False
    return all(left[name] is right[name] or _content(left[name]) == _content(right[name]) for name in left)


def _as_set(items: Iterable[str] | None) -> frozenset[str]:
    return frozenset(items or ())


def _as_sets(lists: Iterable[NameList]) -> list[NameList]:
    """``lists`` with each one's patterns as a set: a list reordered, or a pattern repeated, changes nothing."""
    return [replace(lst, patterns=tuple(sorted(set(lst.patterns)))) for lst in lists]


def mcp_gating_equal(a: McpGating, b: McpGating) -> bool:
    """Whether two gatings admit the same: lists as sets; ``None`` == ``[]`` for excluded and pending,
    but for allowed ``None`` (admit all) != ``[]`` (admit none). An allow-list or exclude-list moved to another
    file is a change too (what says which list leaves a server out follows it)."""
    if _as_set(a.excluded) != _as_set(b.excluded) or _as_set(a.pending) != _as_set(b.pending):
        return False
    if _as_sets(a.allowed_by) != _as_sets(b.allowed_by) or _as_sets(a.excluded_by) != _as_sets(b.excluded_by):
        return False
    if a.allowed is None or b.allowed is None:
        return a.allowed is None and b.allowed is None
    return _as_set(a.allowed) == _as_set(b.allowed)
