"""Running turns across a fleet (issue 31): two copies of the app as Lambda runs them (`run.sh` under the Web
Adapter's environment, a copy frozen while it serves nothing, tests/support/fleet.py) over one store, a SQLite file
or a DynamoDB table on a moto server; every follow-up goes to a copy that did not start the turn.

- a stored streamed response: read in progress, resumed live, from the other copy;
- a /chat turn in a conversation: stopped from the other copy;
- a background response: queued, handed to an asynchronous self-invocation (the right function, qualifier and
  payload) that the stand-in Invoke API delivers to an idle copy's /events; polled, resumed and cancelled from the
  other copy; an event delivered twice runs the turn once; /events refuses a request with an API Gateway context;
- a background turn whose copy died is ended failed when read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.adapter import MODEL
from tests.support.fake_llm import FakeLLM, Reply, text
from tests.support.fleet import FUNCTION, VERSION, Fleet, sse_events

pytestmark = pytest.mark.slow

WORDS = 16


def answer(body: dict[str, Any]) -> Reply:
    """The answer to the last user message, word by word; slowly (0.25 s a word) when it says so."""
    last = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    content = f"About {last}: " + " ".join(f"w{i}" for i in range(WORDS))
    reply = text(body["model"], content, pieces=WORDS + 2, groq=True)
    if "slowly" in str(last):
        reply.chunk_delay = 0.25
    return reply


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        fake.default = answer
        yield fake


@pytest.fixture(scope="module", params=["sqlite", "dynamodb"])
def fleet(request, llm, tmp_path_factory) -> Iterator[Fleet]:
    with Fleet(
        llm, tmp_path_factory.mktemp(f"fleet-{request.param}"), copies=2, store=request.param
    ) as running:
        yield running


def model_calls(llm: FakeLLM, words: str) -> int:
    """How many model calls were asked to answer ``words`` (each test's words name its fleet's store: the fake
    model serves both fleets of the module)."""
    return sum(words in str(r["body"]["messages"]) for r in llm.requests_for(MODEL))


class Reader(threading.Thread):
    """Reads one streamed request to its end on its own copy (which stays busy, and thawed, meanwhile)."""

    def __init__(self, fleet: Fleet, method: str, path: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.fleet, self.method, self.path, self.body = fleet, method, path, body
        self.events: list[dict[str, Any]] = []
        self.copy: Any = None
        self.started = threading.Event()
        self.status = 0

    def run(self) -> None:
        with self.fleet.stream(self.method, self.path, json=self.body) as (copy, response):
            self.copy, self.status = copy, response.status_code
            for data in sse_events(response.iter_lines()):
                self.events.append(data)
                if data.get("type") in ("response.output_text.delta",) or "content" in data:
                    self.started.set()
        self.started.set()


def wait_for(check, timeout: float = 30.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(every)


# --- stored streamed responses ----------------------------------------------------------------------------
def test_a_running_response_is_read_in_progress_and_resumed_live_on_the_other_copy(fleet):
    reader = Reader(fleet, "POST", "/v1/responses", {"input": "tell me slowly", "stream": True})
    reader.start()
    assert reader.started.wait(30) and reader.status == 200
    response_id = reader.events[0]["response"]["id"]
    # GET on the other copy while the first one runs it: the response as it stands.
    _, now = fleet.request("GET", f"/v1/responses/{response_id}", avoid=reader.copy)
    assert now.status_code == 200 and now.json()["status"] == "in_progress"
    # Resumed on the other copy: the journal replayed, then followed live to the end.
    with fleet.stream(
        "GET", f"/v1/responses/{response_id}?stream=true&starting_after=1", avoid=reader.copy
    ) as (copy, resumed):
        assert copy is not reader.copy
        followed = list(sse_events(resumed.iter_lines()))
    reader.join(30)
    assert followed[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in followed] == [e["sequence_number"] for e in reader.events[2:]]
    assert followed == reader.events[2:]
    _, done = fleet.request("GET", f"/v1/responses/{response_id}", avoid=reader.copy)
    assert done.json()["status"] == "completed" and f"w{WORDS - 1}" in str(done.json()["output"])


# --- /chat in a conversation ----------------------------------------------------------------------------------
def test_a_chat_turn_is_stopped_from_the_other_copy(fleet, llm):
    _, made = fleet.request("POST", "/v1/conversations", json={})
    conversation = made.json()["id"]
    body = {"conversation": conversation, "messages": [{"role": "user", "content": "explain slowly please"}]}
    reader = Reader(fleet, "POST", "/chat", body)
    reader.start()
    assert reader.started.wait(30) and reader.status == 200
    _, stopped = fleet.request("POST", "/chat/stop", json={"conversation": conversation}, avoid=reader.copy)
    assert stopped.status_code == 200 and stopped.json() == {"conversation": conversation, "stopped": True}
    reader.join(30)
    assert not reader.is_alive()
    done = reader.events[-1]
    assert done["stop_reason"] == "client_disconnected"  # ended early, well-formed: error, then done
    assert reader.events[-2] == {"code": "stopped", "message": "the turn was stopped by its client"}
    assert f"w{WORDS - 1}" not in str(reader.events)  # the model's stream was cut before its end
    _, items = fleet.request("GET", f"/v1/conversations/{conversation}/items")
    assert items.json()["data"] == []  # a stopped turn is not kept
    # Nothing runs any more: a second stop finds no running turn.
    _, again = fleet.request("POST", "/chat/stop", json={"conversation": conversation})
    assert again.json()["stopped"] is False


def test_a_chat_turn_is_followed_live_on_the_other_copy(fleet):
    _, made = fleet.request("POST", "/v1/conversations", json={})
    conversation = made.json()["id"]
    body = {"conversation": conversation, "messages": [{"role": "user", "content": "narrate slowly"}]}
    reader = Reader(fleet, "POST", "/chat", body)
    reader.start()
    assert reader.started.wait(30) and reader.status == 200
    path = f"/chat/follow?conversation={conversation}&starting_after=-1"
    with fleet.stream("GET", path, avoid=reader.copy) as (copy, followed):
        assert followed.status_code == 200 and copy is not reader.copy
        events = list(sse_events(followed.iter_lines()))
    reader.join(30)
    assert events == reader.events  # every event of the turn, in order, the same as its own client's
    assert events[-1]["stop_reason"] == "stop" and f"w{WORDS - 1}" in events[-1]["message"]["content"]
    _, after = fleet.request("GET", path)
    assert after.status_code == 404  # nothing runs there any more: the page reads the stored answer


# --- background responses --------------------------------------------------------------------------------------
def background(fleet: Fleet, text: str, **extra: Any) -> tuple[Any, dict[str, Any]]:
    before = len(fleet.invocations)
    copy, queued = fleet.request("POST", "/v1/responses", json={"input": text, "background": True, **extra})
    assert queued.status_code == 200, queued.text
    wait_for(lambda: len(fleet.invocations) > before)
    return copy, queued.json()


def test_a_background_response_is_invoked_asynchronously_polled_and_resumed(fleet, llm):
    _, queued = background(fleet, f"summarise the background ({fleet.store})")
    assert queued["status"] == "queued" and queued["background"] is True and queued["output"] == []
    call = fleet.invocations[-1]
    assert call["function"] == FUNCTION and call["qualifier"] == VERSION and call["type"] == "Event"
    assert call["payload"] == {
        "chatloop_background": {"response_id": queued["id"], "owner": "apikey:key-alice"}
    }

    def finished() -> dict[str, Any] | None:
        _, polled = fleet.request("GET", f"/v1/responses/{queued['id']}")
        body = polled.json()
        return body if body["status"] not in ("queued", "in_progress") else None

    done = wait_for(finished)
    assert done["status"] == "completed" and "About summarise the background" in str(done["output"])
    with fleet.stream("GET", f"/v1/responses/{queued['id']}?stream=true&starting_after=0") as (_, resumed):
        events = list(sse_events(resumed.iter_lines()))
    assert events[0]["type"] == "response.created" and events[0]["sequence_number"] == 1
    assert events[-1]["type"] == "response.completed"
    numbers = [e["sequence_number"] for e in events]
    assert numbers == list(range(1, len(events) + 1))
    assert model_calls(llm, f"summarise the background ({fleet.store})") == 1


def test_a_streamed_background_response_starts_queued_and_can_be_dropped_and_resumed(fleet):
    with fleet.stream(
        "POST",
        "/v1/responses",
        json={"input": "stream slowly in the background", "background": True, "stream": True},
    ) as (copy, response):
        lines = response.iter_lines()
        first = next(sse_events(lines))
        assert first["type"] == "response.queued" and first["sequence_number"] == 0
        seen = [first]
        for data in sse_events(lines):
            seen.append(data)
            if data["type"] == "response.output_text.delta":
                break  # the client drops the stream mid-answer
    rid = first["response"]["id"]
    last = seen[-1]["sequence_number"]
    with fleet.stream("GET", f"/v1/responses/{rid}?stream=true&starting_after={last}", avoid=copy) as (
        _,
        resumed,
    ):
        rest = list(sse_events(resumed.iter_lines()))
    assert rest[0]["sequence_number"] == last + 1 and rest[-1]["type"] == "response.completed"


def test_a_background_response_is_cancelled_from_the_other_copy(fleet, llm):
    _, queued = background(fleet, f"write slowly at length ({fleet.store})")
    rid = queued["id"]

    def running() -> bool:  # read on the copy that is not running it (the other one is busy with the turn)
        _, polled = fleet.request("GET", f"/v1/responses/{rid}")
        return (
            polled.json()["status"] == "in_progress"
            and model_calls(llm, f"write slowly at length ({fleet.store})") == 1
        )

    wait_for(running)
    worker = fleet.delivered_to[-1]  # the copy the delivered event runs on
    _, cancelled = fleet.request("POST", f"/v1/responses/{rid}/cancel", avoid=worker)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    _, again = fleet.request("POST", f"/v1/responses/{rid}/cancel")  # idempotent
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    with fleet.stream("GET", f"/v1/responses/{rid}?stream=true") as (_, replayed):
        events = list(sse_events(replayed.iter_lines()))
    assert events[0]["type"] == "response.queued"
    assert events[-1]["type"] == "response.failed" and events[-1]["response"]["status"] == "cancelled"
    assert f"w{WORDS - 1}" not in str(events)
    wait_for(lambda: any(rid in str(d) or '"status":"cancelled"' in d["body"] for d in fleet.deliveries))
    assert (
        model_calls(llm, f"write slowly at length ({fleet.store})") == 1
    )  # nothing further was asked of the model


def test_a_response_that_is_not_background_cannot_be_cancelled(fleet):
    _, created = fleet.request("POST", "/v1/responses", json={"input": "quick"})
    _, refused = fleet.request("POST", f"/v1/responses/{created.json()['id']}/cancel")
    assert refused.status_code == 400 and "background" in refused.json()["error"]["message"]


def test_an_event_delivered_twice_runs_the_turn_once(fleet, llm):
    fleet.duplicate_deliveries = 1
    try:
        before = len(fleet.deliveries)
        _, queued = background(fleet, f"count the deliveries ({fleet.store})")
        fleet.wait_deliveries(before + 2)
    finally:
        fleet.duplicate_deliveries = 0
    answers = sorted(d["body"] for d in fleet.deliveries[before:])
    assert answers[0].startswith('{"ran":false') and answers[1].startswith('{"ran":true')
    assert model_calls(llm, f"count the deliveries ({fleet.store})") == 1
    _, done = fleet.request("GET", f"/v1/responses/{queued['id']}")
    assert done.json()["status"] == "completed"


def test_the_pass_through_path_refuses_a_request_that_came_through_api_gateway(fleet, llm):
    _, queued = background(fleet, "the real one")
    forged = {"chatloop_background": {"response_id": queued["id"], "owner": "apikey:key-alice"}}
    refused = fleet.deliver(forged, gateway_key="key-mallory")
    assert refused.status_code == 403
    _, direct = fleet.request("POST", "/events", json=forged)  # a client reaching /events through the API
    assert direct.status_code == 403


# --- a dead turn ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("store", ["sqlite", "dynamodb"])
def test_a_background_turn_whose_copy_died_is_ended_failed_when_read(llm, tmp_path, store):
    timeouts = {
        "BACKGROUND_TIMEOUT_SECONDS": "6",
        "REQUEST_TIMEOUT_SECONDS": "3",
        "DEADLINE_RESERVE_SECONDS": "0.5",
    }
    with Fleet(llm, tmp_path, copies=2, store=store, **timeouts) as fleet:
        _, queued = background(fleet, f"die slowly on {store}")
        rid = queued["id"]
        wait_for(lambda: model_calls(llm, f"die slowly on {store}") == 1, every=0.02)
        worker = fleet.delivered_to[-1]  # the copy the event was delivered to: it runs the turn
        worker.kill()  # the invocation running it ends (timed out, crashed) without finishing it

        def settled() -> dict[str, Any] | None:
            _, polled = fleet.request("GET", f"/v1/responses/{rid}", avoid=worker)
            body = polled.json()
            return body if body["status"] not in ("queued", "in_progress") else None

        failed = wait_for(settled, timeout=60, every=0.5)
        assert failed["status"] == "failed" and "timed out" in failed["error"]["message"]
        with fleet.stream("GET", f"/v1/responses/{rid}?stream=true", avoid=worker) as (_, replayed):
            events = list(sse_events(replayed.iter_lines()))
        assert events[-1]["type"] == "response.failed"


def test_a_background_response_deleted_while_it_runs_stays_deleted(fleet, llm):
    """Deletion wins (issue 41): deleted on the copy that does not run it, the response is not stored again when its
    turn ends on the other copy: it reads 404 afterwards, on both copies."""
    words = f"run slowly then vanish ({fleet.store})"
    before = len(fleet.deliveries)
    _, queued = background(fleet, words)
    rid = queued["id"]
    wait_for(lambda: model_calls(llm, words) == 1, every=0.05)
    worker = fleet.delivered_to[-1]
    _, deleted = fleet.request("DELETE", f"/v1/responses/{rid}", avoid=worker)
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    fleet.wait_deliveries(before + 1)  # the worker's turn has ended
    for copy in fleet.copies:
        _, read = fleet.request("GET", f"/v1/responses/{rid}", on=copy)
        assert read.status_code == 404, read.text
    _, events = fleet.request("GET", f"/v1/responses/{rid}?stream=true", avoid=worker)
    assert events.status_code == 404
