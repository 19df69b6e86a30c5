"""WebSocket mode on Lambda, through the real handler (``src/app.py``): API Gateway WebSocket events as API Gateway
sends them (events/websocket/), the turn handed to an asynchronous invocation of the function (the stubbed Lambda
client keeps it), the worker run on another copy, and the events it posts kept by moto's Management API. Two app
copies (two runtimes) share one DynamoDB table (moto), as two containers of the function share the deployed one."""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatloop.api.websocket import apigw_post
from chatloop.api.websocket.apigw import turn_id
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.providers.base import ModelResponse
from chatloop.tools.base import ToolRegistry
from tests.support.aws import FAKE_CREDENTIALS, invocations_kept, one_request_at_a_time, table_text
from tests.support.connections import CONNECTION, make_gone, posted
from tests.support.handler import build_runtime as runtime_of
from tests.support.handler import handle, serving
from tests.support.models import ScriptedModel
from tests.support.repo import ROOT

EVENTS = ROOT / "events" / "websocket"
KEYS = {"groq": "gsk_websocket_test_key_0123456789", "openai": None}
CALLER = "apikey:k1x2y3z4"
TOKEN = "mcp-token-that-must-never-travel-in-clear"


def event(name: str, body: Any = None, connection: str = CONNECTION) -> dict[str, Any]:
    loaded = json.loads((EVENTS / f"{name}.json").read_text())
    loaded["requestContext"]["connectionId"] = connection
    if body is not None:
        loaded["body"] = body if isinstance(body, str) else json.dumps(body)
    return loaded


def answering(*texts: str, chunk: int = 8) -> ScriptedModel:
    return ScriptedModel(
        chunk=chunk, script=lambda request, n: ModelResponse(content=texts[min(n, len(texts)) - 1], model="")
    )


class Copies:
    """Two containers of the WebSocket function over one table; ``on(n)`` serves the next event with copy ``n``."""

    def __init__(self, settings: Settings, model: ScriptedModel) -> None:
        self.runtimes = [
            runtime_of(settings, model=model, registry=ToolRegistry(), keys=KEYS) for _ in range(2)
        ]

    def on(self, n: int, lambda_event: dict[str, Any], remaining_ms: float = 28_000) -> dict[str, Any]:
        with serving(self.runtimes[n]):
            return handle(lambda_event, remaining_ms)


@pytest.fixture
def aws(monkeypatch):
    import boto3
    from moto import mock_aws

    from chatloop.store.dynamodb_layout import create_table

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setattr(apigw_post, "_CLIENTS", {})
    one_request_at_a_time(monkeypatch)  # posts go out from threads while the turn writes the store
    with mock_aws():
        create_table(boto3.client("dynamodb", region_name="us-east-1"), "conversations")
        yield


SETTINGS = Settings(conversation_table_name="conversations", lambda_function_name="chatloop-websocket")


def run_message(copies: Copies, body: Any, sent: list[dict[str, Any]], on: int = 1) -> list[dict[str, Any]]:
    """``body`` sent on the socket: ``$default`` on copy ``on`` hands it over, the worker runs it on the other one;
    the events posted for it."""
    before = len(posted(CONNECTION))
    assert copies.on(on, event("message", body)) == {"statusCode": 200}
    assert len(sent) and sent[-1]["InvocationType"] == "Event"
    assert copies.on(1 - on, json.loads(sent[-1]["Payload"]), 120_000)["ran"] is True
    return posted(CONNECTION)[before:]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def test_a_message_on_one_copy_runs_on_another_and_its_events_are_posted_in_order(aws, monkeypatch):
    model = answering("Two to the sixty-fourth is 18446744073709551616.")
    copies = Copies(SETTINGS, model)
    sent, _ = invocations_kept(monkeypatch, answers=1)
    assert copies.on(0, event("connect")) == {"statusCode": 200}
    assert sent == []  # connected and idle: no invocation of anything
    got = run_message(copies, {"type": "response.create", "model": "chatloop", "input": "2**64?"}, sent)
    assert got[0]["type"] == "response.created" and got[-1]["type"] == "response.completed"
    assert text_of(got) == "Two to the sixty-fourth is 18446744073709551616."
    numbers = [e["sequence_number"] for e in got]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    task = json.loads(sent[0]["Payload"])["chatloop_websocket"]
    assert task["caller"] == CALLER and task["connection_id"] == CONNECTION
    assert sent[0]["FunctionName"] == "chatloop-websocket" and model.calls == 1


@pytest.mark.parametrize("store", [False, True])
def test_a_continuation_by_previous_response_id_runs_on_another_copy(aws, monkeypatch, store):
    model = answering("The capital of France is Paris.", "About 2.1 million people live there.")
    copies = Copies(SETTINGS, model)
    sent, _ = invocations_kept(monkeypatch, answers=2)
    copies.on(0, event("connect"))
    first = run_message(
        copies, {"type": "response.create", "input": "Capital of France?", "store": store}, sent, on=1
    )
    rid = first[-1]["response"]["id"]
    second = run_message(
        copies,
        {
            "type": "response.create",
            "input": "How many live there?",
            "previous_response_id": rid,
            "store": store,
        },
        sent,
        on=0,  # the other way round: each copy has handed over one and run one
    )
    assert second[-1]["type"] == "response.completed", second[-1]
    assert text_of(second) == "About 2.1 million people live there."
    asked = json.dumps(model.requests[1].messages)
    assert "Capital of France?" in asked and "The capital of France is Paris." in asked


def test_the_invoke_payload_carries_no_secret_in_clear_and_the_worker_opens_it(aws, monkeypatch):
    copies = Copies(SETTINGS, answering("unused"))
    sent, _ = invocations_kept(monkeypatch, answers=1)
    copies.on(0, event("connect"))
    tool = {
        "type": "mcp",
        "server_label": "docs",
        "server_url": "https://mcp.example.com/mcp",
        "authorization": TOKEN,
        "headers": {"X-Tenant": TOKEN},
    }
    got = run_message(copies, {"type": "response.create", "input": "search", "tools": [tool]}, sent)
    assert TOKEN not in sent[0]["Payload"].decode()
    # opened again in the worker: the request is judged whole (no MCP server is allowed here), and refused by name
    (error,) = got
    assert error["type"] == "error" and "mcp" in json.dumps(error).lower()
    assert TOKEN not in json.dumps(error)


def test_a_connect_without_a_caller_is_refused_and_its_messages_run_nothing(aws, monkeypatch):
    model = answering("never")
    copies = Copies(SETTINGS, model)
    sent, _ = invocations_kept(monkeypatch, answers=0)
    anonymous = event("connect")
    del anonymous["requestContext"]["identity"]["apiKeyId"], anonymous["requestContext"]["identity"]["apiKey"]
    refused = copies.on(0, anonymous)
    assert refused["statusCode"] == 401 and "caller" in refused["body"]
    assert copies.on(1, event("message")) == {"statusCode": 200}
    (error,) = posted(CONNECTION)
    assert error["type"] == "error" and error["error"]["code"] == "unauthenticated"
    assert sent == [] and model.calls == 0


def test_a_message_that_is_not_a_response_create_is_answered_at_once_with_no_invocation(aws, monkeypatch):
    model = answering("never")
    copies = Copies(SETTINGS, model)
    sent, _ = invocations_kept(monkeypatch, answers=0)
    copies.on(0, event("connect"))
    for body in ("{not json", json.dumps({"type": "response.cancel"}), json.dumps([1, 2])):
        assert copies.on(1, event("message", body)) == {"statusCode": 200}
    got = posted(CONNECTION)
    assert [e["type"] for e in got] == ["error"] * 3
    assert sent == [] and model.calls == 0


def test_after_disconnect_the_connection_runs_nothing(aws, monkeypatch):
    copies = Copies(SETTINGS, answering("never"))
    sent, _ = invocations_kept(monkeypatch, answers=0)
    copies.on(0, event("connect"))
    assert copies.on(1, event("disconnect")) == {"statusCode": 200}
    copies.on(0, event("message"))
    (error,) = posted(CONNECTION)
    assert error["error"]["code"] == "unauthenticated" and sent == []


def test_a_gone_connection_ends_the_turn_cleanly_and_keeps_the_stored_response(aws, monkeypatch):
    model = answering("kept even though nobody is listening")
    copies = Copies(SETTINGS, model)
    sent, _ = invocations_kept(monkeypatch, answers=1)
    copies.on(0, event("connect"))
    copies.on(1, event("message", {"type": "response.create", "input": "hi", "store": True}))
    refused = make_gone(
        apigw_post.management_client("https://abc123wsid.execute-api.us-east-1.amazonaws.com/prod"),
        CONNECTION,
    )
    answer = copies.on(0, json.loads(sent[0]["Payload"]), 120_000)
    assert answer["ran"] is True and answer["stopped"] == "gone" and answer["posts"] == 0
    assert refused == [CONNECTION] and posted(CONNECTION) == []
    store = copies.runtimes[1].stores.state()  # the other copy reads what this one kept
    rid = "resp_" + turn_id(json.loads(sent[0]["Payload"])["chatloop_websocket"]["request_id"])
    stored = asyncio.run(store.responses.get(CALLER, rid, Deadline.after(5)))
    assert stored is not None and stored.body["status"] == "completed"
    assert model.calls == 1


def test_an_event_over_128_kb_is_split_or_trimmed_never_sent_whole(aws, monkeypatch):
    long = "word " * 40_000  # 200 KB of text
    copies = Copies(SETTINGS, answering(long, chunk=50_000))  # deltas of 50 KB: each over a 32 KB frame
    sent, _ = invocations_kept(monkeypatch, answers=1)
    copies.on(0, event("connect"))
    got = run_message(copies, {"type": "response.create", "input": "talk", "store": False}, sent)
    assert text_of(got) == long  # every delta arrived, in order
    sizes = [len(json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode()) for e in got]  # as sent
    assert max(sizes) <= 128 * 1024
    deltas = [n for e, n in zip(got, sizes, strict=True) if e["type"] == "response.output_text.delta"]
    assert len(deltas) >= 8 and max(deltas) <= 32 * 1024  # four 50 KB deltas, each sent as two or more
    assert got[-1]["type"] == "response.completed" and got[-1]["chatloop_trimmed"] is True


def test_a_turn_delivered_twice_runs_once(aws, monkeypatch):
    model = answering("once")
    copies = Copies(SETTINGS, model)
    sent, _ = invocations_kept(monkeypatch, answers=1)
    copies.on(0, event("connect"))
    run_message(copies, {"type": "response.create", "input": "hi"}, sent)
    again = copies.on(1, json.loads(sent[0]["Payload"]), 120_000)
    assert again == {"ran": False, "reason": "already claimed"} and model.calls == 1


def test_import_app_imports_neither_the_transport_nor_botocores_clients():
    code = (
        "import sys; sys.path[:0] = [sys.argv[1] + '/src']; import app; "
        "print(sorted(m for m in ('botocore.session', 'botocore.client', 'chatloop.api.websocket.lambda_transport', "
        "'chatloop.api.websocket.apigw_post', 'chatloop.api.websocket.session') if m in sys.modules))"
    )
    env = {"PATH": "/usr/bin:/bin", "POWERTOOLS_SERVICE_NAME": "t", "POWERTOOLS_LOG_LEVEL": "ERROR"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_committed_websocket_events_are_what_the_handler_reads():
    from chatloop.api.websocket.apigw import caller_from, websocket_event

    kinds = {p.stem: websocket_event(json.loads(p.read_text())) for p in sorted(Path(EVENTS).glob("*.json"))}
    assert {k: e.kind for k, e in kinds.items()} == {
        "connect": "connect",
        "message": "message",
        "disconnect": "disconnect",
    }
    assert {e.connection_id for e in kinds.values()} == {CONNECTION}
    assert kinds["message"].endpoint == "https://abc123wsid.execute-api.us-east-1.amazonaws.com/prod"
    assert caller_from(kinds["connect"].context) == CALLER
    assert json.loads(str(kinds["message"].message))["type"] == "response.create"
    assert (
        copy.deepcopy(kinds["connect"].context)["identity"]["apiKey"] == "test-api-key"
    )  # never logged or kept


# --- hostile events: a clear answer, never a crash ------------------------------------------------------------
HOSTILE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["CONNECT", "MESSAGE", "DISCONNECT"]),
    st.dictionaries(
        st.sampled_from(["connectionId", "domainName", "stage", "requestId", "identity", "routeKey"]), HOSTILE
    ),
    HOSTILE,
    st.one_of(st.none(), st.booleans(), HOSTILE),
)
def test_a_malformed_websocket_event_is_refused_by_name_and_never_crashes_the_reader(
    kind, context, body, encoded
):
    from chatloop.api.websocket import handles
    from chatloop.api.websocket.apigw import EventError, websocket_event

    raw = {"requestContext": {**context, "eventType": kind}, "body": body, "isBase64Encoded": encoded}
    assert handles(raw)
    try:
        read = websocket_event(raw)
    except EventError as error:
        assert str(error)  # says what is wrong
        return
    assert read.connection_id == context["connectionId"] and read.endpoint.startswith("https://")


def test_a_malformed_event_through_the_handler_is_a_400_naming_the_field_and_posts_nothing(aws, monkeypatch):
    copies = Copies(SETTINGS, answering("never"))
    sent, _ = invocations_kept(monkeypatch, answers=0)
    broken = event("message")
    del broken["requestContext"]["domainName"]
    answer = copies.on(0, broken)
    assert answer["statusCode"] == 400 and "requestContext.domainName" in answer["body"]
    huge = event("message", "x" * (200 * 1024))
    assert copies.on(0, huge)["statusCode"] == 400
    assert posted(CONNECTION) == [] and sent == []


def test_a_fault_in_the_turn_ends_it_with_an_error_event_not_its_text(aws, monkeypatch):
    from chatloop.api.websocket import session

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("internal detail that must stay in the logs")

    copies = Copies(SETTINGS, answering("never"))
    sent, _ = invocations_kept(monkeypatch, answers=1)
    copies.on(0, event("connect"))
    monkeypatch.setattr(session, "answer", broken)
    create = {"type": "response.create", "input": "hi", "stream_id": "lane-2"}
    (error,) = run_message(copies, create, sent)
    assert error["type"] == "error" and error["error"]["code"] == "server_error"
    assert "internal detail" not in json.dumps(error) and error.get("stream_id") == "lane-2"


# --- over a moto server: the store and the Management API over HTTP, the endpoint from the setting -------------
@pytest.fixture
def moto_server(monkeypatch):
    import boto3

    from chatloop.store.dynamodb_layout import create_table
    from tests.support.moto_server import AtomicMotoServer

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(apigw_post, "_CLIENTS", {})
    server = AtomicMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)  # DynamoDB, as the fleet tests reach it
        create_table(boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url), "conversations")
        yield url
    finally:
        server.stop()


def test_over_a_moto_server_a_store_false_continuation_runs_on_the_other_copy(moto_server, monkeypatch):
    # moto's server takes @connections at its root: WEBSOCKET_MANAGEMENT_ENDPOINT says where, as the template does
    settings = Settings(
        conversation_table_name="conversations",
        lambda_function_name="chatloop-websocket",
        websocket_management_endpoint=moto_server,
    )
    model = answering("Paris.", "About 2.1 million.")
    copies = Copies(settings, model)
    sent, _ = invocations_kept(monkeypatch, answers=2)
    assert copies.on(0, event("connect")) == {"statusCode": 200}
    first = run_message(
        copies, {"type": "response.create", "input": "Capital of France?", "store": False}, sent
    )
    assert json.loads(sent[0]["Payload"])["chatloop_websocket"]["endpoint"] == moto_server
    rid = first[-1]["response"]["id"]
    create = {"type": "response.create", "input": "Population?", "previous_response_id": rid, "store": False}
    second = run_message(copies, create, sent, on=0)
    assert text_of(first) == "Paris." and text_of(second) == "About 2.1 million."
    assert "Capital of France?" in json.dumps(model.requests[1].messages)


def test_a_turn_that_cannot_be_handed_over_is_an_error_event_on_its_lane(aws, monkeypatch):
    model = answering("never")
    copies = Copies(SETTINGS, model)
    invocations_kept(monkeypatch, answers=0)  # Lambda unreachable: the invoke fails
    copies.on(0, event("connect"))
    create = {"type": "response.create", "input": "hi", "stream_id": "s1"}
    assert copies.on(1, event("message", create)) == {"statusCode": 200}
    (error,) = posted(CONNECTION)
    assert error["type"] == "error" and error["error"]["code"] == "server_error"
    assert error.get("stream_id") == "s1" and model.calls == 0


def test_the_connections_caller_is_kept_sealed_never_in_clear_and_its_messages_still_run_as_it(
    aws, monkeypatch
):
    """The store holds no caller in clear (owners are hashed): the caller ``$connect`` established is kept sealed in
    the connection's record, bound to its connection id, and the next message's turn still runs as that caller."""
    import boto3

    copies = Copies(SETTINGS, answering("sealed and answered"))
    sent, _ = invocations_kept(monkeypatch, answers=1)
    copies.on(0, event("connect"))
    kept = table_text(boto3.client("dynamodb", region_name="us-east-1"))
    assert "sealed_caller" in kept and CALLER.split(":")[1] not in kept
    got = run_message(copies, {"type": "response.create", "input": "hi", "store": True}, sent)
    assert text_of(got) == "sealed and answered"
    stored_for = got[-1]["response"]["id"]
    with serving(copies.runtimes[0]):  # the stored response is the caller's: read back under that caller
        store = copies.runtimes[0].stores.state()
        found = asyncio.run(store.responses.get(CALLER, stored_for, Deadline.after(5)))
    assert found is not None
