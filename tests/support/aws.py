"""AWS as the tests meet it through moto: fake credentials (moto accepts any; boto3 wants some) and the lock that
gives moto's in-process backend DynamoDB's atomicity per request.

Usage::

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    one_request_at_a_time(monkeypatch)
    with mock_aws(): ...
"""

from __future__ import annotations

import contextlib
import json
import threading
import zlib
from typing import Any

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


def one_request_at_a_time(monkeypatch) -> None:
    """moto's in-process backend is not thread-safe (a transaction deep-copies the table while another thread
    writes it); DynamoDB is atomic per request. A lock around each mocked request gives moto that atomicity, and
    still lets our multi-request operations (reserve positions, then write them) interleave across threads."""
    from moto.core.botocore_stubber import BotocoreStubber

    lock = threading.Lock()
    original = BotocoreStubber.process_request

    def atomic(self: Any, request: Any) -> Any:
        with lock:
            return original(self, request)

    monkeypatch.setattr(BotocoreStubber, "process_request", atomic)


ANY_INVOKE = object()
"""``invocations_kept``'s default: an invocation of any function, type and payload."""


def invocations_kept(
    monkeypatch, answers: int = 0, expected: Any = ANY_INVOKE
) -> tuple[list[dict[str, Any]], Any]:
    """The background worker's Lambda client, stubbed: each ``lambda.invoke`` it makes is kept in the list (its
    parameters) and answered 202, ``answers`` times at most (one more fails the request, as an unreachable Lambda
    would); ``expected``, the parameters each must have. Returns the list and the stubber (to assert nothing is
    left pending)."""
    import boto3
    from botocore.stub import ANY, Stubber

    from chatloop.api.openai.responses import worker

    client = boto3.client(
        "lambda", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    kept: list[dict[str, Any]] = []
    client.meta.events.register(
        "provide-client-params.lambda.Invoke", lambda params, **_: kept.append(dict(params))
    )
    stubber = Stubber(client)
    wanted = (
        {"FunctionName": ANY, "InvocationType": ANY, "Payload": ANY} if expected is ANY_INVOKE else expected
    )
    for _ in range(answers):
        stubber.add_response("invoke", {"StatusCode": 202}, wanted)
    stubber.activate()
    monkeypatch.setitem(worker._CLIENTS, 5.0, client)
    return kept, stubber


def table_text(dynamodb: Any) -> str:
    """Every attribute of every item, binary ones decompressed as the store writes them (zlib)."""
    texts: list[str] = []
    for item in dynamodb.scan(TableName="conversations")["Items"]:
        for value in item.values():
            if "B" in value:
                data = value["B"]
                with contextlib.suppress(
                    zlib.error
                ):  # every value the store writes is zlib; others as they are
                    data = zlib.decompress(data)
                texts.append(data.decode("utf-8", "replace"))
            else:
                texts.append(json.dumps(value))
    return "\n".join(texts)
