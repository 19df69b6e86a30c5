"""The Conversations API: the real ``openai`` SDK against the app under uvicorn (conversations and items, in
OpenAI's shapes and paginated as OpenAI paginates), and the real Lambda handler with REST and Function URL events
of two callers, each of whom sees only their own."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.conversations import Conversation, ConversationDeletedResource, Message

from chatloop.api import create_app
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.store import Store
from chatloop.store.sqlite import SQLiteBackend
from chatloop.tools.base import ToolRegistry
from tests.support.events import function_url_event, response_body, rest_event
from tests.support.handler import handle
from tests.support.server import Server, client


def runtime_for(settings: Settings, **kwargs: Any) -> Runtime:
    return Runtime(settings, registry=ToolRegistry(), keys_loader=lambda s: {}, **kwargs)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    settings = Settings(conversation_store_path=str(tmp_path_factory.mktemp("store") / "c.sqlite3"))
    with Server(create_app(settings, runtime=runtime_for(settings))) as running:
        yield running


def said(item: Any) -> str:
    return "".join(part.text for part in item.content)


# --- conversations --------------------------------------------------------------------------------
def test_create_retrieve_update_delete(server):
    alice = client(server)
    created = alice.conversations.create(
        items=[{"role": "user", "content": "Hello"}], metadata={"topic": "greetings"}
    )
    assert isinstance(created, Conversation) and created.object == "conversation"
    assert created.id.startswith("conv_") and created.metadata == {"topic": "greetings"}
    assert abs(created.created_at - time.time()) < 60
    again = alice.conversations.retrieve(created.id)
    assert again.id == created.id and again.metadata == {"topic": "greetings"}
    updated = alice.conversations.update(created.id, metadata={"topic": "changed", "n": "2"})
    assert updated.metadata == {"topic": "changed", "n": "2"}
    assert alice.conversations.retrieve(created.id).metadata == {"topic": "changed", "n": "2"}
    deleted = alice.conversations.delete(created.id)
    assert isinstance(deleted, ConversationDeletedResource)
    assert (deleted.id, deleted.object, deleted.deleted) == (created.id, "conversation.deleted", True)
    with pytest.raises(openai.NotFoundError):
        alice.conversations.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        alice.conversations.delete(created.id)


def test_items_create_list_retrieve_delete(server):
    alice = client(server)
    conversation = alice.conversations.create(items=[{"role": "user", "content": "one"}])
    added = alice.conversations.items.create(
        conversation.id,
        items=[
            {"type": "message", "role": "assistant", "content": "two"},
            {"role": "user", "content": [{"type": "input_text", "text": "three"}]},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"q": 4}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "four"},
        ],
    )
    assert added.object == "list" and len(added.data) == 4 and added.has_more is False
    assert added.first_id == added.data[0].id and added.last_id == added.data[-1].id
    assert added.data[0].type == "message" and added.data[0].role == "assistant"
    assert added.data[0].content[0].type == "output_text" and said(added.data[0]) == "two"
    assert added.data[2].type == "function_call" and added.data[2].arguments == '{"q": 4}'
    assert added.data[3].type == "function_call_output" and added.data[3].output == "four"

    everything = list(alice.conversations.items.list(conversation.id, order="asc", limit=2))  # auto-paginated
    assert [getattr(i, "call_id", None) or said(i) for i in everything] == [
        "one",
        "two",
        "three",
        "call_1",
        "call_1",
    ]
    first = alice.conversations.items.list(conversation.id, order="asc", limit=2)
    assert [said(i) for i in first.data] == ["one", "two"] and first.has_more is True
    after = alice.conversations.items.list(conversation.id, order="asc", limit=2, after=first.data[1].id)
    assert said(after.data[0]) == "three" and after.has_more is True
    newest = alice.conversations.items.list(conversation.id, limit=1)  # OpenAI's default order: desc
    assert newest.data[0].type == "function_call_output" and newest.has_more is True
    backwards = alice.conversations.items.list(conversation.id, order="desc", after=added.data[1].id)
    assert [said(i) for i in backwards.data] == ["two", "one"] and backwards.has_more is False

    item = alice.conversations.items.retrieve(added.data[1].id, conversation_id=conversation.id)
    assert isinstance(item, Message) and item.id == added.data[1].id and said(item) == "three"
    after_delete = alice.conversations.items.delete(added.data[1].id, conversation_id=conversation.id)
    assert isinstance(after_delete, Conversation) and after_delete.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        alice.conversations.items.retrieve(added.data[1].id, conversation_id=conversation.id)
    remaining = alice.conversations.items.list(conversation.id, order="asc")
    assert [getattr(i, "call_id", None) or said(i) for i in remaining.data] == [
        "one",
        "two",
        "call_1",
        "call_1",
    ]


def test_another_caller_gets_exactly_a_404(server):
    alice, bob = client(server, "alice-key"), client(server, "bob-key")
    conversation = alice.conversations.create(items=[{"role": "user", "content": "private"}])
    item_id = alice.conversations.items.list(conversation.id).data[0].id
    attempts = [
        lambda: bob.conversations.retrieve(conversation.id),
        lambda: bob.conversations.update(conversation.id, metadata={"x": "y"}),
        lambda: bob.conversations.items.list(conversation.id),
        lambda: bob.conversations.items.create(conversation.id, items=[{"role": "user", "content": "hi"}]),
        lambda: bob.conversations.items.retrieve(item_id, conversation_id=conversation.id),
        lambda: bob.conversations.items.delete(item_id, conversation_id=conversation.id),
        lambda: bob.conversations.delete(conversation.id),
    ]
    missing = "conv_" + "0" * 48
    with pytest.raises(openai.NotFoundError) as never_existed:
        bob.conversations.retrieve(missing)
    for attempt in attempts:
        with pytest.raises(openai.NotFoundError) as raised:
            attempt()
        assert raised.value.status_code == 404 and "private" not in raised.value.response.text
    # A foreign id answers as a missing one does: nothing tells bob it exists.
    assert raised.value.body["code"] == never_existed.value.body["code"] == "not_found"
    assert [said(i) for i in alice.conversations.items.list(conversation.id).data] == ["private"]


@pytest.mark.parametrize(
    ("call", "param"),
    [
        (lambda c: c.conversations.retrieve("not-a-conversation"), "conversation_id"),
        (lambda c: c.conversations.items.retrieve("msg_not valid", conversation_id="conv_abc"), "item_id"),
        (lambda c: c.conversations.items.list("conv_abc", limit=101), "limit"),
        (lambda c: c.conversations.items.list("conv_abc", extra_query={"order": "sideways"}), "order"),
        (lambda c: c.conversations.items.list("conv_abc", after="nope"), "after"),
        (lambda c: c.conversations.create(metadata={f"k{i}": "v" for i in range(17)}), "metadata"),
        (lambda c: c.conversations.create(metadata={"k" * 65: "v"}), "metadata"),
        (lambda c: c.conversations.create(metadata={"k": "v" * 513}), "metadata"),
        (lambda c: c.conversations.create(items=[{"role": "user", "content": "x"}] * 21), "items"),
        (lambda c: c.conversations.create(items=[{"role": "wizard", "content": "x"}]), "items"),
        (lambda c: c.conversations.create(items=[{"type": "reasoning", "summary": []}]), "items[0]"),
        (lambda c: c.conversations.items.create("conv_abc", items=[]), "items"),
    ],
)
def test_bad_requests_are_400s(server, call, param):
    with pytest.raises(openai.BadRequestError) as raised:
        call(client(server))
    assert raised.value.status_code == 400
    if param is not None:
        assert str(raised.value.body.get("param")).startswith(param)


class Hanging(SQLiteBackend):
    def read(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(5)

    def create(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(5)


@pytest.mark.parametrize("failure", ["hangs", "down"])
def test_a_store_that_hangs_or_is_down_is_a_503_within_the_timeout(tmp_path, failure):
    settings = Settings(conversation_store_timeout_seconds=0.5)
    if failure == "hangs":
        store = Store(Hanging(tmp_path / "c.sqlite3"), 3600)
    else:
        (tmp_path / "file").write_text("a file where a directory should be")
        store = Store(SQLiteBackend(tmp_path / "file" / "c.sqlite3"), 3600)
    with Server(create_app(settings, runtime=runtime_for(settings, state=store))) as running:
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as raised:
            client(running).conversations.create(metadata={"a": "b"})
        assert time.monotonic() - started < 2.0
        with pytest.raises(openai.InternalServerError):
            client(running).conversations.retrieve("conv_" + "0" * 48)
    assert raised.value.status_code == 503
    assert raised.value.body == {
        "message": "the conversation store is unavailable; try again shortly",
        "type": "service_unavailable",
        "param": None,
        "code": "store_unavailable",
    }


# --- the real Lambda handler: REST events of two API keys, Function URL events of two IAM callers ----
@pytest.fixture
def lambda_store(tmp_path, app_runtime) -> None:
    settings = Settings(conversation_store_path=str(tmp_path / "lambda.sqlite3"))
    app_runtime.install(runtime_for(settings))


def invoke(event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = handle(event)
    return response["statusCode"], json.loads(response_body(response))


def rest(method: str, path: str, body: Any = None, api_key_id: str | None = "key-a") -> dict[str, Any]:
    event = rest_event(method, path, body)
    if api_key_id is not None:
        event["requestContext"]["identity"]["apiKeyId"] = api_key_id
    return event


def test_rest_callers_each_see_only_their_own(lambda_store):
    status, mine = invoke(rest("POST", "/v1/conversations", {"items": [{"role": "user", "content": "a's"}]}))
    assert status == 200 and mine["object"] == "conversation"
    status, theirs = invoke(
        rest("POST", "/v1/conversations", {"metadata": {"owner": "b"}}, api_key_id="key-b")
    )
    assert status == 200
    assert invoke(rest("GET", f"/v1/conversations/{mine['id']}"))[0] == 200
    assert invoke(rest("GET", f"/v1/conversations/{mine['id']}", api_key_id="key-b"))[0] == 404
    assert invoke(rest("GET", f"/v1/conversations/{mine['id']}/items", api_key_id="key-b"))[0] == 404
    assert invoke(rest("GET", f"/v1/conversations/{theirs['id']}", api_key_id="key-a"))[0] == 404
    status, items = invoke(rest("GET", f"/v1/conversations/{mine['id']}/items"))
    assert status == 200 and items["data"][0]["content"][0]["text"] == "a's"
    status, theirs_again = invoke(rest("GET", f"/v1/conversations/{theirs['id']}", api_key_id="key-b"))
    assert status == 200 and theirs_again["metadata"] == {"owner": "b"}


def test_on_lambda_a_header_alone_names_no_caller(lambda_store):
    """The REST event carries x-api-key, but no API key id: nobody is established, so nothing is stored."""
    status, body = invoke(rest("POST", "/v1/conversations", {}, api_key_id=None))
    assert status == 401 and body["error"]["code"] == "unauthenticated"


def test_function_url_callers_are_their_iam_identities(lambda_store):
    def as_user(user: str, method: str, path: str, body: Any = None) -> dict[str, Any]:
        event = function_url_event(method, path, body)
        event["requestContext"]["authorizer"]["iam"]["userArn"] = f"arn:aws:iam::123456789012:user/{user}"
        return event

    status, created = invoke(as_user("ops", "POST", "/v1/conversations", {}))
    assert status == 200
    assert invoke(as_user("ops", "GET", f"/v1/conversations/{created['id']}"))[0] == 200
    assert invoke(as_user("intern", "GET", f"/v1/conversations/{created['id']}"))[0] == 404


# --- stream mode: the caller from the Web Adapter's request context header -----------------------
def request_with(headers: dict[str, str], trusted_adapter: bool = False) -> Any:
    """A request as the app sees it over loopback; ``trusted_adapter``: the process runs under the Web Adapter
    (run.sh sets TRUST_ADAPTER_HEADERS), so its ``x-amzn-*`` headers are the adapter's."""
    from starlette.requests import Request

    app = create_app(
        Settings(trust_adapter_headers=trusted_adapter),
        runtime=runtime_for(Settings(trust_adapter_headers=trusted_adapter)),
    )
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": "http", "method": "GET", "path": "/", "headers": raw, "query_string": b"", "app": app}
    return Request({**scope, "client": ("127.0.0.1", 5000)})


def test_under_the_web_adapter_the_caller_is_the_gateways_identity():
    from chatloop.api.http.caller import caller_of

    lambda_context = json.dumps({"deadline": int(time.time() * 1000) + 30_000, "request_id": "r1"})
    identity = json.dumps({"requestId": "g1", "identity": {"apiKeyId": "key-a", "apiKey": "secret-value"}})
    established = {"x-amzn-lambda-context": lambda_context, "x-amzn-request-context": identity}
    assert (
        caller_of(request_with(established, trusted_adapter=True)) == "apikey:key-a"
    )  # the key's id, never the key
    # Under the adapter, an x-api-key header with no identity behind it names nobody ...
    headers = {"x-amzn-lambda-context": lambda_context, "x-api-key": "k"}
    assert caller_of(request_with(headers, trusted_adapter=True)) is None
    # ... while under `make run` it is the caller (hashed), and no header is the one local user; the adapter's
    # headers, written by a client there, name nobody.
    local = caller_of(request_with({"x-api-key": "k"}))
    assert local is not None and local.startswith("local-key:") and local[10:] != "k"
    assert caller_of(request_with(established)) == "local"
    assert caller_of(request_with({})) == "local"
