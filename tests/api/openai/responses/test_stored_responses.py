"""Stored responses (issue 26): store / retrieve / delete / input_items / previous_response_id / conversation and a
resumed stream, through the real ``openai`` SDK against the app under uvicorn with the offline demo model, and the
real Lambda handler with REST events of two API key ids (each sees only its own)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from chatloop.api import create_app
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse, TextDelta
from chatloop.providers.chain import FallbackChain
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.events import response_body, rest_event
from tests.support.handler import handle
from tests.support.server import Server, app_server, client


class Recorder:
    """A model that answers with the number of user messages it was given, and keeps every conversation."""

    name = "scripted:recorder"

    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []

    async def stream(self, request: ModelRequest):
        self.seen.append(request.messages)
        users = [m["content"] for m in request.messages if m["role"] == "user"]
        text = f"I have {len(users)} question(s); the last: {users[-1]}"
        if "slowly" in users[-1]:  # word by word, as a model that takes its time
            for word in text.split(" "):
                await asyncio.sleep(0.2)
                yield TextDelta(word + " ")
            yield ModelResponse(self.name, content=text + " ", finish_reason="stop")
            return
        yield TextDelta(text)
        yield ModelResponse(self.name, content=text, finish_reason="stop")


@pytest.fixture(scope="module")
def model() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def server(tmp_path_factory, model, sandbox) -> Iterator[Server]:
    settings = Settings(conversation_store_path=str(tmp_path_factory.mktemp("store") / "r.sqlite3"))
    with app_server(
        settings, model=model, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    ) as running:
        yield running


def test_a_response_is_stored_and_read_back(server):
    alice = client(server)
    created = alice.responses.create(model="chatloop", input="first?")
    assert created.store is True
    again = alice.responses.retrieve(created.id)
    assert again.id == created.id and again.output_text == created.output_text
    items = alice.responses.input_items.list(created.id)
    assert [i.type for i in items.data] == ["message"] and items.data[0].content[0].text == "first?"
    deleted = alice.responses.delete(created.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(created.id)


def test_store_false_keeps_nothing(server):
    alice = client(server)
    created = alice.responses.create(model="chatloop", input="ephemeral", store=False)
    assert created.store is False
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(created.id)


def test_previous_response_id_continues_with_the_whole_chain(server, model):
    alice = client(server)
    first = alice.responses.create(model="chatloop", input="one")
    second = alice.responses.create(model="chatloop", input="two", previous_response_id=first.id)
    third = alice.responses.create(model="chatloop", input="three", previous_response_id=second.id)
    assert third.previous_response_id == second.id
    assert third.output_text == "I have 3 question(s); the last: three"
    history = model.seen[-1]
    assert [m["content"] for m in history if m["role"] == "user"] == ["one", "two", "three"]
    assert [m["content"] for m in history if m["role"] == "assistant"] == [
        first.output_text,
        second.output_text,
    ]


def test_another_caller_sees_nothing_and_cannot_continue(server, model):
    first = client(server, "alice-key").responses.create(model="chatloop", input="secret plan")
    bob = client(server, "bob-key")
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(first.id)
    calls = len(model.seen)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model="chatloop", input="and?", previous_response_id=first.id)
    assert len(model.seen) == calls  # no model call for a history that cannot be had


def test_a_conversation_gets_each_turn_and_gives_the_model_the_whole_of_it(server, model):
    alice = client(server)
    conversation = alice.conversations.create(items=[{"role": "user", "content": "zero"}])
    alice.responses.create(model="chatloop", input="one", conversation=conversation.id)
    last = alice.responses.create(model="chatloop", input="two", conversation={"id": conversation.id})
    assert last.output_text == "I have 3 question(s); the last: two"
    items = alice.conversations.items.list(conversation.id, order="asc")
    kinds = [(i.type, getattr(i, "role", None)) for i in items.data]
    assert kinds == [("message", "user"), ("message", "user"), ("message", "assistant")] * 1 + [
        ("message", "user"),
        ("message", "assistant"),
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
def test_store_false_in_a_conversation_still_appends_the_turn_but_keeps_no_response(server, stream):
    # OpenAI's contract: a response's input and output items are added to its `conversation` after it completes;
    # `store` is whether the response object is kept for retrieval. A stream is no different from a JSON answer.
    alice = client(server)
    conversation = alice.conversations.create(items=[{"role": "user", "content": "zero"}])
    if stream:
        with alice.responses.stream(
            model="chatloop", input="one", conversation=conversation.id, store=False
        ) as events:
            answered = events.get_final_response()
    else:
        answered = alice.responses.create(
            model="chatloop", input="one", conversation=conversation.id, store=False
        )
    assert answered.store is False and answered.output_text == "I have 2 question(s); the last: one"
    items = alice.conversations.items.list(conversation.id, order="asc")
    texts = [(i.role, i.content[0].text) for i in items.data]
    assert texts == [("user", "zero"), ("user", "one"), ("assistant", answered.output_text)]
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(answered.id)


def test_a_streamed_response_can_be_resumed_after_any_event(server):
    alice = client(server)
    with alice.responses.stream(model="chatloop", input="stream me") as stream:
        sent = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in sent] == list(range(len(sent)))
    resumed = list(alice.responses.retrieve(final.id, stream=True, starting_after=2))
    assert [e.sequence_number for e in resumed] == [e.sequence_number for e in sent[3:]]
    assert resumed[-1].type == "response.completed" and resumed[-1].response.output_text == final.output_text


def test_continuing_a_missing_or_malformed_id_is_a_4xx_with_no_model_call(server, model):
    alice = client(server)
    calls = len(model.seen)
    with pytest.raises(openai.NotFoundError):
        alice.responses.create(model="chatloop", input="x", previous_response_id="resp_doesnotexist")
    with pytest.raises(openai.BadRequestError):
        alice.responses.create(model="chatloop", input="x", previous_response_id="../etc")
    with pytest.raises(openai.BadRequestError):
        alice.responses.create(
            model="chatloop", input="x", previous_response_id="resp_a", conversation="conv_b"
        )
    assert len(model.seen) == calls


def test_the_handler_keeps_each_api_keys_responses_apart(tmp_path, sandbox, app_runtime):
    recorder = Recorder()
    app_runtime(
        Settings(conversation_store_path=str(tmp_path / "h.sqlite3")),
        model=recorder,
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
    )

    def post(key_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        event = rest_event("POST", "/v1/responses", json.dumps(body))
        event["requestContext"]["identity"]["apiKeyId"] = key_id
        response = handle(event)
        return response["statusCode"], json.loads(response_body(response))

    code, first = post("key-a", {"input": "from a"})
    assert code == 200 and first["store"] is True
    code, _ = post("key-b", {"input": "from b", "previous_response_id": first["id"]})
    assert code == 404
    code, _ = post("key-a", {"input": "again", "previous_response_id": first["id"]})
    assert code == 200 and [m["content"] for m in recorder.seen[-1] if m["role"] == "user"] == [
        "from a",
        "again",
    ]


def test_a_running_stored_response_can_be_followed_live_from_another_connection(server):
    alice = client(server)
    first_events: list = []
    started = threading.Event()

    def original() -> None:
        with alice.responses.stream(model="chatloop", input="answer slowly now") as stream:
            for event in stream:
                first_events.append(event)
                if event.type == "response.output_text.delta":
                    started.set()

    reader = threading.Thread(target=original)
    reader.start()
    assert started.wait(10)
    response_id = first_events[0].response.id
    followed = list(client(server).responses.retrieve(response_id, stream=True, starting_after=1))
    reader.join(20)
    assert followed[0].sequence_number == 2 and followed[-1].type == "response.completed"
    assert [e.sequence_number for e in followed] == [e.sequence_number for e in first_events[2:]]


def test_a_stored_response_whose_client_left_is_finished_and_stored(server):
    alice = client(server)
    with alice.responses.create(model="chatloop", input="tell me slowly", stream=True) as stream:
        for event in stream:
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.output_text.delta":
                break  # the first words arrived: the client leaves
    deadline = time.monotonic() + 10
    seen = set()
    while True:  # in_progress (journaled from its first events) until it is stored whole
        done = alice.responses.retrieve(response_id)
        seen.add(done.status)
        if done.status != "in_progress":
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert seen == {"in_progress", "completed"}
    assert done.status == "completed" and done.output_text.startswith("I have")


@pytest.mark.parametrize("failure", ["hangs", "down"])
def test_a_store_that_fails_is_a_503_for_state_and_no_answer_is_lost_without_it(tmp_path, sandbox, failure):
    from chatloop.store import Store
    from chatloop.store.sqlite import SQLiteBackend

    class Hanging(SQLiteBackend):  # every read and write waits past the store's timeout
        def read(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(5)

        def page(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(5)

        def create(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(5)

    if failure == "hangs":
        store = Store(Hanging(tmp_path / "r.sqlite3"), 3600)
    else:
        (tmp_path / "file").write_text("a file where a directory should be")
        store = Store(SQLiteBackend(tmp_path / "file" / "r.sqlite3"), 3600)
    recorder = Recorder()
    settings = Settings(conversation_store_timeout_seconds=0.5)
    runtime = Runtime(
        settings,
        chain=FallbackChain([recorder]),
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
        state=store,
    )
    with Server(create_app(settings, runtime=runtime)) as running:
        alice = client(running)
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as raised:
            alice.responses.create(model="chatloop", input="go on", previous_response_id="resp_" + "1" * 40)
        assert raised.value.status_code == 503 and time.monotonic() - started < 2.0
        with pytest.raises(openai.InternalServerError):
            alice.responses.create(model="chatloop", input="go on", conversation="conv_" + "1" * 48)
        assert recorder.seen == []  # no model call for a turn whose history cannot be read
        answered = alice.responses.create(model="chatloop", input="a stateless question")
        assert (
            answered.output_text.startswith("I have 1") and answered.store is False
        )  # it says it was not kept


@pytest.mark.parametrize("how", ["previous_response_id", "conversation_id", "session"])
def test_the_agents_sdk_continues_with_the_servers_state(server, model, how):
    from agents import Agent, OpenAIConversationsSession, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)

    async def run() -> list[str]:
        client = openai.AsyncOpenAI(
            base_url=server.base_url,
            api_key="unused",
            max_retries=0,
            default_headers={"x-api-key": f"agents-{how}"},
        )
        agent = Agent(name="a", model=OpenAIResponsesModel(model="chatloop", openai_client=client))
        answers = []
        if how == "previous_response_id":
            first = await Runner.run(agent, "one")
            second = await Runner.run(agent, "two", previous_response_id=first.last_response_id)
        elif how == "conversation_id":
            conversation = await client.conversations.create()
            first = await Runner.run(agent, "one", conversation_id=conversation.id)
            second = await Runner.run(agent, "two", conversation_id=conversation.id)
        else:
            session = OpenAIConversationsSession(openai_client=client)
            first = await Runner.run(agent, "one", session=session)
            second = await Runner.run(agent, "two", session=session)
        answers += [str(first.final_output), str(second.final_output)]
        await client.close()
        return answers

    first, second = asyncio.run(run())
    assert first == "I have 1 question(s); the last: one"
    # The second turn sent only "two": the server gave the model the first turn too.
    assert second == "I have 2 question(s); the last: two"
    users = [m["content"] for m in model.seen[-1] if m["role"] == "user"]
    assert users == ["one", "two"]


class WritesUntilItsDeadline:
    """A model still writing when the turn's time runs out (a long answer on a slow model)."""

    name = "scripted:slow"

    async def stream(self, request: ModelRequest) -> Any:
        while request.deadline.remaining() > 0.05:
            await asyncio.sleep(0.05)
        yield TextDelta("done")
        yield ModelResponse(self.name, content="done", finish_reason="stop")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
def test_a_turn_that_ran_to_its_deadline_is_still_stored(tmp_path, app_runtime, stream):
    """Once (the re-cut): the writes after a turn shared the turn's deadline, so a turn that used all of it had
    ~0.25 s left to be stored, and a store write slower than that lost it. The writes get what the invocation has
    left (less the margin, at most CONVERSATION_STORE_TIMEOUT_SECONDS)."""
    from chatloop.store import Store
    from chatloop.store.sqlite import SQLiteBackend

    class SlowWrites(SQLiteBackend):  # a write under load: 0.4 s each
        def create(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(0.4)
            return super().create(*args, **kwargs)

        def append(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(0.4)
            return super().append(*args, **kwargs)

    settings = Settings(request_timeout_seconds=2.0)
    app_runtime(
        settings,
        model=WritesUntilItsDeadline(),
        registry=ToolRegistry(),
        state=Store(SlowWrites(tmp_path / "s.sqlite3"), 3600),
    )

    def call(method: str, path: str, body: Any = None) -> dict[str, Any]:
        event = rest_event(method, path, body)
        event["requestContext"]["identity"]["apiKeyId"] = "key-a"  # a caller: what is stored is its own
        return handle(event)

    response = call("POST", "/v1/responses", {"input": "write at length", "stream": stream})
    body = response_body(response)
    if stream:
        completed = [json.loads(line[6:]) for line in body.splitlines() if '"response.completed"' in line]
        body = json.dumps(completed[-1]["response"])
    answered = json.loads(body)
    assert response["statusCode"] == 200 and answered["store"] is True, answered.get("x_chatloop")
    assert call("GET", f"/v1/responses/{answered['id']}")["statusCode"] == 200
    # /chat in a stored conversation: the turn is appended to it.
    conversation = json.loads(response_body(call("POST", "/v1/conversations", {})))
    turn = {
        "conversation": conversation["id"],
        "messages": [{"role": "user", "content": "go"}],
        "stream": stream,
    }
    assert call("POST", "/chat", turn)["statusCode"] == 200
    listed = json.loads(response_body(call("GET", f"/v1/conversations/{conversation['id']}/items")))
    assert [i["role"] for i in listed["data"] if i["type"] == "message"] == [
        "assistant",
        "user",
    ]  # newest first
