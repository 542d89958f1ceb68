"""Typed events the core emits, the bus that carries them, and the one list of listeners every
publisher in mcpvisor keeps (:class:`Listeners`).

Listeners are plain callables run synchronously in the emitting task: they must not block.
A listener that raises is logged and never disturbs the emitter or the other listeners.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias, TypeVar

__all__ = [
    "EventBus",
    "Listeners",
    "McpClientUpdate",
    "McpEvent",
    "PromptsChanged",
    "ReconcileFinished",
    "ServerStateChanged",
    "ServerStates",
    "ServerStatus",
    "ToolsChanged",
    "listener_name",
    "synchronous",
]

logger = logging.getLogger(__name__)

ServerStatus = Literal["disconnected", "connecting", "connected"]


@dataclass(frozen=True, slots=True)
class McpClientUpdate:
    """``mcp-client-update``: some server's status changed, or discovery started or finished."""

    server: str | None = None
    in_progress: bool = False


@dataclass(frozen=True, slots=True)
class ServerStateChanged:
    """What a reader can see of one server changed (status, tools, prompts, error or reason)."""

    server: str
    status: ServerStatus
    reason: str | None
    tools: tuple[str, ...]
    prompts: tuple[str, ...]
    error: str | None
    held_tools: tuple[str, ...] = ()
    """Tools listed but held back (their definition changed since approval), by registered name."""
    held_prompts: tuple[str, ...] = ()
    held_why: str | None = None
    """Why they are held when their definitions did not change (their pins could not be saved); None: changed."""
    warning: str | None = None
    """What is wrong with its latest listing while it stays connected (not valid MCP, a name listed twice, a re-listing
    refused: the server's bug), or None."""


@dataclass(frozen=True, slots=True)
class ReconcileFinished:
    """One reconcile pass is over. ``gated`` maps servers torn down or skipped by gating to the reason;
    ``retried`` are servers that had failed and were started again (never also in ``added``)."""

    added: tuple[str, ...] = ()
    retried: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()
    refiltered: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    gated: Mapping[str, str] = field(default_factory=dict)
    failed: Mapping[str, str] = field(default_factory=dict)
    duration_ms: float = 0.0
    starting: tuple[str, ...] = ()
    """Servers still waiting for their handshake when another pass was asked for: they start on (and their
    state events say how it went)."""


@dataclass(frozen=True, slots=True)
class ToolsChanged:
    """The set of registered tools changed."""


@dataclass(frozen=True, slots=True)
class PromptsChanged:
    """The set of registered prompts changed."""


McpEvent: TypeAlias = McpClientUpdate | ServerStateChanged | ReconcileFinished | ToolsChanged | PromptsChanged
Listener: TypeAlias = Callable[[McpEvent], None]


F = TypeVar("F", bound=Callable[..., Any])


class Listeners(Generic[F]):
    """Functions that listen, in the order they were added. :meth:`add` returns the function that removes
    one (harmless to call twice); iterating gives a snapshot, so a listener may remove itself while it
    is being told. :meth:`tell` calls each synchronously, logging (as ``what``) one that raises."""

    def __init__(self, what: str = "listener") -> None:
        self._what = what
        self._fns: list[F] = []

    def add(self, fn: F) -> Callable[[], None]:
        self._fns.append(fn)

        def remove() -> None:
            if fn in self._fns:
                self._fns.remove(fn)

        return remove

    def __iter__(self) -> Iterator[F]:
        return iter(list(self._fns))

    def __len__(self) -> int:
        return len(self._fns)

    def tell(self, *args: Any) -> None:
        for fn in self:
            try:
                fn(*args)
            except Exception:
                logger.exception("%s %r failed", self._what, fn)


def listener_name(fn: object) -> str:
    """How a listener is named in a log line: its qualified name, else its ``repr``."""
    return getattr(fn, "__qualname__", None) or repr(fn)


def synchronous(listener: F, what: str) -> F:
    """``listener``, which events are told to synchronously; ``TypeError`` for an ``async`` function: it would be
    called and never awaited, hearing nothing (``what`` names it in the message)."""
    if inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(getattr(listener, "__call__", None)):  # noqa: B004
        raise TypeError(
            f"{what} {listener!r} is an async function: listeners are called synchronously and must not block; "
            "from a plain function, hand the event to a task (e.g. a memory object stream's send_nowait)"
        )
    return listener


class EventBus:
    """Synchronous publish/subscribe of :data:`McpEvent` within one session: a listener runs in the
    emitter's step and must not block; one that raises is logged and never stops the others."""

    def __init__(self) -> None:
        self._listeners: Listeners[Listener] = Listeners("event listener")

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add a listener (a plain function: it is called synchronously); returns a function that removes it."""
        return self._listeners.add(synchronous(listener, "event listener"))

    def emit(self, event: McpEvent) -> None:
        self._listeners.tell(event)


class ServerStates:
    """The last :class:`ServerStateChanged` said of each server, emitted on ``events`` only when it differs."""

    def __init__(self, events: EventBus) -> None:
        self._events = events
        self._last: dict[str, ServerStateChanged] = {}

    def say(self, state: ServerStateChanged) -> None:
        if self._last.get(state.server) != state:
            self._last[state.server] = state
            self._events.emit(state)

    def removed(self, name: str) -> None:
        """``name`` is no longer configured: said down once more (if it was not), then forgotten."""
        if name in self._last:
            self.say(ServerStateChanged(name, "disconnected", None, (), (), None))
            del self._last[name]

    def keep_only(self, names: Collection[str]) -> None:
        """The servers not in ``names`` are no longer configured (a gated one, never started, too): :meth:`removed`."""
        for name in self._last.keys() - set(names):
            self.removed(name)

    def snapshot(self) -> dict[str, ServerStateChanged]:
        return dict(self._last)
