"""Admission lists (SPEC §4): which configured servers may run at all. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase, translate
from typing import Literal

__all__ = [
    "McpGating",
    "NameList",
    "NameMatcher",
    "escape_glob",
    "excluded_by",
    "matches_any",
    "names_tuple",
    "not_allowed_by",
]

_GLOB_CHARS = frozenset("*?[")


def names_tuple(names: Iterable[str] | None) -> tuple[str, ...] | None:
    """``names`` as a tuple (None stays None: no list); a lone string is refused."""
    if isinstance(names, str):  # iterable, but one name per character
        raise TypeError(f"expected a list of server names, not the string {names!r}: write [{names!r}]")
    return None if names is None else tuple(names)


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of the glob patterns (``*``, ``?``; case-sensitive)."""
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def escape_glob(name: str) -> str:
    """A pattern that matches exactly ``name``, even when it contains ``*``, ``?`` or ``[``."""
    return re.sub(r"([*?\[])", r"[\1]", name)


class NameMatcher:
    """Matches names against a list of globs in about constant time: plain names go in a set,
    the real globs into one compiled pattern."""

    __slots__ = ("_names", "_pattern")

    def __init__(self, patterns: Iterable[str]) -> None:
        patterns = list(patterns)
        self._names = frozenset(p for p in patterns if not _GLOB_CHARS & set(p))
        globs = [p for p in patterns if _GLOB_CHARS & set(p)]
        self._pattern = re.compile("|".join(f"(?:{translate(g)})" for g in globs)) if globs else None

    def __call__(self, name: str) -> bool:
        return name in self._names or (self._pattern is not None and self._pattern.match(name) is not None)


@dataclass(frozen=True, slots=True)
class NameList:
    """One of the lists an allow-list or an exclude-list is combined from: the start-up flag ``key`` (``file``
    None), the settings key ``key`` of ``file``, or (``call``) the list a library caller set with method ``key``."""

    key: str
    patterns: tuple[str, ...]
    file: str | None = None
    invalid: bool = False
    """The file's value is no list of patterns: ``patterns`` is what it is read as (deny all, exclude all)."""
    call: bool = False
    """Set by the program hosting the servers through ``Config``'s method ``key``: no file or flag to change."""

    def where(self) -> str:
        """Where the list is, as a message names it."""
        if self.call:
            return f"the list the host set with {self.key}()"
        return f"{self.key} given at start-up" if self.file is None else f"{self.key} of {self.file}"


def not_allowed_by(name: str, lists: Iterable[NameList]) -> str | None:
    """Which of ``lists`` leave server ``name`` out, and the fix that lets it in (None: each admits it).

    >>> not_allowed_by("db", [NameList("mcp.allowed", ("web",), "/w/settings.json")])
    'not in mcp.allowed of /w/settings.json; add it there'
    """
    missed = [lst for lst in lists if not matches_any(name, lst.patterns)]
    flags = [lst for lst in lists if lst.file is None and not lst.call]
    if broken := [lst for lst in missed if lst.invalid]:
        why, fix = _not_a_list(broken, "read as allowing no server")
        if flag_missed := [lst for lst in flags if lst in missed]:  # fixing the file alone would not let it in
            flag = f"relaunch with {name!r} added to that flag"
            return f"not in {flag_missed[0].where()}, and {why}; {flag} and fix {broken[0].key} there"
        return f"allowed by {flags[0].where()}, but {why}; {fix}" if flags else f"{why}; {fix}"
    flags = [lst for lst in flags if lst in missed]
    files = [lst for lst in missed if lst.file is not None]
    calls = [lst.where() for lst in missed if lst.call]  # the host's to change: no fix to give
    left_out = [lst.where() for lst in flags]
    fixes = [f"relaunch with {name!r} added to that flag"] if flags else []
    if files:  # "there" alone when the file's list is the only one named: the host's list is no file
        left_out.append(f"{files[0].key} of {', '.join(str(lst.file) for lst in files)}")
        fixes.append(f"add it to {files[0].key} there" if fixes or calls else "add it there")
    left_out += calls
    if not left_out:
        return None
    return f"not in {' nor in '.join(left_out)}" + (f"; {' and '.join(fixes)}" if fixes else "")


def excluded_by(name: str, lists: Iterable[NameList]) -> str | None:
    """Which of the exclude-lists ``lists`` leave server ``name`` out, by which pattern when one is a glob, and the
    fix (None: none of them does).

    >>> excluded_by("db", [NameList("mcp.excluded", ("db", "web"), "/u/settings.json")])
    'in mcp.excluded of /u/settings.json; remove it there'
    >>> excluded_by("db", [NameList("mcp.excluded", ("d*",), "/u/settings.json")])
    "matched by 'd*' in mcp.excluded of /u/settings.json; remove that pattern there"
    """
    hits = [(lst, [p for p in lst.patterns if fnmatchcase(name, p)]) for lst in lists]
    hits = [(lst, matched) for lst, matched in hits if matched]
    if not hits:
        return None
    if broken := [lst for lst, _ in hits if lst.invalid]:
        return "; ".join(_not_a_list(broken, "read as excluding every server"))
    exact = {name, escape_glob(name)}
    files = [(lst, matched) for lst, matched in hits if not lst.call]  # a list the host set with a call has no file
    # "there" names the file's list alone unless the host's list is named too: then the fix says which one.
    there = f" from {files[0][0].key} there" if files and len(files) < len(hits) else " there"
    if all(p in exact for _, matched in hits for p in matched):
        places = [f"{files[0][0].key} of {', '.join(str(lst.file) for lst, _ in files)}"] if files else []
        places += [lst.where() for lst, _ in hits if lst.call]
        return f"in {' and in '.join(places)}{f'; remove it{there}' if files else ''}"
    by = [f"{' and '.join(repr(p) for p in matched)} in {lst.where()}" for lst, matched in hits]
    many = sum(len(matched) for _, matched in files) > 1
    fix = f"; remove {'those patterns' if many else 'that pattern'}{there}" if files else ""
    return f"matched by {' and '.join(by)}{fix}"


def _not_a_list(lists: list[NameList], meaning: str) -> tuple[str, str]:
    """Why settings lists leave a server out when their value is not a list of patterns (nothing to add to or remove
    from them), and the fix."""
    files = ", ".join(str(lst.file) for lst in lists)
    one = len(lists) == 1
    said = "it is not a list of glob patterns" if one else "they are not lists of glob patterns"
    return f"left out by {lists[0].key} of {files}: {said}, {meaning}", f"fix {'it' if one else 'them'} there"


@dataclass(frozen=True, slots=True)
class McpGating:
    """The three admission lists.

    ``allowed=None`` admits every name, ``allowed=()`` admits none. ``excluded`` wins over
    ``allowed``. ``pending`` holds gated servers that are not approved (rejected included).
    """

    excluded: tuple[str, ...] | None = None
    allowed: tuple[str, ...] | None = None
    pending: tuple[str, ...] | None = None
    allowed_by: tuple[NameList, ...] = field(default=(), compare=False)
    """The lists ``allowed`` was combined from, to say which leaves a server out (empty: not known)."""
    excluded_by: tuple[NameList, ...] = field(default=(), compare=False)
    """The lists ``excluded`` was united from, to say which leaves a server out (empty: not known)."""
    host_allowed: tuple[str, ...] | None = None
    """The allow-list a library caller set (:meth:`narrowed_by_host`), matched besides ``allowed``."""
    _excluded: NameMatcher = field(init=False, repr=False, compare=False)
    _allowed: NameMatcher | None = field(init=False, repr=False, compare=False)
    _host_allowed: NameMatcher | None = field(init=False, repr=False, compare=False)
    _pending: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_excluded", NameMatcher(self.excluded or ()))
        object.__setattr__(self, "_allowed", None if self.allowed is None else NameMatcher(self.allowed))
        object.__setattr__(self, "_host_allowed", None if self.host_allowed is None else NameMatcher(self.host_allowed))
        object.__setattr__(self, "_pending", frozenset(self.pending or ()))

    def narrowed_by_host(self, excluded: tuple[str, ...] | None, allowed: tuple[str, ...] | None) -> McpGating:
        """This gating (the files' and the start-up flag's lists) narrowed by the lists a library caller set with
        ``Config.set_excluded_mcp_servers`` and ``set_allowed_mcp_servers`` (None: none set): what they leave out is
        said to be left out by the host, and they never admit a name the other lists leave out."""
        gating = self
        if excluded:
            united = tuple(dict.fromkeys((*(self.excluded or ()), *excluded)))
            by = (*self.excluded_by, NameList("set_excluded_mcp_servers", excluded, call=True))
            gating = replace(gating, excluded=united, excluded_by=by)
        if allowed is not None:
            by = (*self.allowed_by, NameList("set_allowed_mcp_servers", allowed, call=True))
            gating = replace(gating, host_allowed=allowed, allowed_by=by)
        return gating

    def is_excluded(self, name: str) -> bool:
        return self._excluded(name)

    def is_allowed(self, name: str) -> bool:
        host = self._host_allowed  # (a library caller's list narrows the others)
        return (self._allowed is None or self._allowed(name)) and (host is None or host(name))

    def reason_of(self, name: str) -> Literal["not_allowed", "excluded", "pending_approval"] | None:
        """Why a configured server ``name`` may not run, checked in that order (None: it may)."""
        if not self.is_allowed(name):
            return "not_allowed"
        if self.is_excluded(name):
            return "excluded"
        return "pending_approval" if self.is_pending(name) else None

    def is_pending(self, name: str) -> bool:
        return name in self._pending

    def why_not_allowed(self, name: str) -> str | None:
        """Which allow-list leaves ``name`` out and the fix (:func:`not_allowed_by`); None when that is not known."""
        return not_allowed_by(name, self.allowed_by)

    def why_excluded(self, name: str) -> str | None:
        """Which exclude-list leaves ``name`` out and the fix (:func:`excluded_by`); None when that is not known."""
        return excluded_by(name, self.excluded_by)

    def left_out_by(self, name: str, reason: str | None) -> str | None:
        """Which list leaves ``name`` out and the fix, when gating's ``reason`` is a list's and that is known."""
        if reason == "excluded":
            return self.why_excluded(name)
        return self.why_not_allowed(name) if reason == "not_allowed" else None

    def with_why(self, name: str, reason: str | None) -> str | None:
        """Gating's ``reason`` for stopping ``name`` followed by ``: `` and which list leaves it out and the fix,
        when that is known (what a call the stop cuts short is told)."""
        why = self.left_out_by(name, reason)
        return f"{reason}: {why}" if why else reason
