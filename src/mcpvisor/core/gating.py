"""Admission lists (SPEC §4): which configured servers may run at all. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase, translate

__all__ = ["McpGating", "NameMatcher", "escape_glob", "matches_any", "names_tuple"]

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
class McpGating:
    """The three admission lists.

    ``allowed=None`` admits every name, ``allowed=()`` admits none. ``excluded`` wins over
    ``allowed``. ``pending`` holds gated servers that are not approved (rejected included).
    """

    excluded: tuple[str, ...] | None = None
    allowed: tuple[str, ...] | None = None
    pending: tuple[str, ...] | None = None
    _excluded: NameMatcher = field(init=False, repr=False, compare=False)
    _allowed: NameMatcher | None = field(init=False, repr=False, compare=False)
    _pending: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_excluded", NameMatcher(self.excluded or ()))
        object.__setattr__(self, "_allowed", None if self.allowed is None else NameMatcher(self.allowed))
        object.__setattr__(self, "_pending", frozenset(self.pending or ()))

    def is_excluded(self, name: str) -> bool:
        return self._excluded(name)

    def is_allowed(self, name: str) -> bool:
        return self._allowed is None or self._allowed(name)

    def is_pending(self, name: str) -> bool:
        return name in self._pending
