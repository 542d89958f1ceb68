"""Admission lists (SPEC §4): which configured servers may run at all. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

__all__ = ["McpGating", "matches_any"]


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of the glob patterns (``*``, ``?``; case-sensitive)."""
    return any(fnmatchcase(name, pattern) for pattern in patterns)


@dataclass(frozen=True, slots=True)
class McpGating:
    """The three admission lists.

    ``allowed=None`` admits every name, ``allowed=()`` admits none. ``excluded`` wins over
    ``allowed``. ``pending`` holds gated servers that are not approved (rejected included).
    """

    excluded: tuple[str, ...] | None = None
    allowed: tuple[str, ...] | None = None
    pending: tuple[str, ...] | None = None

    def is_excluded(self, name: str) -> bool:
        return bool(self.excluded) and matches_any(name, self.excluded or ())

    def is_allowed(self, name: str) -> bool:
        return self.allowed is None or matches_any(name, self.allowed)

    def is_pending(self, name: str) -> bool:
        return name in (self.pending or ())
