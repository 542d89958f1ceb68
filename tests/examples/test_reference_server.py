"""The stdlib server offering what the conformance suite's scenarios call (the suite runs it behind the gateway in
``tests/e2e/test_conformance.py``): here, alone, that it answers a request of an unexpected shape with an error
and goes on serving, and that a tool asking its client waits for the answer while it reads on."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.helpers import WAIT_S

SERVER = [sys.executable, "-m", "mcpvisor.examples.reference_server"]
INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {"sampling": {}},
    "clientInfo": {"name": "t", "version": "1"},
}


def request(id_: object, method: str, params: Any = None) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message)


def test_requests_of_an_unexpected_shape_get_errors_and_the_server_goes_on() -> None:
    lines = [
        request(1, "initialize", INITIALIZE),
        request(2, "prompts/get", ["x"]),
        request(3, "prompts/get", {"name": "test_prompt_with_arguments", "arguments": {"arg1": "a"}}),
        request(4, "prompts/get", {"name": "test_prompt_with_arguments", "arguments": "a"}),
        request(5, "tools/call", {"name": "test_sampling", "arguments": "a"}),
        request(6, "resources/read", {"uri": 5}),
        request(7, "ping"),
    ]
    done = subprocess.run(SERVER, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    answers = {answer["id"]: answer for answer in map(json.loads, done.stdout.splitlines())}
    assert set(answers) == {1, 2, 3, 4, 5, 6, 7}
    assert (
        answers[3]["error"]["message"] == "prompts/get: prompt 'test_prompt_with_arguments' needs the argument 'arg2'"
    )
    assert all(answers[i]["error"]["code"] == -32602 for i in (2, 3, 4, 5, 6))
    assert answers[7]["result"] == {}


def test_a_tool_that_asks_its_client_waits_for_the_answer_and_returns_it() -> None:
    with subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as server:
        stdin, stdout = server.stdin, server.stdout
        assert stdin is not None
        assert stdout is not None

        def send(line: str) -> None:
            stdin.write(line + "\n")
            stdin.flush()

        send(request(1, "initialize", INITIALIZE))
        assert json.loads(stdout.readline())["id"] == 1
        send(request(2, "tools/call", {"name": "test_sampling", "arguments": {"prompt": "a haiku"}}))
        asked = json.loads(stdout.readline())
        assert asked["method"] == "sampling/createMessage"
        assert asked["params"]["messages"][0]["content"]["text"] == "a haiku"
        send(request(3, "ping"))  # it reads on while the tool waits
        assert json.loads(stdout.readline()) == {"jsonrpc": "2.0", "id": 3, "result": {}}
        answer = {"role": "assistant", "content": {"type": "text", "text": "five seven five"}, "model": "m"}
        send(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": answer}))
        result = json.loads(stdout.readline())
        assert result["id"] == 2
        assert result["result"]["content"] == [{"type": "text", "text": "LLM response: five seven five"}]
        stdin.close()
        assert server.wait(timeout=WAIT_S) == 0
