"""How the gateway names upstream resources, and routes a URI back to the server that owns it.

A resource keeps its own URI when no other connected server lists the same one, so clients see the
URIs the servers use (and ``resource_link`` contents in tool results stay readable as they are).
When two servers list one URI, each is served as ``mcpvisor://<server>/<URI, percent-encoded>``:
reversible, and the same on every reload. A URI no server lists is routed to the one server that
could own it (the one server whose resource template matches it, or the only server with
resources), or refused with a message naming the reason.

Resource templates are served as the servers list them. A URI the templates of several servers match is
refused naming its ``mcpvisor://<server>/…`` form for each of them, which reads it from that server. A
``completion/complete`` for a template goes to the server that lists that template.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

from mcpvisor.gateway.protocol import RESOURCE_NOT_FOUND, as_mcp_errors

if TYPE_CHECKING:
    from mcpvisor.core.config import Config
    from mcpvisor.core.manager import McpClientManager
    from mcpvisor.gateway.names import ServedPrompts

__all__ = [
    "NAMESPACE_SCHEME",
    "ResourceRoutes",
    "ServedResource",
    "namespaced_uri",
    "parse_namespaced_uri",
    "servers_matching_templates",
    "served_resources",
]

NAMESPACE_SCHEME = "mcpvisor"


@dataclass(frozen=True, slots=True)
class ServedResource:
    server: str
    resource: types.Resource
    """As the server lists it (``resource.uri`` is its URI on the server)."""


def namespaced_uri(server: str, uri: str) -> str:
    return f"{NAMESPACE_SCHEME}://{quote(server, safe='')}/{quote(uri, safe='')}"


def parse_namespaced_uri(uri: str) -> tuple[str, str] | None:
    """``(server, URI on that server)`` for a URI made by :func:`namespaced_uri`, else None."""
    prefix = f"{NAMESPACE_SCHEME}://"
    if not uri.startswith(prefix):
        return None
    server, sep, rest = uri[len(prefix) :].partition("/")
    if not sep or not server or not rest:
        return None
    return unquote(server), unquote(rest)


def served_resources(listed: Mapping[str, Sequence[types.Resource]]) -> dict[str, ServedResource]:
    """Served URI -> owner, for every resource of every server (``listed``: server -> its resources)."""
    counts = Counter(str(r.uri) for resources in listed.values() for r in {str(r.uri): r for r in resources}.values())
    served: dict[str, ServedResource] = {}
    for server in sorted(listed):
        for resource in listed[server]:
            uri = str(resource.uri)
            served[uri if counts[uri] == 1 else namespaced_uri(server, uri)] = ServedResource(server, resource)
    return served


def servers_matching_templates(uri: str, templates: Mapping[str, Sequence[types.ResourceTemplate]]) -> list[str]:
    """The servers (sorted) with a resource template that ``uri`` matches (``templates``: server -> its
    templates). A template that does not parse matches nothing."""
    matching = []
    for server in sorted(templates):
        for template in templates[server]:
            try:
                parsed = UriTemplate.parse(template.uri_template)
            except InvalidUriTemplate:
                continue
            if parsed.match(uri) is not None:
                matching.append(server)
                break
    return matching


class ResourceRoutes:
    """The resources and resource templates served now, from the connected servers of ``config``, and
    the route from a URI a client asks for back to the server that owns it. Reads the config's
    connections when asked (the config need not run yet when this is made)."""

    def __init__(self, config: Config) -> None:
        self._config = config

    @property
    def _manager(self) -> McpClientManager:
        return self._config.manager

    def resources(self) -> dict[str, ServedResource]:
        clients = self._manager.clients()
        return served_resources({name: c.resources for name, c in clients.items() if c.status == "connected"})

    def templates(self) -> dict[str, list[types.ResourceTemplate]]:
        """Server -> the resource templates it lists, for connected servers that list any."""
        clients = self._manager.clients()
        return {n: c.resource_templates for n, c in clients.items() if c.status == "connected" and c.resource_templates}

    def served(self) -> tuple[frozenset[str], frozenset[str]]:
        """The URIs and templates served now (when it changes, clients are told)."""
        templates = frozenset(t.uri_template for listed in self.templates().values() for t in listed)
        return frozenset(self.resources()), templates

    def template_owner(self, uri_template: str) -> str:
        """The server that lists ``uri_template`` (the first by name when several do), for completion."""
        owners = [s for s, listed in self.templates().items() if any(t.uri_template == uri_template for t in listed)]
        if not owners:
            raise MCPError(
                types.INVALID_PARAMS,
                f"cannot complete for resource template {uri_template!r}: no connected MCP server lists it",
            )
        return sorted(owners)[0]

    def owner(self, uri: str) -> tuple[str, str]:
        """(server, URI on it) for a URI a client asks for; MCPError naming the reason when none owns it."""
        served = self.resources().get(uri)
        if served is not None:
            return served.server, str(served.resource.uri)
        namespaced = parse_namespaced_uri(uri)
        if namespaced is not None:
            return namespaced
        by_template = servers_matching_templates(uri, self.templates())
        if len(by_template) == 1:
            return by_template[0], uri
        if len(by_template) > 1:  # (no server lists it: a URI made from a template, a resource_link of a result)
            forms = " or ".join(namespaced_uri(n, uri) for n in by_template)
            raise MCPError(
                RESOURCE_NOT_FOUND,
                f"resource {uri!r} is ambiguous: it matches resource templates of servers {', '.join(by_template)}; "
                f"read {forms}",
            )
        clients = self._manager.clients()
        listing = sorted(
            n for n, c in clients.items() if c.status == "connected" and any(str(r.uri) == uri for r in c.resources)
        )
        if len(listing) > 1:  # served under each server's name since a second one lists it (e.g. after a reload)
            forms = " or ".join(namespaced_uri(n, uri) for n in listing)
            raise MCPError(
                RESOURCE_NOT_FOUND, f"resource {uri!r} is listed by servers {', '.join(listing)}: read {forms}"
            )
        with_resources = [n for n, c in clients.items() if c.resources or c.resource_templates]
        if len(with_resources) == 1:  # e.g. a resource_link of the only server with resources
            return with_resources[0], uri
        raise MCPError(
            RESOURCE_NOT_FOUND,
            f"resource {uri!r} not found: no connected MCP server lists it"
            + (f" (servers with resources: {', '.join(sorted(with_resources))})" if with_resources else ""),
        )


async def complete(
    config: Config, prompts: ServedPrompts, routes: ResourceRoutes, params: types.CompleteRequestParams
) -> types.CompleteResult:
    """Completion of a prompt's or a resource template's argument, answered by the server that owns it."""
    ref = params.ref
    upstream_ref: types.PromptReference | types.ResourceTemplateReference
    if isinstance(ref, types.PromptReference):
        with as_mcp_errors(config):  # (several servers offering a prompt by its own name: which to complete)
            if (entry := prompts.find(ref.name)) is None:
                raise config.not_found(ref.name, "prompt")
        server, upstream_ref = entry.server, ref.model_copy(update={"name": entry.prompt.name})
    else:
        server, upstream_ref = routes.template_owner(ref.uri), ref
    client = config.manager.get_client(server)
    if client is None:
        raise MCPError(types.INVALID_PARAMS, f"cannot complete: server {server!r} is not connected")
    context = params.context.arguments if params.context is not None else None
    argument = {"name": params.argument.name, "value": params.argument.value}
    with as_mcp_errors(config):
        return await client.complete(upstream_ref, argument, context, meta=params.meta)
