"""Shared test configuration: every async test runs on anyio's asyncio backend; the conformance tests
need npm and are left out, loudly, where there is none (unless ``MCPVISOR_CONFORMANCE=1`` says they must run)."""

from __future__ import annotations

import inspect
import os
import shutil
from typing import Any

import pytest

_left_out: list[pytest.Item] = []

# What the terminal running the tests says of its size is not the tests' business: views are checked at
# the widths the tests set (pytest-xdist's workers, for one, get COLUMNS=80 from their launcher).
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> None:
    """Mark every ``async def test_...`` for the anyio plugin before it collects the function."""
    if isinstance(collector, pytest.Module | pytest.Class) and collector.istestfunction(obj, name):
        inner = getattr(getattr(obj, "hypothesis", None), "inner_test", obj)  # @given wraps the coroutine
        if inspect.iscoroutinefunction(inner):
            pytest.mark.anyio(obj)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without npm the conformance suite cannot be installed: leave its tests out (said in the summary),
    unless ``MCPVISOR_CONFORMANCE=1`` (as in ``.ci/run``), where they run and a missing npm fails them."""
    if os.environ.get("MCPVISOR_CONFORMANCE") == "1" or shutil.which("npm") is not None:
        return
    _left_out[:] = [item for item in items if item.get_closest_marker("conformance") is not None]
    if _left_out:
        items[:] = [item for item in items if item.get_closest_marker("conformance") is None]
        config.hook.pytest_deselected(items=_left_out)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _left_out:
        terminalreporter.write_line(
            f"{len(_left_out)} conformance tests not run: npm is not installed (install Node.js with npm to run "
            "them; MCPVISOR_CONFORMANCE=1 makes this an error)",
            yellow=True,
            bold=True,
        )
