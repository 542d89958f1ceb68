"""The MCP server facing clients: every connected tool and prompt of a host as one server (SPEC §0.3, §9).

``server`` (:class:`Gateway`: the low-level MCP server and its change notices), ``http`` (sockets,
uvicorn, DNS-rebinding settings, the workspace header) and ``workspaces`` (one host per client
workspace). Imports ``mcpvisor.host`` and ``mcpvisor.core``; never the shell or the commands, never
prints. Embed it in another program with::

    async with Host(HostOptions(env=os.environ)) as host, Gateway(host.config) as gateway:
        await gateway.serve_http("127.0.0.1", 8765)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcpvisor._lazy import lazy_exports

if TYPE_CHECKING:
    from mcpvisor.gateway.server import Gateway
    from mcpvisor.gateway.workspaces import WorkspaceGateway

__all__ = ["Gateway", "WorkspaceGateway"]

__getattr__ = lazy_exports(
    __name__, {"Gateway": "mcpvisor.gateway.server", "WorkspaceGateway": "mcpvisor.gateway.workspaces"}
)
