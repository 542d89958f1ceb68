"""The ``/mcp`` status view drawn with rich: the shell's ``/mcp`` and the commands' status tables (SPEC §9)."""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.text import Text

from mcpvisor.host.host import Host
from mcpvisor.host.lsp.events import LspServerView
from mcpvisor.host.pin_review import Change, diff_lines
from mcpvisor.host.pins import pin_mode_of, unread_pins
from mcpvisor.host.status import (
    APPROVE_HINT,
    LOGIN_HINT,
    ONCE_PINS_READABLE,
    ONCE_READABLE,
    ServerView,
    fix_commands,
    short_command,
    state_text,
    trust_hint,
)

LSP_TOOLS = "mcp__lsp__*"
"""The language server tools' names while no MCP server has theirs."""

__all__ = [
    "approving_waits",
    "indented",
    "lsp_state_style",
    "render_definition_changes",
    "render_lsp_status",
    "render_mcp_view",
    "render_status",
]


def indented(renderable: RenderableType, columns: int) -> Padding:
    """``renderable`` indented by ``columns``, wrapped lines too, to the console's width (``COLUMNS``)."""
    return Padding(renderable, (0, 0, 0, columns), expand=False)


def approving_waits(host: Host) -> str:
    """What an approve hint adds while approving cannot work yet (a store that cannot be read), as ``status`` says."""
    if host.approvals.error is not None:
        return ONCE_READABLE
    if unread_pins(host.pins, pin_mode_of(host.settings)[0], host.state.assembled.servers) is not None:
        return ONCE_PINS_READABLE
    return ""


def render_status(
    console: Console,
    rows: list[ServerView],
    *,
    live: bool = True,
    title: str | None = None,
    show_target: bool = False,
    approve_hint: str = APPROVE_HINT,
    login_hint: str = LOGIN_HINT,
    unreadable: bool = False,
    trust: str | None = None,
) -> None:
    """Draw the ``/mcp`` view: servers grouped by source, each ``name · icon text``.

    ``live=False`` shows admission only (nothing was started); ``show_target`` adds what each
    server runs or reaches on a line of its own; ``unreadable`` says a settings file did not parse
    (an empty list then is no news that nothing is configured); ``trust``: the command that trusts the folder
    (by default made from ``approve_hint``)."""
    if title:
        console.print(Text(title, style="bold"))
    if not rows:
        if unreadable:
            console.print("No MCP servers to show: a settings file did not parse (fix it as said above).")
        else:
            console.print("No MCP servers configured.")
        return
    group: tuple[str, str | None] | None = None
    for row in rows:
        if (row.source, row.file) != group:  # each --mcp-config file under a header of its own
            group = (row.source, row.file)
            where = f" ({row.file})" if row.file else ""
            console.print(Text(f"{row.source}{where}", style="bold"))
        icon, text, style = state_text(row, live=live, approve_hint=approve_hint, login_hint=login_hint, trust=trust)
        line = _named(row.name)
        line.append(f"{icon} {text}", style=style)
        _print_row(console, line, row.kept, row.target if show_target else None)


def _named(name: str) -> Text:
    """A row's line up to its state: its name (an entry's blank name shown quoted), then a separator."""
    line = Text(name if name.strip() else repr(name), style="bold")
    line.append(" · ")
    return line


def _print_row(console: Console, line: Text, kept: str | None, target: str | None) -> None:
    """A row's ``line``, with ``kept`` (what runs is not what the file says), then ``target`` (what it runs, if
    shown: an invalid entry has none) on a line of its own."""
    if kept:
        line.append(f" · ! {kept}", style="yellow")
    console.print(indented(line, 2))
    if target:
        console.print(indented(Text(short_command(target), style="dim", overflow="fold"), 6))


_DIFF_STYLES = {"+": "green", "-": "red", "@": "dim"}


def render_definition_changes(console: Console, changes: list[Change]) -> None:
    """What changed in each held tool or prompt, as a coloured diff of its definition (JSON)."""
    for change in changes:
        what = f"{'new' if change.before is None else 'changed'} {change.kind[:-1]} {change.name}"
        console.print(indented(Text(what, style="bold"), 2))
        for line in diff_lines(change):
            console.print(indented(Text(line, style=_DIFF_STYLES.get(line[:1], ""), overflow="fold"), 4))


def lsp_state_style(state: str) -> tuple[str, str]:
    """The icon and style of a language server's state text."""
    if state.startswith("ready"):
        return "●", "green"
    if state.startswith(("needs approval", "starting")):
        return "?" if state.startswith("needs") else "◐", "yellow"
    if state.startswith(("rejected", "failed", "invalid")):
        return "✗", "red"
    return "○", "dim"


def render_lsp_status(
    console: Console, rows: list[LspServerView], *, show_target: bool = False, tools: str | None = None
) -> None:
    """Draw the language servers under the MCP servers: ``name · icon state`` (pid, open documents, error);
    ``tools``: the names their tools are served under, said when an MCP server took theirs (``mcp__lsp_1__*``)."""
    if not rows:
        return
    heading = Text("Language servers", style="bold")
    if tools is not None and tools != LSP_TOOLS:
        heading.append(f"  tools served as {tools}: an MCP server is named 'lsp'", style="yellow")
    console.print(heading)
    for row in rows:
        icon, style = lsp_state_style(row.state)
        line = _named(row.name)
        facts = [f"pid {row.pid}"] if row.pid is not None and row.state.startswith("ready") else []
        if row.open_documents:
            facts.append(f"{row.open_documents} open")
        state = row.state + (f" ({', '.join(facts)})" if facts else "")
        line.append(f"{icon} {state}", style=style)
        line.append(f"  {' '.join(row.extensions)}", style="dim")
        if row.error and row.error not in row.state:  # (an invalid entry's state says it already)
            line.append(f" — {row.error}", style="red")
        _print_row(console, line, row.kept, row.target if show_target else None)


def render_mcp_view(console: Console, host: Host) -> None:
    """The shell's ``/mcp``: the MCP servers, then the language servers, with the shell's own commands as hints."""
    render_status(
        console,
        host.server_views(sign_in_command="/login {name}"),
        title="MCP servers",
        approve_hint="/approve {name}" + approving_waits(host),
        login_hint="/login {name}",
        unreadable=bool(host.settings.errors),
        trust=trust_hint(fix_commands(host.root, host.approvals.decided_with, host.options.env)[0]),
    )
    render_lsp_status(console, host.lsp.views(), tools=host.lsp.tools_served_as())
