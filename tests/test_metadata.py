"""The package's metadata as pyproject.toml declares it: one version (the package says the one pip installs),
and the licence text it names, which goes into the wheel and the sdist."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement

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


def test_the_typer_releases_the_package_accepts_run_its_commands() -> None:
    """Typer before 0.19.1 cannot run a command with an unset repeatable option that has a callback
    (``--mcp-config``, ``--lsp-config``: its list converter gets None and raises a TypeError), and 0.15.0 to 0.15.2
    cannot show a command's help beside click 8.2 or later: an environment that already holds such a typer
    keeps it when mcpvisor is installed, so the requirement must leave those releases out."""
    typer = _required("typer")
    assert not typer.specifier.contains("0.19.0")
    assert typer.specifier.contains("0.19.1")
    assert typer.specifier.contains(version("typer"))


def test_the_json5_releases_the_package_accepts_say_where_a_settings_file_breaks() -> None:
    """json5 before 0.9.8 names the wrong place for a syntax error (line 1, column 2 for a comma missing
    further on, or for a file cut short): every "FILE:LINE:COL" a bad save reports comes from it."""
    json5 = _required("json5")
    assert not json5.specifier.contains("0.9.7")
    assert json5.specifier.contains("0.9.8")
    assert json5.specifier.contains(version("json5"))


def _required(name: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (requirement,) = (Requirement(spec) for spec in project["dependencies"] if Requirement(spec).name == name)
    return requirement
