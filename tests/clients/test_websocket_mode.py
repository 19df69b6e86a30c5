"""WebSocket mode of the Responses API (issue 44) with the openai SDK's ``client.responses.connect()`` (openai-python
3.54) against the app under uvicorn on 127.0.0.1, a scripted model behind the real groq SDK and the real Deno
sandbox: a tool turn, a continuation by ``previous_response_id`` with ``store: false`` sending only the new input,
a second response on the same socket, a reconnect that continues a stored response (and cannot continue an
unstored one of the old socket), an unknown ``previous_response_id``, ``stream_id`` lanes side by side, and errors
that leave the socket usable."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from chatloop.config import Settings
from tests.support.fake_llm import FakeLLM, Reply, text, tool_calls
from tests.support.server import Server, app_server

MODEL = "llama-3.3-70b-versatile"
CHAIN = f"groq:{MODEL}"
KEYS = {"groq": "gsk_websocket_mode_000000000000"}
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def scripted(body: dict[str, Any]) -> Reply:
    """Runs ``6 * 7`` in the sandbox when asked to "compute" (once), and otherwise repeats every user message it was
    given (so a test sees what history reached the model). "slow": the answer takes a moment to start."""
    messages = body["messages"]
    users = [str(m["content"]) for m in messages if m["role"] == "user"]
    ran = [m for m in messages if m["role"] == "tool"]
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    if "spin" in users[-1] and not ran:  # a run that would take 8 s
        code = json.dumps(
            {"code": "const t = Date.now(); while (Date.now() - t < 8000) {}; 1", "timeout_seconds": 10}
        )
        return tool_calls(MODEL, [("call_spin", "execute_javascript", code)], groq=True)
    if "compute" in users[-1] and "execute_javascript" in offered and not ran:
        code = json.dumps({"code": "6 * 7"})
        return tool_calls(MODEL, [("call_js_1", "execute_javascript", code)], groq=True)
    if "leak" in users[-1]:  # a hostile model repeating the provider's key it should never know
        leaked = f"the key is {KEYS['groq']}, again: {KEYS['groq']}"
        return text(MODEL, leaked, pieces=len(leaked) // 3, groq=True)  # streamed 3 characters at a time
    answer = "heard: " + " | ".join(users) + (f" (ran: {ran[-1]['content']})" if ran else "")
    reply = text(MODEL, answer, groq=True)
    reply.delay = 0.5 if "slow" in users[-1] else 0.0
    return reply


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeLLM]:
    with FakeLLM() as llm:
        llm.default = scripted
        yield llm


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("ws") / "store.sqlite3")


def serve(upstream: FakeLLM, store_path: str, sandbox: Any, **settings: Any) -> Any:
    from chatloop.tools.base import ToolRegistry
    from chatloop.tools.javascript import ExecuteJavaScriptTool

    config = Settings(
        model_chain=CHAIN, rate_limit_max_wait_seconds=0.0, conversation_store_path=store_path, **settings
    )
    env = {"GROQ_BASE_URL": upstream.groq_base_url}
    registry = ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    return app_server(config, env=env, registry=registry, keys=KEYS)


@pytest.fixture(scope="module")
def server(upstream, store_path, sandbox) -> Iterator[Server]:
    with serve(upstream, store_path, sandbox) as served:
        yield served


def client(server: Server, key: str = "alice-key") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.base_url, api_key="unused", max_retries=0, default_headers={"x-api-key": key}
    )


def until_terminal(connection: Any) -> list[Any]:
    """The events of one response, its terminal event last (an ``error`` event ends it too)."""
    events = []
    for event in connection:
        events.append(event)
        if event.type in TERMINAL or event.type == "error":
            return events
    raise AssertionError(f"the socket closed after {[e.type for e in events]}")


def through_errors_until_terminal(connection: Any) -> list[Any]:
    """The events up to the first terminal one, ``error`` events (another message's refusal) among them."""
    events: list[Any] = []
    while not any(e.type in TERMINAL for e in events):
        events.append(connection.recv())
    return events


def create(connection: Any, **fields: Any) -> list[Any]:
    connection.response.create(model="chatloop", **fields)
    return until_terminal(connection)


@pytest.mark.slow  # the sandbox's first run in the session
def test_a_tool_turn_streams_its_events_over_the_socket(server, upstream):
    with client(server).responses.connect() as connection:
        events = create(connection, input="compute six times seven", store=False)
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.code_interpreter_call_code.done" in types  # the sandbox's run, as on HTTP
    done = events[-1].response
    assert "(ran: " in done.output_text and "42" in done.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_store_false_response_is_continued_from_the_connections_memory(server, upstream):
    with client(server).responses.connect() as connection:
        first = create(connection, input="my name is Ada", store=False)[-1].response
        upstream.requests.clear()
        second = create(connection, input="what is my name?", store=False, previous_response_id=first.id)
    assert second[-1].type == "response.completed"
    assert second[-1].response.previous_response_id == first.id
    # the model was given the first turn too, though only the new input was sent
    assert second[-1].response.output_text == "heard: my name is Ada | what is my name?"
    with pytest.raises(openai.NotFoundError):  # nothing was stored
        client(server).responses.retrieve(first.id)


def test_a_second_response_on_the_same_socket(server):
    with client(server).responses.connect() as connection:
        one = create(connection, input="first", store=False)[-1].response
        two = create(connection, input="second", store=False)[-1].response
    assert one.id != two.id and two.output_text == "heard: second"


def test_a_reconnect_continues_a_stored_response_but_not_an_unstored_one(server):
    alice = client(server)
    with alice.responses.connect() as connection:
        kept = create(connection, input="remember the lighthouse")[-1].response
        unkept = create(connection, input="and the harbour", store=False)[-1].response
    with alice.responses.connect() as again:  # a new socket: the old one's memory is gone
        continued = create(again, input="what did I ask?", previous_response_id=kept.id)
        assert continued[-1].response.output_text == "heard: remember the lighthouse | what did I ask?"
        lost = create(again, input="and then?", previous_response_id=unkept.id)
        assert lost[-1].type == "error" and lost[-1].error.code == "previous_response_not_found"
        assert lost[-1].error.param == "previous_response_id"
        after = create(again, input="still here")  # the error left the socket usable
    assert after[-1].type == "response.completed"


def test_an_unknown_previous_response_id_is_the_http_routes_error(server, upstream):
    alice = client(server)
    upstream.requests.clear()
    with alice.responses.connect() as connection:
        events = create(connection, input="hi", previous_response_id="resp_nothing")
    [error] = events
    with pytest.raises(openai.NotFoundError) as http:
        alice.responses.create(model="chatloop", input="hi", previous_response_id="resp_nothing")
    assert error.error.code == http.value.code == "previous_response_not_found"
    assert error.error.message == http.value.body["message"] and error.status == 404
    assert upstream.requests == []  # no model call either way


def test_bad_messages_are_error_events_and_the_socket_stays_usable(server, upstream):
    alice = client(server)
    with alice.responses.connect() as connection:
        replies = []
        for raw in (
            "{not json",
            json.dumps({"type": "session.update"}),
            json.dumps({"type": "response.create"}),
        ):
            connection.send_raw(raw)
            replies.append(until_terminal(connection)[-1])
        connection.response.create(model="chatloop", input="hi", background=True)
        replies.append(until_terminal(connection)[-1])
        ok = create(connection, input="hi after all that", store=False)
    assert [(r.type, r.error.code, r.error.param) for r in replies] == [
        ("error", "invalid_json", None),
        ("error", "invalid_request", "type"),
        ("error", "invalid_request", "input"),
        ("error", "unsupported_parameter", "background"),
    ]
    with pytest.raises(openai.BadRequestError) as http:  # the body's error is the POST's own
        alice.responses.create(model="chatloop")
    assert replies[2].error.message == http.value.body["message"]
    assert ok[-1].type == "response.completed"


def test_stream_id_lanes_run_side_by_side_and_one_lane_at_a_time_without(server):
    with client(server).responses.connect() as connection:
        connection.response.create(model="chatloop", input="slow one", store=False, stream_id="a")
        connection.response.create(model="chatloop", input="slow two", store=False, stream_id="b")
        ends: dict[str, Any] = {}
        seen: dict[str, list[str]] = {"a": [], "b": []}
        while len(ends) < 2:
            event = connection.recv()
            seen[event.stream_id].append(event.type)
            if event.type in TERMINAL:
                ends[event.stream_id] = event.response
        assert ends["a"].output_text == "heard: slow one" and ends["b"].output_text == "heard: slow two"
        assert all(types[0] == "response.created" for types in seen.values())
        # without a stream_id, a second response.create while one runs is refused, and the first goes on
        connection.response.create(model="chatloop", input="slow three", store=False)
        connection.response.create(model="chatloop", input="four", store=False)
        events = through_errors_until_terminal(connection)
    refused = [e for e in events if e.type == "error"]
    assert [e.error.code for e in refused] == ["response_already_in_flight"]
    assert refused[0].stream_id is None and events[-1].response.output_text == "heard: slow three"


def test_a_message_over_the_limit_closes_the_socket_with_1009(upstream, store_path, sandbox):
    from websockets.exceptions import ConnectionClosed

    small = serve(upstream, store_path, sandbox, websocket_max_message_bytes=1000)
    with small as served, client(served).responses.connect() as connection:
        connection.response.create(model="chatloop", input="x" * 2000, store=False)
        with pytest.raises(ConnectionClosed) as closed:
            connection.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def test_an_idle_socket_is_closed_as_api_gateway_closes_it(upstream, store_path, sandbox):
    from websockets.exceptions import ConnectionClosed

    quick = serve(upstream, store_path, sandbox, websocket_idle_seconds=0.5)
    with quick as served, client(served).responses.connect() as connection:
        # a running turn is no idle time: this one starts after as long as the idle limit
        create(connection, input="slow but not idle", store=False)
        with pytest.raises(ConnectionClosed) as closed:
            connection.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001


@pytest.mark.slow  # node's start and the SDK's import
def test_openai_nodes_websocket_client(server):
    from tests.support.node import run_node

    result = run_node("responses_ws.mjs", env={"CHATLOOP_BASE_URL": server.base_url})
    assert result["tool"]["types"][-1] == "response.completed"
    assert "response.code_interpreter_call_code.done" in result["tool"]["types"]
    assert "42" in result["tool"]["text"]
    assert result["continued"] == "heard: my name is Ada | what is my name?"  # store: false, from its memory
    assert result["second"]
    assert result["unknown"] == {
        "type": "error",
        "code": "previous_response_not_found",
        "param": "previous_response_id",
    }
    assert result["errors"] == ["previous_response_not_found"]  # the SDK's error handler heard of it too
    assert result["recovered"] == "heard: remember the lighthouse | what did I ask?"


def test_another_sites_page_cannot_open_a_socket(server):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    url = server.root.replace("http", "ws", 1) + "/v1/responses"
    with pytest.raises(InvalidStatus) as refused:
        connect(url, origin="https://evil.example")
    assert refused.value.response.status_code == 403
    own = server.root.replace("http://", "")
    with connect(url, origin=f"http://{own}") as page:  # the app's own page
        page.send(json.dumps({"type": "response.create", "model": "chatloop", "input": "hi", "store": False}))
        assert json.loads(page.recv())["type"] == "response.created"


def test_one_stream_id_runs_its_responses_in_order(server):
    with client(server).responses.connect() as connection:
        connection.response.create(model="chatloop", input="slow first", store=False, stream_id="a")
        connection.response.create(model="chatloop", input="second", store=False, stream_id="a")
        events = []
        while sum(e.type in TERMINAL or e.type == "error" for e in events) < 2:
            events.append(connection.recv())
    types = [e.type for e in events]
    assert not [e for e in events if e.type == "error"]  # queued, not refused
    assert types.index("response.completed") < types.index("response.created", 1)  # one after the other
    assert [e.response.output_text for e in events if e.type in TERMINAL] == [
        "heard: slow first",
        "heard: second",
    ]


def test_a_socket_is_closed_at_its_longest_life(upstream, store_path, sandbox):
    from websockets.exceptions import ConnectionClosed

    brief = serve(upstream, store_path, sandbox, websocket_max_connection_seconds=1)
    with brief as served, client(served).responses.connect() as connection:
        create(connection, input="within its life", store=False)  # idle time is not what closes it here
        with pytest.raises(ConnectionClosed) as closed:
            connection.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001


def test_a_socket_holds_a_bounded_number_of_messages_and_refuses_the_rest_at_once(server):
    """A client naming one lane over and over (or ever new ones) would otherwise queue a task per message, each
    holding its text: memory that grows without end on one socket. Past ``MAX_PENDING`` a message is an error
    event at once, and the socket goes on."""
    from chatloop.api.websocket.route import MAX_PENDING

    with client(server).responses.connect() as connection:
        for n in range(MAX_PENDING + 1):
            connection.response.create(model="chatloop", input=f"slow {n}", store=False, stream_id="q")
        first = connection.recv()
        while first.type not in TERMINAL and first.type != "error":
            first = connection.recv()
    # refused before the first response (0.5 s) could end: nothing was queued for it
    assert (first.type, first.error.code, first.stream_id) == ("error", "too_many_pending", "q")
    assert str(MAX_PENDING) in first.error.message


def test_a_client_that_leaves_mid_turn_gets_its_concurrent_turn_slot_back(upstream, store_path, sandbox):
    """The socket closed while its turn waits on the model: the turn is cancelled, and its concurrent-turn slot (a
    lease in the store) is given back then, not when the lease runs out (the request's deadline) — else a client
    that reconnects is refused for half a minute."""
    import time

    with serve(upstream, store_path, sandbox, budget_concurrent_turns=1) as served:
        with client(served).responses.connect() as connection:
            connection.response.create(model="chatloop", input="slow, then gone", store=False)
            assert connection.recv().type == "response.created"
        time.sleep(0.3)  # the server sees the close and cancels the turn
        again = client(served).responses.create(model="chatloop", input="back again", store=False)
    assert again.output_text == "heard: back again"


def test_another_callers_stored_response_cannot_be_continued_over_the_socket(server, upstream):
    stored = client(server, "alice-key").responses.create(model="chatloop", input="alice's secret plan")
    upstream.requests.clear()
    with client(server, "bob-key").responses.connect() as connection:
        refused = create(connection, input="what was the plan?", previous_response_id=stored.id)
    assert (refused[-1].type, refused[-1].error.code) == ("error", "previous_response_not_found")
    assert not upstream.requests  # no model call
    with client(server, "alice-key").responses.connect() as connection:
        own = create(connection, input="and now?", store=False, previous_response_id=stored.id)
    assert own[-1].response.output_text == "heard: alice's secret plan | and now?"


def test_a_secret_the_model_repeats_never_reaches_the_socket(server):
    from websockets.sync.client import connect

    url = server.root.replace("http", "ws", 1) + "/v1/responses"
    frames: list[str] = []
    with connect(url, additional_headers={"x-api-key": "alice-key"}) as socket:
        socket.send(
            json.dumps({"type": "response.create", "model": "chatloop", "input": "leak it", "store": False})
        )
        while not frames or json.loads(frames[-1])["type"] not in TERMINAL:
            frames.append(str(socket.recv(timeout=10)))
    assert json.loads(frames[-1])["type"] == "response.completed"
    assert "the key is" in json.loads(frames[-1])["response"]["output"][0]["content"][0]["text"]
    assert not [f for f in frames if KEYS["groq"] in f]
    deltas = [json.loads(f) for f in frames]
    streamed = "".join(e["delta"] for e in deltas if e["type"] == "response.output_text.delta")
    assert streamed.startswith("the key is ") and KEYS["groq"] not in streamed  # nor split across deltas


@pytest.mark.slow  # a sandbox run, killed
def test_a_client_that_leaves_mid_run_leaves_no_sandbox_running(server, upstream):
    import time

    from tests.support.processes import children_of

    with client(server).responses.connect() as connection:
        connection.response.create(model="chatloop", input="spin for a while", store=False)
        for event in connection:
            if event.type == "response.code_interpreter_call.in_progress":
                break
        time.sleep(0.5)  # the run has started in its process (the warm spare it took)
        running = children_of()
    time.sleep(2.0)  # the close reaches the app: the run is killed at once, not after its 8 s
    assert running - children_of(), running  # the run's process is gone


def test_messages_without_a_stream_id_claim_in_the_order_they_came(server, monkeypatch):
    """The first ``response.create`` is the one that runs and the second the one refused, even when the first's
    claim is the slower store call (each message is a task of its own: the route keeps their claims in order)."""
    import asyncio

    from chatloop.store.connections import Connections

    original, calls = Connections.claim, []

    async def first_one_slow(self: Connections, *args: Any, **kwargs: Any) -> bool:
        calls.append(args)
        if len(calls) == 1:
            await asyncio.sleep(0.3)
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(Connections, "claim", first_one_slow)
    with client(server).responses.connect() as connection:
        connection.response.create(model="chatloop", input="first", store=False)
        connection.response.create(model="chatloop", input="second", store=False)
        events = through_errors_until_terminal(connection)
    refused = [e for e in events if e.type == "error"]
    assert [e.error.code for e in refused] == ["response_already_in_flight"]
    assert events[-1].response.output_text == "heard: first"
