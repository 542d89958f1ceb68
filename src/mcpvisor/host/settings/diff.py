"""Semantic comparison of settings: which dotted paths changed."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- diff


def values_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is not ``1.0``, key order never matters, NaN equals NaN."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


_ABSENT: Any = object()


def changed_paths(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths that differ between two settings objects, sorted.

    Objects recurse and other values compare whole: changing server ``a``'s ``args`` gives
    ``mcpServers.a.args``. An object that appears or disappears recurses against ``{}``, so
    adding ``{"mcp": {"excluded": [...]}}`` gives ``mcp.excluded`` (hot-reloadable) and not ``mcp``,
    and adding server ``a`` gives one path per field (``mcpServers.a.command``, ...). An object that takes the place
    of another value (``"mcp": null``), or gives its place to one, gives the paths of its keys (its own path when it
    has none), so ``{"mcp": null}`` to ``{"mcp": {"allowed": ["a"]}}`` gives ``mcp.allowed``. An empty object
    and an absent key are the same. A key with a dot in it is spelled as is (``mcpServers.my.server``).
    """
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}{key}"
        a = old.get(key, _ABSENT)
        b = new.get(key, _ABSENT)
        a_obj = a is _ABSENT or isinstance(a, Mapping)
        b_obj = b is _ABSENT or isinstance(b, Mapping)
        if a_obj and b_obj:
            out.extend(changed_paths({} if a is _ABSENT else a, {} if b is _ABSENT else b, f"{path}."))
        elif not values_equal(a, b):
            # An object for another value (null, a number) or the other way: the keys it holds are what changed.
            keys = changed_paths(a if isinstance(a, Mapping) else {}, b if isinstance(b, Mapping) else {}, f"{path}.")
            out.extend(keys or [path])
    return out
