"""Tool and prompt names that fit the client: served within a length budget.

A client adds its own prefix to what a server offers: Claude Code calls the gateway's
``mcp__github__create_issue`` ``mcp__mcpvisor__mcp__github__create_issue``, and the model APIs behind
such clients refuse tool names over 64 characters (for Claude Code that is a 400 that breaks the
session). So the gateway serves every name within a budget (``serve --name-budget N``, default
:data:`DEFAULT_NAME_BUDGET` = 64 − ``len("mcp__mcpvisor__")``): a name within it is served as it is; a
longer one as its head and a hash of the whole name — the server and the start of the tool's name stay
readable, the same name comes out on every reload, and two names never come out the same (a clash,
however unlikely, is settled by hashing again with a counter, in name order).

Calls and prompt requests may use the served name or the registered one.
"""

from __future__ import annotations

from collections.abc import Iterable

from mcpvisor.core.errors import NotFoundError
from mcpvisor.core.registry import PromptRegistry, RegisteredPrompt, fnv1a_base36
from mcpvisor.gateway.limits import DEFAULT_NAME_BUDGET, MIN_NAME_BUDGET

__all__ = ["DEFAULT_NAME_BUDGET", "MIN_NAME_BUDGET", "ServedNames", "ServedPrompts", "shortened"]

_HASH_LEN = 7
FORMER_NAMES_KEPT = 4096
"""Served names gone since remembered (the latest), for the reason a call of one is refused."""


def shortened(name: str, budget: int, salt: int = 0) -> str:
    """``name`` when it fits ``budget``; else its head, ``_`` and a hash of the whole name, ``budget`` long."""
    if len(name) <= budget and not salt:
        return name
    digest = fnv1a_base36(name if not salt else f"{name}#{salt}")
    return f"{name[: budget - _HASH_LEN - 1]}_{digest}"


class ServedNames:
    """Registered name -> served name under ``budget``, and back, for one set of names (see the module)."""

    def __init__(self, names: Iterable[str], budget: int, *, former: ServedNames | None = None) -> None:
        """``former``: the names served before; a name served then and gone since (its server removed, excluded,
        waiting for approval) still stands for its registered name, so a client calling it is told why."""
        self.budget = budget
        self._served: dict[str, str] = {}
        self._registered: dict[str, str] = {}
        gone: dict[str, str] = {**former._gone, **former._registered} if former is not None else {}
        self._gone: dict[str, str] = dict(list(gone.items())[-FORMER_NAMES_KEPT:])
        ordered = sorted(set(names))
        fitting = [n for n in ordered if len(n) <= budget]
        for name in fitting:  # names within the budget are served as they are, and come first
            self._add(name, name)
        for name in (n for n in ordered if len(n) > budget):
            salt = 0
            served = shortened(name, budget)
            while served in self._registered:
                salt += 1
                served = shortened(name, budget, salt)
            self._add(name, served)

    def _add(self, registered: str, served: str) -> None:
        self._served[registered] = served
        self._registered[served] = registered

    def served(self, registered: str) -> str:
        return self._served.get(registered) or shortened(registered, self.budget)

    def registered(self, name: str) -> str:
        """The registered name a client's ``name`` stands for (an unknown name is returned as it is)."""
        return self._registered.get(name) or self._gone.get(name, name)


class ServedPrompts:
    """Prompts under the tools' naming rule, ``mcp__<server>__<prompt>`` within the budget: unique across
    servers and the same on every reload, unlike the registry's bare names, whose clash rule depends on
    which server connected first."""

    def __init__(self, prompts: PromptRegistry, budget: int) -> None:
        self._by_full_name = {prompts.qualified_name(p): p for p in prompts.get_all_prompts()}  # a's b__p, a__b's p
        names = ServedNames(self._by_full_name, budget)
        self.by_name = {names.served(name): prompt for name, prompt in self._by_full_name.items()}
        """Served name -> prompt."""

    def find(self, name: str) -> RegisteredPrompt | None:
        """The prompt served as ``name``, or named ``name`` before shortening, or — for a client that knows a
        server's prompt by its own name, as with tools — the one prompt by that name on its server. Raises
        :class:`~mcpvisor.core.errors.NotFoundError` naming the served names when several servers offer one."""
        found = self.by_name.get(name) or self._by_full_name.get(name)
        if found is not None:
            return found
        owners = {served: p for served, p in self.by_name.items() if p.prompt.name == name}
        if len(owners) > 1:
            servers = ", ".join(sorted(p.server for p in owners.values()))
            raise NotFoundError(
                f"prompt {name!r} is ambiguous: servers {servers} each offer a prompt by that name; get one of "
                + ", ".join(sorted(owners)),
                kind="prompt",
                target=name,
                reason="ambiguous",
            )
        return next(iter(owners.values()), None)
