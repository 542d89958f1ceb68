"""What of an open connection is served: the settings that filter its tools without restarting it (SPEC §3.2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from mcpvisor.core.server_config import McpServerConfig

__all__ = ["Exposure", "exposure_of"]


class Exposure(BaseModel):
    """The settings that filter an already open connection (SPEC §3.2)."""

    model_config = ConfigDict(frozen=True)

    trust: bool | None = None
    include_tools: tuple[str, ...] | None = None
    exclude_tools: tuple[str, ...] | None = None

    def admits(self, tool_name: str) -> bool:
        """Whether a tool (by its name on the server) is exposed. Exclude wins over include."""
        if self.exclude_tools and tool_name in self.exclude_tools:
            return False
        return self.include_tools is None or tool_name in self.include_tools


def exposure_of(cfg: McpServerConfig) -> Exposure:
    return Exposure(trust=cfg.trust, include_tools=cfg.include_tools, exclude_tools=cfg.exclude_tools)
