"""Language servers (.lsp.json) managed like MCP servers, their operations served as tools (SPEC §10)."""

from __future__ import annotations
