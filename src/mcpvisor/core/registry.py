"""Tool and prompt registries and the naming rules (SPEC §5.2).

Tools register as ``mcp__<server>__<tool>``. A name longer than 63 characters, or with
characters outside ``[A-Za-z0-9_-]``, is sanitised, truncated and suffixed with ``_`` plus a
7-character base-36 FNV-1a hash of the original, so names stay unique and valid for model
providers. Two servers' tools that would get the same name (server ``a``'s ``b__c``, server ``a__b``'s ``c``)
are told apart the same way whatever their order: the longer server name keeps it, the other is hashed
(:func:`qualified_name`) for as long as the registry lives, even while the longer one is down or no longer lists
that tool, unless it has since stopped listing :data:`FORMER_NAMES_KEPT` newer names (:class:`_Claims`). Prompts
register by bare name; on a clash the later one becomes ``<server>_<name>``.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpvisor.core.events import ServerStateChanged, ServerStatus
from mcpvisor.core.exposure import Exposure
from mcpvisor.core.server_config import McpServerConfig

if TYPE_CHECKING:
    from mcp_types import Prompt, Tool

logger = logging.getLogger(__name__)

__all__ = [
    "FORMER_NAMES_KEPT",
    "MAX_TOOL_NAME_LEN",
    "Admitted",
    "DefinitionGate",
    "TOOL_PREFIX",
    "PromptRegistry",
    "RegisteredPrompt",
    "RegisteredTool",
    "ToolRegistry",
    "admit",
    "fnv1a_base36",
    "mcp_tool_name",
    "qualified_name",
    "server_state",
]

TOOL_PREFIX = "mcp__"
MAX_TOOL_NAME_LEN = 63
_HASH_LEN = 7
_VALID = re.compile(r"^[A-Za-z0-9_-]+$")
_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
FORMER_NAMES_KEPT = 1000
"""How many names a server listed once and lists no more stay its own (per server, the most recently listed), so
that a server inventing new tool names at every listing does not grow the registry for as long as it lives."""


def fnv1a_base36(text: str) -> str:
    """32-bit FNV-1a of the UTF-8 bytes, in base 36, zero-padded to 7 characters."""
    h = 0x811C9DC5
    for byte in text.encode():
        h ^= byte
        h = (h * 0x01000193) & 0xFFFFFFFF
    digits = ""
    while h:
        h, rem = divmod(h, 36)
        digits = _BASE36[rem] + digits
    return digits.rjust(_HASH_LEN, "0")


def mcp_tool_name(server: str, tool: str) -> str:
    """The registered name of ``tool`` from ``server``."""
    original = f"{TOOL_PREFIX}{server}__{tool}"
    if len(original) <= MAX_TOOL_NAME_LEN and _VALID.match(original):
        return original
    sanitised = _INVALID_CHAR.sub("_", original)
    head = sanitised[: MAX_TOOL_NAME_LEN - _HASH_LEN - 1]
    return f"{head}_{fnv1a_base36(original)}"


def may_be_of(name: str, server: str) -> int:
    """How long a prefix of the registered tool name ``name`` says it is ``server``'s (0: none): ``mcp__<server>__``,
    or that prefix as :func:`mcp_tool_name` makes it valid (a dot, a space or a long name)."""
    prefix = f"{TOOL_PREFIX}{server}__"
    if name.startswith(prefix):
        return len(prefix)
    valid = _INVALID_CHAR.sub("_", prefix)[: MAX_TOOL_NAME_LEN - _HASH_LEN - 1]
    return len(valid) if valid != prefix and name.startswith(valid) else 0


def owner_among(name: str, servers: Iterable[str]) -> str | None:
    """The one of ``servers`` whose prefix the registered tool name ``name`` has (:func:`may_be_of`), the longest."""
    matches = {server: may_be_of(name, server) for server in servers}
    best = max(matches, key=lambda server: (matches[server], len(server)), default=None)
    return best if best is not None and matches[best] else None


def qualified_name(server: str, own: str, claimants: Collection[str]) -> str:
    """The registered name of ``server``'s tool or prompt ``own`` when the servers ``claimants`` each have one that
    :func:`mcp_tool_name` names alike (server ``a``'s ``b__c`` and server ``a__b``'s ``c``): the one whose server
    name is the longest — the server a reader of the name takes its ``mcp__<server>__`` for — has it, and every
    other the hashed form of its server and name. Which one connected first never matters."""
    name = mcp_tool_name(server, own)
    if max(claimants, key=lambda claimant: (len(claimant), claimant), default=server) == server:
        return name
    head = _INVALID_CHAR.sub("_", name)[: MAX_TOOL_NAME_LEN - _HASH_LEN - 1]
    return f"{head}_{fnv1a_base36(server + chr(0) + own)}"


@dataclass(frozen=True, slots=True)
class Admitted:
    """What a :data:`DefinitionGate` lets register of a server's tools and prompts, and what it holds back."""

    tools: Sequence[Tool]
    prompts: Sequence[Prompt]
    held_tools: tuple[str, ...] = ()
    """Tools held back, by their name on the server."""
    held_prompts: tuple[str, ...] = ()
    why: str | None = None
    """Why they are held when it is not only that their definition changed, so that accepting them is no fix (their
    pins could not be saved, or read: which file, why, the fix); None: changed since approval."""


DefinitionGate = Callable[[str, McpServerConfig, "Sequence[Tool]", "Sequence[Prompt]"], Admitted]
"""Decides, each time a connected server's tools or prompts are (re)listed, which of them register
(the host pins approved definitions with it). It runs in the event loop: keep it quick."""


def admit(
    gate: DefinitionGate, name: str, cfg: McpServerConfig, tools: Sequence[Tool], prompts: Sequence[Prompt]
) -> Admitted:
    """What ``gate`` admits of server ``name``'s tools and prompts; all of them held when the gate fails."""
    try:
        return gate(name, cfg, tools, prompts)
    except Exception:
        logger.exception("checking the definitions of server %r failed; holding all of them", name)
        return Admitted((), (), tuple(t.name for t in tools), tuple(p.name for p in prompts))


def _first_of_each_name(tools: list[Tool]) -> tuple[list[Tool], list[str]]:
    """``tools`` without a later tool of a name listed before (a server's bug: a call by the name reaches one of
    them, and the first is the one described), and the names listed more than once."""
    firsts: dict[str, Tool] = {}
    repeated: dict[str, None] = {}
    for t in tools:
        if t.name in firsts:
            repeated[t.name] = None
        else:
            firsts[t.name] = t
    return list(firsts.values()), list(repeated)


class _Claims:
    """``mcp__<server>__<name>`` -> the servers whose tools (or prompts) have made it: every name a server lists
    now, and of those it listed once and no longer lists the :data:`FORMER_NAMES_KEPT` it listed last, oldest
    forgotten first. A remembered name goes to no other server (:func:`qualified_name`); a forgotten one may go to
    another whose tool or prompt makes it alike (server ``a``'s ``b__c`` once server ``a__b`` has moved on)."""

    def __init__(self) -> None:
        self._claimants: dict[str, set[str]] = {}
        self._of: dict[str, OrderedDict[str, None]] = {}
        """server -> the names it has made, the most recently listed last."""

    def claim(self, server: str, plains: Iterable[str]) -> list[str]:
        """Record that ``server`` lists ``plains`` now. Returns the names it forgot that other servers still claim
        (their names may change)."""
        listed = list(dict.fromkeys(plains))
        made = self._of.setdefault(server, OrderedDict())
        for plain in listed:
            made[plain] = None
            made.move_to_end(plain)
            self._claimants.setdefault(plain, set()).add(server)
        forgotten: list[str] = []
        while len(made) > len(listed) + FORMER_NAMES_KEPT:
            plain, _ = made.popitem(last=False)
            claimants = self._claimants[plain]
            claimants.discard(server)
            if claimants:
                forgotten.append(plain)
            else:
                del self._claimants[plain]
        return forgotten

    def of(self, plain: str) -> set[str]:
        """The servers that have made ``plain`` (empty: none)."""
        return self._claimants.get(plain, set())

    def __len__(self) -> int:
        """How many names are claimed."""
        return len(self._claimants)


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    name: str
    """Registered name, unique across servers."""
    server: str
    tool: Tool
    """The tool as the server describes it (``tool.name`` is its name on the server)."""


@dataclass(frozen=True, slots=True)
class RegisteredPrompt:
    name: str
    server: str
    prompt: Prompt


class ToolRegistry:
    """Every admitted tool of every connected server, by registered name."""

    def __init__(self) -> None:
        self._by_name: dict[str, RegisteredTool] = {}
        self._by_server: dict[str, list[str]] = {}
        self._offered: dict[str, list[Tool]] = {}
        self._claims = _Claims()
        """``mcp__<server>__<tool>`` -> the servers whose tools make it (more than one: :func:`qualified_name`)."""
        self._renamed: set[str] = set()

    def set_server_tools(self, server: str, tools: Iterable[Tool], exposure: Exposure) -> bool:
        """Replace ``server``'s tools with those ``exposure`` admits. Returns whether anything changed.

        Names are unique across servers: when ``mcp__<server>__<tool>`` is another server's too (server ``a``
        with tool ``b__c`` and server ``a__b`` with tool ``c``), the one with the longer server name has it and
        the other the hashed form (:func:`qualified_name`), whichever connected first: a server's coming may
        rename another's tools (:meth:`take_renamed` says whose). Its going gives its names to no other server
        while the registry lives: a call of one while it is down or removed is told so, never sent elsewhere. Of the
        names a server no longer lists, only the :data:`FORMER_NAMES_KEPT` it listed last are kept so (a server
        inventing new names at every listing would grow the registry without bound); when it forgets one, another
        server's tool hashed for it gets it back (and is in :meth:`take_renamed`)."""
        admitted, repeated = _first_of_each_name([t for t in tools if exposure.admits(t.name)])
        if admitted == self._offered.get(server, []):
            return False
        for tool in repeated:  # said when its listing changes, not at every listing of a chatty server
            logger.warning(
                "server %r lists tool %r more than once; only the first is served (the server needs fixing)",
                server,
                tool,
            )
        self.remove_mcp_tools_by_server(server)
        if not admitted:
            return True
        self._offered[server] = admitted
        plains = [mcp_tool_name(server, t.name) for t in admitted]
        for plain in [*self._claims.claim(server, plains), *plains]:
            self._settle(plain)  # another server's tool that has the name and yields it moves aside first
        names = [
            qualified_name(server, t.name, self._claims.of(plain)) for t, plain in zip(admitted, plains, strict=True)
        ]
        for name, t in zip(names, admitted, strict=True):
            self._by_name[name] = RegisteredTool(name, server, t)
        self._by_server[server] = names
        return True

    def remove_mcp_tools_by_server(self, server: str) -> bool:
        names = self._by_server.pop(server, [])
        for name in names:
            self._by_name.pop(name, None)
        self._offered.pop(server, None)  # (its claims stay: a name it had goes to no other server, see _Claims)
        return bool(names)

    def _settle(self, plain: str) -> None:
        """Give each registered tool whose ``mcp__<server>__<tool>`` is ``plain`` the name it has now (the one
        that yields first, so the name is free for the one that takes it)."""
        claimants = self._claims.of(plain)
        entries = [
            entry
            for server in claimants
            for entry in self.tools_of(server)
            if mcp_tool_name(server, entry.tool.name) == plain
        ]
        moves = [(entry, qualified_name(entry.server, entry.tool.name, claimants)) for entry in entries]
        for entry, name in sorted(moves, key=lambda move: move[1] == plain):
            if name == entry.name:
                continue
            if self._by_name.get(entry.name) is entry:
                del self._by_name[entry.name]
            self._by_name[name] = RegisteredTool(name, entry.server, entry.tool)
            own = self._by_server[entry.server]
            own[own.index(entry.name)] = name
            self._renamed.add(entry.server)

    def take_renamed(self) -> set[str]:
        """The servers whose tools were renamed by another server's coming since the last call."""
        renamed, self._renamed = self._renamed, set()
        return renamed

    def get_tool(self, name: str) -> RegisteredTool | None:
        return self._by_name.get(name)

    def get_all_tools(self) -> list[RegisteredTool]:
        """Every registered tool now, as a new list (a snapshot: later changes do not reach it). Never raises."""
        return list(self._by_name.values())

    def find_by_own_name(self, tool: str) -> list[RegisteredTool]:
        """The registered tools whose name on their server is ``tool`` (a scan: for names not registered)."""
        return [entry for entry in self._by_name.values() if entry.tool.name == tool]

    def tools_of(self, server: str) -> list[RegisteredTool]:
        return [self._by_name[n] for n in self._by_server.get(server, ())]

    def names(self) -> frozenset[str]:
        """The registered names (``mcp__<server>__<tool>``) now, a frozen snapshot. Never raises."""
        return frozenset(self._by_name)


class PromptRegistry:
    """Every prompt of every connected server. Names are stable while their server stays."""

    def __init__(self) -> None:
        self._by_name: dict[str, RegisteredPrompt] = {}
        self._by_server: dict[str, list[str]] = {}
        self._claims = _Claims()
        """``mcp__<server>__<prompt>`` -> the servers whose prompts made it, as :class:`ToolRegistry` keeps them."""

    def set_server_prompts(self, server: str, prompts: Iterable[Prompt]) -> bool:
        prompts = list(prompts)
        before = [self._by_name[n].prompt for n in self._by_server.get(server, ())]
        if before == prompts:
            return False
        self._claims.claim(server, [mcp_tool_name(server, prompt.name) for prompt in prompts])
        self.remove_prompts_by_server(server)
        names: list[str] = []
        offered: set[str] = set()
        for prompt in prompts:
            if prompt.name in offered:
                continue  # the same prompt name twice from one server: keep the first
            offered.add(prompt.name)
            # The first server to offer a name keeps it bare; another gets its server's name in front, and if even
            # that is taken (a prompt of the first named so), the gateway's qualified name, which nothing takes.
            candidates = (prompt.name, f"{server}_{prompt.name}", mcp_tool_name(server, prompt.name))
            name = next((c for c in candidates if c not in self._by_name), None)
            if name is None:
                logger.warning("prompt %r of server %r left out: every name for it is taken", prompt.name, server)
                continue
            self._by_name[name] = RegisteredPrompt(name, server, prompt)
            names.append(name)
        if names:
            self._by_server[server] = names
        return True

    def remove_prompts_by_server(self, server: str) -> bool:
        names = self._by_server.pop(server, [])
        for name in names:
            self._by_name.pop(name, None)
        return bool(names)

    def get_prompt(self, name: str) -> RegisteredPrompt | None:
        return self._by_name.get(name)

    def qualified_name(self, entry: RegisteredPrompt) -> str:
        """``mcp__<server>__<prompt>`` of a registered prompt, unique across servers as a tool's is (the gateway's
        name for it): :func:`qualified_name` among every server whose prompt made that name while the registry
        lives."""
        claimants = self._claims.of(mcp_tool_name(entry.server, entry.prompt.name)) or {entry.server}
        return qualified_name(entry.server, entry.prompt.name, claimants)

    def get_all_prompts(self) -> list[RegisteredPrompt]:
        return list(self._by_name.values())

    def prompts_of(self, server: str) -> list[RegisteredPrompt]:
        return [self._by_name[n] for n in self._by_server.get(server, ())]

    def names(self) -> frozenset[str]:
        """The registered prompt names now, a frozen snapshot. Never raises."""
        return frozenset(self._by_name)


def server_state(
    name: str,
    status: ServerStatus | None,
    error: str | None,
    tools: ToolRegistry,
    prompts: PromptRegistry,
    held: Admitted | None,
    *,
    reason: str | None = None,
) -> ServerStateChanged:
    """What readers see of server ``name``: its ``status`` (None: no connection is held, so it is down for
    ``reason``), its registered tools and prompts and what is held back of them."""
    if status is None:
        return ServerStateChanged(name, "disconnected", reason, (), (), None)
    held_tools = tuple(mcp_tool_name(name, t) for t in held.held_tools) if held else ()
    return ServerStateChanged(
        name,
        status,
        None,
        tuple(t.name for t in tools.tools_of(name)),
        tuple(p.name for p in prompts.prompts_of(name)),
        error,
        held_tools,
        held.held_prompts if held else (),
        held.why if held else None,
    )
