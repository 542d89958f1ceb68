"""Reading what people type into the shell: slash commands and their arguments (pure)."""

from __future__ import annotations

import io
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

__all__ = [
    "BUILTIN_COMMANDS",
    "ArgumentError",
    "Command",
    "parse_command",
    "parse_json_object",
    "parse_prompt_arguments",
    "render_help",
    "server_name",
    "split_name",
]

BUILTIN_COMMANDS: Mapping[str, tuple[str, str]] = {
    "mcp": ("", "servers and their state, grouped by source"),
    "tools": ("[SERVER]", "registered tools by server (SERVER's only)"),
    "prompts": ("[SERVER]", "registered prompts by server (SERVER's only)"),
    "call": ("NAME [JSON]", 'call a tool, e.g. /call mcp__a__echo {"text": "hi"}'),
    "prompt": ("NAME [JSON]", "get a prompt and show its messages"),
    "reload": ("", "re-read every settings file and reconcile"),
    "approve": ("NAME", "approve a project or workspace server (connects it)"),
    "reject": ("NAME", "reject a project or workspace server (keeps it disconnected)"),
    "login": ("NAME", "sign in to a remote server that needs OAuth (opens the browser)"),
    "help": ("", "this list"),
    "quit": ("", "leave the shell (also /exit, Ctrl-D)"),
}
"""Command name -> (argument synopsis, one-line description). ``/exit`` is an alias of ``/quit``."""

ALIASES: Mapping[str, str] = {"exit": "quit", "q": "quit", "?": "help"}


class ArgumentError(ValueError):
    """A command's arguments cannot be read; the message says how to write them."""


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    """Without the slash, aliases resolved (``exit`` -> ``quit``)."""
    argument: str
    """Everything after the name, stripped."""


def parse_command(line: str) -> Command | None:
    """``/name rest`` -> Command; anything that does not start with ``/`` -> None."""
    text = line.strip()
    if not text.startswith("/") or len(text) == 1:
        return None
    name, _, rest = text[1:].partition(" ")
    name = name.strip()
    return Command(ALIASES.get(name, name), rest.strip())


def split_name(argument: str) -> tuple[str, str]:
    """``NAME rest`` -> (NAME, rest); a NAME in quotes (``'a b'``, as the hints write a name with a space or a
    quote in it) is read as a shell would."""
    if argument[:1] in ("'", '"'):
        stream = io.StringIO(argument)
        lexer = shlex.shlex(stream, posix=True)
        lexer.whitespace_split = True
        try:
            name = lexer.get_token() or ""
        except ValueError as exc:  # no closing quotation
            raise ArgumentError(f"cannot read the name: {exc}") from None
        return name, stream.read().strip()
    parts = argument.split(None, 1)
    if not parts:
        return "", ""
    return parts[0], parts[1].strip() if len(parts) > 1 else ""


def server_name(argument: str) -> str:
    """The one argument of ``/tools`` and ``/prompts``: a server's name, in quotes (as completion writes a name with a
    space) or as typed."""
    if argument[:1] in ("'", '"'):
        try:
            name, rest = split_name(argument)
        except ArgumentError:  # no closing quote: a name as typed
            return argument
        if not rest:
            return name
    return argument


def parse_json_object(text: str, *, example: str) -> dict[str, Any]:
    """Arguments written as a JSON object (empty text: no arguments)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ArgumentError(f"arguments are not valid JSON ({exc}); write a JSON object, e.g. {example}") from None
    if not isinstance(value, dict):
        raise ArgumentError(f"arguments must be a JSON object, e.g. {example}")
    return value


def parse_prompt_arguments(text: str, argument_names: Sequence[str], *, example: str) -> dict[str, str]:
    """A prompt's arguments: a JSON object, or plain text given to the prompt's first argument."""
    if text.startswith("{"):
        raw = parse_json_object(text, example=example)
        return {key: value if isinstance(value, str) else json.dumps(value) for key, value in raw.items()}
    if not text:
        return {}
    if not argument_names:
        raise ArgumentError(f"this prompt takes no arguments; drop {text!r}")
    return {argument_names[0]: text}


def render_help(console: Console, prompt_commands: Sequence[str] = ()) -> None:
    console.print(Text("Commands", style="bold"))
    for name, (synopsis, description) in BUILTIN_COMMANDS.items():
        usage = f"/{name} {synopsis}".rstrip()
        console.print(Text(f"  {usage:<22}{description}"))
    if prompt_commands:
        console.print(Text("MCP prompts (run one as /NAME [text or JSON])", style="bold"))
        console.print(Text("  " + "  ".join(f"/{name}" for name in prompt_commands)))
