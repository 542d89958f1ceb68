"""mcpvisor: an MCP host runtime whose servers follow their configuration files while it runs."""

from __future__ import annotations

__version__ = "0.1.0"
