"""A scratch settings layout under ``tmp_path``: every scope's file, and an env pointing at them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpvisor.host.settings.loader import Settings, SettingsPaths, settings_paths


@dataclass(frozen=True)
class Layout:
    root: Path
    home: Path
    env: dict[str, str]
    paths: SettingsPaths

    def settings(self) -> Settings:
        settings = Settings(env=self.env, root=self.root)
        settings.load()
        return settings


def make_layout(tmp_path: Path, **extra_env: str) -> Layout:
    """Only the workspace root exists; user and system folders are created by the first write."""
    base = tmp_path.resolve()
    home = base / "home"
    root = base / "ws"
    root.mkdir(parents=True)
    env = {
        "HOME": str(home),
        "MCPVISOR_HOME": str(home / ".mcpvisor"),
        "MCPVISOR_SYSTEM_DEFAULTS_PATH": str(base / "etc" / "system-defaults.json"),
        "MCPVISOR_SYSTEM_SETTINGS_PATH": str(base / "etc" / "settings.json"),
        **extra_env,
    }
    return Layout(root=root, home=home, env=env, paths=settings_paths(env, root))


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def replace_text(path: Path, text: str) -> None:
    """An editor's atomic save: write a temporary file in the same folder, then rename it over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.swp-tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
