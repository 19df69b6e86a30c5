"""The table's operations over many items at once, for ``dynamodb.DynamoDBBackend``: a record's items read page by
page (strongly consistent), and items written or deleted in transactions of at most 100.

Usage::

    for item in query_records(client, "chatloop-conversations", pk, None, None, True, now):
        ...
    put_all(client, "chatloop-conversations", items, only_new=True)   # never over an existing item
"""

from __future__ import annotations

from collections.abc import Iterator

from chatloop.store.dynamodb_layout import (
    TRANSACTION_ITEMS,
    Attr,
    DynamoDBClient,
    expired,
    transaction_batches,
)


def query_records(
    client: DynamoDBClient,
    table_name: str,
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
        "TableName": table_name,
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
            if now is None or not expired(record, now):
                yield record
        if "LastEvaluatedKey" not in answer:
            return
        request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def put_all(client: DynamoDBClient, table_name: str, records: list[Attr], only_new: bool) -> None:
    """Write ``records`` in transactions (100 items, ~3.5 MB each); ``only_new``: never over an existing one."""
    condition = {"ConditionExpression": "attribute_not_exists(sk)"} if only_new else {}
    for batch in transaction_batches(records):
        client.transact_write_items(
            TransactItems=[{"Put": {"TableName": table_name, "Item": r, **condition}} for r in batch]
        )


def delete_all(client: DynamoDBClient, table_name: str, records: Iterator[Attr]) -> None:
    """Delete ``records`` (keys), 100 at a time: transactions, so the table needs no permission beyond
    DeleteItem."""
    keys = [{"pk": record["pk"], "sk": record["sk"]} for record in records]
    for start in range(0, len(keys), TRANSACTION_ITEMS):
        client.transact_write_items(
            TransactItems=[
                {"Delete": {"TableName": table_name, "Key": key}}
                for key in keys[start : start + TRANSACTION_ITEMS]
            ]
        )
