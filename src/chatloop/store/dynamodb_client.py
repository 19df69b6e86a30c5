"""The boto3 client the DynamoDB backend calls, and what its failures mean to the store.

- ``ClientPool``: one client per whole second of the caller's time left (up to 10), built on first use (boto3 is
  imported then, not at start-up), whose timeouts and retries fit in that time: a store that hangs ends the
  call, and the request, in time.
- ``store_errors()``: botocore's failures (connection, timeout, throttling, a missing table) become
  ``StoreUnavailable`` naming the error class, never a key or an endpoint's answer.
- ``conditional()``: a call whose condition failed (the record is not there, or not any more) is False, not an
  error.

Usage::

    clients = ClientPool()
    with store_errors():
        client = clients.get(timeout=2.5)
        deleted = conditional(client.delete_item, TableName="t", Key=key, ConditionExpression="attribute_exists(pk)")
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from types import TracebackType

from chatloop.aws import bounded_config
from chatloop.store.dynamodb_layout import DynamoDBClient
from chatloop.store.model import StoreUnavailable

CONDITION_FAILED = "ConditionalCheckFailedException"
TRANSACTION_CANCELLED = "TransactionCanceledException"
"""A transaction fails as a whole, with this code, when one of its conditions fails."""


class ClientPool:
    """Clients by store-call time, shared by the threads the store runs its calls in."""

    def __init__(self) -> None:
        self._clients: dict[int, DynamoDBClient] = {}
        self._lock = threading.Lock()

    def get(self, timeout: float) -> DynamoDBClient:
        """A client whose connect/read timeouts and retries fit in ``timeout`` (one client per whole second of
        call time, up to 10, built once)."""
        seconds = max(1, min(10, math.ceil(timeout)))
        with self._lock:
            client = self._clients.get(seconds)
            if client is None:
                import boto3

                built: DynamoDBClient = boto3.session.Session().client(
                    "dynamodb", config=bounded_config(seconds)
                )
                self._clients[seconds] = client = built
            return client


def store_errors() -> _StoreErrors:
    """``with store_errors(): ...``: botocore's failures inside become ``StoreUnavailable``."""
    return _StoreErrors()


class _StoreErrors:
    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if error is None or isinstance(error, StoreUnavailable):
            return
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(error, ClientError):
            raise StoreUnavailable(f"the conversation store failed ({error_code(error)})") from None
        if isinstance(error, BotoCoreError):
            raise StoreUnavailable(f"the conversation store failed ({type(error).__name__})") from None


def conditional(call: Callable[..., object], **request: object) -> bool:
    """``call(**request)``; False when its condition failed (the record is not there, or not any more)."""
    from botocore.exceptions import ClientError

    try:
        call(**request)
        return True
    except ClientError as exc:
        if error_code(exc) in {CONDITION_FAILED, TRANSACTION_CANCELLED}:
            return False
        raise


def error_code(error: Exception) -> str:
    """The DynamoDB error code of a botocore ``ClientError`` (the class name for anything else)."""
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", type(error).__name__))
