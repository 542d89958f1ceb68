"""What upstream servers ask of their client - sampling, elicitation, roots - reaches the gateway's client
whose call caused it, and cancellation crosses the gateway both ways (SPEC §9 "Gateway"). Real example
servers upstream: the light server in the handshake era, the SDK server in the 2026-07-28 era (its
requests ride input-required results); the SDK's ``Client`` downstream, in both eras (a modern-era
client is asked through input-required results of the gateway's own)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning

from mcpvisor.core.client_requests import InFlight, Progress, answering
from mcpvisor.core.server_config import ConnectionOptions
from mcpvisor.gateway import asks
from tests.gateway.test_gateway import ERAS, running, save, server, text_of
from tests.helpers import LIGHT, SDK, WAIT_S, raw_server, wait_until

UPSTREAMS = [LIGHT, SDK]
"""The light server asks in the middle of a call (handshake era); the SDK server, reached in the modern
era, returns an input-required result that the gateway's connection fulfils and retries."""


class Answers:
    """A downstream client's answers to sampling, elicitation and roots requests, and what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.cancelled = anyio.Event()
        self.withdrawn = 0
        """How many of its answers were cancelled by the gateway."""
        self.hold = False

    async def sampling(self, context: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        content = params.messages[0].content
        assert isinstance(content, types.TextContent)
        self.asked.append(f"sampling {content.text}")
        token = (context.meta or {}).get("progress_token")
        if isinstance(token, str | int):  # the server asked for progress: report some
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # client-to-server progress: handshake era
                await context.session.send_progress_notification(token, 0.5, 1.0, "thinking")
        if self.hold:
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                self.withdrawn += 1
                self.cancelled.set()
                raise
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"an answer to {content.text}"), model="m"
        )

    async def elicitation(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        self.asked.append(f"elicitation {params.message}")
        return types.ElicitResult(action="accept", content={"answer": "42"})

    async def roots(self, context: ClientRequestContext) -> Any:
        self.asked.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project", name="project")])

    def client(self, gateway_server: Any, *, mode: str = "legacy") -> Client:
        return Client(
            gateway_server,
            mode=mode,
            sampling_callback=self.sampling,
            elicitation_callback=self.elicitation,
            list_roots_callback=self.roots,
        )


async def ask(client: Client, kind: str, text: str = "", **more: Any) -> types.CallToolResult:
    with anyio.fail_after(WAIT_S):
        return await client.call_tool("mcp__a__ask_client", {"kind": kind, "text": text, **more})


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("upstream", UPSTREAMS)
async def test_sampling_elicitation_and_roots_reach_the_calling_client_and_its_answer_goes_back(
    tmp_path: Path, upstream: str, mode: str
) -> None:
    answers = Answers()
    user = {"mcpServers": {"a": server("a", "--control", module=upstream)}}
    async with (
        running(tmp_path, user=user, client_requests=True) as r,
        answers.client(r.gateway.server, mode=mode) as client,
    ):
        assert (client.protocol_version == "2026-07-28") == (mode == "auto")
        sampled = await ask(client, "sampling", "what is up?")
        assert not sampled.is_error, text_of(sampled)
        assert text_of(sampled) == "sampled: an answer to what is up?"
        elicited = await ask(client, "elicitation", "your favourite number?")
        assert text_of(elicited) == 'elicited: accept {"answer": "42"}'
        assert text_of(await ask(client, "roots")) == "roots: file:///work/project"
        assert answers.asked == ["sampling what is up?", "elicitation your favourite number?", "roots"]
        connection = r.host.config.manager.get_client("a")
        assert connection is not None
        modern = connection.protocol_version == "2026-07-28"
        assert modern == (upstream == SDK)


async def test_the_clients_progress_on_a_servers_request_reaches_the_server(tmp_path: Path) -> None:
    answers = Answers()
    user = {"mcpServers": {"a": server("a", "--control")}}
    async with (
        running(tmp_path, user=user, client_requests=True, processes=True) as r,
        answers.client(r.gateway.server) as client,
    ):
        log = Path(r.layout.env["MCPVISOR_LOG_DIR"]) / "a.log"
        assert text_of(await ask(client, "sampling", "slowly")) == "sampled: an answer to slowly"
        # The light server asked with progress token ask-1; the gateway gave the client a token of its own.
        await wait_until(lambda: log.exists() and "progress on ask-1: 0.5/1.0 thinking" in log.read_text())


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("upstream", UPSTREAMS)
async def test_a_client_that_offers_nothing_is_not_asked_and_the_server_hears_why(
    tmp_path: Path, upstream: str, mode: str
) -> None:
    user = {"mcpServers": {"a": server("a", "--control", module=upstream)}}
    async with (
        running(tmp_path, user=user, client_requests=True, processes=True) as r,
        Client(r.gateway.server, mode=mode) as c,
    ):
        result = await ask(c, "sampling", "hello")
        assert result.is_error
        assert "server 'a' asked for sampling, but the client calling it through mcpvisor does not offer sampling" in (
            text_of(result)
        )
        # The gateway and the server go on.
        assert text_of(await c.call_tool("mcp__a__pid", {})).isdigit()


async def test_a_modern_era_client_answers_in_rounds_and_a_call_it_abandons_is_cancelled(tmp_path: Path) -> None:
    """Driven by hand: the call answers with the server's request, the retry carries the answer; a call the
    client never comes back to is cancelled upstream after the round timeout, and its state is refused."""
    user = {"mcpServers": {"a": server("a", "--control")}}
    async with (
        running(tmp_path, user=user, client_requests=True, processes=True, round_timeout_s=0.5) as r,
        Answers().client(r.gateway.server, mode="auto") as client,
    ):
        session = client.session
        log = Path(r.layout.env["MCPVISOR_LOG_DIR"]) / "a.log"
        first = await session.call_tool("mcp__a__ask_client", {"kind": "roots"}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None
        [(key, request)] = first.input_requests.items()
        assert isinstance(request, types.ListRootsRequest)
        assert key.startswith("a-")
        answer = types.ListRootsResult(roots=[types.Root(uri="file:///by/hand")])
        done = await session.call_tool(
            "mcp__a__ask_client",
            {"kind": "roots"},
            input_responses={key: answer},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(done, types.CallToolResult)
        assert text_of(done) == "roots: file:///by/hand"

        abandoned = await session.call_tool("mcp__a__ask_client", {"kind": "roots"}, allow_input_required=True)
        assert isinstance(abandoned, types.InputRequiredResult)
        await wait_until(lambda: log.exists() and "cancelled request" in log.read_text(), what="the server's note")
        with pytest.raises(MCPError, match="names no call waiting for input"):
            await session.call_tool(
                "mcp__a__ask_client",
                {"kind": "roots"},
                input_responses={key: answer},
                request_state=abandoned.request_state,
                allow_input_required=True,
            )
        assert len(r.gateway._rounds or ()) == 0


async def test_calls_from_two_clients_in_flight_make_a_request_ambiguous_and_it_is_refused(tmp_path: Path) -> None:
    """The handshake era does not say which call a request belongs to: with calls from two clients in
    flight on the server, nobody is asked rather than the wrong one."""
    first, second = Answers(), Answers()
    user = {"mcpServers": {"a": server("a", "--control")}}
    async with (
        running(tmp_path, user=user, client_requests=True) as r,
        first.client(r.gateway.server) as one,
        second.client(r.gateway.server) as two,
        anyio.create_task_group() as tg,
    ):
        connection = r.host.config.manager.get_client("a")
        assert connection is not None
        tg.start_soon(one.call_tool, "mcp__a__sleep", {"seconds": 60})
        await wait_until(lambda: connection._in_flight is not None and len(connection._in_flight._calls) == 1)
        result = await ask(two, "roots")
        assert result.is_error
        assert "calls from 2 clients are in flight" in text_of(result)
        assert first.asked == second.asked == []
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_the_client_cancels_is_cancelled_at_the_server(tmp_path: Path, mode: str) -> None:
    user = {"mcpServers": {"a": server("a", "--control")}}
    async with (
        running(tmp_path, user=user, client_requests=True, processes=True) as r,
        Answers().client(r.gateway.server, mode=mode) as client,
    ):
        log = Path(r.layout.env["MCPVISOR_LOG_DIR"]) / "a.log"
        with anyio.move_on_after(0.5):
            await client.call_tool("mcp__a__sleep", {"seconds": 60})
        await wait_until(lambda: log.exists() and "cancelled request" in log.read_text(), what="the server's note")
        assert text_of(await client.call_tool("mcp__a__sleep", {"seconds": 0})) == "slept"


async def test_a_request_the_server_withdraws_is_cancelled_at_the_client(tmp_path: Path) -> None:
    answers = Answers()
    user = {"mcpServers": {"a": server("a", "--control")}}
    async with running(tmp_path, user=user, client_requests=True) as r, answers.client(r.gateway.server) as client:
        answers.hold = True
        result = await ask(client, "sampling", "slow", cancel_after=0.3)
        assert text_of(result) == "withdrawn"
        with anyio.fail_after(WAIT_S):
            await answers.cancelled.wait()
        # Both sides go on.
        answers.hold = False
        assert text_of(await ask(client, "sampling", "again")) == "sampled: an answer to again"


@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("edit", ["replaced", "removed"])
async def test_a_call_whose_server_is_replaced_while_its_client_answers_fails_at_once_and_the_ask_is_withdrawn(
    tmp_path: Path, upstream: str, edit: str
) -> None:
    """SPEC §5.4 "In-flight calls": the settings edit stops the server while its client is being asked; the call
    fails saying why and the client's request is cancelled, as when a handshake-era server asks (a 2026-07-28
    server's requests ride its call's result, fulfilled in the calling task: that call waited for the answer)."""
    answers = Answers()
    answers.hold = True
    user = {"mcpServers": {"a": server("a", "--control", module=upstream), "b": server("b")}}
    async with (
        running(tmp_path, user=user, client_requests=True, processes=True) as r,
        answers.client(r.gateway.server) as client,
        anyio.create_task_group() as tg,
    ):
        results: list[types.CallToolResult] = []

        async def call() -> None:
            results.append(await ask(client, "sampling", "hold on"))

        tg.start_soon(call)
        await wait_until(lambda: answers.asked == ["sampling hold on"], what="the client asked")
        a = server("a", "--control", "--tools", "other", module=upstream)
        save(
            r.layout.paths.user,
            {"mcpServers": {"a": a, "b": server("b")} if edit == "replaced" else {"b": server("b")}},
        )
        await wait_until(lambda: bool(results), what="the call's answer")
        [result] = results
        assert result.is_error
        why = "its configuration changed or it was removed"
        if edit == "removed":
            why = "it was removed from the configuration"
        assert f"server 'a' was stopped while the call was in flight ({why})" in text_of(result)
        with anyio.fail_after(WAIT_S):
            await answers.cancelled.wait()


@pytest.mark.parametrize("end", ["timed out", "cancelled by its client"])
async def test_a_request_the_client_leaves_unanswered_is_withdrawn_when_its_call_ends_and_nothing_is_left_pending(
    tmp_path: Path, end: str
) -> None:
    """A handshake-era client in a session over HTTP holds a server's sampling request unanswered, and the call ends:
    its server's timeout runs out, or the client cancels it. The gateway cancels its request at the client (on the
    call's stream, before the call's answer), call after call, and holds nothing of them. Before, the request stayed
    open for good (the light server does not withdraw its own request when its call is cancelled): the client was
    never told, and each such call left its request pending at both ends."""
    answers = Answers()
    answers.hold = True
    a = {**server("a", "--control"), "timeout": 2000} if end == "timed out" else server("a", "--control")
    async with (
        running(tmp_path, user={"mcpServers": {"a": a}}, client_requests=True, processes=True) as r,
        anyio.create_task_group() as tg,
    ):
        url: str = await tg.start(r.gateway.serve_http)
        async with answers.client(url) as client:
            for n in range(1, 4):
                if end == "timed out":
                    result = await ask(client, "sampling", f"call {n}")
                    assert "call to tool 'ask_client' on server 'a' timed out after 2 s" in text_of(result)
                else:
                    async with anyio.create_task_group() as calls:
                        calls.start_soon(ask, client, "sampling", f"call {n}")
                        await wait_until(lambda: len(answers.asked) == n, what="the client asked")  # noqa: B023
                        calls.cancel_scope.cancel()
                await wait_until(lambda: answers.withdrawn == n, what=f"request {n} withdrawn")  # noqa: B023
            assert answers.asked == [f"sampling call {n}" for n in range(1, 4)]
            connection = r.host.config.manager.get_client("a")
            assert connection is not None
            assert connection._in_flight is not None
            await wait_until(lambda: not connection._in_flight._routed, what="nothing left routed")  # type: ignore[union-attr]
            assert connection._in_flight._calls == []
            answers.hold = False  # the gateway and the server go on
            assert text_of(await ask(client, "sampling", "again")) == "sampled: an answer to again"
        tg.cancel_scope.cancel()


async def test_without_client_requests_the_servers_are_not_offered_sampling(tmp_path: Path) -> None:
    """A host that does not pass requests on (the shell, ``run``, a library user who did not ask) does not
    declare the capabilities: the SDK server refuses to ask at all."""
    answers = Answers()
    user = {"mcpServers": {"a": server("a", "--control", module=SDK)}}
    async with running(tmp_path, user=user) as r, answers.client(r.gateway.server) as client:
        result = await ask(client, "sampling", "hello")
        assert result.is_error
        assert answers.asked == []


# -- routing, in isolation ------------------------------------------------------------------------


class _Named:
    def __init__(self, client: str) -> None:
        self.client = client

    async def create_message(
        self, server: str, params: types.CreateMessageRequestParams, progress: Progress | None = None
    ) -> Any:
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=self.client), model="m"
        )

    async def elicit(self, server: str, params: types.ElicitRequestParams, progress: Progress | None = None) -> Any:
        raise AssertionError("not asked")

    async def list_roots(self, server: str, progress: Progress | None = None) -> Any:
        return types.ListRootsResult(roots=[])


async def test_in_flight_routing_names_the_server_and_the_reason() -> None:
    calls = InFlight("files")
    nobody = calls.answerer("a roots request")
    assert isinstance(nobody, types.ErrorData)
    assert nobody.message == (
        "mcpvisor cannot answer a roots request for server 'files': no call to it is in flight from a client that "
        "answers such requests (mcpvisor passes them to the client whose call caused them; a program using "
        "mcpvisor as a library answers them inside `with answering(...)`)"
    )

    async def hold(answerer: _Named, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with answering(answerer):
            async with calls.call():
                task_status.started()
                await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        await tg.start(hold, _Named("one"))
        await tg.start(hold, _Named("one"))
        # Asked from outside any call (a handshake-era request): two calls of one client, so that client.
        only = calls.answerer("sampling")
        assert isinstance(only, _Named)
        assert only.client == "one"
        await tg.start(hold, _Named("two"))
        several = calls.answerer("sampling")
        assert isinstance(several, types.ErrorData)
        assert "calls from 2 clients are in flight" in several.message
        with answering(_Named("three")):
            # Inside a call the caller is known exactly (the modern era's input-required results).
            exact = calls.answerer("sampling")
            assert isinstance(exact, _Named)
            assert exact.client == "three"
        tg.cancel_scope.cancel()
    assert calls._calls == []


async def test_a_library_caller_answers_what_its_calls_cause(tmp_path: Path) -> None:
    """Without the gateway: a ``Config`` made with ``client_requests=True`` and calls made inside
    ``answering(...)``, against both eras of upstream."""
    from mcpvisor.core.config import Config
    from mcpvisor.core.server_config import McpServerConfig

    servers = {
        name: McpServerConfig(command=sys.executable, args=("-m", module, "--name", name, "--control"))
        for name, module in (("old", LIGHT), ("new", SDK))
    }
    async with Config(mcp_servers=servers, options=ConnectionOptions(log_dir=tmp_path, client_requests=True)) as config:
        await config.initialize()
        for name in servers:
            with answering(_Named(f"agent asked by {name}")):
                result = await config.call_tool(f"mcp__{name}__ask_client", {"kind": "sampling", "text": "hi"})
            assert text_of(result) == f"sampled: agent asked by {name}"
        # Outside answering(...): nobody to ask, and the server hears why.
        refused = await config.call_tool("mcp__old__ask_client", {"kind": "roots"})
        assert refused.is_error
        assert "no call to it is in flight from a client that answers such requests" in text_of(refused)


async def test_calls_waiting_for_their_clients_input_are_bounded_one_more_is_refused_and_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, every call a modern-era client left waiting held its state (about 50 KB) for 10 minutes, with no
    bound on how many: a client that never came back could fill the gateway's memory."""
    monkeypatch.setattr(asks, "MAX_OPEN_ROUNDS", 2)
    user = {"mcpServers": {"a": server("a", "--control", module=SDK)}}  # its asks name the call they belong to
    async with (
        running(tmp_path, user=user, client_requests=True, processes=True) as r,
        Answers().client(r.gateway.server, mode="auto") as client,
    ):
        session = client.session
        for _ in range(2):
            held = await session.call_tool("mcp__a__ask_client", {"kind": "roots"}, allow_input_required=True)
            assert isinstance(held, types.InputRequiredResult), text_of(held)
        with pytest.raises(MCPError) as refused:
            await session.call_tool("mcp__a__ask_client", {"kind": "roots"}, allow_input_required=True)
        assert str(refused.value) == (
            "the call's server asked for input, and the gateway already holds 2 calls waiting for their clients' "
            "answers (each waits up to 600 s); make the call again later"
        )
        assert text_of(await session.call_tool("mcp__a__pid", {})).isdigit()  # calls that need no input go on


ASKING_SERVER = raw_server(
    "asking",
    """
    # Its tool 'ask' asks its client for roots and reports progress while the client answers: 1 of 2 when the tool
    # 'nudge' is called (by anyone), 2 of 2 once the answer came.
    asking = None  # (the id of the 'ask' call, its progress token)

    def progress(token, n, message):
        params = {"progressToken": token, "progress": n, "total": 2, "message": message}
        send({"method": "notifications/progress", "params": params})

    def text(value):
        return {"content": [{"type": "text", "text": value}]}

    def answer(method, params):
        global asking
        if method is None and msg["id"] == "roots" and asking is not None:
            call, token = asking
            progress(token, 2, "answered")
            send({"id": call, "result": text("roots: " + " ".join(r["uri"] for r in msg["result"]["roots"]))})
        elif method == "tools/list":
            return {"tools": [{"name": name, "inputSchema": {"type": "object"}} for name in ("ask", "nudge")]}
        elif method == "tools/call" and params["name"] == "ask":
            asking = (msg["id"], params["_meta"]["progressToken"])
            send({"id": "roots", "method": "roots/list"})
        elif method == "tools/call" and params["name"] == "nudge":
            progress(asking[1], 1, "waiting")  # written before the answer: the gateway reads it first
            return text("nudged")
        return None if method is None or params.get("name") == "ask" else {}  # (ping: an empty result)
    """,
)


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_a_server_reports_while_its_client_answers_reaches_the_client(tmp_path: Path, mode: str) -> None:
    """A server asks for roots in the middle of a call and reports progress while the client answers. A 2026-07-28-era
    client answers between two rounds of the call, when the first round's stream has ended: the progress goes on the
    next round's stream, before the result (it was dropped). Over real HTTP, where each round is a response stream."""
    script = tmp_path / "asking_server.py"
    script.write_text(ASKING_SERVER)
    user = {"mcpServers": {"s": {"command": sys.executable, "args": [str(script)]}}}
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    async with (
        running(tmp_path, user=user, client_requests=True, processes=True) as r,
        anyio.create_task_group() as tg,
    ):
        url: str = await tg.start(r.gateway.serve_http)
        async with Client(url, mode="legacy") as nudger:

            async def roots(context: ClientRequestContext) -> types.ListRootsResult:
                # Answering (2026-07-28: between the rounds): the server reports 1 of 2 before this call's answer.
                assert text_of(await nudger.call_tool("mcp__s__nudge", {})) == "nudged"
                return types.ListRootsResult(roots=[types.Root(uri="file:///work/project")])

            async with Client(url, mode=mode, list_roots_callback=roots) as client:
                with anyio.fail_after(WAIT_S):
                    done = await client.call_tool("mcp__s__ask", {}, progress_callback=on_progress)
        tg.cancel_scope.cancel()
    assert text_of(done) == "roots: file:///work/project"
    assert heard == [(1, 2, "waiting"), (2, 2, "answered")]


@pytest.mark.parametrize("upstream", UPSTREAMS)
async def test_a_call_made_while_answering_gets_its_own_answer_and_so_does_the_first(
    tmp_path: Path, upstream: str
) -> None:
    """A handshake-era client, asked for roots by call A, makes call B (same client, same server) before answering;
    B's request and A's each get the answer given to them, by request id (over real HTTP)."""
    user = {"mcpServers": {"a": server("a", "--control", module=upstream)}}
    got: dict[str, str] = {}
    asked = 0
    async with (
        running(tmp_path, user=user, client_requests=True, processes=True) as r,
        anyio.create_task_group() as tg,
    ):
        url: str = await tg.start(r.gateway.serve_http)

        async def roots(context: ClientRequestContext) -> types.ListRootsResult:
            nonlocal asked
            asked += 1
            mine = asked  # (read once: by the time A is answered, B has been asked too)
            if mine == 1:
                got["B"] = text_of(await ask(client, "roots"))
            return types.ListRootsResult(roots=[types.Root(uri=f"file:///d{mine}")])

        async with Client(url, mode="legacy", list_roots_callback=roots) as client:
            got["A"] = text_of(await ask(client, "roots"))
        tg.cancel_scope.cancel()
    assert got == {"A": "roots: file:///d1", "B": "roots: file:///d2"}
