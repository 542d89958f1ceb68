"""Resources through the gateway (SPEC §9 "Gateway"): real example servers listing resources, the SDK's
client downstream, in both protocol eras."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.subscriptions import ResourcesListChanged
from mcp.shared.exceptions import MCPDeprecationWarning

from mcpvisor.gateway.resources import namespaced_uri, parse_namespaced_uri
from tests.gateway.test_gateway import ERAS, next_event, running, save, server
from tests.helpers import SDK, WAIT_S, raw_server, wait_until

SHARED = "file:///shared/readme.txt"


def text_of(result: types.ReadResourceResult) -> tuple[str, str]:
    [content] = result.contents
    assert isinstance(content, types.TextResourceContents)
    return str(content.uri), content.text


@pytest.mark.parametrize(
    ("server_name", "uri"),
    [("a", SHARED), ("we/ird srv", "urn:x?y=1&z=%20"), ("b", "mcpvisor://c/d")],
)
def test_a_namespaced_uri_reads_back_as_its_server_and_uri(server_name: str, uri: str) -> None:
    assert parse_namespaced_uri(namespaced_uri(server_name, uri)) == (server_name, uri)


@pytest.mark.parametrize("uri", ["note://x/1", "mcpvisor://only", "mcpvisor:///nothing", "mcpvisor://a/"])
def test_other_uris_are_not_namespaced(uri: str) -> None:
    assert parse_namespaced_uri(uri) is None


@pytest.mark.parametrize("mode", ERAS)
async def test_resources_keep_their_uri_unless_two_servers_list_it_and_read_from_their_own_server(
    tmp_path: Path, mode: str
) -> None:
    user = {
        "mcpServers": {
            "a": server("a", "--resources", f"note://a/1,{SHARED}"),
            "b": server("b", "--resources", SHARED),
        }
    }
    async with running(tmp_path, user=user) as r, Client(r.gateway.server, mode=mode) as client:
        uris = {str(res.uri) for res in (await client.list_resources()).resources}
        assert uris == {"note://a/1", namespaced_uri("a", SHARED), namespaced_uri("b", SHARED)}
        assert text_of(await client.read_resource("note://a/1")) == ("note://a/1", "a:note://a/1")
        for name in ("a", "b"):
            served = namespaced_uri(name, SHARED)
            assert text_of(await client.read_resource(served)) == (served, f"{name}:{SHARED}")
        # An unknown URI with two servers to choose from: one clear error, the gateway goes on.
        with pytest.raises(MCPError) as caught:
            await client.read_resource("note://nobody/1")
        assert caught.value.code == -32002
        assert "resource 'note://nobody/1' not found: no connected MCP server lists it" in caught.value.message
        assert "servers with resources: a, b" in caught.value.message
        # The URI both list (a subscriber may hold it from before the second came): each one's form, named.
        with pytest.raises(MCPError) as shared:
            await client.read_resource(SHARED)
        forms = f"{namespaced_uri('a', SHARED)} or {namespaced_uri('b', SHARED)}"
        assert shared.value.message == f"resource {SHARED!r} is listed by servers a, b: read {forms}"
        with pytest.raises(MCPError) as gone:
            await client.read_resource(namespaced_uri("left", SHARED))
        assert "server 'left' is not connected" in gone.value.message
        assert text_of(await client.read_resource("note://a/1"))[1] == "a:note://a/1"


async def test_a_uri_not_listed_goes_to_the_only_server_with_resources_and_its_error_names_it(tmp_path: Path) -> None:
    user = {"mcpServers": {"a": server("a", "--resources", "note://a/1"), "b": server("b")}}
    async with running(tmp_path, user=user) as r, Client(r.gateway.server) as client:
        with pytest.raises(MCPError) as caught:
            await client.read_resource("note://a/2")
        assert caught.value.code == -32002  # the server's own: resource not found
        assert "reading resource 'note://a/2' on server 'a' failed: Resource not found" in caught.value.message


async def test_a_server_with_resources_joining_is_announced_to_clients_of_both_eras(tmp_path: Path) -> None:
    heard: list[object] = []

    async def handler(message: object) -> None:
        heard.append(message)

    user = {"mcpServers": {"a": server("a", "--resources", "note://a/1")}}
    async with (
        running(tmp_path, user=user) as r,
        Client(r.gateway.server, mode="legacy", message_handler=handler) as legacy,
        Client(r.gateway.server) as modern,
        modern.listen(resources_list_changed=True) as subscription,
    ):
        caps = legacy.server_capabilities
        assert caps.resources is not None
        assert caps.resources.list_changed
        assert {str(res.uri) for res in (await legacy.list_resources()).resources} == {"note://a/1"}
        save(r.layout.paths.user, {"mcpServers": {**user["mcpServers"], "b": server("b", "--resources", "note://b/1")}})
        assert isinstance(await next_event(subscription), ResourcesListChanged)
        await wait_until(lambda: any(isinstance(m, types.ResourceListChangedNotification) for m in heard))
        listed = (await modern.list_resources(cache_mode="bypass")).resources
        assert {str(res.uri) for res in listed} == {"note://a/1", "note://b/1"}
        # A server without resources joining changes no resource list: no notice for it.
        notices = r.gateway.notices_sent
        save(
            r.layout.paths.user,
            {"mcpServers": {**user["mcpServers"], "b": server("b", "--resources", "note://b/1"), "c": server("c")}},
        )
        await wait_until(lambda: "c" in r.host.config.manager.clients() and r.gateway.notices_sent > notices)
        await wait_until(lambda: sum(isinstance(m, types.ToolListChangedNotification) for m in heard) == 2)
        await legacy.list_tools()  # a round trip: what the gateway sent in that round has arrived
        assert sum(isinstance(m, types.ResourceListChangedNotification) for m in heard) == 1


async def test_a_server_restarted_by_an_edit_is_one_resources_notice_sent_once_its_new_resources_are_listed(
    tmp_path: Path,
) -> None:
    """A new argument restarts a server with resources: its clients hear one resources/list_changed, with its tools',
    once the new process lists its resources (not one as the old process goes, when a client finds none of them)."""
    heard: list[object] = []

    async def handler(message: object) -> None:
        heard.append(message)

    def resource_notices() -> int:
        return sum(isinstance(m, types.ResourceListChangedNotification) for m in heard)

    user = {"mcpServers": {"a": server("a", "--resources", "note://a/1")}}
    async with (
        running(tmp_path, user=user, processes=True) as r,
        Client(r.gateway.server, mode="legacy", message_handler=handler) as legacy,
    ):
        assert {str(res.uri) for res in (await legacy.list_resources()).resources} == {"note://a/1"}
        await r.settle()
        sent = r.gateway.notices_sent
        save(r.layout.paths.user, {"mcpServers": {"a": server("a", "--resources", "note://a/1,note://a/2")}})
        await wait_until(lambda: resource_notices() >= 1, what="a resources/list_changed")
        listed = (await legacy.list_resources()).resources
        assert {str(res.uri) for res in listed} == {"note://a/1", "note://a/2"}
        await r.settle()
        await legacy.list_tools()  # a round trip: what the gateway sent before has arrived
        assert r.gateway.notices_sent == sent + 1
        assert resource_notices() == 1


@pytest.mark.parametrize("mode", ERAS)
async def test_templates_are_listed_and_a_uri_is_read_from_the_server_whose_template_it_matches(
    tmp_path: Path, mode: str
) -> None:
    user = {
        "mcpServers": {
            "a": server("a", "--templates", "notes://{id}"),
            "b": server("b", "--templates", "tickets://{project}/{id},both://{x}"),
            "c": server("c", "--templates", "both://{y}"),
        }
    }
    async with running(tmp_path, user=user) as r, Client(r.gateway.server, mode=mode) as client:
        listed = await client.list_resource_templates()
        assert sorted(t.uri_template for t in listed.resource_templates) == [
            "both://{x}",
            "both://{y}",
            "notes://{id}",
            "tickets://{project}/{id}",
        ]
        assert text_of(await client.read_resource("notes://n1")) == ("notes://n1", "a:notes://n1")
        assert text_of(await client.read_resource("tickets://p/7")) == ("tickets://p/7", "b:tickets://p/7")
        with pytest.raises(MCPError) as ambiguous:
            await client.read_resource("both://z")
        assert "matches resource templates of servers b, c" in ambiguous.value.message
        assert text_of(await client.read_resource("notes://n2"))[1] == "a:notes://n2"  # the gateway goes on


@pytest.mark.parametrize("mode", ERAS)
async def test_completion_goes_to_the_server_that_owns_the_prompt_or_the_template(tmp_path: Path, mode: str) -> None:
    user = {
        "mcpServers": {
            "a": server("a", "--prompts", "plan", "--templates", "notes://{id}"),
            "b": server("b", "--prompts", "plan"),
        }
    }
    async with running(tmp_path, user=user) as r, Client(r.gateway.server, mode=mode) as client:
        assert client.server_capabilities.completions is not None
        for name in ("a", "b"):
            ref = types.PromptReference(type="ref/prompt", name=f"mcp__{name}__plan")
            result = await client.complete(ref, {"name": "topic", "value": "wea"})
            assert result.completion.values == [f"{name}:topic:wea"]
        template = types.ResourceTemplateReference(type="ref/resource", uri="notes://{id}")
        assert (await client.complete(template, {"name": "id", "value": "4"})).completion.values == ["a:id:4"]

        # Nobody owns it: one clear error each, naming the reason.
        with pytest.raises(MCPError) as no_template:
            await client.complete(
                types.ResourceTemplateReference(type="ref/resource", uri="x://{y}"), {"name": "y", "value": ""}
            )
        assert "resource template 'x://{y}': no connected MCP server lists it" in no_template.value.message
        with pytest.raises(MCPError) as no_prompt:
            await client.complete(
                types.PromptReference(type="ref/prompt", name="mcp__gone__plan"), {"name": "topic", "value": ""}
            )
        assert "prompt 'mcp__gone__plan' not found" in no_prompt.value.message


@pytest.mark.parametrize("mode", ERAS)
async def test_the_meta_of_a_prompt_get_a_read_and_a_completion_reaches_the_server_but_the_protocols_own_keys(
    tmp_path: Path, mode: str
) -> None:
    """A client's ``_meta`` (an extension's keys, a tenant) reached the server on a tool call only: prompts/get,
    resources/read and completion/complete dropped it. It is passed on as a call's is: without what the protocol
    keeps there for one connection (the gateway's connection to the server states its own) or a progress token."""
    echo = "note,note://a/1,note://a/{id}"
    args = ("--prompts", "note", "--resources", "note://a/1", "--templates", "note://a/{id}", "--echo-meta", echo)
    spoofed = {"name": "not the gateway", "version": "0"}
    meta: Any = {"example.com/tenant": "t1", "io.modelcontextprotocol/clientInfo": spoofed, "progressToken": "p"}
    prompt_ref = types.PromptReference(type="ref/prompt", name="mcp__a__note")
    template_ref = types.ResourceTemplateReference(type="ref/resource", uri="note://a/{id}")
    echoed: list[dict[str, Any]] = []
    user = {"mcpServers": {"a": server("a", *args)}}
    async with running(tmp_path, user=user, processes=True) as r, anyio.create_task_group() as tg:
        url = await tg.start(r.gateway.serve_http, "127.0.0.1", 0)
        async with Client(url, mode=mode) as client:
            [message] = (await client.get_prompt("mcp__a__note", meta=meta)).messages
            assert isinstance(message.content, types.TextContent)
            echoed.append(json.loads(message.content.text))
            echoed.append(json.loads(text_of(await client.read_resource("note://a/1", meta=meta))[1]))
            for ref in (prompt_ref, template_ref):
                argument = types.CompletionArgument(name="topic", value="x")
                params = types.CompleteRequestParams(ref=ref, argument=argument, _meta=meta)
                completed = await client.session.send_request(
                    types.CompleteRequest(params=params), types.CompleteResult
                )
                echoed.append(json.loads(completed.completion.values[0]))
        tg.cancel_scope.cancel()
    assert [e.get("example.com/tenant") for e in echoed] == ["t1"] * 4
    assert all(e.get("io.modelcontextprotocol/clientInfo") != spoofed and e.get("progressToken") != "p" for e in echoed)


async def test_an_upstream_that_changes_its_resources_is_refetched_and_announced_downstream(tmp_path: Path) -> None:
    heard: list[object] = []

    async def handler(message: object) -> None:
        heard.append(message)

    user = {"mcpServers": {"a": server("a", "--control", "--resources", "note://a/1")}}
    async with (
        running(tmp_path, user=user) as r,
        Client(r.gateway.server, mode="legacy", message_handler=handler) as legacy,
        Client(r.gateway.server) as modern,
        modern.listen(resources_list_changed=True) as subscription,
    ):
        assert {str(res.uri) for res in (await modern.list_resources()).resources} == {"note://a/1"}
        # The upstream replaces its resources and sends notifications/resources/list_changed.
        await legacy.call_tool("mcp__a__set_resources", {"names": "note://a/2,note://a/3"})
        assert isinstance(await next_event(subscription), ResourcesListChanged)
        await wait_until(lambda: any(isinstance(m, types.ResourceListChangedNotification) for m in heard))
        listed = (await modern.list_resources(cache_mode="bypass")).resources
        assert {str(res.uri) for res in listed} == {"note://a/2", "note://a/3"}
        assert text_of(await modern.read_resource("note://a/3")) == ("note://a/3", "a:note://a/3")


# -- subscriptions ----------------------------------------------------------------------------------


async def subscribe(client: Client, uri: str) -> None:
    """``resources/subscribe``, which the SDK marks deprecated because the 2026-07-28 era dropped it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.subscribe_resource(uri)


async def unsubscribe(client: Client, uri: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.unsubscribe_resource(uri)


def updated_uris(heard: list[object]) -> list[str]:
    return [str(m.params.uri) for m in heard if isinstance(m, types.ResourceUpdatedNotification)]


async def touch(client: Client, tool: str, uri: str) -> str:
    result = await client.call_tool(tool, {"uri": uri})
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def test_subscriptions_reach_the_subscribed_handshake_clients_and_end_with_the_last_subscriber(
    tmp_path: Path,
) -> None:
    first: list[object] = []
    second: list[object] = []

    async def on_first(message: object) -> None:
        first.append(message)

    async def on_second(message: object) -> None:
        second.append(message)

    user = {"mcpServers": {"a": server("a", "--resources", "note://a/1,note://a/2", "--control")}}
    async with (
        running(tmp_path, user=user) as r,
        Client(r.gateway.server, mode="legacy", message_handler=on_first) as one,
        Client(r.gateway.server) as caller,
    ):
        caps = one.server_capabilities.resources
        assert caps is not None
        assert caps.subscribe
        async with Client(r.gateway.server, mode="legacy", message_handler=on_second) as two:
            await subscribe(one, "note://a/1")
            await subscribe(two, "note://a/1")
            await subscribe(two, "note://a/1")  # twice from one client counts once
            assert r.gateway.subscriptions.subscribed() == {"note://a/1": 2}
            assert await touch(caller, "mcp__a__touch_resource", "note://a/1") == "notified"
            await wait_until(lambda: updated_uris(first) == ["note://a/1"] and updated_uris(second) == ["note://a/1"])
            assert await touch(caller, "mcp__a__touch_resource", "note://a/2") == "not subscribed"
            await unsubscribe(one, "note://a/1")
            assert await touch(caller, "mcp__a__touch_resource", "note://a/1") == "notified"  # two still listens
            await wait_until(lambda: updated_uris(second) == ["note://a/1", "note://a/1"])
            assert updated_uris(first) == ["note://a/1"]
        # The last subscriber's connection closed: the upstream subscription ends with it.
        await wait_until(lambda: r.gateway.subscriptions.subscribed() == {})
        assert await touch(caller, "mcp__a__touch_resource", "note://a/1") == "not subscribed"


async def test_a_modern_client_subscribes_through_listen_and_hears_updates_under_the_gateway_uri(
    tmp_path: Path,
) -> None:
    from mcp.client.subscriptions import ResourceUpdated

    user = {
        "mcpServers": {
            "a": server("a", "--resources", SHARED, "--control"),
            "b": server("b", "--resources", SHARED),
        }
    }
    served = namespaced_uri("a", SHARED)  # two servers list the same URI: the gateway's name for a's
    async with (
        running(tmp_path, user=user) as r,
        Client(r.gateway.server) as modern,
        modern.listen(resource_subscriptions=[served]) as subscription,
    ):
        assert r.gateway.subscriptions.subscribed() == {served: 1}
        assert await touch(modern, "mcp__a__touch_resource", SHARED) == "notified"
        event = await next_event(subscription)
        assert isinstance(event, ResourceUpdated)
        assert str(event.uri) == served


async def test_a_listen_subscription_that_cannot_be_made_is_left_out_and_the_stream_goes_on(tmp_path: Path) -> None:
    """One URI of a listen stream that cannot be subscribed (its server is not connected) failed the whole stream,
    list changes and the other subscriptions with it (a handshake-era client's resources/subscribe fails alone):
    it is left out of what the acknowledgement honours, and the rest is heard."""
    from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged

    user = {"mcpServers": {"a": server("a", "--resources", "note://a/1", "--control")}}
    gone = namespaced_uri("nope", "note://nope/1")
    async with (
        running(tmp_path, user=user) as r,
        Client(r.gateway.server) as modern,
        modern.listen(tools_list_changed=True, resource_subscriptions=["note://a/1", gone]) as subscription,
    ):
        assert subscription.honored.resource_subscriptions == ["note://a/1"]
        assert subscription.honored.tools_list_changed
        assert r.gateway.subscriptions.subscribed() == {"note://a/1": 1}
        assert await touch(modern, "mcp__a__touch_resource", "note://a/1") == "notified"
        event = await next_event(subscription)
        assert isinstance(event, ResourceUpdated)
        save(r.layout.paths.user, {"mcpServers": {**user["mcpServers"], "b": server("b")}})
        assert isinstance(await next_event(subscription), ToolsListChanged)


async def test_a_subscription_survives_its_server_restarting(tmp_path: Path) -> None:
    heard: list[object] = []

    async def on_message(message: object) -> None:
        heard.append(message)

    user = {"mcpServers": {"a": server("a", "--resources", "note://a/1", "--control")}}
    async with (
        running(tmp_path, user=user) as r,
        Client(r.gateway.server, mode="legacy", message_handler=on_message) as client,
    ):
        await subscribe(client, "note://a/1")
        old = r.host.config.manager.get_client("a")
        assert old is not None
        old.mark_lost("killed by the test")
        await wait_until(lambda: r.gateway.subscriptions.client_of("a", "note://a/1") not in (None, old))
        assert await touch(client, "mcp__a__touch_resource", "note://a/1") == "notified"
        await wait_until(lambda: updated_uris(heard) == ["note://a/1"])


async def test_subscribing_to_what_no_server_owns_or_a_server_that_left_is_a_clear_error(tmp_path: Path) -> None:
    user = {
        "mcpServers": {"a": server("a", "--resources", "note://a/1"), "b": server("b", "--resources", "note://b/1")}
    }
    async with running(tmp_path, user=user) as r, Client(r.gateway.server, mode="legacy") as client:
        with pytest.raises(MCPError) as unknown:
            await subscribe(client, "note://nobody/1")
        assert unknown.value.code == -32002
        assert "resource 'note://nobody/1' not found: no connected MCP server lists it" in unknown.value.message
        with pytest.raises(MCPError) as gone:
            await subscribe(client, namespaced_uri("left", "note://x"))
        assert "server 'left' is not connected" in gone.value.message
        assert r.gateway.subscriptions.subscribed() == {}
        await unsubscribe(client, "note://a/1")  # never subscribed: nothing to do, no error
        assert (await client.read_resource("note://a/1")).contents


async def test_an_upstream_that_never_answers_a_read_is_a_timeout_error_and_the_rest_goes_on(tmp_path: Path) -> None:
    slow = {**server("a", "--resources", "note://a/1,note://a/slow", "--hang-on-read", "note://a/slow"), "timeout": 500}
    user = {"mcpServers": {"a": slow, "b": server("b", "--resources", "note://b/1")}}
    async with running(tmp_path, user=user) as r, Client(r.gateway.server) as client, Client(r.gateway.server) as other:
        with pytest.raises(MCPError) as caught:
            await client.read_resource("note://a/slow")
        assert caught.value.code == types.INTERNAL_ERROR
        assert (
            "reading resource 'note://a/slow' on server 'a' timed out after 0.5 s; raise mcpServers.a.timeout"
            in caught.value.message
        )
        assert text_of(await client.read_resource("note://a/1")) == ("note://a/1", "a:note://a/1")
        assert text_of(await other.read_resource("note://b/1")) == ("note://b/1", "b:note://b/1")
        assert r.host.config.manager.get_client("a").status == "connected"  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_modern_upstream_is_subscribed_through_a_listen_stream_of_its_own(tmp_path: Path, mode: str) -> None:
    """The SDK server, reached in the 2026-07-28 era, hears of a subscription on a subscriptions/listen
    stream the connection opens for that resource, and the gateway's subscribers hear its updates."""
    from mcp.client.subscriptions import ResourceUpdated

    heard: list[object] = []

    async def on_message(message: object) -> None:
        heard.append(message)

    user = {"mcpServers": {"a": server("a", "--resources", "note://a/1", "--control", module=SDK)}}
    async with running(tmp_path, user=user) as r, Client(r.gateway.server, mode=mode, message_handler=on_message) as c:
        upstream = r.host.config.manager.get_client("a")
        assert upstream is not None
        assert upstream.protocol_version == "2026-07-28"
        if mode == "legacy":
            await subscribe(c, "note://a/1")
            assert upstream._notices.listened() == ["note://a/1"]
            assert await touch(c, "mcp__a__touch_resource", "note://a/1") == "notified"
            await wait_until(lambda: updated_uris(heard) == ["note://a/1"])
            await unsubscribe(c, "note://a/1")
        else:
            async with c.listen(resource_subscriptions=["note://a/1"]) as subscription:
                assert upstream._notices.listened() == ["note://a/1"]
                assert await touch(c, "mcp__a__touch_resource", "note://a/1") == "notified"
                event = await next_event(subscription)
                assert isinstance(event, ResourceUpdated)
                assert str(event.uri) == "note://a/1"
        # The last subscriber left: the upstream stream ends.
        await wait_until(lambda: not upstream._notices.listened())
        assert r.gateway.subscriptions.subscribed() == {}


async def test_one_change_is_told_once_whatever_else_the_server_is_subscribed_to(tmp_path: Path) -> None:
    """Before, every upstream subscription on a server heard every notice of that server: a client subscribed to
    one of three resources was told of its change three times (fifty-one times beside fifty others)."""
    heard: list[object] = []

    async def on_message(message: object) -> None:
        heard.append(message)

    uris = ["note://a/1", "note://a/2", "note://a/3"]
    user = {"mcpServers": {"a": server("a", "--resources", ",".join(uris), "--control")}}
    async with (
        running(tmp_path, user=user) as r,
        Client(r.gateway.server, mode="legacy", message_handler=on_message) as one,
        Client(r.gateway.server, mode="legacy") as other,
        Client(r.gateway.server) as caller,
    ):
        await subscribe(one, "note://a/1")
        await subscribe(other, "note://a/2")
        await subscribe(other, "note://a/3")
        assert await touch(caller, "mcp__a__touch_resource", "note://a/1") == "notified"
        await subscribe(one, "note://a/3")
        assert await touch(caller, "mcp__a__touch_resource", "note://a/3") == "notified"
        await wait_until(lambda: "note://a/3" in updated_uris(heard), what="the second change told")
        assert sorted(updated_uris(heard)) == ["note://a/1", "note://a/3"]


HANGING_SUBSCRIBE = raw_server(
    "hang",
    """
    def answer(method, params):
        if method == "resources/subscribe":
            open(sys.argv[1], "w").close()  # the marker: it has the request
            time.sleep(3600)  # never answers (and reads nothing more)
        if method == "resources/list":
            return {"resources": [{"uri": "hang://x", "name": "x"}]}
        return {"tools": [], "prompts": [], "resourceTemplates": []}
    """,
    capabilities={"resources": {"subscribe": True}},
)


async def test_a_server_that_never_answers_a_subscribe_holds_up_no_other_servers_subscriptions(
    tmp_path: Path,
) -> None:
    """Before, one lock covered every upstream subscribe: a client's subscribe to a healthy server waited until the
    hanging server's request timed out (600 s by default)."""
    marker = tmp_path / "subscribing"
    user = {
        "mcpServers": {
            "a": server("a", "--resources", "note://a/1", "--control"),
            "hang": {"command": sys.executable, "args": ["-c", HANGING_SUBSCRIBE, str(marker)], "timeout": 120_000},
        }
    }
    async with (
        running(tmp_path, user=user) as r,
        Client(r.gateway.server, mode="legacy") as stuck,
        Client(r.gateway.server, mode="legacy") as fine,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(subscribe, stuck, "hang://x")
        await wait_until(marker.exists, what="the hanging subscribe under way")
        with anyio.fail_after(WAIT_S):
            await subscribe(fine, "note://a/1")
        assert r.gateway.subscriptions.subscribed() == {"note://a/1": 1}
        tg.cancel_scope.cancel()


async def test_a_subscribe_a_server_never_answers_is_answered_within_its_timeout(tmp_path: Path) -> None:
    """A handshake-era server that never answers ``resources/subscribe``: the client's subscribe waited for ever (the
    server's ``timeout`` bounded its reads of resources, its prompts and completions, not its subscriptions)."""
    marker = tmp_path / "subscribing"
    hang = {"command": sys.executable, "args": ["-c", HANGING_SUBSCRIBE, str(marker)], "timeout": 1000}
    async with (
        running(tmp_path, user={"mcpServers": {"hang": hang}}) as r,
        Client(r.gateway.server, mode="legacy") as c,
    ):
        with anyio.fail_after(WAIT_S), pytest.raises(MCPError) as refused:
            await subscribe(c, "hang://x")
        assert "subscribing to resource 'hang://x' on server 'hang' timed out" in refused.value.error.message
        assert r.gateway.subscriptions.subscribed() == {}


@pytest.mark.parametrize("mode", ERAS)
async def test_completing_a_prompt_of_a_server_without_completions_is_no_method_not_found_of_the_gateway(
    tmp_path: Path, mode: str
) -> None:
    """The gateway serves completion/complete; a server that does not (the SDK example server offers prompts and
    no completions) answering -32601 must not reach the client as if the gateway lacked the method."""
    user = {"mcpServers": {"s": server("s", "--prompts", "plan", module=SDK)}}
    async with running(tmp_path, user=user) as r, Client(r.gateway.server, mode=mode) as client:
        assert client.server_capabilities.completions is not None
        ref = types.PromptReference(type="ref/prompt", name="mcp__s__plan")
        with pytest.raises(MCPError) as caught:
            await client.complete(ref, {"name": "topic", "value": "wea"})
        assert caught.value.code != types.METHOD_NOT_FOUND
        assert "completing argument 'topic' of 'plan' on server 's' failed" in caught.value.message
