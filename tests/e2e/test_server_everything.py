"""The npm reference server ``@modelcontextprotocol/server-everything`` (Node.js, the TypeScript SDK) behind
``mcpvisor serve --http``, reached by the SDK's client in both eras: its tools (text, structured content, an
image, annotations, resource links), the tools it adds once it has seen the gateway's client capabilities,
progress, sampling, elicitation and roots asked of the calling client, its prompts with their completions, its
resources and templates, a subscription whose updates reach the subscriber, its log messages, and the URL its
URL-elicitation-required error asks the user to open (to a library caller and to the gateway's clients). A settings
edit that adds a server leaves it running: same process, same subscription.

The server and its Node.js are installed from the npm registry on first use (:mod:`tests.e2e.npm_peers`)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import psutil
import pytest
from mcp import Client, MCPError, UrlElicitationRequiredError
from mcp.client.session import ClientRequestContext

from mcpvisor.core.config import Config
from mcpvisor.core.errors import ToolCallError
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from mcpvisor.gateway.resources import namespaced_uri
from tests.e2e.npm_peers import installed
from tests.e2e.test_lsp import serving
from tests.gateway.test_gateway import ERAS, save, server, text_of
from tests.helpers import WAIT_S, wait_until
from tests.layout import Layout, make_layout

pytestmark = pytest.mark.conformance

DOCUMENT = "demo://resource/static/document/architecture.md"
ASKING_TOOLS = {"get-roots-list", "trigger-sampling-request", "trigger-elicitation-request"}
"""What the server registers only after it has seen a client that can answer (its ``tools/list_changed``)."""
URL_REQUIRED = {"url": "https://example.org/sign-in", "errorPath": True}
"""Arguments of ``trigger-url-elicitation`` that make the server answer with its URL-elicitation-required error
(-32042), which asks the user to open :data:`PREREQUISITE` before the call can succeed."""
PREREQUISITE = "https://modelcontextprotocol.io"


def everything(folder: Path) -> dict[str, Any]:
    """The server's entry, run in ``folder`` (which tells its process from other tests')."""
    bin_dir = installed()
    return {
        "command": str(bin_dir / "node"),
        "args": [str(bin_dir / "mcp-server-everything"), "stdio"],
        "cwd": str(folder),
    }


class Peer:
    """The downstream client's side: its answers to what the server asks, and what it heard."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.updated: list[str] = []
        self.progress: list[tuple[float, float | None]] = []

    async def sampling(self, context: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        content = params.messages[0].content
        assert isinstance(content, types.TextContent)
        self.asked.append(f"sampling: {content.text}")
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="a sampled answer"), model="test-model"
        )

    async def elicitation(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        self.asked.append(f"elicitation: {params.message}")
        return types.ElicitResult(action="accept", content={"name": "Ada", "check": True, "email": "ada@example.org"})

    async def roots(self, context: ClientRequestContext) -> Any:
        self.asked.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project", name="project")])

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)

    async def message(self, message: object) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total))

    def client(self, url: str, mode: str, *, roots: bool = True) -> Client:
        """The client; without ``roots`` it does not offer them (nor is asked for them)."""
        return Client(
            url,
            mode=mode,
            sampling_callback=self.sampling,
            elicitation_callback=self.elicitation,
            list_roots_callback=self.roots if roots else None,
            logging_callback=self.log,
            message_handler=self.message,
        )


@asynccontextmanager
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[Layout, str]]:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    save(layout.paths.user, {"mcpServers": {"everything": everything(tmp_path)}})
    async with serving(layout) as (process, url):
        yield layout, url


async def listed(client: Client, wanted: set[str]) -> dict[str, types.Tool]:
    """The gateway's tools once every name in ``wanted`` is among them (the server adds some after its start)."""
    tools: dict[str, types.Tool] = {}
    with anyio.fail_after(WAIT_S):
        while not wanted <= set(tools):
            tools = {tool.name: tool for tool in (await client.list_tools(cache_mode="bypass")).tools}
            await anyio.sleep(0.05)  # the gateway's tools/list_changed may come before this client listens
    return tools


def everything_pids(folder: Path) -> set[int]:
    """The reference server's processes running in ``folder``."""
    pids = set()
    for process in psutil.process_iter(["cmdline", "cwd"]):
        if process.info["cwd"] == str(folder) and "mcp-server-everything" in " ".join(process.info["cmdline"] or ()):
            pids.add(process.pid)
    return pids


@pytest.mark.parametrize("mode", ERAS)
async def test_the_reference_servers_tools_prompts_and_resources_pass_through_the_gateway(
    tmp_path: Path, mode: str
) -> None:
    peer = Peer()
    async with gateway(tmp_path) as (_, url), peer.client(url, mode) as client:
        assert (client.protocol_version == "2026-07-28") == (mode == "auto")
        served = {f"mcp__everything__{name}" for name in ("echo", "get-sum", "get-tiny-image", *ASKING_TOOLS)}
        tools = await listed(client, served)
        assert tools["mcp__everything__get-sum"].input_schema["required"] == ["a", "b"]

        assert text_of(await client.call_tool("mcp__everything__echo", {"message": "hi"})) == "Echo: hi"
        assert text_of(await client.call_tool("echo", {"message": "by its own name"})) == "Echo: by its own name"
        assert (
            text_of(await client.call_tool("mcp__everything__get-sum", {"a": 2, "b": 3})) == "The sum of 2 and 3 is 5."
        )
        weather = await client.call_tool("mcp__everything__get-structured-content", {"location": "Chicago"})
        assert weather.structured_content is not None
        assert json.loads(text_of(weather)) == weather.structured_content
        image = await client.call_tool("mcp__everything__get-tiny-image", {})
        [_, picture, _] = image.content
        assert isinstance(picture, types.ImageContent)
        assert picture.mime_type == "image/png"
        assert base64.b64decode(picture.data).startswith(b"\x89PNG")
        annotated = await client.call_tool("mcp__everything__get-annotated-message", {"messageType": "error"})
        assert annotated.content[0].annotations is not None
        assert annotated.content[0].annotations.priority == 1.0
        links = await client.call_tool("mcp__everything__get-resource-links", {"count": 2})
        [link, *_] = [item for item in links.content if isinstance(item, types.ResourceLink)]
        read = await client.read_resource(str(link.uri))  # a tool result's link stays readable
        assert read.contents

        prompts = {prompt.name: prompt for prompt in (await client.list_prompts()).prompts}
        assert set(prompts) >= {f"mcp__everything__{p}" for p in ("simple-prompt", "args-prompt", "completable-prompt")}
        assert text_of(await client.get_prompt("mcp__everything__simple-prompt")) == (
            "This is a simple prompt without arguments."
        )
        assert text_of(await client.get_prompt("mcp__everything__args-prompt", {"city": "Oslo"})) == (
            "What's weather in Oslo?"
        )
        completable = types.PromptReference(type="ref/prompt", name="mcp__everything__completable-prompt")
        departments = await client.complete(completable, {"name": "department", "value": "Ma"})
        assert departments.completion.values == ["Marketing"]
        names = await client.complete(completable, {"name": "name", "value": ""}, {"department": "Sales"})
        assert names.completion.values == ["David", "Eve", "Frank"]

        resources = {str(resource.uri) for resource in (await client.list_resources()).resources}
        assert DOCUMENT in resources
        [document] = (await client.read_resource(DOCUMENT)).contents
        assert isinstance(document, types.TextResourceContents)
        assert document.text.strip()
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert "demo://resource/dynamic/text/{resourceId}" in templates
        [dynamic] = (await client.read_resource("demo://resource/dynamic/text/7")).contents
        assert isinstance(dynamic, types.TextResourceContents)
        assert "7" in dynamic.text


@pytest.mark.parametrize("mode", ERAS)
async def test_the_reference_servers_progress_and_requests_reach_the_calling_client(tmp_path: Path, mode: str) -> None:
    peer = Peer()
    async with gateway(tmp_path) as (_, url), peer.client(url, mode) as client:
        await listed(client, {f"mcp__everything__{name}" for name in ASKING_TOOLS})
        done = await client.call_tool(
            "mcp__everything__trigger-long-running-operation",
            {"duration": 0.3, "steps": 3},
            progress_callback=peer.on_progress,
        )
        assert text_of(done) == "Long running operation completed. Duration: 0.3 seconds, Steps: 3."
        # (2026-07-28: the server asks for roots 350 ms after its start, often during this call; what progress it
        # reports while the client answers goes on the call's next round.)
        assert peer.progress == [(1, 3), (2, 3), (3, 3)]

        sampled = await client.call_tool("mcp__everything__trigger-sampling-request", {"prompt": "a haiku"})
        assert not sampled.is_error, text_of(sampled)
        assert "a sampled answer" in text_of(sampled)
        elicited = await client.call_tool("mcp__everything__trigger-elicitation-request", {})
        assert not elicited.is_error
        assert "User provided the requested information" in elicited.content[0].text  # type: ignore[union-attr]
        roots = await client.call_tool("mcp__everything__get-roots-list", {})
        assert "file:///work/project" in "\n".join(c.text for c in roots.content if isinstance(c, types.TextContent))
        # The server asks for the roots once, at its first call after it saw the capability.
        assert sorted(asked.split(":")[0] for asked in peer.asked) == ["elicitation", "roots", "sampling"]
        assert "sampling: Resource trigger-sampling-request context: a haiku" in peer.asked


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # setLevel, subscribe: 2025-11-25
async def test_a_subscription_and_log_messages_of_the_reference_server_survive_a_settings_edit(
    tmp_path: Path,
) -> None:
    peer = Peer()
    async with gateway(tmp_path) as (layout, url), peer.client(url, "legacy") as client:
        await listed(client, {"mcp__everything__echo"})
        [node] = everything_pids(tmp_path)
        await client.set_logging_level("info")
        await client.subscribe_resource(DOCUMENT)
        # The server logs each subscribe request at "info"; the gateway relays it under "<server>/<logger>".
        await wait_until(lambda: any("Received Subscribe Resource request" in str(log.data) for log in peer.logs))
        assert {log.logger for log in peer.logs} == {"everything"}
        assert "Started simulated resource updated notifications" in text_of(
            await client.call_tool("mcp__everything__toggle-subscriber-updates", {})
        )
        await wait_until(lambda: peer.updated == [DOCUMENT], what="the update sent at once")

        user = {"mcpServers": {"everything": everything(tmp_path), "light": server("light")}}
        save(layout.paths.user, user)
        await listed(client, {"mcp__everything__echo", "mcp__light__echo"})
        assert everything_pids(tmp_path) == {node}  # an edit of another entry: the same process
        await wait_until(lambda: len(peer.updated) >= 2, what="an update after the edit (every 5 s)")
        assert set(peer.updated) == {DOCUMENT}
        assert text_of(await client.call_tool("mcp__everything__echo", {"message": "still"})) == "Echo: still"

        await client.unsubscribe_resource(DOCUMENT)  # the last subscriber: the server hears it
        await wait_until(
            lambda: any("Received Unsubscribe Resource request" in str(log.data) for log in peer.logs),
            what="the server's log of the unsubscribe",
        )


async def test_a_modern_clients_listen_stream_hears_the_reference_servers_resource_updates(tmp_path: Path) -> None:
    from mcp.client.subscriptions import ResourceUpdated

    peer = Peer()
    async with gateway(tmp_path) as (_, url), peer.client(url, "auto") as client:
        await listed(client, {"mcp__everything__toggle-subscriber-updates"})
        async with client.listen(resource_subscriptions=[DOCUMENT]) as subscription:
            await client.call_tool("mcp__everything__toggle-subscriber-updates", {})
            with anyio.fail_after(WAIT_S):
                event = await subscription.__anext__()
        assert isinstance(event, ResourceUpdated)
        assert str(event.uri) == DOCUMENT


async def test_a_url_the_reference_server_requires_opened_reaches_a_library_caller(tmp_path: Path) -> None:
    servers = {"everything": McpServerConfig(**everything(tmp_path))}
    options = ConnectionOptions(log_dir=tmp_path / "logs", client_requests=True)  # it offers URL elicitation
    async with Config(mcp_servers=servers, options=options) as config:
        await config.initialize()
        await wait_until(lambda: "mcp__everything__trigger-url-elicitation" in config.tool_registry.names())
        with pytest.raises(ToolCallError) as caught:
            await config.call_tool("mcp__everything__trigger-url-elicitation", URL_REQUIRED)
    assert str(caught.value) == (
        "call to tool 'trigger-url-elicitation' on server 'everything' failed: MCP error -32042: This request "
        f"requires browser-based authorization; open in a browser: {PREREQUISITE} (Open this link to satisfy the "
        "prerequisite, then retry the request); then make the request again"
    )
    [elicitation] = caught.value.elicitations
    assert elicitation.url == PREREQUISITE


@pytest.mark.parametrize("mode", ERAS)
async def test_a_url_the_reference_server_requires_opened_reaches_the_calling_client(tmp_path: Path, mode: str) -> None:
    peer = Peer()
    # Without roots: the server asks for them 350 ms after its start, and in the handshake era a request that
    # names no call goes to the client of the calls in flight, which on a loaded machine can be this test's.
    async with gateway(tmp_path) as (_, url), peer.client(url, mode, roots=False) as client:
        await listed(client, {"mcp__everything__trigger-url-elicitation"})
        if mode == "legacy":  # as the server said it: the client opens the URL (-32042 is of the handshake era)
            with pytest.raises(MCPError) as caught:
                await client.call_tool("mcp__everything__trigger-url-elicitation", URL_REQUIRED)
            [elicitation] = UrlElicitationRequiredError.from_error(caught.value.error).elicitations
            assert elicitation.url == PREREQUISITE
            assert caught.value.error.message.startswith(
                "call to tool 'trigger-url-elicitation' on server 'everything' failed: MCP error -32042: This request "
                "requires browser-based authorization"
            )
        else:  # a 2026-07-28 client reads what to open in the error result
            refused = await client.call_tool("mcp__everything__trigger-url-elicitation", URL_REQUIRED)
            assert refused.is_error
            assert f"open in a browser: {PREREQUISITE} (Open this link" in text_of(refused)
        again = await client.call_tool("mcp__everything__trigger-url-elicitation", URL_REQUIRED)  # (opened: done)
        assert "User completed the URL elicitation flow" in again.content[0].text  # type: ignore[union-attr]
        assert peer.asked == ["elicitation: Please open the link to complete this action."]


@pytest.mark.parametrize("mode", ERAS)
async def test_the_reference_servers_error_codes_reach_the_client(tmp_path: Path, mode: str) -> None:
    async with gateway(tmp_path) as (_, url), Client(url, mode=mode) as client:
        await listed(client, {"mcp__everything__echo"})
        # The server answers both with invalid params (-32602): the client's request is at fault, not a server.
        with pytest.raises(MCPError) as unknown:
            await client.read_resource("demo://resource/session/never-made")
        assert unknown.value.error.code == types.INVALID_PARAMS
        assert "Resource demo://resource/session/never-made not found" in unknown.value.error.message
        with pytest.raises(MCPError) as missing:
            await client.get_prompt("mcp__everything__args-prompt", {})
        assert missing.value.error.code == types.INVALID_PARAMS
        assert "Invalid arguments for prompt args-prompt" in missing.value.error.message


async def test_a_uri_the_templates_of_two_servers_match_is_refused_naming_the_uris_that_read_it(tmp_path: Path) -> None:
    layout = make_layout(tmp_path, MCPVISOR_LOG_DIR=str(tmp_path / "logs"))
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
    save(layout.paths.user, {"mcpServers": {name: everything(tmp_path / name) for name in ("one", "two")}})
    dynamic = "demo://resource/dynamic/text/3"  # both servers' template demo://resource/dynamic/text/{resourceId}
    async with serving(layout) as (_, url), Client(url) as client:
        await listed(client, {"mcp__one__echo", "mcp__two__echo"})
        with pytest.raises(MCPError) as ambiguous:
            await client.read_resource(dynamic)
        assert ambiguous.value.error.message == (
            f"resource {dynamic!r} is ambiguous: it matches resource templates of servers one, two; "
            f"read {namespaced_uri('one', dynamic)} or {namespaced_uri('two', dynamic)}"
        )
        [read] = (await client.read_resource(namespaced_uri("two", dynamic))).contents
        assert isinstance(read, types.TextResourceContents)
        assert read.text.startswith("Resource 3: This is a plaintext resource")
