"""Small MCP servers shipped for the demo, the tests and the benchmarks.

- `mcpvisor.examples.sdk_server`: built on the official SDK (`mcp.server.MCPServer`); speaks both
  protocol eras over stdio, streamable HTTP or SSE; about 0.8 s to start (the `mcp` import).
- `mcpvisor.examples.light_server`: standard library only, handshake era over stdio; about 30 ms
  to start.

Both take the same command line (see `mcpvisor.examples._options`); run either with ``--help``.
This package imports nothing, so that starting the light server stays cheap.
"""
