"""Fixtures the API tests share: renderers with no registered secrets; idempotency on DynamoDB through moto."""

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def no_registered_secrets(monkeypatch):
    """Secrets other tests registered (``register_secret`` is process-wide) would hold back pieces of the renderer
    tests' deltas; key-shaped strings are still redacted. Not autouse: tests/api/chat/test_render_chat.py, tests/api/openai/test_render_chat_completions.py
    and tests/api/openai/responses/test_render_responses.py apply it to every test of theirs with ``pytestmark``."""
    monkeypatch.setattr("chatloop.redaction._SECRETS", [])


@pytest.fixture
def aws(monkeypatch) -> Iterator[None]:
    """Fake credentials, moto in-process and the template's idempotency table (tests/support/idempotency.py) for one
    test. Used by tests/api/idempotency/test_idempotency.py and tests/api/idempotency/test_regressions.py."""
    from moto import mock_aws

    from tests.support.aws import FAKE_CREDENTIALS
    from tests.support.idempotency import create_table

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        create_table()
        yield


@pytest.fixture
def serve(app_runtime):
    """``serve(table=TABLE)``: the handler answers with a fresh counting model, idempotent on ``table``
    (tests/support/idempotency.py). Used by tests/api/idempotency/test_idempotency.py and tests/api/idempotency/test_regressions.py."""
    from chatloop.config import Settings
    from chatloop.tools.base import ToolRegistry
    from tests.support.idempotency import TABLE, counting_model

    def install(table: str = TABLE) -> Any:
        model = counting_model()
        app_runtime(Settings(idempotency_table_name=table), model=model, registry=ToolRegistry())
        return model

    return install
