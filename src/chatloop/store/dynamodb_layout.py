"""How the DynamoDB backend lays records out in its one table: keys, attribute values, parts, TTL; and the shape
of the boto3 client it calls. Pure functions (``create_table`` aside): ``dynamodb.py`` makes the calls.

The table is keyed ``pk`` (string, hash) and ``sk`` (string, range), with TTL on ``expires_at``. Everything of a
record lives under ``pk = <owner hash>#<record id>`` (the store passes the owner already hashed, so no caller
identity is stored, and another owner's record has another key: not found)::

    sk "#meta"                       kind, created_at, expires_at, next (the list counter), body or body_ref
    sk "#body#<ref>#<part>"          a body too large for the meta item, in parts
    sk "<list>#<position>#<part>"    an item of a list (its JSON compressed, in parts of PART_BYTES)
    sk "<list>@<item id>"            where an item is: its position and parts (not kept for events)

- Size: an item or body over DynamoDB's 400 KB item limit is split into parts and read back whole.
- Expiry: every item carries its record's ``expires_at`` (epoch seconds, the TTL attribute).

Usage::

    items = list_items(record_key(owner, "conv_1"), "items", 0, [Item("msg_1", {"role": "user"})], expires_at)
    [(0, item)] = list(assemble(iter(items[:-1]), limit=1))   # the parts back into the item, the pointer left out
"""

from __future__ import annotations

import json
import secrets
import zlib
from collections.abc import Iterator, Sequence
from typing import Protocol, TypedDict

from chatloop.jsontypes import JSONObject
from chatloop.store.model import Item, ListName, Order, Record

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


class GetItemOutput(TypedDict, total=False):
    Item: Attr


class QueryOutput(TypedDict, total=False):
    Items: list[Attr]
    LastEvaluatedKey: Attr


class UpdateItemOutput(TypedDict, total=False):
    Attributes: Attr


class DynamoDBClient(Protocol):
    """The calls the backend makes on a boto3 DynamoDB client (botocore builds the client at run time, untyped),
    with the parts of their answers it reads."""

    def get_item(self, **request: object) -> GetItemOutput: ...

    def query(self, **request: object) -> QueryOutput: ...

    def put_item(self, **request: object) -> object: ...

    def update_item(self, **request: object) -> UpdateItemOutput: ...

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


# --- keys -----------------------------------------------------------------------------------------
def record_key(owner: str, record_id: str) -> str:
    """The partition key of everything a record holds (``owner`` is the store's hash of the caller)."""
    return f"{owner}#{record_id}"


def table_key(pk: str, sk: str) -> Attr:
    """The primary key of one table item."""
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def pointer_sk(name: ListName, item_id: str) -> str:
    """Where the item ``item_id`` of list ``name`` is (its position and parts)."""
    return f"{name}@{item_id}"


def part_sk(name: ListName, position: int, part: int) -> str:
    return f"{name}#{position:012d}#{part:03d}"


def parts_range(name: ListName, position: int) -> tuple[str, str]:
    """The sort keys of every part of the item at ``position``, as a ``BETWEEN`` range."""
    prefix = f"{name}#{position:012d}#"
    return prefix, prefix + "~"


def body_parts_range(ref: str) -> tuple[str, str]:
    """The sort keys of every part of the body stored under ``ref``, as a ``BETWEEN`` range."""
    return f"#body#{ref}#", f"#body#{ref}#~"


def page_range(name: ListName, order: Order, after_position: int | None) -> tuple[str, str] | None:
    """The sort keys of the items of list ``name`` after ``after_position`` (None: from the start) in ``order``, as
    a ``BETWEEN`` range; None when nothing can come after it (descending past position 0)."""
    if order == "asc":
        first = 0 if after_position is None else after_position + 1
        return f"{name}#{min(first, MAX_POSITION):012d}", f"{name}#~"
    if after_position is not None and after_position <= 0:
        return None
    last = MAX_POSITION if after_position is None else after_position - 1
    return f"{name}#", f"{name}#{last:012d}#~"


# --- items ----------------------------------------------------------------------------------------
def meta_item(pk: str, record: Record, next_position: int) -> Attr:
    """A record's meta item, its body aside (see ``body_items``); ``next``: the list counter (see the module)."""
    return {
        "pk": {"S": pk},
        "sk": {"S": META},
        "kind": {"S": record.kind},
        "created_at": {"N": str(record.created_at)},
        "expires_at": {"N": str(record.expires_at)},
        "next": {"N": str(next_position)},
    }


def dump(value: JSONObject) -> bytes:
    return zlib.compress(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(), 6)


def load(data: bytes) -> JSONObject:
    value: JSONObject = json.loads(zlib.decompress(data))  # only ever what dump wrote: a JSON object
    return value


def expired(item: Attr, now: float) -> bool:
    """Whether ``item`` has passed its ``expires_at`` (DynamoDB deletes expired items only eventually)."""
    return int(item["expires_at"]["N"]) <= now


def split(data: bytes) -> list[bytes]:
    return [data[i : i + PART_BYTES] for i in range(0, len(data), PART_BYTES)] or [b""]


def body_items(pk: str, body: JSONObject, expires_at: int) -> tuple[list[Attr], Attr]:
    """A body's storage: inline on the meta item when it fits (the attributes returned), else parts under a fresh
    reference (the items returned, and the ``body_ref`` attribute naming them)."""
    data = dump(body)
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
        for i, part in enumerate(split(data))
    ]
    return records, {"body_ref": {"S": ref}}


def list_items(pk: str, name: ListName, start: int, items: Sequence[Item], expires_at: int) -> list[Attr]:
    """The table items holding ``items`` at positions from ``start``: each one's parts, then its pointer."""
    records: list[Attr] = []
    for offset, item in enumerate(items):
        position = start + offset
        ttl: AttributeValue = {"N": str(item.expires_at or expires_at)}
        parts = split(dump(item.body))
        for i, part in enumerate(parts):
            records.append(
                {
                    "pk": {"S": pk},
                    "sk": {"S": part_sk(name, position, i)},
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
                    "sk": {"S": pointer_sk(name, item.id)},
                    "pos": {"N": str(position)},
                    "parts": {"N": str(len(parts))},
                    "expires_at": ttl,
                }
            )
    return records


def transaction_batches(records: list[Attr]) -> Iterator[list[Attr]]:
    """``records`` in runs that fit one ``TransactWriteItems`` (100 items, ~3.5 MB)."""
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


def assemble(records: Iterator[Attr], limit: int) -> Iterator[tuple[int, Item]]:
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
        return current, Item(first["id"]["S"], load(data))

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
