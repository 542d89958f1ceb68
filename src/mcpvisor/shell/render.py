"""How the shell shows tools, prompts and results (pure: each function draws onto a Console).

Text that comes from servers (descriptions, results) is printed as plain text, never as rich
markup, so a server cannot restyle or hide parts of the terminal output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.text import Text

from mcpvisor.core.registry import RegisteredPrompt, RegisteredTool
from mcpvisor.host.status import plural
from mcpvisor.shell.views import indented

if TYPE_CHECKING:
    from mcp_types import CallToolResult, GetPromptResult

__all__ = ["content_text", "first_line", "render_call_result", "render_prompt_result", "render_prompts", "render_tools"]

DESCRIPTION_MAX_CHARS = 80
"""What Tab's menu shows of a description (the listings fit theirs to the console's width: :func:`listed`)."""
FITTED_MIN_CELLS = 20
"""A description with less room than this on its line is not cut: the console wraps it."""

R = TypeVar("R", RegisteredTool, RegisteredPrompt)


def first_line(text: str | None, limit: int | None = DESCRIPTION_MAX_CHARS) -> str:
    """The first non-empty line of a description, cut to ``limit`` characters (None: whole)."""
    for line in (text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"
    return ""


def fitted(text: str, cells: int) -> str:
    """``text`` cut to ``cells`` columns with ``…``, after its last whole word that fits (mid-word only when that
    word takes more than half of them)."""
    if cell_len(text) <= cells:
        return text
    cut = set_cell_size(text, cells - 1)
    space = len(cut) if text[len(cut) : len(cut) + 1] == " " else cut.rfind(" ")  # (the end of the cut is a word's end)
    if space > cells // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def listed(console: Console, line: Text, description: str | None, indent: int) -> Text:
    """``line`` (a tool's or prompt's name) followed by the first line of its ``description``, cut to what is left of
    the console's width: one line each at a terminal; to a pipe or a file (no width: ``consoles``), nothing is cut."""
    text = first_line(description, limit=None)
    if text:
        room = console.width - indent - line.cell_len - len(" — ")
        line.append(f" — {fitted(text, room) if room >= FITTED_MIN_CELLS else text}")
    return line


def _by_server(names: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for server, name in sorted(names):
        groups.setdefault(server, []).append(name)
    return groups


def render_tools(console: Console, tools: list[RegisteredTool], *, server: str = "") -> None:
    """Registered tool names grouped by server, each with its description's first line (``server``'s only)."""
    _render_grouped(
        console, tools, server, "tool", lambda t: listed(console, Text(t.name, style="cyan"), t.tool.description, 2)
    )


def render_prompts(console: Console, prompts: list[RegisteredPrompt], *, server: str = "") -> None:
    """Registered prompt names grouped by server, with their arguments and descriptions (``server``'s only)."""

    def line_of(registered: RegisteredPrompt) -> Text:
        prompt = registered.prompt
        line = Text(registered.name, style="cyan")
        arguments = [f"{a.name}{'' if a.required else '?'}" for a in prompt.arguments or ()]
        if arguments:
            line.append(f" ({', '.join(arguments)})", style="dim")
        return listed(console, line, prompt.description, 2)

    _render_grouped(console, prompts, server, "prompt", line_of)


def _render_grouped(
    console: Console, entries: Sequence[R], server: str, kind: str, line_of: Callable[[R], Text]
) -> None:
    """``entries`` (``server``'s only, if named) under a heading per server that counts them, one line each."""
    entries = [e for e in entries if e.server == server] if server else entries
    if not entries:
        console.print(_none_registered(f"{kind}s", server))
        return
    by_name = {e.name: e for e in entries}
    for group, names in _by_server((e.server, e.name) for e in entries).items():
        console.print(Text(f"{group} ({plural(len(names), kind)})", style="bold"))
        for name in names:
            console.print(indented(line_of(by_name[name]), 2))


def _none_registered(what: str, server: str) -> str:
    if server:
        return f"No {what} registered from a server named {server!r} (/mcp shows the servers and their states)."
    return f"No {what} registered (see /mcp for server states)."


def content_text(block: Any) -> str:
    """One content block as text: text as is, anything else as a short bracketed summary."""
    from mcp_types import EmbeddedResource, ResourceLink, TextContent, TextResourceContents

    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.uri}]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return resource.text
        return f"[resource {resource.uri} ({resource.mime_type or 'binary'})]"
    kind = getattr(block, "type", type(block).__name__)
    mime = getattr(block, "mime_type", None)
    return f"[{kind} content{f' ({mime})' if mime else ''}]"


def render_call_result(console: Console, result: CallToolResult) -> None:
    parts = [content_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, indent=2)]
    # A carriage return would have the terminal write over what came before it on its line (an agent reads it all).
    text = "\n".join(parts).replace("\r\n", "\n").replace("\r", "\n")
    # A tool's colours (a test runner's, a linter's) are kept as styles; any other escape sequence is dropped,
    # and what control characters remain the console shows as symbols.
    if result.is_error:
        console.print(Text("✗ the tool reported an error:", style="red"))
        console.print(Text.from_ansi(text, style="red") if text else Text("(no details)", style="red"), soft_wrap=True)
        return
    console.print(Text.from_ansi(text) if text else Text("(empty result)", style="dim"), soft_wrap=True)


def render_prompt_result(console: Console, result: GetPromptResult) -> None:
    if result.description:
        console.print(Text(result.description, style="dim"), soft_wrap=True)
    for message in result.messages:
        line = Text(f"[{message.role}] ", style="bold")
        line.append(content_text(message.content))
        console.print(line, soft_wrap=True)
