"""Where mcpvisor keeps its files (SPEC §2.2, §7). Every function takes the environment explicitly."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_log import default_log_dir

__all__ = [
    "APPROVALS_FILENAME",
    "SETTINGS_DIRNAME",
    "SETTINGS_FILENAME",
    "approvals_path",
    "log_dir",
    "named_home",
    "system_defaults_path",
    "system_settings_path",
    "trusted_folders_path",
    "user_dir",
    "user_settings_path",
    "workspace_mcp_json_path",
    "workspace_root",
    "workspace_settings_path",
]

SETTINGS_DIRNAME = ".mcpvisor"
SETTINGS_FILENAME = "settings.json"
APPROVALS_FILENAME = "mcp-approvals.json"


def home(env: Mapping[str, str]) -> Path:
    """The user's home folder: ``$HOME``, else the account's (:class:`ConfigError` when neither is known)."""
    try:
        return Path(env.get("HOME") or Path.home())
    except (RuntimeError, KeyError):  # an account with no passwd entry (a container's --user 1234)
        raise ConfigError(
            "cannot tell your home folder: HOME is not set and this account has none; set HOME, or MCPVISOR_HOME "
            "to the folder that holds mcpvisor's settings"
        ) from None


_home = home


def user_dir(env: Mapping[str, str]) -> Path:
    """``~/.mcpvisor``, or ``$MCPVISOR_HOME``."""
    override = env.get("MCPVISOR_HOME")
    return Path(override).expanduser() if override else _home(env) / SETTINGS_DIRNAME


def named_home(env: Mapping[str, str]) -> str | None:
    """``$MCPVISOR_HOME`` when it names another folder than ``~/.mcpvisor``: a command suggested to be pasted
    elsewhere carries it (without it, that command would read and write another folder's stores)."""
    override = env.get("MCPVISOR_HOME")
    if not override:
        return None
    try:
        default = _home(env) / SETTINGS_DIRNAME
        named = Path(override).expanduser()
        if named.resolve() == default.resolve():
            return None
        return override if named.is_absolute() else str(named.absolute())  # (pasted elsewhere, still that folder)
    except (ConfigError, OSError):
        return override


def user_settings_path(env: Mapping[str, str]) -> Path:
    return user_dir(env) / SETTINGS_FILENAME


def approvals_path(env: Mapping[str, str]) -> Path:
    override = env.get("MCPVISOR_MCP_APPROVALS_PATH")
    return Path(override).expanduser() if override else user_dir(env) / APPROVALS_FILENAME


def oauth_tokens_path(env: Mapping[str, str]) -> Path:
    """The OAuth token store (``mcpvisor mcp login``)."""
    return user_dir(env) / "oauth-tokens.json"


def pins_path(env: Mapping[str, str]) -> Path:
    """The pinned tool and prompt definitions (``mcp.pinTools``)."""
    return user_dir(env) / "tool-pins.json"


def trusted_folders_path(env: Mapping[str, str]) -> Path:
    return user_dir(env) / "trusted-folders.json"


def system_defaults_path(env: Mapping[str, str]) -> Path:
    return Path(env.get("MCPVISOR_SYSTEM_DEFAULTS_PATH") or "/etc/mcpvisor/system-defaults.json")


def system_settings_path(env: Mapping[str, str]) -> Path:
    return Path(env.get("MCPVISOR_SYSTEM_SETTINGS_PATH") or "/etc/mcpvisor/settings.json")


def workspace_root(workspace: str | os.PathLike[str] | None) -> Path:
    """The one project root for every read and write: ``--workspace`` or the cwd, as a real path."""
    return Path(workspace if workspace is not None else os.getcwd()).expanduser().resolve()


def workspace_settings_path(root: Path) -> Path:
    return root / SETTINGS_DIRNAME / SETTINGS_FILENAME


def workspace_lsp_json_path(root: Path) -> Path:
    """A repository's language servers (Claude Code's and Qwen Code's ``.lsp.json``)."""
    return root / ".lsp.json"


def workspace_mcp_json_path(root: Path) -> Path:
    return root / ".mcp.json"


def log_dir(env: Mapping[str, str]) -> Path:
    """Per-server stderr logs: ``$MCPVISOR_LOG_DIR``; else ``logs`` in ``$MCPVISOR_HOME`` when that is set (a
    scratch home keeps everything inside it; the watcher watches folders non-recursively, so log writes
    there are never settings events); else the XDG state folder."""
    return default_log_dir(env)
