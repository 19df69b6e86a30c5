"""``/chat`` in a stored conversation (issue 26): the client sends only the new message and the conversation's id,
the model receives the whole conversation, the turn (its sandbox runs included) is appended, and a turn whose
client goes away mid-answer still runs to its end and is stored. Against the app under uvicorn, with httpx."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.models import Conversational
from tests.support.server import Server, app_server


@pytest.fixture(scope="module")
def model() -> Conversational:
    return Conversational()


@pytest.fixture(scope="module")
def server(tmp_path_factory, model, sandbox) -> Iterator[Server]:
    settings = Settings(conversation_store_path=str(tmp_path_factory.mktemp("store") / "chat.sqlite3"))
    with app_server(
        settings, model=model, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    ) as running:
        yield running


def http(server: Server, key: str = "alice-key") -> httpx.Client:
    return httpx.Client(base_url=server.base_url.removesuffix("/v1"), headers={"x-api-key": key}, timeout=30)


def items(client: httpx.Client, conversation_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/conversations/{conversation_id}/items", params={"order": "asc", "limit": 100})
    assert response.status_code == 200, response.text
    return response.json()["data"]


def test_chat_continues_a_stored_conversation_and_appends_the_turn(server, model):
    alice = http(server)
    conversation = alice.post("/v1/conversations", json={"metadata": {"title": "maths"}}).json()
    first = alice.post(
        "/chat",
        json={
            "conversation": conversation["id"],
            "messages": [{"role": "user", "content": "hello"}],
            "stream": False,
        },
    )
    assert first.status_code == 200 and first.json()["message"]["content"].startswith("Turn 1: hello")
    second = alice.post(
        "/chat",
        json={
            "conversation": conversation["id"],
            "messages": [{"role": "user", "content": "compute six times seven"}],
        },
    )
    assert second.status_code == 200 and "= 42" in second.text  # streamed (the default)
    assert [m["content"] for m in model.seen[-1] if m["role"] == "user"] == [
        "hello",
        "compute six times seven",
    ]
    stored = items(alice, conversation["id"])
    kinds = [(i["type"], i.get("role")) for i in stored]
    assert kinds == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
        ("code_interpreter_call", None),
        ("message", "assistant"),
    ]
    run = stored[3]
    assert run["code"] == "6 * 7" and "42" in run["outputs"][0]["logs"]


def test_another_key_cannot_read_or_continue_it(server, model):
    alice, bob = http(server), http(server, "bob-key")
    conversation = alice.post("/v1/conversations", json={}).json()
    calls = len(model.seen)
    answer = bob.post(
        "/chat", json={"conversation": conversation["id"], "messages": [{"role": "user", "content": "hi"}]}
    )
    assert answer.status_code == 404 and len(model.seen) == calls
    assert bob.get("/v1/conversations").json()["data"] == [] or all(
        c["id"] != conversation["id"] for c in bob.get("/v1/conversations").json()["data"]
    )
    assert conversation["id"] in [c["id"] for c in alice.get("/v1/conversations").json()["data"]]


def test_with_a_conversation_only_new_user_messages_are_taken(server):
    alice = http(server)
    conversation = alice.post("/v1/conversations", json={}).json()
    answer = alice.post(
        "/chat",
        json={"conversation": conversation["id"], "messages": [{"role": "assistant", "content": "I said"}]},
    )
    assert answer.status_code == 400 and "new user message" in answer.json()["error"]["message"]


def test_a_turn_whose_client_went_away_still_ends_and_is_stored(server):
    alice = http(server)
    conversation = alice.post("/v1/conversations", json={}).json()
    body = {
        "conversation": conversation["id"],
        "messages": [{"role": "user", "content": "answer slowly please"}],
    }
    with alice.stream("POST", "/chat", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("event: delta"):
                break  # the first words arrived: the reader leaves (a page reloaded mid-answer)
    waited = time.monotonic() + 10
    while time.monotonic() < waited:
        stored = items(alice, conversation["id"])
        if any(i.get("role") == "assistant" for i in stored):
            break
        time.sleep(0.2)
    answer = next(i for i in stored if i.get("role") == "assistant")
    assert json.dumps(answer).count("answer slowly please") == 1 and "Turn 1" in answer["content"][0]["text"]


def test_only_the_caller_can_stop_a_running_turn_and_a_stopped_turn_is_not_stored(server):
    import threading

    alice, bob = http(server), http(server, "bob-key")
    conversation = alice.post("/v1/conversations", json={}).json()
    body = {
        "conversation": conversation["id"],
        "messages": [{"role": "user", "content": "answer slowly please"}],
    }
    started = threading.Event()

    seen: list[str] = []

    def read() -> None:
        with http(server).stream("POST", "/chat", json=body) as response:
            for line in response.iter_lines():
                seen.append(line)
                if line.startswith("event: delta"):
                    started.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert started.wait(10)
    assert bob.post("/chat/stop", json={"conversation": conversation["id"]}).json()["stopped"] is False
    assert alice.post("/chat/stop", json={"conversation": conversation["id"]}).json()["stopped"] is True
    reader.join(10)
    assert not reader.is_alive()  # the stream ended when the turn was stopped, with its terminal event
    assert [line for line in seen if line.startswith("event:")][-2:] == ["event: error", "event: done"]
    time.sleep(0.5)
    assert items(alice, conversation["id"]) == []  # not stored: the conversation is as it was
    assert alice.post("/chat/stop", json={"conversation": conversation["id"]}).json()["stopped"] is False
