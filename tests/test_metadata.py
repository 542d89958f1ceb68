"""The package's metadata as pyproject.toml declares it: one version (the package says the one pip installs),
and the licence text it names, which goes into the wheel and the sdist."""

from __future__ import annotations

import tomllib
from pathlib import Path

import mcpvisor

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_the_package_reports_is_the_one_it_is_built_with() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert mcpvisor.__version__ == project["version"]


def test_the_licence_file_pyproject_names_holds_the_licence_it_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    (name,) = project["license-files"]
    assert (ROOT / name).read_text().startswith("MIT License\n")
