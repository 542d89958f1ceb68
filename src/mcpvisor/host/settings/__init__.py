"""Settings: scopes and files (:mod:`.loader`), the schema (:mod:`.schema`), the desired server map
(:mod:`.mcp_servers`) and the writer (:mod:`.writer`). See SPEC §2.2, §2.3 and §6."""

from __future__ import annotations

from mcpvisor.host.settings.loader import (
    FILE_SCOPES,
    SETTINGS_SCOPES,
    FileScope,
    MergedSettings,
    ScopeReload,
    ServerEntry,
    ServerLayer,
    ServerScope,
    Settings,
    SettingsError,
    SettingsFileError,
    SettingsPaths,
    SettingsScope,
    load_settings,
)
from mcpvisor.host.settings.mcp_servers import (
    AssembledServers,
    ServerSource,
    SourceLabel,
    TopTier,
    assemble_from_settings,
    assemble_mcp_servers,
    load_top_tier,
)
from mcpvisor.host.settings.schema import (
    SETTINGS_SCHEMA,
    SettingDefinition,
    flatten_schema,
    is_restart_required_key,
    settings_json_schema,
)
from mcpvisor.host.settings.writer import delete_setting, set_setting

__all__ = [
    "FILE_SCOPES",
    "SETTINGS_SCHEMA",
    "SETTINGS_SCOPES",
    "AssembledServers",
    "FileScope",
    "MergedSettings",
    "ScopeReload",
    "ServerEntry",
    "ServerLayer",
    "ServerScope",
    "ServerSource",
    "SettingDefinition",
    "Settings",
    "SettingsError",
    "SettingsFileError",
    "SettingsPaths",
    "SettingsScope",
    "SourceLabel",
    "TopTier",
    "assemble_from_settings",
    "assemble_mcp_servers",
    "delete_setting",
    "flatten_schema",
    "is_restart_required_key",
    "load_settings",
    "load_top_tier",
    "set_setting",
    "settings_json_schema",
]
