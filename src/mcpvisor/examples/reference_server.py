"""The tools, prompts and resources the official MCP conformance suite's server scenarios call, over stdio,
in the standard library only.

Run it as ``python -m mcpvisor.examples.reference_server``. The suite (npm ``@modelcontextprotocol/conformance``)
checks a server by calling what its own reference server offers — ``test_simple_text``, ``test_sampling``,
``test_prompt_with_arguments``, ``test://static-binary`` and the rest —, each answering as its scenario's
description says. This server offers those, so that the scenarios can run against ``mcpvisor serve`` with it
upstream: a call the gateway passes on, a request the server makes of its client, a progress or log
notification must cross the gateway both ways.

It speaks the handshake era (newline-delimited JSON-RPC 2.0, ``initialize``). A tool that waits (progress,
logging) or asks its client (sampling, elicitation) runs on a thread of its own, so the connection keeps
reading meanwhile: the client's answer comes in on it. This module must never import `mcp`, `pydantic` or
anything outside the standard library.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from mcpvisor import __version__

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"  # a red pixel
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA=="  # one silent 16-bit sample, 8 kHz
STEP_S = 0.05
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}
SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}
DEFAULTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "default": True},
    },
}
ENUMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}
USER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image() -> dict[str, Any]:
    return {"type": "image", "data": PNG, "mimeType": "image/png"}


def _embedded(uri: str, mime_type: str, text: str) -> dict[str, Any]:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": text}}


def _string_arguments(*names: str) -> dict[str, Any]:
    return {"type": "object", "properties": {n: {"type": "string"} for n in names}, "required": list(names)}


CONTENT_TOOLS: dict[str, list[dict[str, Any]]] = {
    "test_simple_text": [_text("This is a simple text response for testing.")],
    "test_image_content": [_image()],
    "test_audio_content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}],
    "test_embedded_resource": [
        _embedded("test://embedded-resource", "text/plain", "This is an embedded resource content.")
    ],
    "test_multiple_content_types": [
        _text("Multiple content types test:"),
        _image(),
        _embedded("test://mixed-content-resource", "application/json", '{"test":"data","value":123}'),
    ],
}
"""Tools that answer with fixed content at once."""

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    **dict.fromkeys(CONTENT_TOOLS, NO_ARGUMENTS),
    "test_tool_with_logging": NO_ARGUMENTS,
    "test_tool_with_progress": NO_ARGUMENTS,
    "test_error_handling": NO_ARGUMENTS,
    "test_sampling": _string_arguments("prompt"),
    "test_elicitation": _string_arguments("message"),
    "test_elicitation_sep1034_defaults": NO_ARGUMENTS,
    "test_elicitation_sep1330_enums": NO_ARGUMENTS,
    "json_schema_2020_12_tool": SCHEMA_2020_12,
}

PROMPTS: dict[str, list[dict[str, Any]]] = {
    "test_simple_prompt": [],
    "test_prompt_with_arguments": [
        {"name": "arg1", "description": "First test argument", "required": True},
        {"name": "arg2", "description": "Second test argument", "required": True},
    ],
    "test_prompt_with_embedded_resource": [
        {"name": "resourceUri", "description": "URI of the resource to embed", "required": True}
    ],
    "test_prompt_with_image": [],
}
COMPLETIONS = ("paris", "park", "party")


def _prompt_messages(name: str, arguments: dict[str, str]) -> list[dict[str, Any]]:
    if name == "test_simple_prompt":
        contents = [_text("This is a simple prompt for testing.")]
    elif name == "test_prompt_with_arguments":
        contents = [_text(f"Prompt with arguments: arg1='{arguments['arg1']}', arg2='{arguments['arg2']}'")]
    elif name == "test_prompt_with_embedded_resource":
        embedded = _embedded(arguments["resourceUri"], "text/plain", "Embedded resource content for testing.")
        contents = [embedded, _text("Please process the embedded resource above.")]
    else:
        contents = [_image(), _text("Please analyze the image above.")]
    return [{"role": "user", "content": content} for content in contents]


class ClientError(Exception):
    """The client answered a request of ours with an error."""


class ReferenceServer:
    """One stdio connection: requests are answered in order, and a tool that waits runs on a thread."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[str, tuple[threading.Event, list[dict[str, Any]]]] = {}
        self._capabilities: dict[str, Any] = {}

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            try:
                self._out.write(data)
                self._out.flush()
            except BrokenPipeError:
                os._exit(0)  # the client is gone: nobody is left to serve

    def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send the client a request and wait for its answer (on a tool's thread)."""
        request_id = f"reference-{next(self._ids)}"
        answered, answer = threading.Event(), list[dict[str, Any]]()
        self._waiting[request_id] = (answered, answer)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        answered.wait()
        [message] = answer
        if "error" in message:
            error = message["error"]
            raise ClientError(str(error.get("message", error) if isinstance(error, dict) else error))
        result: dict[str, Any] = message.get("result") or {}
        return result

    def handle_line(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if "method" not in message:  # an answer to one of our requests
            waiting = self._waiting.pop(str(message.get("id")), None)
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()
            return
        if "id" not in message:
            return  # a notification: nothing to do
        request_id, method, params = message["id"], message["method"], message.get("params") or {}
        if not isinstance(params, dict):
            error = {"code": -32602, "message": f"{method}: params must be an object"}
            self.send({"jsonrpc": "2.0", "id": request_id, "error": error})
            return
        if method == "tools/call" and params.get("name") not in CONTENT_TOOLS:
            threading.Thread(target=self._call_on_thread, args=(request_id, params), daemon=True).start()
            return
        try:
            result = self._answer(method, params)
        except NotImplementedError:
            error = {"code": -32601, "message": f"method not found: {method}"}
            self.send({"jsonrpc": "2.0", "id": request_id, "error": error})
        except Exception as exc:  # params of another shape than expected: said, never a crash
            error = {"code": -32602, "message": f"{method}: {exc if isinstance(exc, LookupError) else repr(exc)}"}
            self.send({"jsonrpc": "2.0", "id": request_id, "error": error})
        else:
            self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            self._capabilities = params.get("capabilities") or {}
            capabilities: dict[str, Any] = {
                "tools": {},
                "prompts": {},
                "resources": {},
                "logging": {},
                "completions": {},
            }
            server_info = {"name": "reference", "version": __version__}
            return {
                "protocolVersion": params["protocolVersion"],
                "capabilities": capabilities,
                "serverInfo": server_info,
            }
        if method in ("ping", "logging/setLevel"):
            return {}
        if method == "tools/list":
            tools = [{"name": n, "description": n.replace("_", " "), "inputSchema": s} for n, s in TOOL_SCHEMAS.items()]
            return {"tools": tools}
        if method == "tools/call":
            return {"content": CONTENT_TOOLS[params["name"]]}
        if method == "prompts/list":
            prompts = [{"name": n, "description": n.replace("_", " "), "arguments": a} for n, a in PROMPTS.items()]
            return {"prompts": prompts}
        if method == "prompts/get":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise LookupError("arguments must be an object")
            if name not in PROMPTS:
                raise LookupError(f"no prompt {name!r}")
            missing = [
                a["name"] for a in PROMPTS[name] if a["required"] and not isinstance(arguments.get(a["name"]), str)
            ]
            if missing:
                raise LookupError(f"prompt {name!r} needs the argument {missing[0]!r}")
            return {"messages": _prompt_messages(name, arguments)}
        if method == "resources/list":
            return {"resources": [{"uri": "test://static-binary", "name": "static-binary", "mimeType": "image/png"}]}
        if method == "resources/templates/list":
            return {"resourceTemplates": []}
        if method == "resources/read":
            if params.get("uri") != "test://static-binary":
                raise LookupError(f"no resource {params.get('uri')!r}")
            return {"contents": [{"uri": "test://static-binary", "mimeType": "image/png", "blob": PNG}]}
        if method == "completion/complete":
            value = str((params.get("argument") or {}).get("value", ""))
            values = [word for word in COMPLETIONS if word.startswith(value)]
            return {"completion": {"values": values, "total": len(values), "hasMore": False}}
        raise NotImplementedError(method)

    def _call_on_thread(self, request_id: object, params: dict[str, Any]) -> None:
        name, arguments, meta = params.get("name"), params.get("arguments") or {}, params.get("_meta") or {}
        tool: Callable[..., str] | None = getattr(self, f"_tool_{name}", None)
        if tool is None or not isinstance(arguments, dict) or not isinstance(meta, dict):
            problem = f"unknown tool: {name}" if tool is None else "arguments and _meta must be objects"
            self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": problem}})
            return
        try:
            result: dict[str, Any] = {"content": [_text(tool(arguments, meta.get("progressToken")))]}
        except ClientError as exc:
            result = {"content": [_text(f"the client refused: {exc}")], "isError": True}
        except Exception as exc:  # its error result (a RuntimeError: the one the tool means to give)
            result = {"content": [_text(str(exc) if isinstance(exc, RuntimeError) else repr(exc))], "isError": True}
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    # -- the tools that wait or ask (each returns its text, or raises RuntimeError for an error result) ----

    def _tool_test_error_handling(self, arguments: dict[str, Any], token: object) -> str:
        raise RuntimeError("This tool intentionally returns an error for testing")

    def _tool_test_tool_with_logging(self, arguments: dict[str, Any], token: object) -> str:
        for index, text in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
            if index:
                time.sleep(STEP_S)
            params = {"level": "info", "logger": "reference", "data": text}
            self.send({"jsonrpc": "2.0", "method": "notifications/message", "params": params})
        return "Tool with logging executed successfully"

    def _tool_test_tool_with_progress(self, arguments: dict[str, Any], token: object) -> str:
        for index, progress in enumerate((0, 50, 100)):
            if index:
                time.sleep(STEP_S)
            if token is not None:
                params = {"progressToken": token, "progress": progress, "total": 100}
                self.send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        return "Tool with progress executed successfully"

    def _tool_test_sampling(self, arguments: dict[str, Any], token: object) -> str:
        if "sampling" not in self._capabilities:
            raise RuntimeError("the client cannot sample (no 'sampling' capability)")
        message = {"role": "user", "content": _text(str(arguments.get("prompt", "")))}
        answer = self.ask("sampling/createMessage", {"messages": [message], "maxTokens": 100})
        content = answer.get("content")
        return f"LLM response: {content.get('text') if isinstance(content, dict) else content}"

    def _elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        if "elicitation" not in self._capabilities:
            raise RuntimeError("the client cannot elicit (no 'elicitation' capability)")
        return self.ask("elicitation/create", {"mode": "form", "message": message, "requestedSchema": schema})

    def _tool_test_elicitation(self, arguments: dict[str, Any], token: object) -> str:
        answer = self._elicit(str(arguments.get("message", "")), USER_SCHEMA)
        return f"User response: action={answer.get('action')}, content={json.dumps(answer.get('content'))}"

    def _tool_test_elicitation_sep1034_defaults(self, arguments: dict[str, Any], token: object) -> str:
        answer = self._elicit("Please review and update the form fields with defaults", DEFAULTS_SCHEMA)
        return f"Elicitation completed: action={answer.get('action')}, content={json.dumps(answer.get('content'))}"

    def _tool_test_elicitation_sep1330_enums(self, arguments: dict[str, Any], token: object) -> str:
        answer = self._elicit("Please select options from the enum fields", ENUMS_SCHEMA)
        return f"Elicitation completed: action={answer.get('action')}, content={json.dumps(answer.get('content'))}"

    def _tool_json_schema_2020_12_tool(self, arguments: dict[str, Any], token: object) -> str:
        return f"received: {json.dumps(arguments, sort_keys=True)}"


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """Serve one connection until stdin reaches end of file."""
    server = ReferenceServer(stdout)
    for line in iter(stdin.readline, b""):
        server.handle_line(line)


def main() -> None:
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        return
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
