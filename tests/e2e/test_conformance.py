"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``) against
``mcpvisor serve --http``, with real example servers upstream.

The suite and the Node.js 22 it needs are installed from the npm registry on first use
(:mod:`tests.e2e.npm_peers`): only ``npm`` is needed on the machine, and without it these tests fail saying
so. Each scenario must pass with no failure and no warning. Most call the tools, prompts and resources of the
suite's own reference server by their own names (``test_simple_text``, ``test_sampling``,
``test_prompt_with_arguments``, ``test://static-binary``...): the ``reference`` upstream
(:mod:`mcpvisor.examples.reference_server`) offers them, and the gateway routes a name to the one upstream
offering it. ``json-schema-2020-12`` alone is left out: it looks for ``json_schema_2020_12_tool`` in the
listing, where the gateway serves ``mcp__reference__json_schema_2020_12_tool``; that the schema's 2020-12
keywords pass through is checked below with the served name.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcpvisor.examples.reference_server import SCHEMA_2020_12
from mcpvisor.gateway.lazy_streams import COMMIT_AFTER_S
from tests.e2e.npm_peers import installed, node_env
from tests.helpers import LIGHT, WAIT_S, free_port, mcpvisor_command
from tests.layout import make_layout, write_json

pytestmark = pytest.mark.conformance

REFERENCE = "mcpvisor.examples.reference_server"

SCENARIO_TIMEOUT_S = 90

SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "prompts-list",
    "resources-list",
    "resources-read-text",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "logging-set-level",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
    "server-sse-polling",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "resources-read-binary",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "completion-complete",
]


def conformance_command() -> Path:
    """The suite's command, installed with its Node.js on first use; run it with :func:`node_env`."""
    return installed() / "conformance"


def wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"mcpvisor serve exited with code {process.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)  # nothing to wait on but the port itself
    pytest.fail(f"mcpvisor serve did not listen on port {port} within {WAIT_S:g} s")


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    layout = make_layout(tmp_path_factory.mktemp("conformance"))
    upstream = [
        *(sys.executable, "-m", LIGHT, "--name", "demo", "--prompts", "brief"),
        *("--resources", "note://demo/1,test://static-text,test://watched-resource"),
        *("--templates", "test://template/{id}/data"),
        *("--tools", "echo,test_reconnection"),
        # A call that emits nothing is answered with plain JSON; server-sse-polling checks the priming event
        # and retry of a POST stream, which a call silent for longer than COMMIT_AFTER_S gets.
        *("--slow-call", f"test_reconnection={COMMIT_AFTER_S + 0.5:g}"),
    ]
    reference = {"command": sys.executable, "args": ["-m", REFERENCE]}
    servers = {"demo": {"command": upstream[0], "args": upstream[1:]}, "reference": reference}
    write_json(layout.paths.user, {"mcpServers": servers})
    port = free_port()
    command = [mcpvisor_command(), "serve", "--http", f"127.0.0.1:{port}", "--no-auth"]
    log = layout.home / "serve.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [*command, "--workspace", str(layout.root)], env={**os.environ, **layout.env}, stderr=err
        )
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=WAIT_S)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_gateway_passes_the_official_conformance_scenario(gateway_url: str, scenario: str) -> None:
    result = subprocess.run(
        [str(conformance_command()), "server", "--url", gateway_url, "--scenario", scenario],
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_S,
        env=node_env(),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert " 0 failed" in output, output
    assert "Passed: 0/" not in output, output
    assert "WARNING" not in output, output


async def test_a_json_schema_2020_12_input_schema_is_listed_as_its_server_wrote_it(gateway_url: str) -> None:
    """What ``json-schema-2020-12`` checks (``$schema``, ``$defs``, ``additionalProperties`` kept), under the
    name the gateway serves the tool by."""
    name = "mcp__reference__json_schema_2020_12_tool"
    async with Client(gateway_url) as client:
        with anyio.fail_after(WAIT_S):
            while name not in (tools := {tool.name: tool for tool in (await client.list_tools()).tools}):  # noqa: ASYNC110
                await anyio.sleep(0.05)  # the servers may still be starting: nothing to wait on but the listing
    assert tools[name].input_schema == SCHEMA_2020_12
