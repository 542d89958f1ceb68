"""The command line shared by the example servers, and what it makes them do at start.

Standard library only: the light server imports this module and must start in about 30 ms, so
nothing here may pull in `mcp` or `pydantic`.

The command line is a contract used by the demo, the tests and the benchmarks::

    --name NAME            server name, in serverInfo and in tool output (default "example")
    --tools a,b,c          configurable tools (default "echo"); each returns "{name}:{tool}:{text}"
    --prompts p,q          configurable prompts (default none); each returns "{name}:{prompt}:{topic}"
    --resources u,v        resource URIs (default none); each reads "{name}:{uri}"; with --control,
                           touch_resource announces a change (SDK server: on subscriptions/listen)
    --templates t,u        resource URI templates, one {variable} per path segment (light server);
                           a URI one matches reads "{name}:{uri}"; completing a template variable or a
                           prompt argument offers "{name}:{argument}:{value}"
    --marker PATH          append "{pid} {name}" to PATH before serving
    --stderr TEXT          write TEXT to stderr at start
    --control              also expose set_tools, set_prompts, sleep, pid and ask_client (and, in the light
                           server with --resources or --templates, set_resources)
    --crash-on-call TOOL   calling TOOL exits the process with code 3, without replying
    --hang-on-call TOOL    calling TOOL never returns; other requests are still served
    --hang-on-initialize   never answer initialize (nor the modern server/discover probe)
    --error-on-call TOOL=CODE  answer calls of TOOL with a JSON-RPC error of CODE (light server)
    --exit-after SECONDS   exit by itself with code 4 after SECONDS
    --stubborn             ignore SIGTERM and stdin closing, and keep a child that does the same

and, for the SDK server only, ``--transport stdio|streamable-http|sse``, ``--host``, ``--port``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

CRASH_EXIT_CODE = 3
"""Exit code of a process whose `--crash-on-call` tool was called."""

EXIT_AFTER_CODE = 4
"""Exit code of a process that reached its `--exit-after` deadline."""

CONTROL_TOOLS = ("set_tools", "set_prompts", "sleep", "pid", "ask_client")
"""Tools added by `--control`; they take precedence over configurable tools of the same name."""

TRANSPORTS = ("stdio", "streamable-http", "sse")

TEXT_SCHEMA: dict[str, object] = {"type": "object", "properties": {"text": {"type": "string"}}}
"""Input schema of every configurable tool: one optional string, `text`."""


class Options:
    """The parsed command line of an example server."""

    __slots__ = (
        "big",
        "control",
        "crash_on_call",
        "error_on_call",
        "exit_after_s",
        "hang_on_call",
        "hang_on_initialize",
        "host",
        "descriptions",
        "echo_meta",
        "flood_stderr",
        "garbage_stdout",
        "hang_on_read",
        "marker",
        "name",
        "port",
        "prompts",
        "resources",
        "slow_call",
        "stderr",
        "stubborn",
        "templates",
        "tools",
        "transport",
    )

    def __init__(self, namespace: argparse.Namespace) -> None:
        self.name: str = namespace.name
        self.tools: tuple[str, ...] = split_names(namespace.tools)
        self.prompts: tuple[str, ...] = split_names(namespace.prompts)
        self.resources: tuple[str, ...] = split_names(namespace.resources)
        self.templates: tuple[str, ...] = split_names(getattr(namespace, "templates", ""))
        self.marker: str | None = namespace.marker
        self.descriptions: str | None = getattr(namespace, "descriptions", None)
        self.flood_stderr: bool = getattr(namespace, "flood_stderr", False)
        self.garbage_stdout: bool = getattr(namespace, "garbage_stdout", False)
        self.big: bool = getattr(namespace, "big", False)
        self.hang_on_read: str | None = getattr(namespace, "hang_on_read", None)
        self.echo_meta: tuple[str, ...] = split_names(getattr(namespace, "echo_meta", None) or "")
        slow, error = getattr(namespace, "slow_call", None), getattr(namespace, "error_on_call", None)
        self.slow_call: tuple[str, float] | None = _tool_and(slow, float, "--slow-call TOOL=SECONDS")
        self.error_on_call: tuple[str, int] | None = _tool_and(error, int, "--error-on-call TOOL=CODE")
        self.stderr: str | None = namespace.stderr
        self.control: bool = namespace.control
        self.crash_on_call: str | None = namespace.crash_on_call
        self.hang_on_call: str | None = namespace.hang_on_call
        self.hang_on_initialize: bool = namespace.hang_on_initialize
        self.exit_after_s: float | None = namespace.exit_after
        self.stubborn: bool = getattr(namespace, "stubborn", False)
        self.transport: str = getattr(namespace, "transport", "stdio")
        self.host: str = getattr(namespace, "host", "127.0.0.1")
        self.port: int = getattr(namespace, "port", 8000)


def split_names(value: str) -> tuple[str, ...]:
    """Split a comma-separated list of names, dropping blanks and repeats, keeping order."""
    names: dict[str, None] = {}
    for part in value.split(","):
        if name := part.strip():
            names[name] = None
    return tuple(names)


def tool_text(server: str, tool: str, text: str) -> str:
    """The text a configurable tool returns."""
    return f"{server}:{tool}:{text}"


def prompt_text(server: str, prompt: str, topic: str) -> str:
    """The text of the one user message a configurable prompt returns."""
    return f"{server}:{prompt}:{topic}"


def _tool_and(value: str | None, read: Callable[[str], T], usage: str) -> tuple[str, T] | None:
    """``TOOL=VALUE`` as ``(tool, read(value))``; a value ``read`` refuses exits saying ``usage`` (``--OPT TOOL=X``)."""
    if value is None:
        return None
    tool, _, given = value.partition("=")
    try:
        return tool, read(given)
    except ValueError:
        option, _, form = usage.partition(" ")
        raise SystemExit(f"{option}: give {form}, not {value!r}") from None


def build_parser(prog: str, *, network: bool) -> argparse.ArgumentParser:
    """The argument parser; `network` adds the SDK server's transport options."""
    parser = argparse.ArgumentParser(prog=prog, description="An example MCP server shipped with mcpvisor.")
    parser.add_argument("--name", default="example", help="server name, reported in serverInfo and tool output")
    parser.add_argument("--tools", default="echo", help="comma-separated tool names (default: echo)")
    parser.add_argument("--prompts", default="", help="comma-separated prompt names (default: none)")
    parser.add_argument("--resources", default="", help='comma-separated resource URIs; each reads "{name}:{uri}"')
    parser.add_argument(
        "--templates",
        default="",
        help='comma-separated resource URI templates, e.g. "notes://{id}"; a matching URI reads "{name}:{uri}"',
    )
    parser.add_argument("--marker", metavar="PATH", help='append "{pid} {name}" to PATH before serving')
    parser.add_argument(
        "--descriptions",
        metavar="FILE",
        help='JSON object {"tool": "description" or {fields listed instead}} read at every tools/list (light server)',
    )
    parser.add_argument("--stderr", metavar="TEXT", help="write TEXT to stderr at start")
    parser.add_argument(
        "--control", action="store_true", help="expose set_tools, set_prompts, sleep, pid and ask_client"
    )
    parser.add_argument("--crash-on-call", metavar="TOOL", help=f"exit with code {CRASH_EXIT_CODE} when TOOL is called")
    parser.add_argument("--hang-on-call", metavar="TOOL", help="never answer a call of TOOL")
    parser.add_argument("--hang-on-initialize", action="store_true", help="never answer initialize")
    parser.add_argument(
        "--big",
        action="store_true",
        help="add the tool 'blob' (answers with MIB mebibytes of text) and, in the light server, 'spew' (writes "
        "MIB mebibytes to stdout with no newline, and never answers)",
    )
    if not network:
        parser.add_argument(
            "--flood-stderr", action="store_true", help="write to stderr as fast as it can, forever (light server)"
        )
        parser.add_argument("--hang-on-read", metavar="URI", help="never answer a read of URI (light server)")
        parser.add_argument(
            "--echo-meta",
            metavar="NAMES",
            help="answer calls of the configurable tools, gets of the prompts, reads of the resources and completions "
            "for the prompts or templates NAMES (comma-separated) with the request's _meta as JSON",
        )
        parser.add_argument(
            "--slow-call",
            metavar="TOOL=SECONDS",
            help="answer calls of the configurable tool TOOL after SECONDS, sending nothing meanwhile (light server)",
        )
        parser.add_argument(
            "--error-on-call",
            metavar="TOOL=CODE",
            help="answer calls of TOOL with a JSON-RPC error of code CODE, as a server's own failure (light server)",
        )
        parser.add_argument(
            "--garbage-stdout", action="store_true", help="write a line that is not JSON-RPC before every message"
        )
    parser.add_argument(
        "--exit-after", type=float, metavar="SECONDS", help=f"exit with code {EXIT_AFTER_CODE} after SECONDS"
    )
    parser.add_argument(
        "--stubborn",
        action="store_true",
        help="ignore SIGTERM and stay after stdin closes, with a child process that does the same "
        "(only SIGKILL of the whole process group ends them)",
    )
    if network:
        parser.add_argument("--transport", choices=TRANSPORTS, default="stdio", help="default: stdio")
        parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8000, help="HTTP port (default: 8000)")
    return parser


def parse_options(argv: list[str] | None, prog: str, *, network: bool = False) -> Options:
    """Parse `argv` (default: `sys.argv[1:]`); exits with code 2 on a usage error."""
    return Options(build_parser(prog, network=network).parse_args(argv))


ASK_KINDS = ("sampling", "elicitation", "roots")
"""What the ``ask_client`` control tool can ask of the client."""

ASK_CLIENT_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": list(ASK_KINDS)},
        "text": {"type": "string", "description": "the message to sample from, or the question to elicit"},
        "cancel_after": {"type": "number", "description": "light server: withdraw the request after SECONDS"},
    },
    "required": ["kind"],
}
ASK_CLIENT_DESCRIPTION = (
    "Ask the client for a sampled message, an elicited answer or its roots, and return what it answered."
)


def ask_request(kind: str, text: str, *, progress_token: str | None = None) -> dict[str, object]:
    """The request ``ask_client`` sends its client (``method`` and ``params``, as JSON)."""
    params: dict[str, object] = {"_meta": {"progressToken": progress_token}} if progress_token else {}
    if kind == "sampling":
        message = {"role": "user", "content": {"type": "text", "text": text}}
        params |= {"messages": [message], "maxTokens": 100}
        return {"method": "sampling/createMessage", "params": params}
    if kind == "elicitation":
        schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
        params |= {"mode": "form", "message": text, "requestedSchema": schema}
        return {"method": "elicitation/create", "params": params}
    if kind == "roots":
        return {"method": "roots/list", "params": params} if params else {"method": "roots/list"}
    raise ValueError(f"tool 'ask_client': kind must be one of {', '.join(ASK_KINDS)}, not {kind!r}")


def answer_text(kind: str, result: dict[str, object]) -> str:
    """What ``ask_client`` returns for the client's answer (JSON): ``sampled: TEXT``, ``elicited: ACTION
    {CONTENT}`` or ``roots: URI,URI``."""
    if kind == "sampling":
        content = result.get("content")
        text = content.get("text") if isinstance(content, dict) else None
        return f"sampled: {text}"
    if kind == "elicitation":
        return f"elicited: {result.get('action')} {json.dumps(result.get('content'), sort_keys=True)}"
    roots = result.get("roots")
    uris = [str(r.get("uri")) for r in roots if isinstance(r, dict)] if isinstance(roots, list) else []
    return "roots: " + ",".join(uris)


def perform_start_actions(options: Options) -> None:
    """Do what the options ask for before serving: stderr line, marker line, exit timer."""
    if options.stderr is not None:
        sys.stderr.write(options.stderr + "\n")
        sys.stderr.flush()
    if options.marker is not None:
        parent = os.path.dirname(options.marker)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(options.marker, "a", encoding="utf-8") as marker:
            marker.write(f"{os.getpid()} {options.name}\n")
    if options.exit_after_s is not None:
        timer = threading.Timer(options.exit_after_s, os._exit, (EXIT_AFTER_CODE,))
        timer.daemon = True
        timer.start()
