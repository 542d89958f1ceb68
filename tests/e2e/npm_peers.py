"""What the suite takes from the npm registry, pinned: Node.js 22 (the npm package ``node@22`` brings its own
binary), the official MCP conformance suite and the reference server ``@modelcontextprotocol/server-everything``.

They are installed together on first use into ``.conformance/`` at the repository root (gitignored), so only
``npm`` is needed on the machine; without it the tests that need them fail saying so (where they run at all:
``tests/conftest.py`` leaves them out, loudly, unless ``MCPVISOR_CONFORMANCE=1``). Test processes running side by
side (pytest-xdist) install once: the first holds a lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[2]
INSTALL_DIR = ROOT / ".conformance"
BIN_DIR = INSTALL_DIR / "node_modules" / ".bin"
INSTALL_TIMEOUT_S = 300

CONFORMANCE_VERSION = "0.1.16"
EVERYTHING_VERSION = "2026.8.31"
PACKAGES = (
    "node@22",  # the conformance suite needs Node.js 22
    f"@modelcontextprotocol/conformance@{CONFORMANCE_VERSION}",
    f"@modelcontextprotocol/server-everything@{EVERYTHING_VERSION}",
)
COMMANDS = ("node", "conformance", "mcp-server-everything")


def installed() -> Path:
    """The folder of the installed commands (:data:`COMMANDS`), installing :data:`PACKAGES` first if a command or
    one of these versions is missing; run them with :func:`node_env`."""
    marker = INSTALL_DIR / ("installed-" + "-".join(package.replace("/", "_") for package in PACKAGES))
    INSTALL_DIR.mkdir(exist_ok=True)
    with FileLock(INSTALL_DIR / "install.lock", timeout=INSTALL_TIMEOUT_S):
        if marker.exists() and all((BIN_DIR / command).exists() for command in COMMANDS):
            return BIN_DIR
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(
                "these tests need npm (any Node.js with npm) to install what they run: install it, then run again"
            )
        subprocess.run(
            [npm, "install", "--prefix", str(INSTALL_DIR), "--no-audit", "--no-fund", "--silent", *PACKAGES],
            check=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        marker.touch()
    return BIN_DIR


def node_env() -> dict[str, str]:
    """The environment with the installed Node.js 22 first on the PATH (the commands' ``#!/usr/bin/env node``)."""
    return {**os.environ, "PATH": f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"}
