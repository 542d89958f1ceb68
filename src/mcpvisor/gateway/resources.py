"""How the gateway names upstream resources, and routes a URI back to the server that owns it.

A resource keeps its own URI when no other connected server lists the same one, so clients see the
URIs the servers use (and ``resource_link`` contents in tool results stay readable as they are).
When two servers list one URI, each is served as ``mcpvisor://<server>/<URI, percent-encoded>``:
reversible, and the same on every reload. A URI no server lists is routed to the one server that
could own it (the one server whose resource template matches it, or the only server with
resources), or refused with a message naming the reason.

Resource templates are served as the servers list them. A ``completion/complete`` for a template
goes to the server that lists that template.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

__all__ = [
    "NAMESPACE_SCHEME",
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
