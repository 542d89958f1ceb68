"""A minimal MCP server over stdio in the standard library only, ready in about 30 ms.

Run it as ``python -m mcpvisor.examples.light_server --help``. It speaks the handshake era
(newline-delimited JSON-RPC 2.0, protocol versions 2024-11-05 to 2025-11-25): ``initialize``,
``ping``, ``tools/list``, ``tools/call``, ``prompts/list``, ``prompts/get``, ``resources/list``,
``resources/templates/list``, ``resources/read`` and ``completion/complete``. Every other request gets
-32601 at once, so a client's
``server/discover`` probe falls back to ``initialize`` without waiting; other requests before
``initialize`` get an error reply too. ``notifications/cancelled`` and ``notifications/progress``
are noted on stderr (``cancelled request ID: REASON``, ``progress on TOKEN: N/TOTAL MESSAGE``);
other notifications are ignored. The ``ask_client`` control
tool sends the client a ``sampling/createMessage``, ``elicitation/create`` or ``roots/list`` request
and returns its answer.

This module must never import `mcp`, `pydantic` or anything outside the standard library.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import IO, Any

from mcpvisor import __version__
from mcpvisor.examples._light_tools import (
    BIG_TOOLS,
    CONTROL_DESCRIPTIONS,
    CONTROL_SCHEMAS,
    LOG_LEVELS,
    MIB_SCHEMA,
    be_stubborn,
    echoed_meta,
    flood_stderr,
    log_messages,
    prompt_list,
    template_regex,
    text_result,
)
from mcpvisor.examples._options import (
    CONTROL_TOOLS,
    CRASH_EXIT_CODE,
    TEXT_SCHEMA,
    Options,
    answer_text,
    ask_request,
    parse_options,
    perform_start_actions,
    prompt_text,
    split_names,
    tool_text,
)

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_PROTOCOL_VERSION = "2025-11-25"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002

_KNOWN_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "completion/complete",
        "logging/setLevel",
    }
)


class RequestError(Exception):
    """A request failed; answered with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _named(params: dict[str, Any], method: str) -> tuple[str, dict[str, Any]]:
    """The ``name`` and ``arguments`` of a ``method`` request (arguments absent: none), or the error that says so."""
    name = params.get("name")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise RequestError(INVALID_PARAMS, f"{method} needs a string 'name' and an object 'arguments'")
    return name, arguments


class LightServer:
    """The protocol state of one stdio connection; `handle_line` takes one input line."""

    def __init__(self, options: Options, out: IO[bytes]) -> None:
        self._options = options
        self._out = out
        self._write_lock = threading.Lock()
        self._tools = options.tools
        self._prompts = options.prompts
        self._resources = options.resources
        self._subscribed: set[str] = set()
        self._log_level: str | None = None
        self._initialized = False
        self._asked: dict[str, tuple[object, str]] = {}
        """Our requests to the client awaiting an answer: id -> (the ask_client call's id, kind)."""
        self._asks = 0

    # -- output --------------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        if self._options.garbage_stdout:
            data = b"this is not JSON-RPC \x00\xff{[\n" + data
        with self._write_lock:
            try:
                self._out.write(data)
                self._out.flush()
            except BrokenPipeError:
                os._exit(0)  # the client is gone: nobody is left to serve

    def _reply(self, request_id: object, result: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _reply_error(self, request_id: object, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    def _notify(self, method: str) -> None:
        self.send({"jsonrpc": "2.0", "method": method})

    # -- input ---------------------------------------------------------------------------------

    def handle_line(self, line: bytes) -> None:
        if self._options.hang_on_initialize or not line.strip():
            return  # (--hang-on-initialize: never answer anything, not even initialize)
        try:
            message = json.loads(line)
        except ValueError:
            self._reply_error(None, PARSE_ERROR, "Parse error")
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self._reply_error(None, INVALID_REQUEST, "Invalid Request")
            return
        method = message.get("method")
        if not isinstance(method, str):
            self._handle_response(message)
            return
        if "id" not in message:
            self._handle_notification(method, message.get("params"))
            return
        request_id = message["id"]
        params = message.get("params")
        if params is None:
            params = {}
        try:
            if not isinstance(params, dict):
                raise RequestError(INVALID_PARAMS, "params must be an object")
            self._handle_request(request_id, method, params)
        except RequestError as error:
            self._reply_error(request_id, error.code, error.message)

    def _handle_notification(self, method: str, params: object) -> None:
        # notifications/initialized and unknown ones need no action; a cancelled call stays unanswered
        # (a hung one stays hung, a finished one has already been answered) and is noted on stderr.
        if method == "notifications/cancelled" and isinstance(params, dict):
            sys.stderr.write(f"cancelled request {params.get('requestId')!r}: {params.get('reason')}\n")
            sys.stderr.flush()
        elif method == "notifications/progress" and isinstance(params, dict):
            line = f"progress on {params.get('progressToken')}: {params.get('progress')}/{params.get('total')}"
            sys.stderr.write(f"{line} {params.get('message')}\n")
            sys.stderr.flush()

    def _handle_response(self, message: dict[str, Any]) -> None:
        """The client's answer to an ``ask_client`` request: the call that asked returns it."""
        asked = self._asked.pop(str(message.get("id")), None)
        if asked is None:
            return  # junk, or the answer to a request we withdrew
        call_id, kind = asked
        error = message.get("error")
        if isinstance(error, dict):
            text = f"the client refused: {error.get('message')} (code {error.get('code')})"
            self._reply(call_id, {"content": [{"type": "text", "text": text}], "isError": True})
            return
        result = message.get("result")
        self._reply(call_id, text_result(answer_text(kind, result if isinstance(result, dict) else {})))

    def _ask_client(self, call_id: object, arguments: dict[str, Any]) -> None:
        kind, text, after = arguments.get("kind"), arguments.get("text", ""), arguments.get("cancel_after")
        if not isinstance(kind, str) or not isinstance(text, str):
            raise RequestError(INVALID_PARAMS, "tool 'ask_client': give a 'kind' and optionally a 'text'")
        self._asks += 1
        ask_id = f"ask-{self._asks}"
        try:
            request = ask_request(kind, text, progress_token=ask_id)
        except ValueError as exc:
            raise RequestError(INVALID_PARAMS, str(exc)) from None
        self._asked[ask_id] = (call_id, kind)
        self.send({"jsonrpc": "2.0", "id": ask_id, **request})
        if isinstance(after, int | float) and not isinstance(after, bool):
            timer = threading.Timer(after, self._withdraw, (ask_id,))
            timer.daemon = True  # never keeps a process (or a test run serving it in memory) alive
            timer.start()

    def _withdraw(self, ask_id: str) -> None:
        """``cancel_after``: cancel our request to the client; the call returns 'withdrawn'."""
        asked = self._asked.pop(ask_id, None)
        if asked is not None:
            params = {"requestId": ask_id, "reason": "the server stopped waiting"}
            self.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})
            self._reply(asked[0], text_result("withdrawn"))

    def _handle_request(self, request_id: object, method: str, params: dict[str, Any]) -> None:
        if method not in _KNOWN_METHODS:
            raise RequestError(METHOD_NOT_FOUND, f"Method not found: {method}")
        if method == "initialize":
            self._initialized = True
            self._reply(request_id, self._initialize_result(params))
        elif method == "ping":
            self._reply(request_id, {})
        elif not self._initialized:
            raise RequestError(INVALID_REQUEST, f"received {method!r} before initialize")
        elif method == "tools/list":
            self._reply(request_id, {"tools": self._tool_list()})
        elif method == "tools/call":
            self._call_tool(request_id, params)
        elif method == "prompts/list":
            self._reply(request_id, {"prompts": prompt_list(self._options.name, self._prompts)})
        elif method == "prompts/get":
            self._reply(request_id, self._get_prompt(params))
        elif method == "resources/list":
            self._reply(
                request_id,
                {"resources": [{"uri": u, "name": u, "mimeType": "text/plain"} for u in self._resources]},
            )
        elif method == "resources/read" and params.get("uri") == self._options.hang_on_read:
            return  # never answered
        elif method == "resources/read":
            uri = params.get("uri")
            if uri not in self._resources and not self._template_matches(uri):
                raise RequestError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")
            text = echoed_meta(params) if uri in self._options.echo_meta else f"{self._options.name}:{uri}"
            self._reply(request_id, {"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]})
        elif method in ("resources/subscribe", "resources/unsubscribe"):
            uri = params.get("uri")
            if not isinstance(uri, str) or (uri not in self._resources and not self._template_matches(uri)):
                raise RequestError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")
            if method == "resources/subscribe":
                self._subscribed.add(uri)
            else:
                self._subscribed.discard(uri)
            self._reply(request_id, {})
        elif method == "completion/complete":
            self._reply(request_id, self._complete(params))
        elif method == "logging/setLevel":
            level = params.get("level")
            if level not in LOG_LEVELS:
                raise RequestError(INVALID_PARAMS, f"unknown log level {level!r}")
            self._log_level = level
            self._reply(request_id, {})
        else:  # resources/templates/list
            templates = [{"uriTemplate": t, "name": t, "mimeType": "text/plain"} for t in self._options.templates]
            self._reply(request_id, {"resourceTemplates": templates})

    # -- handlers ------------------------------------------------------------------------------

    def _initialize_result(self, params: dict[str, Any]) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        version = requested if requested in PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
        resources: dict[str, Any] = {"listChanged": True} if "set_resources" in self._control_tools() else {}
        if self._options.resources or self._options.templates:
            resources["subscribe"] = True
        capabilities: dict[str, Any] = {"tools": {"listChanged": True}, "resources": resources, "completions": {}}
        if self._options.control:
            capabilities["logging"] = {}
        if self._prompts or self._options.control:
            capabilities["prompts"] = {"listChanged": True}
        return {
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": {"name": self._options.name, "version": __version__},
        }

    def _control_tools(self) -> tuple[str, ...]:
        """The control tools (``--control``); ``set_resources`` too when the server has resources."""
        if not self._options.control:
            return ()
        with_resources = self._options.resources or self._options.templates
        tools = (*CONTROL_TOOLS, "log")
        return (*tools, "set_resources", "touch_resource") if with_resources else tools

    def _described_tools(self) -> dict[str, dict[str, Any]]:
        """``--descriptions FILE``: tool descriptions, or objects of the fields to list instead (``inputSchema``,
        ``name``…), read again at every listing (a test rewrites it)."""
        if self._options.descriptions is None:
            return {}
        try:
            with open(self._options.descriptions, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return {}
        said = data.items() if isinstance(data, dict) else ()
        return {k: {"description": v} if isinstance(v, str) else v for k, v in said if isinstance(v, str | dict)}

    def _configurable_tools(self) -> tuple[str, ...]:
        if not self._options.control:
            return self._tools
        return tuple(tool for tool in self._tools if tool not in self._control_tools())

    def _tool_list(self) -> list[dict[str, Any]]:
        name = self._options.name
        described = self._described_tools()
        tools: list[dict[str, Any]] = [
            {
                "name": tool,
                "description": f"Return {tool_text(name, tool, '{text}')!r}.",
                "inputSchema": TEXT_SCHEMA,
                **described.get(tool, {}),
            }
            for tool in self._configurable_tools()
        ]
        tools.extend(
            {"name": tool, "description": CONTROL_DESCRIPTIONS[tool], "inputSchema": CONTROL_SCHEMAS[tool]}
            for tool in self._control_tools()
        )
        if self._options.big:
            tools.extend({"name": t, "description": d, "inputSchema": MIB_SCHEMA} for t, d in BIG_TOOLS.items())
        return tools

    def _call_tool(self, request_id: object, params: dict[str, Any]) -> None:
        tool, arguments = _named(params, "tools/call")
        if tool == self._options.crash_on_call:
            os._exit(CRASH_EXIT_CODE)
        if tool == self._options.hang_on_call:
            return  # never answered; the read loop goes on serving other requests
        if self._options.error_on_call is not None and tool == self._options.error_on_call[0]:
            raise RequestError(self._options.error_on_call[1], f"{tool} failed on purpose")
        if self._options.big and tool in BIG_TOOLS:
            self._big(request_id, tool, arguments)
        elif self._options.control and tool in self._control_tools():
            meta = params.get("_meta")
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            self._call_control_tool(request_id, tool, arguments, token)
        elif tool in self._configurable_tools():
            text = arguments.get("text", "")
            if not isinstance(text, str):
                raise RequestError(INVALID_PARAMS, f"tool {tool!r}: argument 'text' must be a string")
            own = tool_text(self._options.name, tool, text)
            result = text_result(echoed_meta(params) if tool in self._options.echo_meta else own)
            slow = self._options.slow_call
            if slow is not None and slow[0] == tool:
                threading.Thread(target=self._reply_later, args=(request_id, result, slow[1]), daemon=True).start()
            else:
                self._reply(request_id, result)
        else:
            raise RequestError(INVALID_PARAMS, f"Unknown tool: {tool}")

    def _call_control_tool(
        self, request_id: object, tool: str, arguments: dict[str, Any], progress_token: object = None
    ) -> None:
        if tool == "pid":
            self._reply(request_id, text_result(str(os.getpid())))
        elif tool == "ask_client":
            self._ask_client(request_id, arguments)
        elif tool == "sleep":
            seconds = arguments.get("seconds")
            if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
                raise RequestError(INVALID_PARAMS, "tool 'sleep': argument 'seconds' must be a number >= 0")
            threading.Thread(
                target=self._sleep_then_reply, args=(request_id, seconds, progress_token), daemon=True
            ).start()
        elif tool == "log":
            level, text = arguments.get("level"), arguments.get("text")
            if level not in LOG_LEVELS or not isinstance(text, str):
                raise RequestError(INVALID_PARAMS, "tool 'log': give a 'level' (debug ... emergency) and a 'text'")
            sent = self._log_level is None or LOG_LEVELS.index(level) >= LOG_LEVELS.index(self._log_level)
            for message in log_messages(level, text, arguments.get("count")) if sent else []:
                self.send(message)
            self._reply(request_id, text_result("sent" if sent else "below the level"))
        elif tool == "touch_resource":
            uri = arguments.get("uri")
            if not isinstance(uri, str):
                raise RequestError(INVALID_PARAMS, "tool 'touch_resource': argument 'uri' must be a string")
            if uri in self._subscribed:
                self.send({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}})
            self._reply(request_id, text_result("notified" if uri in self._subscribed else "not subscribed"))
        else:
            names = arguments.get("names")
            if not isinstance(names, str):
                raise RequestError(INVALID_PARAMS, f"tool {tool!r}: argument 'names' must be a string")
            if tool == "set_tools":
                self._tools = split_names(names)
                self._notify("notifications/tools/list_changed")
                self._reply(request_id, text_result(",".join(self._configurable_tools())))
            elif tool == "set_resources":
                self._resources = split_names(names)
                self._notify("notifications/resources/list_changed")
                self._reply(request_id, text_result(",".join(self._resources)))
            else:
                self._prompts = split_names(names)
                self._notify("notifications/prompts/list_changed")
                self._reply(request_id, text_result(",".join(self._prompts)))

    def _big(self, request_id: object, tool: str, arguments: dict[str, Any]) -> None:
        mib = arguments.get("mib")
        if not isinstance(mib, int | float) or isinstance(mib, bool) or mib < 0:
            raise RequestError(INVALID_PARAMS, f"tool {tool!r}: argument 'mib' must be a number >= 0")
        size = int(mib * 1024 * 1024)
        if tool == "blob":
            self._reply(request_id, text_result("x" * size))
            return
        chunk = b"x" * (1024 * 1024)
        with self._write_lock:
            try:
                for start in range(0, size, len(chunk)):
                    self._out.write(chunk[: size - start])
                self._out.flush()
            except BrokenPipeError:
                os._exit(0)

    def _sleep_then_reply(self, request_id: object, seconds: float, progress_token: object = None) -> None:
        """Sleep, then answer; with a progress token, report progress at the start and the end."""
        if progress_token is not None:
            self._progress(progress_token, 0, seconds, "sleeping")
        time.sleep(seconds)
        if progress_token is not None:
            self._progress(progress_token, seconds, seconds, "awake")
        self._reply(request_id, text_result("slept"))

    def _reply_later(self, request_id: object, result: dict[str, Any], seconds: float) -> None:
        time.sleep(seconds)
        self._reply(request_id, result)

    def _progress(self, token: object, progress: float, total: float, message: str) -> None:
        params = {"progressToken": token, "progress": progress, "total": total, "message": message}
        self.send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})

    def _get_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        prompt, arguments = _named(params, "prompts/get")
        if prompt not in self._prompts:
            raise RequestError(INVALID_PARAMS, f"Unknown prompt: {prompt}")
        topic = arguments.get("topic", "")
        if not isinstance(topic, str):
            raise RequestError(INVALID_PARAMS, f"prompt {prompt!r}: argument 'topic' must be a string")
        text = prompt_text(self._options.name, prompt, topic)
        if prompt in self._options.echo_meta:
            text = echoed_meta(params)
        return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}]}

    def _template_matches(self, uri: object) -> bool:
        return isinstance(uri, str) and any(template_regex(t).fullmatch(uri) for t in self._options.templates)

    def _complete(self, params: dict[str, Any]) -> dict[str, Any]:
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise RequestError(INVALID_PARAMS, "completion/complete needs an object 'ref' and an object 'argument'")
        if ref.get("type") == "ref/prompt" and ref.get("name") not in self._prompts:
            raise RequestError(INVALID_PARAMS, f"Unknown prompt: {ref.get('name')}")
        if ref.get("type") == "ref/resource" and ref.get("uri") not in self._options.templates:
            raise RequestError(INVALID_PARAMS, f"Unknown resource template: {ref.get('uri')}")
        value = f"{self._options.name}:{argument.get('name')}:{argument.get('value', '')}"
        if ref.get("name", ref.get("uri")) in self._options.echo_meta:
            value = echoed_meta(params)
        return {"completion": {"values": [value], "total": 1, "hasMore": False}}


def serve(options: Options, stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """Serve one connection until stdin reaches end of file."""
    server = LightServer(options, stdout)
    for line in iter(stdin.readline, b""):
        server.handle_line(line)


def main(argv: list[str] | None = None) -> None:
    options = parse_options(argv, "python -m mcpvisor.examples.light_server")
    perform_start_actions(options)
    if options.flood_stderr:
        threading.Thread(target=flood_stderr, daemon=True).start()
    if options.stubborn:
        be_stubborn(options.marker)
    serve(options, sys.stdin.buffer, sys.stdout.buffer)
    while options.stubborn:
        time.sleep(60)  # stdin closed: stay anyway


if __name__ == "__main__":
    main()
