"""The conversation store as the store tests build it: on the backend under test (SQLite in a temp file, or DynamoDB
through moto: the ``backends`` fixture of tests/conftest.py gives one of each), with a deadline a test need not think
about.

Usage::

    async def test_x(backends):
        store = backends.store()
        await store.conversations.create("alice", {}, [], soon())
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import boto3

from chatloop.deadline import Deadline
from chatloop.store import Store
from chatloop.store.dynamodb import DynamoDBBackend
from chatloop.store.sqlite import SQLiteBackend

TABLE = "chatloop-conversations-test"
DAY = 86_400


def soon(seconds: float = 10.0) -> Deadline:
    """A deadline ``seconds`` from now, for a store call."""
    return Deadline.after(seconds)


class Backends:
    """Builds a store on the backend under test, and reads that backend's raw storage."""

    def __init__(self, kind: str, tmp_path: Path):
        self.kind = kind
        self.path = tmp_path / "conversations.sqlite3"

    def store(self, ttl_seconds: int = DAY) -> Store:
        backend = SQLiteBackend(self.path) if self.kind == "sqlite" else DynamoDBBackend(TABLE)
        return Store(backend, ttl_seconds)

    def raw_rows(self) -> list[dict[str, Any]]:
        """Everything stored, as the backend keeps it (expired or not)."""
        if self.kind == "sqlite":
            db = sqlite3.connect(self.path)
            try:
                records = [
                    {"expires_at": e, "table": "records"}
                    for (e,) in db.execute("SELECT expires_at FROM records")
                ]
                children = [
                    {"expires_at": e, "table": "children"}
                    for (e,) in db.execute("SELECT expires_at FROM children")
                ]
            finally:
                db.close()
            return records + children
        items = boto3.client("dynamodb", region_name="us-east-1").scan(TableName=TABLE)["Items"]
        return [{"expires_at": int(i["expires_at"]["N"]), "sk": i["sk"]["S"]} for i in items]
