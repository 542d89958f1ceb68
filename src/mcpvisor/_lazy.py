"""Lazy package exports: ``import mcpvisor.host`` stays cheap until a name is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) on first use; the package's
    ``dir()`` lists those names too (completion in a REPL or an editor), as if they were imported."""
    namespace = importlib.import_module(package).__dict__
    namespace["__dir__"] = lambda: sorted({*namespace, *exports})

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
