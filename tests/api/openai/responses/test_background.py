"""Background responses (issue 31) through the real ``openai`` SDK against the app under uvicorn (``make run``: the
turn runs in-process), and the Lambda path through the real handler in buffered mode: the asynchronous
self-invocation (botocore's Stubber: the function, its qualifier and the payload), the event run by the handler, a
retried event that runs nothing, and the pass-through path refusing a request that came through API Gateway.
Stream mode's path (the adapter POSTing the event to /events) is tests/fleet/test_running_turns.py's."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse, TextDelta
from chatloop.tools.base import ToolRegistry
from tests.support.aws import invocations_kept
from tests.support.events import response_body, rest_event
from tests.support.handler import handle
from tests.support.server import Server, app_server, client


class Writer:
    """Answers the last user message word by word; slowly (0.2 s a word) when it says so. Counts its calls."""

    name = "scripted:writer"

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def stream(self, request: ModelRequest):
        last = [m["content"] for m in request.messages if m["role"] == "user"][-1]
        self.calls.append(last)
        words = [f"About {last}:", *(f"w{i}" for i in range(12))]
        for word in words:
            if "slowly" in last:
                await asyncio.sleep(0.2)
            yield TextDelta(word + " ")
        yield ModelResponse(self.name, content=" ".join(words) + " ", finish_reason="stop")


@pytest.fixture(scope="module")
def model() -> Writer:
    return Writer()


@pytest.fixture(scope="module")
def server(tmp_path_factory, model) -> Iterator[Server]:
    settings = Settings(conversation_store_path=str(tmp_path_factory.mktemp("bg") / "bg.sqlite3"))
    with app_server(settings, model=model, registry=ToolRegistry()) as running:
        yield running


def poll(sdk: openai.OpenAI, response_id: str, until: set[str], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        response = sdk.responses.retrieve(response_id)
        if response.status in until:
            return response
        assert time.monotonic() < deadline, f"still {response.status}"
        time.sleep(0.1)


def test_create_background_then_poll_until_completed(server, model):
    sdk = client(server)
    created = sdk.responses.create(model="chatloop", input="plan the week", background=True)
    assert created.status in ("queued", "in_progress") and created.background is True and created.output == []
    done = poll(sdk, created.id, {"completed", "failed", "cancelled", "incomplete"})
    assert done.status == "completed" and done.output_text.startswith("About plan the week")
    assert model.calls.count("plan the week") == 1


def test_a_background_stream_starts_queued_and_resumes_with_starting_after(server):
    sdk = client(server)
    seen = []
    with sdk.responses.create(
        model="chatloop", input="stream this slowly", background=True, stream=True
    ) as stream:
        for event in stream:
            seen.append(event)
            if event.type == "response.output_text.delta":
                break  # dropped mid-answer
    assert seen[0].type == "response.queued" and seen[0].sequence_number == 0
    last = seen[-1].sequence_number
    rest = list(sdk.responses.retrieve(seen[0].response.id, stream=True, starting_after=last))
    assert rest[0].sequence_number == last + 1 and rest[-1].type == "response.completed"
    numbers = [e.sequence_number for e in seen] + [e.sequence_number for e in rest]
    assert numbers == list(range(len(numbers)))
    assert rest[-1].response.output_text.startswith("About stream this slowly")


def test_cancel_ends_a_running_background_response(server, model):
    sdk = client(server)
    created = sdk.responses.create(model="chatloop", input="write slowly forever", background=True)
    poll(sdk, created.id, {"in_progress"})
    while "write slowly forever" not in model.calls:
        time.sleep(0.05)
    cancelled = sdk.responses.cancel(created.id)
    assert cancelled.id == created.id and cancelled.status == "cancelled"
    assert sdk.responses.cancel(created.id).status == "cancelled"  # idempotent
    assert sdk.responses.retrieve(created.id).status == "cancelled"
    events = list(sdk.responses.retrieve(created.id, stream=True, starting_after=0))
    assert events[-1].type == "response.failed" and events[-1].response.status == "cancelled"
    assert "w11" not in str(events)
    assert model.calls.count("write slowly forever") == 1


def test_background_needs_store_and_a_plain_response_cannot_be_cancelled(server, model):
    sdk = client(server)
    calls = len(model.calls)
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model="chatloop", input="x", background=True, store=False)
    assert "store" in str(refused.value) and len(model.calls) == calls
    plain = sdk.responses.create(model="chatloop", input="not in the background")
    with pytest.raises(openai.BadRequestError):
        sdk.responses.cancel(plain.id)


def test_a_follower_ends_well_formed_at_its_deadline_and_resumes(tmp_path):
    settings = Settings(
        conversation_store_path=str(tmp_path / "deadline.sqlite3"),
        request_timeout_seconds=1.5,  # each request's own deadline: the follower's
        background_timeout_seconds=60,  # the background turn's: it outlives its followers
    )
    with app_server(settings, model=Writer(), registry=ToolRegistry()) as server:
        sdk = client(server)
        created = sdk.responses.create(model="chatloop", input="go on slowly", background=True)
        first = list(sdk.responses.retrieve(created.id, stream=True, starting_after=0))
        assert first[-1].type == "error" and first[-1].code == "stream_interrupted"  # ended, not cut
        last = first[-2].sequence_number if len(first) > 1 else 0
        assert first[-1].sequence_number == last and f"starting_after={last}" in first[-1].message
        events = first[:-1]
        while events[-1].type != "response.completed":  # resumed, as often as its deadline needs
            more = list(
                sdk.responses.retrieve(created.id, stream=True, starting_after=events[-1].sequence_number)
            )
            events += [e for e in more if e.type != "error"]
        numbers = [e.sequence_number for e in events]
        assert numbers == list(range(1, len(numbers) + 1))
        assert events[-1].response.output_text.startswith("About go on slowly")


# --- the Lambda path, buffered mode (the handler) ------------------------------------------------------------
def test_the_buffered_handler_invokes_itself_and_runs_the_event_once(tmp_path, app_runtime, monkeypatch):
    from botocore.stub import ANY

    writer = Writer()
    settings = Settings(
        conversation_store_path=str(tmp_path / "lambda.sqlite3"),
        lambda_function_name="chatloop-chat",
        lambda_function_version="7",
    )
    app_runtime(settings, model=writer, registry=ToolRegistry())
    expected = {"FunctionName": "chatloop-chat", "InvocationType": "Event", "Qualifier": "7", "Payload": ANY}
    sent, stubber = invocations_kept(monkeypatch, answers=1, expected=expected)

    def call(method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        event = rest_event(method, path, json.dumps(body) if body is not None else None)
        event["requestContext"]["identity"]["apiKeyId"] = "key-a"
        response = handle(event)
        return response["statusCode"], json.loads(response_body(response))

    status, queued = call("POST", "/v1/responses", {"input": "in the background", "background": True})
    assert status == 200 and queued["status"] == "queued"
    stubber.assert_no_pending_responses()
    payload = json.loads(sent[0]["Payload"])
    assert payload == {"chatloop_background": {"response_id": queued["id"], "owner": "apikey:key-a"}}
    assert writer.calls == []  # nothing ran in the invocation that answered

    # Lambda delivers the event to the handler itself (buffered mode): the turn runs there.
    assert handle(payload) == {"ran": True, "status": "completed"}
    status, done = call("GET", f"/v1/responses/{queued['id']}")
    assert status == 200 and done["status"] == "completed" and "About in the background" in json.dumps(done)
    # A retried (or duplicated) delivery finds it claimed: nothing runs twice.
    assert handle(payload)["ran"] is False
    assert writer.calls == ["in the background"]
    # The pass-through path through API Gateway: refused, and nothing runs.
    status, _ = call("POST", "/events", payload)
    assert status == 403 and writer.calls == ["in the background"]


# --- webhooks -------------------------------------------------------------------------------------------------
def test_a_background_responses_end_is_a_webhook_the_openai_sdk_verifies(tmp_path):
    import base64
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    received: list[tuple[dict[str, str], bytes]] = []

    class Receiver(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            received.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    secret = "whsec_" + base64.b64encode(b"a webhook secret of 32 bytes....").decode()
    settings = Settings(
        conversation_store_path=str(tmp_path / "hooks.sqlite3"),
        webhook_url=f"http://127.0.0.1:{receiver.server_address[1]}/hooks",
        webhook_allow_private=True,
        webhook_secret=secret,
    )
    try:
        with app_server(settings, model=Writer(), registry=ToolRegistry()) as server:
            sdk = client(server)
            created = sdk.responses.create(model="chatloop", input="notify me", background=True)
            poll(sdk, created.id, {"completed"})
            deadline = time.monotonic() + 10
            while not received:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        receiver.shutdown()
        receiver.server_close()
    headers, body = received[0]
    verifier = openai.OpenAI(api_key="unused", webhook_secret=secret)
    event = verifier.webhooks.unwrap(body, headers)
    assert event.type == "response.completed" and event.data.id == created.id and event.object == "event"
    with pytest.raises(openai.InvalidWebhookSignatureError):
        verifier.webhooks.unwrap(body.replace(b"completed", b"cancelled"), headers)
    with pytest.raises(openai.InvalidWebhookSignatureError):
        openai.OpenAI(
            api_key="unused", webhook_secret="whsec_" + base64.b64encode(b"x" * 32).decode()
        ).webhooks.unwrap(body, headers)


def test_a_background_turn_refused_when_its_worker_runs_it_fails_with_its_webhook(
    tmp_path, app_runtime, monkeypatch
):
    """The worker's turn can be refused before it starts although it was admitted when queued (here the caller's
    budget, lowered meanwhile; or its history deleted): the response fails, and a client that waits for webhooks
    hears so, as for any other ending. The Lambda path: queued through the handler, the event delivered to it."""
    import base64
    from concurrent.futures import ThreadPoolExecutor

    from chatloop.api.runs import webhooks
    from chatloop.deadline import Deadline
    from chatloop.store.budget import Limits

    sent: list[bytes] = []

    async def post(url: str, body: bytes, *args: Any) -> int:
        sent.append(body)
        return 200

    monkeypatch.setattr(webhooks, "_post", post)
    settings = Settings(
        conversation_store_path=str(tmp_path / "refused.sqlite3"),
        lambda_function_name="chatloop-chat",
        budget_tokens_per_day=100_000,
        webhook_url="http://127.0.0.1:9/hooks",
        webhook_allow_private=True,
        webhook_secret="whsec_" + base64.b64encode(b"a webhook secret of 32 bytes....").decode(),
    )
    model = Writer()
    runtime = app_runtime(settings, model=model, registry=ToolRegistry())
    invoked, _ = invocations_kept(monkeypatch, answers=1)
    event = rest_event("POST", "/v1/responses", json.dumps({"input": "over budget", "background": True}))
    event["requestContext"]["identity"]["apiKeyId"] = "key-a"
    queued = handle(event)
    assert queued["statusCode"] == 200
    lowered = runtime.budgets().ledger.set_limits(
        "apikey:key-a", Limits(tokens_per_day=1), Deadline.after(10)
    )
    with ThreadPoolExecutor(1) as pool:  # the operator lowers the caller's day (`make budget`) meanwhile
        pool.submit(asyncio.run, lowered).result()
    assert handle(json.loads(invoked[0]["Payload"])) == {"ran": True, "status": "failed"}
    assert json.loads(sent[0])["type"] == "response.failed" and model.calls == []


def test_a_background_turn_whose_worker_breaks_is_ended_failed_not_left_running(tmp_path, monkeypatch):
    """An unexpected fault in the worker's turn (here listing the MCP tools) ends the response ``failed`` at once,
    with its webhook; it is not left ``in_progress`` until a reader decides it is dead."""
    sent, settings = webhooks_kept(monkeypatch, tmp_path / "broken.sqlite3")
    with app_server(settings, model=Writer(), registry=ToolRegistry()) as server:

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a fault nobody expected")

        monkeypatch.setattr(server.runtime.tools, "mcp_for_turn", broken)
        sdk = client(server)
        created = sdk.responses.create(model="chatloop", input="break", background=True)
        ended = poll(sdk, created.id, {"completed", "failed", "cancelled", "incomplete"}, timeout=10)
        assert ended.status == "failed" and "a fault nobody expected" not in str(ended.error)
    assert [json.loads(body)["type"] for body in sent] == ["response.failed"]


def test_a_background_response_deleted_while_it_runs_sends_no_webhook(tmp_path, monkeypatch):
    """Deletion wins (issue 41), for its webhook too: a response deleted while its turn runs is not announced as
    ``response.completed`` when the turn ends, since a receiver that fetches it would find nothing."""
    sent, settings = webhooks_kept(monkeypatch, tmp_path / "deleted.sqlite3")
    writer = Finishing()
    with app_server(settings, model=writer, registry=ToolRegistry()) as server:
        sdk = client(server)
        created = sdk.responses.create(
            model="chatloop", input="write slowly, then be deleted", background=True
        )
        while "write slowly, then be deleted" not in writer.calls:
            time.sleep(0.05)
        sdk.responses.delete(created.id)
        other = sdk.responses.create(model="chatloop", input="a second one", background=True)
        poll(sdk, other.id, {"completed"})
        while len(writer.finished) < 2:  # the deleted one's turn has had its last word too
            time.sleep(0.05)
        deadline = time.monotonic() + 1.5  # time for a webhook sent after that last word (one comes in ms)
        while len(sent) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert [json.loads(body)["data"]["id"] for body in sent] == [other.id]


class Finishing(Writer):
    """The writer, noting each answer it finished."""

    def __init__(self) -> None:
        super().__init__()
        self.finished: list[str] = []

    async def stream(self, request: ModelRequest):
        async for item in super().stream(request):
            yield item
        self.finished.append(self.calls[-1])


def webhooks_kept(monkeypatch: pytest.MonkeyPatch, store: Path) -> tuple[list[bytes], Settings]:
    """Settings for an app over the SQLite file ``store`` whose webhooks are kept in the list, not sent."""
    from chatloop.api.runs import webhooks

    sent: list[bytes] = []

    async def post(url: str, body: bytes, *args: Any) -> int:
        sent.append(body)
        return 200

    monkeypatch.setattr(webhooks, "_post", post)
    settings = Settings(
        conversation_store_path=str(store),
        webhook_url="http://127.0.0.1:9/hooks",
        webhook_allow_private=True,
        webhook_secret="a webhook secret",
    )
    return sent, settings
