"""Fixtures the store tests share: each test run on both backends (tests/support/store.py)."""

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(params=["sqlite", "dynamodb"])
def backends(request, tmp_path, monkeypatch) -> Iterator[Any]:
    """A store's backend under test, SQLite then DynamoDB through moto (tests/support/store.py ``Backends``). Used by
    tests/store/test_conversation_store.py and tests/store/test_runs.py."""
    import boto3
    from moto import mock_aws

    from chatloop.store.dynamodb import create_table
    from tests.support.aws import FAKE_CREDENTIALS, one_request_at_a_time
    from tests.support.store import TABLE, Backends

    if request.param == "sqlite":
        yield Backends("sqlite", tmp_path)
        return
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    one_request_at_a_time(monkeypatch)
    with mock_aws():
        create_table(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
        yield Backends("dynamodb", tmp_path)
