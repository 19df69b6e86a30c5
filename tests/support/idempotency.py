"""Idempotent requests as the idempotency tests make them (tests/api/idempotency/test_idempotency.py, tests/api/idempotency/test_regressions.py): the
template's idempotency table in moto, a scripted model that counts its calls (a retry answered again would count
twice), and a /chat body. The ``serve`` fixture (tests/conftest.py) installs the counting model on the handler.

Usage::

    with mock_aws():
        create_table()
        model = serve()   # the fixture
        invoke(rest_event("POST", "/chat", ask()))
        assert model.calls == 1
"""

from __future__ import annotations

from typing import Any

import boto3

from chatloop.providers.base import ModelResponse
from tests.support.models import ScriptedModel

TABLE = "chatloop-idempotency-test"


def counting_model() -> ScriptedModel:
    """Answers "Answer number n." to its n-th call."""

    def answer(request, n):
        return ModelResponse("", content=f"Answer number {n}.", finish_reason="stop")

    return ScriptedModel(answer, name="scripted:counting")


def create_table(endpoint: str | None = None) -> None:
    """The template's table: a string ``id`` key, TTL on ``expiration``, on demand."""
    client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint)
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.update_time_to_live(
        TableName=TABLE, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiration"}
    )


def ask(text: str = "hello", stream: bool = False) -> dict[str, Any]:
    """A /chat request body with no tools."""
    return {"messages": [{"role": "user", "content": text}], "stream": stream, "tools": []}
