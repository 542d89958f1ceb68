"""The light server's control and big-message tools (their descriptions and input schemas), small
helpers for its answers, and the misbehaviours it can be asked for (``--stubborn``, ``--flood-stderr``).
Standard library only."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from typing import Any

from mcpvisor.examples._options import ASK_CLIENT_DESCRIPTION, ASK_CLIENT_SCHEMA, prompt_text

__all__ = [
    "BIG_TOOLS",
    "CONTROL_DESCRIPTIONS",
    "CONTROL_SCHEMAS",
    "LOG_LEVELS",
    "MIB_SCHEMA",
    "be_stubborn",
    "echoed_meta",
    "flood_stderr",
    "prompt_list",
    "template_regex",
    "text_result",
]

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

CONTROL_SCHEMAS: dict[str, dict[str, object]] = {
    "set_tools": {
        "type": "object",
        "properties": {"names": {"type": "string", "description": "comma-separated tool names"}},
        "required": ["names"],
    },
    "set_prompts": {
        "type": "object",
        "properties": {"names": {"type": "string", "description": "comma-separated prompt names"}},
        "required": ["names"],
    },
    "sleep": {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]},
    "set_resources": {
        "type": "object",
        "properties": {"names": {"type": "string", "description": "comma-separated resource URIs"}},
        "required": ["names"],
    },
    "touch_resource": {
        "type": "object",
        "properties": {"uri": {"type": "string", "description": "the resource that changed"}},
        "required": ["uri"],
    },
    "pid": {"type": "object", "properties": {}},
    "ask_client": ASK_CLIENT_SCHEMA,
    "log": {
        "type": "object",
        "properties": {
            "level": {"type": "string", "enum": list(LOG_LEVELS)},
            "text": {"type": "string"},
            "count": {"type": "integer", "minimum": 1, "description": "send COUNT messages: 'TEXT #1', 'TEXT #2', ..."},
        },
        "required": ["level", "text"],
    },
}

MIB_SCHEMA: dict[str, object] = {"type": "object", "properties": {"mib": {"type": "number"}}, "required": ["mib"]}
BIG_TOOLS = {
    "blob": "Answer with MIB mebibytes of text (one JSON-RPC line).",
    "spew": "Write MIB mebibytes to stdout with no newline, and never answer.",
}

CONTROL_DESCRIPTIONS = {
    "set_tools": "Replace the configurable tools and announce the change.",
    "set_prompts": "Replace the configurable prompts and announce the change.",
    "set_resources": "Replace the resources and announce the change.",
    "touch_resource": "Announce that a resource changed to a client subscribed to it.",
    "sleep": "Sleep for the given number of seconds, then return 'slept'.",
    "pid": "Return the server's process id.",
    "ask_client": ASK_CLIENT_DESCRIPTION,
    "log": "Send a log message at the given level (if the client's level lets it through).",
}


def log_messages(level: str, text: str, count: object = None) -> list[dict[str, object]]:
    """The ``notifications/message`` the ``log`` tool sends (logger ``light``): ``text``, or with a ``count``
    that many, ``TEXT #1``, ``TEXT #2``, ..."""
    texts = [text] if count is None else [f"{text} #{i}" for i in range(1, int(str(count)) + 1)]
    return [
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": level, "logger": "light", "data": t}}
        for t in texts
    ]


def be_stubborn(marker: str | None) -> None:
    """Ignore SIGTERM, and leave a child in the same process group that ignores it too (its PID is
    appended to the marker file as well), so only a kill of the whole group ends both."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:
        os.close(0)
        os.close(1)
        while True:
            time.sleep(60)
    if marker:
        with open(marker, "a", encoding="utf-8") as f:
            f.write(f"{pid} child\n")


def flood_stderr() -> None:
    """Write to stderr as fast as the pipe takes it, forever (a server whose logging ran away)."""
    line = ("x" * 1000 + "\n").encode()
    while True:
        try:
            sys.stderr.buffer.write(line * 64)
            sys.stderr.buffer.flush()
        except OSError:
            return


def template_regex(template: str) -> re.Pattern[str]:
    """A URI template with simple ``{variable}`` expressions as a regular expression (one path segment each)."""
    parts = re.split(r"\{[^}]*\}", template)
    return re.compile("[^/]+".join(re.escape(part) for part in parts))


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def echoed_meta(params: dict[str, Any]) -> str:
    """A request's ``_meta`` as JSON, keys sorted (``--echo-meta``: what reached the server)."""
    return json.dumps(params.get("_meta") or {}, sort_keys=True)


def prompt_list(server: str, prompts: tuple[str, ...]) -> list[dict[str, Any]]:
    """The ``prompts/list`` entries of ``prompts``: each takes an optional ``topic``."""
    return [
        {
            "name": prompt,
            "description": f"One user message: {prompt_text(server, prompt, '{topic}')!r}.",
            "arguments": [{"name": "topic", "description": "what the prompt is about", "required": False}],
        }
        for prompt in prompts
    ]
