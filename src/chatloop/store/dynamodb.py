"""The deployed backend: one DynamoDB table (``CONVERSATION_TABLE_NAME``; the SAM template creates it). How records
map to its items (keys, parts over 400 KB, TTL) is ``dynamodb_layout``, the client and its errors
``dynamodb_client`` (modules beside this one); this module holds the operations and makes the calls.

- Read-after-write: every read is a ``GetItem`` / ``Query`` with ``ConsistentRead`` on the table (no index).
- Concurrent appends: an atomic, conditional counter update reserves the positions, and each part is written with
  ``attribute_not_exists(sk)`` in a transaction, so two appends never take one position and no item is lost.
- Expiry: reads filter out what has expired (``expires_at``, the TTL attribute), since DynamoDB deletes expired
  items only eventually.
- Deadlines: botocore's timeouts and retries are derived from the caller's time left (``timeout``), and boto3 is
  imported on first use.

Usage::

    store = Store(DynamoDBBackend("chatloop-conversations"), ttl_seconds=2_592_000)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chatloop.jsontypes import JSONObject
from chatloop.store.dynamodb_batch import delete_all, put_all, query_records
from chatloop.store.dynamodb_client import CONDITION_FAILED, ClientPool, conditional, error_code, store_errors
from chatloop.store.dynamodb_layout import (
    META,
    PART_BYTES,
    TABLE_DEFINITION,
    TTL_ATTRIBUTE,
    Attr,
    AttributeValue,
    DynamoDBClient,
    assemble,
    body_items,
    body_parts_range,
    create_table,
    dump,
    expired,
    list_items,
    load,
    meta_item,
    page_range,
    part_sk,
    parts_range,
    pointer_sk,
    record_key,
    table_key,
)
from chatloop.store.model import Item, ListName, Order, Record, StoreUnavailable, record_kind

__all__ = [
    "PART_BYTES",
    "TABLE_DEFINITION",
    "TTL_ATTRIBUTE",
    "AttributeValue",
    "DynamoDBBackend",
    "DynamoDBClient",
    "create_table",
]


class DynamoDBBackend:
    """The store's ``Backend`` on the table ``table_name``: every method is one synchronous operation, bounded by
    ``timeout`` seconds, that fails as ``StoreUnavailable``.

    Usage::

        backend = DynamoDBBackend("chatloop-conversations")
        backend.create(owner_key("caller"), "conv_1", record, {"items": [item]}, timeout=2.0)
        backend.page(owner_key("caller"), "conv_1", "items", "asc", None, limit=20, now=time.time(), timeout=2.0)
    """

    def __init__(self, table_name: str):
        self.table_name = table_name
        self._clients = ClientPool()

    # --- records ----------------------------------------------------------------------------------
    def create(
        self,
        owner: str,
        record_id: str,
        record: Record,
        lists: Mapping[ListName, Sequence[Item]],
        timeout: float,
    ) -> None:
        pk = record_key(owner, record_id)
        with store_errors():
            client = self._clients.get(timeout)
            parts: list[Attr] = []
            for name, items in lists.items():
                parts += list_items(pk, name, 0, items, record.expires_at)
            meta = meta_item(
                pk, record, next_position=max((len(items) for items in lists.values()), default=0)
            )
            body_parts, body_attrs = body_items(pk, record.body, record.expires_at)
            # The parts first, the meta item last: the record exists only once everything it holds is written.
            put_all(client, self.table_name, parts + body_parts, only_new=True)
            client.put_item(
                TableName=self.table_name,
                Item={**meta, **body_attrs},
                ConditionExpression="attribute_not_exists(pk)",
            )

    def ensure(self, owner: str, record_id: str, record: Record, timeout: float) -> None:
        """An upsert: created with an empty list counter when absent; its expiry only ever moves later."""
        with store_errors():
            conditional(
                self._clients.get(timeout).update_item,
                TableName=self.table_name,
                Key=table_key(record_key(owner, record_id), META),
                UpdateExpression="SET kind = if_not_exists(kind, :kind), created_at = if_not_exists(created_at, "
                ":created), #n = if_not_exists(#n, :zero), body = if_not_exists(body, :body), expires_at = :expires",
                ConditionExpression="attribute_not_exists(pk) OR expires_at < :expires",
                ExpressionAttributeNames={"#n": "next"},
                ExpressionAttributeValues={
                    ":kind": {"S": record.kind},
                    ":created": {"N": str(record.created_at)},
                    ":zero": {"N": "0"},
                    ":body": {"B": dump(record.body)},
                    ":expires": {"N": str(record.expires_at)},
                },
            )

    def read(self, owner: str, record_id: str, now: float, timeout: float) -> Record | None:
        pk = record_key(owner, record_id)
        with store_errors():
            client = self._clients.get(timeout)
            for _ in range(3):  # a body in parts replaced between the two reads: read the new one
                meta = self._meta(client, pk, now)
                if meta is None:
                    return None
                if "body" in meta:
                    body = load(meta["body"]["B"])
                else:
                    ref = meta["body_ref"]["S"]
                    records = query_records(client, self.table_name, pk, *body_parts_range(ref), True, None)
                    data = b"".join(r["d"]["B"] for r in records)
                    if not data:
                        continue
                    body = load(data)
                kind, created_at = record_kind(meta["kind"]["S"]), int(meta["created_at"]["N"])
                if kind is None:  # not a record this store wrote
                    return None
                return Record(kind, created_at, int(meta["expires_at"]["N"]), body)
            raise StoreUnavailable("the conversation store failed (a record's body kept changing)")

    def replace_body(self, owner: str, record_id: str, body: JSONObject, now: float, timeout: float) -> bool:
        pk = record_key(owner, record_id)
        with store_errors():
            client = self._clients.get(timeout)
            meta = self._meta(client, pk, now)
            if meta is None:
                return False
            expires_at = int(meta["expires_at"]["N"])
            body_parts, attrs = body_items(pk, body, expires_at)
            put_all(client, self.table_name, body_parts, only_new=True)
            values: Attr
            if "body" in attrs:
                update, values = "SET body = :b REMOVE body_ref", {":b": attrs["body"]}
            else:
                update, values = "SET body_ref = :r REMOVE body", {":r": attrs["body_ref"]}
            if not conditional(
                client.update_item,
                TableName=self.table_name,
                Key=table_key(pk, META),
                UpdateExpression=update,
                ConditionExpression="attribute_exists(pk) AND expires_at > :now",
                ExpressionAttributeValues={**values, ":now": {"N": str(int(now))}},
            ):
                return False
            if "body_ref" in meta:  # the parts of the body just replaced
                old = meta["body_ref"]["S"]
                stale = query_records(
                    client, self.table_name, pk, *body_parts_range(old), True, None, keys_only=True
                )
                delete_all(client, self.table_name, stale)
            return True

    def swap_body(
        self, owner: str, record_id: str, expected: JSONObject, body: JSONObject, now: float, timeout: float
    ) -> bool:
        """Compare-and-set on the body's stored bytes (``body = :old``), so only small, inline bodies (a running
        turn's state) can be swapped; a body kept in parts is never ``expected``."""
        pk = record_key(owner, record_id)
        with store_errors():
            client = self._clients.get(timeout)
            meta = self._meta(client, pk, now)
            if meta is None or "body" not in meta or load(meta["body"]["B"]) != expected:
                return False
            _, attrs = body_items(pk, body, int(meta["expires_at"]["N"]))
            if "body" not in attrs:
                raise StoreUnavailable("the conversation store failed (a swapped body must fit one item)")
            return conditional(
                client.update_item,
                TableName=self.table_name,
                Key=table_key(pk, META),
                UpdateExpression="SET body = :new",
                ConditionExpression="body = :old AND expires_at > :now",
                ExpressionAttributeValues={
                    ":new": attrs["body"],
                    ":old": meta["body"],
                    ":now": {"N": str(int(now))},
                },
            )

    def delete(self, owner: str, record_id: str, now: float, timeout: float) -> bool:
        pk = record_key(owner, record_id)
        with store_errors():
            client = self._clients.get(timeout)
            deleted = conditional(
                client.delete_item,
                TableName=self.table_name,
                Key=table_key(pk, META),
                ConditionExpression="attribute_exists(pk) AND expires_at > :now",
                ExpressionAttributeValues={":now": {"N": str(int(now))}},
            )
            # The meta item is gone, so the rest already reads as missing; remove it (or let TTL do it).
            rest = query_records(client, self.table_name, pk, None, None, True, None, keys_only=True)
            delete_all(client, self.table_name, rest)
            return deleted

    # --- lists ------------------------------------------------------------------------------------
    def append(
        self, owner: str, record_id: str, name: ListName, items: Sequence[Item], now: float, timeout: float
    ) -> bool:
        pk = record_key(owner, record_id)
        with store_errors():
            client = self._clients.get(timeout)
            from botocore.exceptions import ClientError

            try:  # reserve len(items) positions: atomic, so concurrent appends get disjoint ones
                reserved = client.update_item(
                    TableName=self.table_name,
                    Key=table_key(pk, META),
                    UpdateExpression="SET #n = #n + :k",
                    ConditionExpression="attribute_exists(pk) AND expires_at > :now",
                    ExpressionAttributeNames={"#n": "next"},
                    ExpressionAttributeValues={":k": {"N": str(len(items))}, ":now": {"N": str(int(now))}},
                    ReturnValues="ALL_NEW",
                )["Attributes"]
            except ClientError as exc:
                if error_code(exc) == CONDITION_FAILED:
                    return False
                raise
            start = int(reserved["next"]["N"]) - len(items)
            expires_at = int(reserved["expires_at"]["N"])
            put_all(client, self.table_name, list_items(pk, name, start, items, expires_at), only_new=True)
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
        pk = record_key(owner, record_id)
        with store_errors():
            client = self._clients.get(timeout)
            meta = self._meta(client, pk, now)
            if meta is None:
                return False
            expires_at = int(meta["expires_at"]["N"])
            records: list[Attr] = []
            for position, item in entries:
                records += list_items(pk, name, position, [item], expires_at)
            put_all(
                client, self.table_name, records, only_new=False
            )  # the same event again overwrites itself
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
        pk = record_key(owner, record_id)
        with store_errors():
            client = self._clients.get(timeout)
            if self._meta(client, pk, now) is None:
                return None
            sort_keys = page_range(name, order, after_position)
            if sort_keys is None:
                return []
            records = query_records(client, self.table_name, pk, *sort_keys, order == "asc", now)
            return list(assemble(records, limit))

    def position_of(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> int | None:
        pointer = self._pointer(owner, record_id, name, item_id, now, timeout)
        return int(pointer["pos"]["N"]) if pointer else None

    def get_child(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> Item | None:
        pk = record_key(owner, record_id)
        pointer = self._pointer(owner, record_id, name, item_id, now, timeout)
        if pointer is None:
            return None
        with store_errors():
            sort_keys = parts_range(name, int(pointer["pos"]["N"]))
            records = query_records(self._clients.get(timeout), self.table_name, pk, *sort_keys, True, now)
            found = [item for _, item in assemble(records, 1)]
        return found[0] if found else None

    def delete_child(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> bool:
        pk = record_key(owner, record_id)
        pointer = self._pointer(owner, record_id, name, item_id, now, timeout)
        if pointer is None:
            return False
        position, parts = int(pointer["pos"]["N"]), int(pointer["parts"]["N"])
        with store_errors():
            client = self._clients.get(timeout)
            keys = [table_key(pk, pointer_sk(name, item_id))] + [
                table_key(pk, part_sk(name, position, part)) for part in range(parts)
            ]
            return conditional(
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

    # --- reads and writes the operations share ---------------------------------------------------------------------------
    def _meta(self, client: DynamoDBClient, pk: str, now: float) -> Attr | None:
        """The record's meta item; None when it is missing or expired."""
        answer = client.get_item(TableName=self.table_name, Key=table_key(pk, META), ConsistentRead=True)
        item = answer.get("Item")
        return None if item is None or expired(item, now) else item

    def _pointer(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> Attr | None:
        pk = record_key(owner, record_id)
        with store_errors():
            client = self._clients.get(timeout)
            if self._meta(client, pk, now) is None:
                return None
            item = client.get_item(
                TableName=self.table_name, Key=table_key(pk, pointer_sk(name, item_id)), ConsistentRead=True
            ).get("Item")
        return None if item is None or expired(item, now) else item
