"""Listing a server's tools, prompts and resources (every page, cached or not) and following their changes.

Handshake-era notices reach the client's message handler; modern-era ones arrive only on a
``subscriptions/listen`` stream, which :func:`follow_list_changes` keeps open (MCP-SDK-2.md pitfall 6)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import anyio
import anyio.abc
import mcp_types as types
from mcp import Client
from mcp.client.caching import CacheMode
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcpvisor.core.schemas import plainly_valid, schema_problem

__all__ = [
    "ListingTooLong",
    "Listings",
    "Refresher",
    "Withheld",
    "discover",
    "follow_list_changes",
    "list_all_prompts",
    "list_all_resource_templates",
    "list_all_resources",
    "list_all_tools",
    "listen_wanted",
    "problems_of",
    "repeated_names",
    "warning_of",
    "usable_tools",
]

logger = logging.getLogger(__name__)

LISTEN_RETRY_S = 0.5
"""Pause before listening again after a subscription stream dropped."""


class RequestRefresh(Protocol):
    def __call__(self, *, tools: bool = False, prompts: bool = False, resources: bool = False) -> None: ...


_Page = TypeVar("_Page")
_Item = TypeVar("_Item")

REFRESH_GAP_S = 0.5
"""The least time between two refetches of one connection's listings: a server announcing a change at every
listing (or in a loop) is listed again at most this often, and its clients hear of it as often, not without pause."""

MAX_LISTED = 10_000
"""The most tools, prompts, resources or templates one server may list (each); more fails the listing."""
MAX_PAGES = 1_000
"""The most pages one listing may take: a server that always names a next page cannot fill the host's memory."""


class ListingTooLong(MCPError):
    """A server listed more than :data:`MAX_LISTED` of a kind, or in more than :data:`MAX_PAGES` pages."""

    def __init__(self, message: str) -> None:
        super().__init__(types.INTERNAL_ERROR, message)


async def _paginate(
    fetch: Callable[[str | None], Awaitable[_Page]],
    items: Callable[[_Page], list[_Item]],
    what: str,
    *,
    truncate: bool = False,
) -> list[_Item]:
    """Every page; past :data:`MAX_LISTED` items or :data:`MAX_PAGES` pages the listing fails (tools, prompts), or
    with ``truncate`` (resources: a file system's may be many) keeps what came first and logs it."""
    out: list[_Item] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await fetch(cursor)
        out.extend(items(page))
        if len(out) > MAX_LISTED:
            if truncate:
                logger.warning(
                    "a server listed more than %s %s: the first %s are kept", f"{MAX_LISTED:,}", what, f"{MAX_LISTED:,}"
                )
                return out[:MAX_LISTED]
            raise ListingTooLong(f"the server listed more than {MAX_LISTED:,} {what}; none were taken")
        cursor = getattr(page, "next_cursor", None)
        if cursor is None:
            return out
    if truncate:
        logger.warning("a server's %s took more than %s pages: the first pages' are kept", what, f"{MAX_PAGES:,}")
        return out
    raise ListingTooLong(f"listing the server's {what} took more than {MAX_PAGES:,} pages (it keeps naming a next one)")


async def list_all_tools(client: Client, *, bypass: bool = False) -> list[types.Tool]:
    mode: CacheMode = "bypass" if bypass else "use"
    return await _paginate(lambda c: client.list_tools(cursor=c, cache_mode=mode), lambda p: p.tools, "tools")


async def list_all_prompts(client: Client, *, bypass: bool = False) -> list[types.Prompt]:
    mode: CacheMode = "bypass" if bypass else "use"
    return await _paginate(lambda c: client.list_prompts(cursor=c, cache_mode=mode), lambda p: p.prompts, "prompts")


async def list_all_resources(client: Client, *, bypass: bool = False) -> list[types.Resource]:
    mode: CacheMode = "bypass" if bypass else "use"
    return await _paginate(
        lambda c: client.list_resources(cursor=c, cache_mode=mode), lambda p: p.resources, "resources", truncate=True
    )


async def list_all_resource_templates(client: Client, *, bypass: bool = False) -> list[types.ResourceTemplate]:
    """Every resource template; none when the server has resources but does not serve templates (-32601):
    templates are optional, and their absence must never fail a discovery."""
    mode: CacheMode = "bypass" if bypass else "use"
    try:
        return await _paginate(
            lambda c: client.list_resource_templates(cursor=c, cache_mode=mode),
            lambda p: p.resource_templates,
            "resource templates",
            truncate=True,
        )
    except MCPError as exc:
        if exc.code != types.METHOD_NOT_FOUND:
            raise
        return []


def listen_wanted(client: Client) -> bool:
    """Whether a connection needs a ``subscriptions/listen`` stream: modern era, and the server
    advertises list-changed for tools, prompts or resources (others answer -32601, MCP-SDK-2.md pitfall 6)."""
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    return any(_list_changed(client))


def _list_changed(client: Client) -> tuple[bool, bool, bool]:
    """Whether the server announces changes of its tools, prompts and resources lists."""
    caps = client.server_capabilities
    return (
        bool(caps.tools and caps.tools.list_changed),
        bool(caps.prompts and caps.prompts.list_changed),
        bool(caps.resources and caps.resources.list_changed),
    )


async def follow_list_changes(
    client: Client,
    request_refresh: RequestRefresh,
    *,
    describe: Callable[[BaseException | None], str],
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Keep a modern-era ``subscriptions/listen`` stream open and turn its events into
    ``request_refresh`` calls; after a drop, listen again and refetch (there is no replay).
    ``task_status`` is started once the first stream is open (or listening turned out impossible);
    ``describe(exc)`` names the server in log lines, without secrets."""
    want_tools, want_prompts, want_resources = _list_changed(client)
    first = True
    try:
        while True:
            try:
                async with client.listen(
                    tools_list_changed=want_tools,
                    prompts_list_changed=want_prompts,
                    resources_list_changed=want_resources,
                ) as sub:
                    if first:
                        task_status.started()
                        first = False
                    else:  # no replay after a drop: refetch what we depend on
                        request_refresh(tools=want_tools, prompts=want_prompts, resources=want_resources)
                    async for event in sub:
                        kind = type(event).__name__
                        request_refresh(
                            tools=kind == "ToolsListChanged",
                            prompts=kind == "PromptsListChanged",
                            resources=kind == "ResourcesListChanged",
                        )
                return  # the server closed the stream gracefully
            except SubscriptionLost:
                logger.debug("%s: change subscription lost; listening again", describe(None))
                await anyio.sleep(LISTEN_RETRY_S)
            except (ListenNotSupportedError, MCPError) as exc:
                # Never let a missing subscription feature tear the connection down.
                logger.debug("%s does not support change subscriptions", describe(exc))
                return
    finally:
        if first:
            task_status.started()


@dataclass(frozen=True, slots=True)
class Withheld:
    """A tool a server lists that no client could use, so it is neither registered nor served (a server's bug)."""

    name: str
    """Its name on the server."""
    why: str
    """Why, said for people: ``its inputSchema is not a valid JSON Schema (…)``, ``its name is empty``."""


@dataclass(frozen=True, slots=True)
class Listings:
    """What a server lists: its tools (those a client can use), prompts, resources and resource templates, and the
    tools it lists that are withheld."""

    tools: list[types.Tool] = field(default_factory=list)
    prompts: list[types.Prompt] = field(default_factory=list)
    resources: list[types.Resource] = field(default_factory=list)
    resource_templates: list[types.ResourceTemplate] = field(default_factory=list)
    withheld: tuple[Withheld, ...] = ()


SORTED_ON_THE_LOOP = 64
"""The most schemas a listing may hold for its tools to be sorted on the event loop (more: in a worker thread)."""


def usable_tools(tools: list[types.Tool]) -> tuple[list[types.Tool], tuple[Withheld, ...]]:
    """The tools of a listing a client can use, and those withheld: an empty name (it would register as
    ``mcp__<server>__``), or an ``inputSchema`` or ``outputSchema`` that is not a valid JSON Schema (many clients,
    LLM APIs among them, refuse a whole tool list for one such tool)."""
    usable: list[types.Tool] = []
    withheld: list[Withheld] = []
    for tool in tools:
        why = "its name is empty" if not tool.name else None
        for field_name, schema in (("inputSchema", tool.input_schema), ("outputSchema", tool.output_schema)):
            if why is None and schema is not None and (problem := schema_problem(schema)) is not None:
                why = f"its {field_name} is not a valid JSON Schema ({problem})"
        if why is None:
            usable.append(tool)
        else:
            withheld.append(Withheld(tool.name, why))
    return usable, tuple(withheld)


async def _sorted(tools: list[types.Tool]) -> tuple[list[types.Tool], tuple[Withheld, ...]]:
    """:func:`usable_tools`, in a worker thread unless the listing is short and plainly valid: a schema ``jsonschema``
    checks takes milliseconds, and recognising a large one as plainly valid about 0.1 ms (a thousand tools of
    nested models would hold the event loop for a tenth of a second)."""
    schemas = [schema for t in tools for schema in (t.input_schema, t.output_schema) if schema is not None]
    if len(schemas) <= SORTED_ON_THE_LOOP and all(plainly_valid(schema) for schema in schemas):
        return usable_tools(tools)
    return await anyio.to_thread.run_sync(usable_tools, tools)


def problems_of(listings: Listings) -> str | None:
    """What is wrong with a listing, said for people (a name it repeats), or None; the tools it withholds are said
    with the server's filters in mind (:func:`warning_of`)."""
    return repeated_names(listings)


def warning_of(problem: str | None, withheld: Sequence[Withheld], admits: Callable[[str], bool]) -> str | None:
    """What a connected server's row warns of: the tools ``withheld`` from its listing that its tool filters
    (``admits``) do not hide anyway — an excluded tool is no one's concern — then ``problem`` (what else is wrong)."""
    said = [w for w in withheld if admits(w.name)]
    if not said:
        return problem
    first, more = said[0], len(said) - 1
    others = f" (and {more} more tool{'s' if more > 1 else ''} withheld)" if more else ""
    withholding = f"tool {first.name[:80]!r} is withheld: {first.why}; the server needs fixing{others}"
    return f"{withholding}; {problem}" if problem else withholding


def repeated_names(listings: Listings) -> str | None:
    """What a listing repeats (a server's bug: a name reaches one of them, and the first is served), said for
    people: ``it lists tool 'x' more than once; the first is served``, or None."""
    for kind, names in (("tool", [t.name for t in listings.tools]), ("prompt", [p.name for p in listings.prompts])):
        seen: set[str] = set()
        for name in names:
            if name in seen:
                return f"it lists {kind} {name[:80]!r} more than once; the first is served"
            seen.add(name)
    return None


async def discover(client: Client) -> Listings:
    """Everything the server's capabilities say it lists, fetched concurrently."""
    caps = client.server_capabilities
    results: dict[str, list[Any]] = {}

    async def fetch(kind: str, fn: Callable[[Client], Awaitable[list[Any]]]) -> None:
        results[kind] = await fn(client)

    async with anyio.create_task_group() as tg:
        if caps.tools is not None:
            tg.start_soon(fetch, "tools", list_all_tools)
        if caps.prompts is not None:
            tg.start_soon(fetch, "prompts", list_all_prompts)
        if caps.resources is not None:
            tg.start_soon(fetch, "resources", list_all_resources)
            tg.start_soon(fetch, "templates", list_all_resource_templates)
    tools, withheld = await _sorted(results.get("tools", []))
    return Listings(
        tools, results.get("prompts", []), results.get("resources", []), results.get("templates", []), withheld
    )


class Refresher:
    """Refetches of a connection's listings when they change: a burst of requests coalesces into one
    refetch, refetches run one after another, so an older listing never lands after a newer one, and
    :data:`REFRESH_GAP_S` apart at least."""

    def __init__(self) -> None:
        self._tools = self._prompts = self._resources = False
        self._wanted = anyio.Event()

    def request(self, *, tools: bool = False, prompts: bool = False, resources: bool = False) -> None:
        self._tools |= tools
        self._prompts |= prompts
        self._resources |= resources
        self._wanted.set()

    async def run(
        self,
        client: Client,
        current: Callable[[], Listings],
        changed: Callable[[Listings], None],
        failed: Callable[[MCPError | ValidationError], None],
        fetched: Callable[[Listings], None] = lambda listings: None,
    ) -> None:
        """Until cancelled: refetch what was asked for; ``changed(new)`` when it differs from ``current()``,
        ``failed(error)`` when a refetch fails, or its answer is not valid MCP (the next request tries again),
        ``fetched(new)`` after each refetch that did not."""
        while True:
            await self._wanted.wait()
            self._wanted = anyio.Event()
            tools, prompts, resources = self._tools, self._prompts, self._resources
            self._tools = self._prompts = self._resources = False
            now = current()
            try:
                usable, withheld = (
                    await _sorted(await list_all_tools(client, bypass=True)) if tools else (now.tools, now.withheld)
                )
                new = Listings(
                    usable,
                    await list_all_prompts(client, bypass=True) if prompts else now.prompts,
                    await list_all_resources(client, bypass=True) if resources else now.resources,
                    await list_all_resource_templates(client, bypass=True) if resources else now.resource_templates,
                    withheld,
                )
            except (MCPError, ValidationError) as exc:
                failed(exc)
            else:
                fetched(new)
                if new != now:
                    changed(new)
            await anyio.sleep(REFRESH_GAP_S)  # requests meanwhile coalesce into the next refetch
