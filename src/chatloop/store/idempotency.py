"""Idempotency records: Powertools Idempotency's DynamoDB persistence layer for one table (IDEMPOTENCY_TABLE_NAME),
every call inside its store-call time. The record store only: what a record means to a request (replay, 409, 422) is the
route wrapper's (``api/idempotency/idempotent.py``).

One layer (and boto3 client) per store-call time in ``BUCKETS``, each built on first use and kept for the container:
``records.layer(1.5)`` is the 1 s bucket's layer, whose every call (connect, read, retries) ends within 1 s.

Usage::

    records = IdempotencyRecords("chatloop-idempotency", expires_after_seconds=3600)   # Runtime.idempotency
    records.layer(call_time).save_inprogress({"key": ..., "body": ...}, remaining_ms)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from chatloop.aws import bounded_config

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
    from boto3.session import Session

BUCKETS = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Budgets (seconds, retries included) a DynamoDB call can be given: one client each, built on first use."""


class StoredAnswer(TypedDict):
    """A recorded answer, replayed byte for byte."""

    status: int
    media_type: str
    headers: dict[str, str]
    body: str


class RecordTimeout(TimeoutError):
    """Too little of the request's time is left to ask the records anything."""


class IdempotencyRecords:
    """The idempotency records of one DynamoDB table, through Powertools' persistence layer."""

    def __init__(self, table_name: str, expires_after_seconds: int):
        self.table_name = table_name
        self.expires_after_seconds = expires_after_seconds
        self._layers: dict[float, DynamoDBPersistenceLayer] = {}
        self._session: Session | None = None

    def layer(self, call_time: float = BUCKETS[-1]) -> DynamoDBPersistenceLayer:
        """The persistence layer whose every call ends within ``call_time`` seconds (the largest bucket that fits);
        ``RecordTimeout`` when even the smallest does not."""
        bucket = max((b for b in BUCKETS if b <= call_time), default=None)
        if bucket is None:
            raise RecordTimeout(f"{max(call_time, 0):.2f} s is too little for a store call")
        if bucket not in self._layers:
            from aws_lambda_powertools.utilities.idempotency import (
                DynamoDBPersistenceLayer,
                IdempotencyConfig,
            )

            if self._session is None:  # one session for every bucket: the service model is loaded once
                import boto3

                self._session = boto3.session.Session()
            layer = DynamoDBPersistenceLayer(
                table_name=self.table_name, boto_config=bounded_config(bucket), boto3_session=self._session
            )
            config = IdempotencyConfig(
                event_key_jmespath="key",
                payload_validation_jmespath="body",
                raise_on_no_idempotency_key=True,
                expires_after_seconds=self.expires_after_seconds,
                hash_function="sha256",
            )
            layer.configure(config, function_name="chatloop")
            self._layers[bucket] = layer
        return self._layers[bucket]
