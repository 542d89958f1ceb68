"""A running session over files: settings, the watcher, approvals, gating, hot reload and :class:`Host`.

Owns everything that reads or watches a file (SPEC §2, §6, §7, §8). Imports only ``mcpvisor.core``;
never prints, parses argv or serves MCP. Embed a watching session in another program with::

    async with Host(HostOptions(env=os.environ, workspace=Path("."))) as host:
        tools = host.config.tool_registry.get_all_tools()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcpvisor._lazy import lazy_exports

if TYPE_CHECKING:
    from mcpvisor.host.host import Host, HostEvent, HostOptions, Ready, SettingsWarning
    from mcpvisor.host.lsp.tool_specs import ToolFailure

__all__ = ["Host", "HostEvent", "HostOptions", "Ready", "SettingsWarning", "ToolFailure"]

__getattr__ = lazy_exports(
    __name__, {**dict.fromkeys(__all__, "mcpvisor.host.host"), "ToolFailure": "mcpvisor.host.lsp.tool_specs"}
)
