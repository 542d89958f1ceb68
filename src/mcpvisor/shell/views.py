"""The ``/mcp`` status view drawn with rich: the shell's ``/mcp`` and the commands' status tables (SPEC §9)."""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.text import Text

from mcpvisor.host.pins import Change, diff_lines
from mcpvisor.host.status import APPROVE_HINT, LOGIN_HINT, ServerView, short_command, state_text

__all__ = ["indented", "render_definition_changes", "render_status"]


def indented(renderable: RenderableType, columns: int) -> Padding:
    """``renderable`` indented by ``columns``, wrapped lines too, to the console's width (``COLUMNS``)."""
    return Padding(renderable, (0, 0, 0, columns), expand=False)


def render_status(
    console: Console,
    rows: list[ServerView],
    *,
    live: bool = True,
    title: str | None = None,
    show_target: bool = False,
    approve_hint: str = APPROVE_HINT,
    login_hint: str = LOGIN_HINT,
) -> None:
    """Draw the ``/mcp`` view: servers grouped by source, each ``name · icon text``.

    ``live=False`` shows admission only (nothing was started); ``show_target`` adds what each
    server runs or reaches on a line of its own."""
    if title:
        console.print(Text(title, style="bold"))
    if not rows:
        console.print("No MCP servers configured.")
        return
    group: str | None = None
    for row in rows:
        if row.source != group:
            group = row.source
            where = f" ({row.file})" if row.file and row.source != "Command line" else ""
            console.print(Text(f"{group}{where}", style="bold"))
        icon, text, style = state_text(row, live=live, approve_hint=approve_hint, login_hint=login_hint)
        line = Text(row.name, style="bold")
        line.append(" · ")
        line.append(f"{icon} {text}", style=style)
        console.print(indented(line, 2))
        if show_target:
            console.print(indented(Text(short_command(row.target), style="dim", overflow="fold"), 6))


_DIFF_STYLES = {"+": "green", "-": "red", "@": "dim"}


def render_definition_changes(console: Console, changes: list[Change]) -> None:
    """What changed in each held tool or prompt, as a coloured diff of its definition (JSON)."""
    for change in changes:
        what = f"{'new' if change.before is None else 'changed'} {change.kind[:-1]} {change.name}"
        console.print(indented(Text(what, style="bold"), 2))
        for line in diff_lines(change):
            console.print(indented(Text(line, style=_DIFF_STYLES.get(line[:1], ""), overflow="fold"), 4))
