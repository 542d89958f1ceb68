"""Shared test configuration: every async test runs on anyio's asyncio backend; the conformance tests (the
official suite, the npm reference server) need npm and are left out, loudly, where there is none (unless
``MCPVISOR_CONFORMANCE=1`` says they must run); the fleet tests need ``redis-server`` and ``haproxy`` and
are left out the same way (unless ``MCPVISOR_FLEET_TESTS=1``)."""

from __future__ import annotations

import inspect
import logging
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

_left_out: list[pytest.Item] = []
_fleet_left_out: list[pytest.Item] = []

# What the terminal running the tests says of its size is not the tests' business: views are checked at
# the widths the tests set (pytest-xdist's workers, for one, get COLUMNS=80 from their launcher).
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core. Most tests wait on server processes, files and sockets rather than
    the CPU (on 2 cores: 4 workers take 0.74x the time 2 take)."""
    return 2 * (os.cpu_count() or 1)


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
    """Without npm the conformance suite and the reference server cannot be installed: leave their tests out
    (said in the summary), unless ``MCPVISOR_CONFORMANCE=1`` (as in ``.ci/run``), where they run and a missing
    npm fails them."""
    for marker, forced, binaries, left_out in (
        ("conformance", "MCPVISOR_CONFORMANCE", ("npm",), _left_out),
        ("fleet", "MCPVISOR_FLEET_TESTS", ("redis-server", "haproxy"), _fleet_left_out),
    ):
        if os.environ.get(forced) == "1" or all(shutil.which(binary) for binary in binaries):
            continue
        left_out[:] = [item for item in items if item.get_closest_marker(marker) is not None]
        if left_out:
            items[:] = [item for item in items if item.get_closest_marker(marker) is None]
            config.hook.pytest_deselected(items=left_out)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _left_out:
        terminalreporter.write_line(
            f"{len(_left_out)} conformance tests (the official suite, the npm reference server) not run: npm is "
            "not installed (install Node.js with npm to run "
            "them; MCPVISOR_CONFORMANCE=1 makes this an error)",
            yellow=True,
            bold=True,
        )
    if _fleet_left_out:
        terminalreporter.write_line(
            f"{len(_fleet_left_out)} fleet tests not run: redis-server or haproxy is not installed (apt install "
            "redis-server haproxy to run them; MCPVISOR_FLEET_TESTS=1 makes this an error)",
            yellow=True,
            bold=True,
        )


@pytest.fixture(autouse=True)
def _logging_as_found() -> Iterator[None]:
    """A command run in the test process (typer's CliRunner) sets up logging for a terminal: the root
    logger's handlers and the levels of every logger. Put back after each test, or a later test's
    ``caplog`` hears nothing below ERROR."""
    root = logging.getLogger()
    handlers, root_level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in logging.root.manager.loggerDict}
    yield
    root.handlers[:] = handlers
    root.setLevel(root_level)
    for name in logging.root.manager.loggerDict:
        logging.getLogger(name).setLevel(levels.get(name, logging.NOTSET))


_SET_BY_OPTIONS = ("MCPVISOR_FLEET", "MCPVISOR_FLEET_NAME")


@pytest.fixture(autouse=True)
def _environment_as_found() -> Iterator[None]:
    """``--fleet`` and ``--fleet-name`` set their variable in the process that parses them: run in the test
    process (a CliRunner), they would send every later command of this worker to that fleet."""
    before = {name: os.environ.get(name) for name in _SET_BY_OPTIONS}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
