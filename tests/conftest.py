"""Shared test configuration: every async test runs on anyio's asyncio backend."""

from __future__ import annotations

import inspect
from typing import Any

import pytest


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
