"""The globs of a language server's file-watch registrations (LSP's GlobPattern), as patterns over paths."""

from __future__ import annotations

import pytest

from mcpvisor.host.lsp.client_side import glob_pattern


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("**/*.py", "pkg/mod.py", True),
        ("**/*.py", "/home/me/ws/mod.py", True),
        ("**/*.py", "mod.py", True),
        ("**/*.py", "pkg/mod.pyc", False),
        ("*.py", "mod.py", True),
        ("*.py", "pkg/mod.py", False),
        ("**/{pyproject.toml,setup.cfg}", "a/setup.cfg", True),
        ("**/{pyproject.toml,setup.cfg}", "a/setup.py", False),
        ("src/**", "src/a/b.ts", True),
        ("src/**", "lib/a.ts", False),
        ("**/[!_]*.py", "pkg/mod.py", True),
        ("**/[!_]*.py", "pkg/_private.py", False),
        ("**/file?.txt", "d/file1.txt", True),
        ("**/a.b", "d/aXb", False),
    ],
)
def test_a_glob_matches_as_lsp_means_it(glob: str, path: str, matches: bool) -> None:
    assert bool(glob_pattern(glob).match(path)) is matches
