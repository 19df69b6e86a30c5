"""AWS as the tests meet it through moto: fake credentials (moto accepts any; boto3 wants some) and the lock that
gives moto's in-process backend DynamoDB's atomicity per request.

Usage::

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    one_request_at_a_time(monkeypatch)
    with mock_aws(): ...
"""

from __future__ import annotations

import threading
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
