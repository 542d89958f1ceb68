"""Settings scopes and their order (SPEC §2.2)."""

from __future__ import annotations

import logging
from typing import Literal

from mcpvisor.core.server_config import Scope

logger = logging.getLogger(__name__)

SettingsScope = Literal["system_defaults", "user", "workspace", "system"]
FileScope = Literal["system_defaults", "user", "workspace", "system", "project", "lsp_project"]
ServerScope = Literal["system_defaults", "user", "workspace", "system", "project", "session", "mcp_config"]

SETTINGS_SCOPES: tuple[SettingsScope, ...] = ("system_defaults", "user", "workspace", "system")
"""Merge order, lowest precedence first."""
FILE_SCOPES: tuple[FileScope, ...] = (*SETTINGS_SCOPES, "project", "lsp_project")
"""Every file the settings layer reads: the settings scopes, ``.mcp.json`` and ``.lsp.json``."""

# Scopes whose settings may enable folder trust: never the repository's own.
TRUST_SCOPES: tuple[SettingsScope, ...] = ("system_defaults", "user", "system")
# Scopes a repository controls: dropped when its folder is untrusted.
REPOSITORY_SCOPES: tuple[FileScope, ...] = ("workspace", "project", "lsp_project")
# ``scope`` stamped on the servers of each settings scope.
SCOPE_STAMPS: dict[SettingsScope, Scope | None] = {
    "system_defaults": None,
    "user": None,
    "workspace": "workspace",
    "system": "system",
}
