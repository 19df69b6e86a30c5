"""Retried requests answered once: Idempotency-Key through the real handler with real-shaped API Gateway events,
Powertools Idempotency on DynamoDB (moto in-process, and one end-to-end run against a moto server), and a scripted
model that counts its calls."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

import app as lambda_app
from chatloop.api.idempotency.idempotent import REPLAYED_HEADER
from chatloop.config import Settings
from chatloop.providers.base import ModelResponse
from chatloop.tools.base import ToolRegistry
from tests.support.aws import FAKE_CREDENTIALS
from tests.support.events import parse_sse, response_body, rest_event
from tests.support.handler import handle
from tests.support.idempotency import TABLE, ask, create_table
from tests.support.models import ScriptedModel


def call(
    body: dict[str, Any], key: str | None = "retry-1", api_key_id: str = "key-a"
) -> tuple[int, str, dict[str, str]]:
    event = rest_event("POST", "/chat", body)
    if key is not None:
        event["headers"]["Idempotency-Key"] = key
        event["multiValueHeaders"]["Idempotency-Key"] = [key]
    event["requestContext"]["identity"]["apiKeyId"] = api_key_id
    response = handle(event)
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    return response["statusCode"], response_body(response), headers


def test_a_retry_gets_the_first_answer_and_no_model_call(aws, serve):
    model = serve()
    first = call(ask())
    again = call(ask())
    assert first[0] == again[0] == 200 and model.calls == 1
    assert again[1] == first[1] and "Answer number 1." in first[1]  # byte for byte
    assert again[2][REPLAYED_HEADER] == "true" and REPLAYED_HEADER not in first[2]


def test_a_retried_stream_replays_the_same_events(aws, serve):
    model = serve()
    first = call(ask(stream=True))
    again = call(ask(stream=True))
    assert model.calls == 1 and again[2]["content-type"].startswith("text/event-stream")
    events, replayed = parse_sse(first[1]), parse_sse(again[1])
    assert [name for name, _ in replayed] == [name for name, _ in events] and replayed[-1][0] == "done"
    assert replayed[-1][1]["message"]["content"] == "Answer number 1."


def test_the_same_key_with_another_body_is_a_422(aws, serve):
    model = serve()
    assert call(ask("hello"))[0] == 200
    status, body, _ = call(ask("something else"))
    assert (
        status == 422 and json.loads(body)["error"]["code"] == "idempotency_key_reused" and model.calls == 1
    )


def test_the_same_key_while_the_first_still_runs_is_a_409_with_retry_after(aws, serve):
    model = serve()
    store = lambda_app.app.state.runtime.stores.idempotency
    body = json.dumps(ask())
    # The first request's record, as its still-running invocation left it.
    data = {"key": "apikey:key-a|/chat|retry-1", "body": hashlib.sha256(body.encode()).hexdigest()}
    store.layer().save_inprogress(data, 60_000)
    status, raw, headers = call(ask())
    assert status == 409 and json.loads(raw)["error"]["code"] == "request_in_progress"
    assert 1 <= int(headers["retry-after"]) <= 30 and model.calls == 0


def test_keys_are_scoped_to_the_caller(aws, serve):
    model = serve()
    mine = call(ask(), api_key_id="key-a")
    theirs = call(ask(), api_key_id="key-b")
    assert model.calls == 2 and "Answer number 1." in mine[1] and "Answer number 2." in theirs[1]
    assert REPLAYED_HEADER not in theirs[2]


def test_no_key_is_todays_behaviour(aws, serve):
    model = serve()
    call(ask(), key=None)
    call(ask(), key=None)
    assert model.calls == 2


def test_a_failed_answer_is_not_stored(aws, app_runtime):
    from chatloop.providers.failures import Transient

    def down(request, n):
        if n == 1:
            raise Transient("upstream down", model="scripted:down")
        return ModelResponse("", content="Back up.", finish_reason="stop")

    model = ScriptedModel(down, name="scripted:down")
    app_runtime(Settings(idempotency_table_name=TABLE), model=model, registry=ToolRegistry())
    assert call(ask())[0] == 503
    lambda_app.app.state.runtime.models.chain().health.cooldown_until.clear()
    status, body, _ = call(ask())  # the retry runs: a failure is nothing to replay
    assert status == 200 and "Back up." in body and model.calls == 2


def test_dynamodb_down_never_fails_the_chat(aws, capsys, caplog, serve):
    model = serve(table="no-such-table")
    status, body, _ = call(ask())
    assert status == 200 and "Answer number 1." in body and model.calls == 1
    assert "idempotency store failed (ResourceNotFoundException)" in caplog.text
    assert '"IdempotencyErrors":[1.0]' in capsys.readouterr().out  # counted, in the EMF the handler flushes


def test_an_answer_too_large_for_dynamodb_is_not_stored(aws, monkeypatch, serve):
    import chatloop.api.idempotency.idempotent as idempotency

    monkeypatch.setattr(idempotency, "MAX_STORED_BYTES", 100)
    model = serve()
    call(ask())
    call(ask())
    assert model.calls == 2


def test_end_to_end_against_a_moto_server(monkeypatch, serve):
    """The handler's own boto3 client, across HTTP, as on Lambda: AWS_ENDPOINT_URL is the only difference."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        for name, value in {**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}.items():
            monkeypatch.setenv(name, value)
        create_table(endpoint)
        model = serve()
        first = call(ask(stream=True), key="e2e-1")
        again = call(ask(stream=True), key="e2e-1")
        assert model.calls == 1 and again[1] == first[1] and again[2][REPLAYED_HEADER] == "true"
        items = boto3.client("dynamodb", endpoint_url=endpoint).scan(TableName=TABLE)["Items"]
        assert len(items) == 1 and items[0]["status"]["S"] == "COMPLETED" and "expiration" in items[0]
        assert "e2e-1" not in json.dumps(items)  # the key is stored hashed
    finally:
        server.stop()
        os.environ.pop("AWS_ENDPOINT_URL", None)


def test_a_stored_answer_holds_no_secret(aws, app_runtime):
    from chatloop.redaction import register_secret

    secret = "gsk_idempotencyLeak0123456789"
    register_secret(secret)

    def leaky(request, n):
        return ModelResponse("", content=f"The key is {secret}.", finish_reason="stop")

    app_runtime(
        Settings(idempotency_table_name=TABLE),
        model=ScriptedModel(leaky, name="scripted:leaky"),
        registry=ToolRegistry(),
    )
    status, body, _ = call(ask(stream=True), key="leak-1")
    assert status == 200 and secret not in body
    items = boto3.client("dynamodb", region_name="us-east-1").scan(TableName=TABLE)["Items"]
    stored = json.dumps(items)
    assert len(items) == 1 and secret not in stored and "[REDACTED]" in stored
