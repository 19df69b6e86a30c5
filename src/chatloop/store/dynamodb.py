"""The deployed backend: one DynamoDB table (``CONVERSATION_TABLE_NAME``; the SAM template creates it), keyed
``pk`` (string, hash) and ``sk`` (string, range), with TTL on ``expires_at``.

Layout, all under ``pk = <owner hash>#<record id>`` (so another owner's record has another key: not found)::

    sk "#meta"                       kind, created_at, expires_at, next (the list counter), body or body_ref
    sk "#body#<ref>#<part>"          a body too large for the meta item, in parts
    sk "<list>#<position>#<part>"    an item of a list (its JSON compressed, in parts of PART_BYTES)
    sk "<list>@<item id>"            where an item is: its position and parts (not kept for events)

- Read-after-write: every read is a ``GetItem`` / ``Query`` with ``ConsistentRead`` on the table (no index).
- Concurrent appends: an atomic, conditional counter update reserves the positions, and each part is written with
  ``attribute_not_exists(sk)`` in a transaction, so two appends never take one position and no item is lost.
- Any size: an item or body over DynamoDB's 400 KB item limit is split into parts and read back whole.
- Expiry: every item carries its record's ``expires_at`` (epoch seconds, the TTL attribute); reads filter out what
  has expired, since DynamoDB deletes expired items only eventually.
- Deadlines: botocore's timeouts and retries are derived from the caller's time left (``timeout``), and boto3 is
  imported on first use.

Usage::

    store = Store(DynamoDBBackend("chatloop-conversations"), ttl_seconds=2_592_000)
"""

from __future__ import annotations

import json
import math
import secrets
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Protocol, TypedDict

from chatloop.store.model import Item, JSONObject, ListName, Order, Record, StoreUnavailable, record_kind

PART_BYTES = 300_000
"""A part's payload: the rest of DynamoDB's 400 KB item limit is left for the key and attributes."""
TRANSACTION_ITEMS = 100
TRANSACTION_BYTES = 3_500_000
"""``TransactWriteItems`` takes at most 100 items and 4 MB."""
META = "#meta"
MAX_POSITION = 10**12 - 1
TTL_ATTRIBUTE = "expires_at"


class AttributeValue(TypedDict, total=False):
    """One DynamoDB attribute value in the low-level client's shape: this backend writes strings, numbers (as
    text) and binary only."""

    S: str
    N: str
    B: bytes


Attr = dict[str, AttributeValue]
"""An item, a key, or a map of expression values: attribute name -> value."""


class _GetItemOutput(TypedDict, total=False):
    Item: Attr


class _QueryOutput(TypedDict, total=False):
    Items: list[Attr]
    LastEvaluatedKey: Attr


class _UpdateItemOutput(TypedDict, total=False):
    Attributes: Attr


class DynamoDBClient(Protocol):
    """The calls this backend makes on a boto3 DynamoDB client (botocore builds the client at run time, untyped),
    with the parts of their answers it reads."""

    def get_item(self, **request: object) -> _GetItemOutput: ...

    def query(self, **request: object) -> _QueryOutput: ...

    def put_item(self, **request: object) -> object: ...

    def update_item(self, **request: object) -> _UpdateItemOutput: ...

    def delete_item(self, **request: object) -> object: ...

    def transact_write_items(self, **request: object) -> object: ...

    def create_table(self, **request: object) -> object: ...

    def update_time_to_live(self, **request: object) -> object: ...


TABLE_DEFINITION: dict[str, object] = {
    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
    ],
    "BillingMode": "PAY_PER_REQUEST",
}
"""The table as template.yaml declares it (tests and the bench create it from this), TTL on ``TTL_ATTRIBUTE``."""


def create_table(client: DynamoDBClient, table_name: str) -> None:
    """Create the table with TTL enabled (tests, the bench, a local DynamoDB; the template does it when deployed)."""
    client.create_table(TableName=table_name, **TABLE_DEFINITION)
    client.update_time_to_live(
        TableName=table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
    )


class DynamoDBBackend:
    def __init__(self, table_name: str):
        self.table_name = table_name
        self._clients: dict[int, DynamoDBClient] = {}
        self._lock = threading.Lock()

    # --- records ----------------------------------------------------------------------------------
    def create(
        self,
        owner: str,
        record_id: str,
        record: Record,
        lists: Mapping[ListName, Sequence[Item]],
        timeout: float,
    ) -> None:
        pk = f"{owner}#{record_id}"
        with self._errors():
            client = self._client(timeout)
            parts: list[Attr] = []
            for name, items in lists.items():
                parts += _list_records(pk, name, 0, items, record.expires_at)
            meta: Attr = {
                "pk": {"S": pk},
                "sk": {"S": META},
                "kind": {"S": record.kind},
                "created_at": {"N": str(record.created_at)},
                "expires_at": {"N": str(record.expires_at)},
                "next": {"N": str(max((len(items) for items in lists.values()), default=0))},
            }
            body_parts, body_attrs = _body_records(pk, record.body, record.expires_at)
            # The parts first, the meta item last: the record exists only once everything it holds is written.
            self._put_all(client, parts + body_parts, conditional=True)
            client.put_item(
                TableName=self.table_name,
                Item={**meta, **body_attrs},
                ConditionExpression="attribute_not_exists(pk)",
            )

    def ensure(self, owner: str, record_id: str, record: Record, timeout: float) -> None:
        """An upsert: created with an empty list counter when absent; its expiry only ever moves later."""
        with self._errors():
            self._conditional(
                self._client(timeout).update_item,
                TableName=self.table_name,
                Key=_key(f"{owner}#{record_id}", META),
                UpdateExpression="SET kind = if_not_exists(kind, :kind), created_at = if_not_exists(created_at, "
                ":created), #n = if_not_exists(#n, :zero), body = if_not_exists(body, :body), expires_at = :expires",
                ConditionExpression="attribute_not_exists(pk) OR expires_at < :expires",
                ExpressionAttributeNames={"#n": "next"},
                ExpressionAttributeValues={
                    ":kind": {"S": record.kind},
                    ":created": {"N": str(record.created_at)},
                    ":zero": {"N": "0"},
                    ":body": {"B": _dump(record.body)},
                    ":expires": {"N": str(record.expires_at)},
                },
            )

    def read(self, owner: str, record_id: str, now: float, timeout: float) -> Record | None:
        pk = f"{owner}#{record_id}"
        with self._errors():
            client = self._client(timeout)
            for _ in range(3):  # a body in parts replaced between the two reads: read the new one
                meta = self._meta(client, pk, now)
                if meta is None:
                    return None
                if "body" in meta:
                    body = _load(meta["body"]["B"])
                else:
                    ref = meta["body_ref"]["S"]
                    records = self._query(client, pk, f"#body#{ref}#", f"#body#{ref}#~", True, None)
                    data = b"".join(r["d"]["B"] for r in records)
                    if not data:
                        continue
                    body = _load(data)
                kind, created_at = record_kind(meta["kind"]["S"]), int(meta["created_at"]["N"])
                if kind is None:  # not a record this store wrote
                    return None
                return Record(kind, created_at, int(meta["expires_at"]["N"]), body)
            raise StoreUnavailable("the conversation store failed (a record's body kept changing)")

    def replace_body(self, owner: str, record_id: str, body: JSONObject, now: float, timeout: float) -> bool:
        pk = f"{owner}#{record_id}"
        with self._errors():
            client = self._client(timeout)
            meta = self._meta(client, pk, now)
            if meta is None:
                return False
            expires_at = int(meta["expires_at"]["N"])
            body_parts, attrs = _body_records(pk, body, expires_at)
            self._put_all(client, body_parts, conditional=True)
            values: Attr
            if "body" in attrs:
                update, values = "SET body = :b REMOVE body_ref", {":b": attrs["body"]}
            else:
                update, values = "SET body_ref = :r REMOVE body", {":r": attrs["body_ref"]}
            if not self._conditional(
                client.update_item,
                TableName=self.table_name,
                Key=_key(pk, META),
                UpdateExpression=update,
                ConditionExpression="attribute_exists(pk) AND expires_at > :now",
                ExpressionAttributeValues={**values, ":now": {"N": str(int(now))}},
            ):
                return False
            if "body_ref" in meta:  # the parts of the body just replaced
                old = meta["body_ref"]["S"]
                stale = self._query(client, pk, f"#body#{old}#", f"#body#{old}#~", True, None, keys_only=True)
                self._delete_all(client, stale)
            return True

    def delete(self, owner: str, record_id: str, now: float, timeout: float) -> bool:
        pk = f"{owner}#{record_id}"
        with self._errors():
            client = self._client(timeout)
            deleted = self._conditional(
                client.delete_item,
                TableName=self.table_name,
                Key=_key(pk, META),
                ConditionExpression="attribute_exists(pk) AND expires_at > :now",
                ExpressionAttributeValues={":now": {"N": str(int(now))}},
            )
            # The meta item is gone, so the rest already reads as missing; remove it (or let TTL do it).
            rest = self._query(client, pk, None, None, True, None, keys_only=True)
            self._delete_all(client, rest)
            return deleted

    # --- lists ------------------------------------------------------------------------------------
    def append(
        self, owner: str, record_id: str, name: ListName, items: Sequence[Item], now: float, timeout: float
    ) -> bool:
        pk = f"{owner}#{record_id}"
        with self._errors():
            client = self._client(timeout)
            from botocore.exceptions import ClientError

            try:  # reserve len(items) positions: atomic, so concurrent appends get disjoint ones
                reserved = client.update_item(
                    TableName=self.table_name,
                    Key=_key(pk, META),
                    UpdateExpression="SET #n = #n + :k",
                    ConditionExpression="attribute_exists(pk) AND expires_at > :now",
                    ExpressionAttributeNames={"#n": "next"},
                    ExpressionAttributeValues={":k": {"N": str(len(items))}, ":now": {"N": str(int(now))}},
                    ReturnValues="ALL_NEW",
                )["Attributes"]
            except ClientError as exc:
                if _code(exc) == "ConditionalCheckFailedException":
                    return False
                raise
            start = int(reserved["next"]["N"]) - len(items)
            expires_at = int(reserved["expires_at"]["N"])
            self._put_all(client, _list_records(pk, name, start, items, expires_at), conditional=True)
            return True

    def put_at(
        self,
        owner: str,
        record_id: str,
        name: ListName,
        entries: Sequence[tuple[int, Item]],
        now: float,
        timeout: float,
    ) -> bool:
        pk = f"{owner}#{record_id}"
        with self._errors():
            client = self._client(timeout)
            meta = self._meta(client, pk, now)
            if meta is None:
                return False
            expires_at = int(meta["expires_at"]["N"])
            records: list[Attr] = []
            for position, item in entries:
                records += _list_records(pk, name, position, [item], expires_at)
            self._put_all(client, records, conditional=False)  # the same event again overwrites itself
            return True

    def page(
        self,
        owner: str,
        record_id: str,
        name: ListName,
        order: Order,
        after_position: int | None,
        limit: int,
        now: float,
        timeout: float,
    ) -> list[tuple[int, Item]] | None:
        pk = f"{owner}#{record_id}"
        with self._errors():
            client = self._client(timeout)
            if self._meta(client, pk, now) is None:
                return None
            if order == "asc":
                first = 0 if after_position is None else after_position + 1
                low, high = f"{name}#{min(first, MAX_POSITION):012d}", f"{name}#~"
            else:
                if after_position is not None and after_position <= 0:
                    return []
                last = MAX_POSITION if after_position is None else after_position - 1
                low, high = f"{name}#", f"{name}#{last:012d}#~"
            records = self._query(client, pk, low, high, order == "asc", now)
            return list(_assemble(records, limit))

    def position_of(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> int | None:
        pointer = self._pointer(owner, record_id, name, item_id, now, timeout)
        return int(pointer["pos"]["N"]) if pointer else None

    def get_child(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> Item | None:
        pk = f"{owner}#{record_id}"
        pointer = self._pointer(owner, record_id, name, item_id, now, timeout)
        if pointer is None:
            return None
        prefix = f"{name}#{int(pointer['pos']['N']):012d}#"
        with self._errors():
            records = self._query(self._client(timeout), pk, prefix, prefix + "~", True, now)
            found = [item for _, item in _assemble(records, 1)]
        return found[0] if found else None

    def delete_child(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> bool:
        pk = f"{owner}#{record_id}"
        pointer = self._pointer(owner, record_id, name, item_id, now, timeout)
        if pointer is None:
            return False
        position, parts = int(pointer["pos"]["N"]), int(pointer["parts"]["N"])
        with self._errors():
            client = self._client(timeout)
            keys = [_key(pk, f"{name}@{item_id}")] + [
                _key(pk, f"{name}#{position:012d}#{part:03d}") for part in range(parts)
            ]
            return self._conditional(
                client.transact_write_items,
                TransactItems=[
                    {
                        "Delete": {
                            "TableName": self.table_name,
                            "Key": key,
                            **({"ConditionExpression": "attribute_exists(pk)"} if i == 0 else {}),
                        }
                    }
                    for i, key in enumerate(keys)
                ],
            )

    # --- DynamoDB calls ---------------------------------------------------------------------------
    def _client(self, timeout: float) -> DynamoDBClient:
        """A client whose connect/read timeouts and retries fit in ``timeout`` (one client per whole second of
        budget, up to 10, built once): a store that hangs ends the call, and the request, in time."""
        budget = max(1, min(10, math.ceil(timeout)))
        with self._lock:
            client = self._clients.get(budget)
            if client is None:
                import boto3

                from chatloop.aws import bounded_config

                built: DynamoDBClient = boto3.session.Session().client(
                    "dynamodb", config=bounded_config(budget)
                )
                self._clients[budget] = client = built
            return client

    @staticmethod
    def _errors() -> _Errors:
        return _Errors()

    def _meta(self, client: DynamoDBClient, pk: str, now: float) -> Attr | None:
        item = client.get_item(TableName=self.table_name, Key=_key(pk, META), ConsistentRead=True).get("Item")
        if item is None or int(item["expires_at"]["N"]) <= now:
            return None
        return item

    def _pointer(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> Attr | None:
        pk = f"{owner}#{record_id}"
        with self._errors():
            client = self._client(timeout)
            if self._meta(client, pk, now) is None:
                return None
            item = client.get_item(
                TableName=self.table_name, Key=_key(pk, f"{name}@{item_id}"), ConsistentRead=True
            ).get("Item")
        if item is None or int(item["expires_at"]["N"]) <= now:
            return None
        return item

    def _query(
        self,
        client: DynamoDBClient,
        pk: str,
        low: str | None,
        high: str | None,
        forward: bool,
        now: float | None,
        keys_only: bool = False,
    ) -> Iterator[Attr]:
        """Every record of ``pk`` with ``low <= sk <= high`` (all of them when None), page by page, strongly
        consistent (unexpired only, when ``now`` is given)."""
        condition = "pk = :pk"
        values: Attr = {":pk": {"S": pk}}
        if low is not None and high is not None:
            condition += " AND sk BETWEEN :low AND :high"
            values.update({":low": {"S": low}, ":high": {"S": high}})
        request: dict[str, object] = {
            "TableName": self.table_name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
            "ScanIndexForward": forward,
        }
        if keys_only:
            request["ProjectionExpression"] = "pk, sk"
        while True:
            answer = client.query(**request)
            for record in answer.get("Items", []):
                if now is None or int(record["expires_at"]["N"]) > now:
                    yield record
            if "LastEvaluatedKey" not in answer:
                return
            request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    def _put_all(self, client: DynamoDBClient, records: list[Attr], conditional: bool) -> None:
        """Write ``records`` in transactions (100 items, ~3.5 MB each); ``conditional``: never over an existing one."""
        condition = {"ConditionExpression": "attribute_not_exists(sk)"} if conditional else {}
        for batch in _batches(records):
            client.transact_write_items(
                TransactItems=[{"Put": {"TableName": self.table_name, "Item": r, **condition}} for r in batch]
            )

    def _delete_all(self, client: DynamoDBClient, records: Iterator[Attr]) -> None:
        """Delete ``records`` (keys), 100 at a time: transactions, so the table needs no permission beyond
        DeleteItem."""
        keys = [{"pk": record["pk"], "sk": record["sk"]} for record in records]
        for start in range(0, len(keys), TRANSACTION_ITEMS):
            client.transact_write_items(
                TransactItems=[
                    {"Delete": {"TableName": self.table_name, "Key": key}}
                    for key in keys[start : start + TRANSACTION_ITEMS]
                ]
            )

    @staticmethod
    def _conditional(call: Callable[..., object], **request: object) -> bool:
        """``call(**request)``; False when its condition failed (the record is not there, or not any more)."""
        from botocore.exceptions import ClientError

        try:
            call(**request)
            return True
        except ClientError as exc:
            if _code(exc) in {"ConditionalCheckFailedException", "TransactionCanceledException"}:
                return False
            raise


class _Errors:
    """A context manager: botocore's failures (connection, timeout, throttling, a missing table) become
    ``StoreUnavailable`` naming the error class, never a key or an endpoint's answer."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if error is None or isinstance(error, StoreUnavailable):
            return
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(error, ClientError):
            raise StoreUnavailable(f"the conversation store failed ({_code(error)})") from None
        if isinstance(error, BotoCoreError):
            raise StoreUnavailable(f"the conversation store failed ({type(error).__name__})") from None


def _code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", type(error).__name__))


def _key(pk: str, sk: str) -> Attr:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _dump(value: JSONObject) -> bytes:
    return zlib.compress(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(), 6)


def _load(data: bytes) -> JSONObject:
    value: JSONObject = json.loads(zlib.decompress(data))  # only ever what _dump wrote: a JSON object
    return value


def _split(data: bytes) -> list[bytes]:
    return [data[i : i + PART_BYTES] for i in range(0, len(data), PART_BYTES)] or [b""]


def _body_records(pk: str, body: JSONObject, expires_at: int) -> tuple[list[Attr], Attr]:
    """A body's storage: inline on the meta item when it fits, else parts under a fresh reference."""
    data = _dump(body)
    if len(data) <= PART_BYTES:
        return [], {"body": {"B": data}}
    ref = secrets.token_hex(8)
    records: list[Attr] = [
        {
            "pk": {"S": pk},
            "sk": {"S": f"#body#{ref}#{i:03d}"},
            "d": {"B": part},
            "expires_at": {"N": str(expires_at)},
        }
        for i, part in enumerate(_split(data))
    ]
    return records, {"body_ref": {"S": ref}}


def _list_records(pk: str, name: ListName, start: int, items: Sequence[Item], expires_at: int) -> list[Attr]:
    records: list[Attr] = []
    for offset, item in enumerate(items):
        position = start + offset
        ttl: AttributeValue = {"N": str(item.expires_at or expires_at)}
        parts = _split(_dump(item.body))
        for i, part in enumerate(parts):
            records.append(
                {
                    "pk": {"S": pk},
                    "sk": {"S": f"{name}#{position:012d}#{i:03d}"},
                    "id": {"S": item.id},
                    "d": {"B": part},
                    "parts": {"N": str(len(parts))},
                    "expires_at": ttl,
                }
            )
        if name != "events":  # events are read by position only
            records.append(
                {
                    "pk": {"S": pk},
                    "sk": {"S": f"{name}@{item.id}"},
                    "pos": {"N": str(position)},
                    "parts": {"N": str(len(parts))},
                    "expires_at": ttl,
                }
            )
    return records


def _batches(records: list[Attr]) -> Iterator[list[Attr]]:
    batch: list[Attr] = []
    size = 0
    for record in records:
        weight = sum(len(v.get("B", b"")) + len(v.get("S", "")) + 16 for v in record.values())
        if batch and (len(batch) == TRANSACTION_ITEMS or size + weight > TRANSACTION_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(record)
        size += weight
    if batch:
        yield batch


def _assemble(records: Iterator[Attr], limit: int) -> Iterator[tuple[int, Item]]:
    """Whole items from their parts (which come in key order, either way round), at most ``limit`` of them; a
    partial item (its parts still being written) is left out."""
    count = 0
    current: int | None = None
    parts: dict[int, Attr] = {}

    def whole() -> tuple[int, Item] | None:
        if current is None or not parts:
            return None
        first = next(iter(parts.values()))
        if len(parts) != int(first["parts"]["N"]):
            return None
        data = b"".join(parts[i]["d"]["B"] for i in sorted(parts))
        return current, Item(first["id"]["S"], _load(data))

    for record in records:
        _, position_text, part_text = record["sk"]["S"].rsplit("#", 2)
        position = int(position_text)
        if position != current:
            done = whole()
            if done is not None:
                yield done
                count += 1
                if count >= limit:
                    return
            current, parts = position, {}
        parts[int(part_text)] = record
    done = whole()
    if done is not None and count < limit:
        yield done
