"""The budget ledger in the conversation store's DynamoDB table (``CONVERSATION_TABLE_NAME``): per caller, the item
``pk = <owner hash>#budget, sk = #usage`` holds the counters (numbers named by period, see ``store/budget.py``) and
the running turns' leases (a string set), with the table's TTL on ``expires_at``; ``sk = #limits`` holds the
caller's overrides (no TTL).

A reservation is one ``UpdateItem``: ``ADD`` the estimate to every counter, under a ``ConditionExpression`` that each
limited counter is missing or at most its limit less the estimate (DynamoDB compares, it cannot add, in a condition),
and that the leases are fewer than the concurrent-turn limit. It succeeds whole or not at all, in every container at
once. A failed condition returns the item as it was (``ReturnValuesOnConditionCheckFailure``), which names the limit;
leases past their expiry (a container that died mid-turn) are deleted and the reservation tried once more.

Usage::

    ledger = DynamoDBLedger("chatloop-conversations")
    held = await ledger.reserve(caller, Charge(tokens=500, requests=1), limits, deadline)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import cast

from chatloop.store.budget import (
    KEPT_SECONDS,
    LIMITED,
    BudgetRefused,
    Charge,
    Clock,
    Counters,
    Held,
    Ledger,
    Limits,
    Periods,
    added,
    budget_key,
    counter_names,
    live_leases,
    refusal,
    settled,
    stale,
    turn_of_lease,
)
from chatloop.store.dynamodb_client import CONDITION_FAILED, ClientPool, error_code, store_errors
from chatloop.store.dynamodb_layout import DynamoDBClient

Item = dict[str, dict[str, object]]
ATTEMPTS = 3
"""A condition that failed although the item read back fits (another writer in between) is tried again, this often."""


class DynamoDBLedger(Ledger):
    def __init__(self, table_name: str, clock: Clock = time.time):
        self.table_name = table_name
        self.clock = clock
        self._clients = ClientPool()

    # --- in a worker thread ----------------------------------------------------------------------------
    def _limits(self, caller: str, timeout: float) -> Limits:
        with store_errors():
            found = cast(
                Item, self._client(timeout).get_item(TableName=self.table_name, Key=_key(caller, "#limits"))
            )
        item = cast(Item, found.get("Item") or {})
        values = cast(Mapping[str, Mapping[str, str]], (item.get("limits") or {}).get("M") or {})
        return Limits.from_overrides({k: int(v["N"]) for k, v in values.items() if "N" in v})

    def _set_limits(self, caller: str, overrides: Limits, timeout: float) -> None:
        values = {k: {"N": str(v)} for k, v in overrides.as_overrides().items()}
        with store_errors():
            self._client(timeout).put_item(
                TableName=self.table_name, Item={**_key(caller, "#limits"), "limits": {"M": values}}
            )

    def _reserve(self, caller: str, charge: Charge, limits: Limits, timeout: float) -> Held:
        client = self._client(timeout)
        for _ in range(ATTEMPTS):
            now = self.clock()
            p = Periods.at(now)
            too_large = refusal(Counters(periods=p), charge, limits)  # more than a whole limit: no store call
            if too_large is not None and too_large.limit != "concurrent_turns":
                raise too_large
            request = _reservation(self.table_name, caller, charge, limits, p)
            with store_errors():
                try:
                    answer = cast(Item, client.update_item(**request))
                except Exception as exc:
                    if error_code(exc) != CONDITION_FAILED:
                        raise
                    old = _usage_of(cast(Item, getattr(exc, "response", {}).get("Item") or {}), p)
                    refused = refusal(old, charge, limits)
                    expired = old.leases - live_leases(old.leases, now)
                    if expired and (refused is None or refused.limit == "concurrent_turns"):
                        self._forget(client, caller, expired)  # the condition counts leases that ran out
                        continue
                    if refused is not None:
                        raise refused from None
                    continue  # it fitted by the time it was read back: another writer settled meanwhile
            return Held(charge, p, _usage_of(cast(Item, answer.get("Attributes") or {}), p))
        raise BudgetRefused(
            "contention", "rate_limit_exceeded", 1.0, Counters(periods=Periods.at(self.clock())), limits
        )

    def _settle(self, caller: str, held: Held, actual: Charge, timeout: float) -> Counters:
        now = self.clock()
        p = Periods.at(now)
        changes = {name: amount for name, amount in settled(held, actual).items() if amount}
        keep = set(counter_names(p).values()) | set(changes)
        gone = stale(held.usage.counters, keep)
        names = {f"#c{i}": name for i, name in enumerate(changes)}
        values: dict[str, dict[str, object]] = {
            f":a{i}": {"N": str(amount)} for i, amount in enumerate(changes.values())
        }
        values[":exp"] = {"N": str(int(now) + KEPT_SECONDS)}
        expression = "SET expires_at = :exp"
        if changes:
            expression += " ADD " + ", ".join(f"#c{i} :a{i}" for i in range(len(changes)))
        if gone:
            names.update({f"#r{i}": name for i, name in enumerate(gone)})
            expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(gone)))
        with store_errors():
            answer = cast(
                Item,
                self._client(timeout).update_item(
                    TableName=self.table_name,
                    Key=_key(caller, "#usage"),
                    UpdateExpression=expression,
                    ExpressionAttributeValues=values,
                    ReturnValues="ALL_NEW",
                    **({"ExpressionAttributeNames": names} if names else {}),
                ),
            )
        return _usage_of(cast(Item, answer.get("Attributes") or {}), p)

    def _end_turn(self, caller: str, lease: str, timeout: float) -> None:
        with store_errors():
            self._forget(self._client(timeout), caller, {lease})

    def _renew_turn(self, caller: str, lease: str, timeout: float) -> None:
        # ADD and DELETE of one set cannot share an UpdateExpression: the new lease first, then the old ones go,
        # so the slot is never free in between.
        turn = turn_of_lease(lease)
        with store_errors():
            client = self._client(timeout)
            client.update_item(
                TableName=self.table_name,
                Key=_key(caller, "#usage"),
                UpdateExpression="SET expires_at = if_not_exists(expires_at, :exp) ADD leases :lease",
                ExpressionAttributeValues={
                    ":lease": {"SS": [lease]},
                    ":exp": {"N": str(int(self.clock()) + KEPT_SECONDS)},
                },
            )
            held = self._usage(caller, timeout).leases
            earlier = {old for old in held if turn_of_lease(old) == turn and old != lease}
            if earlier:
                self._forget(client, caller, earlier)

    def _usage(self, caller: str, timeout: float) -> Counters:
        with store_errors():
            found = cast(
                Item, self._client(timeout).get_item(TableName=self.table_name, Key=_key(caller, "#usage"))
            )
        now = self.clock()
        item = cast(Item, found.get("Item") or {})
        if item and float(cast(str, item.get("expires_at", {}).get("N", "0"))) <= now:
            item = {}  # TTL deletes only eventually
        return _usage_of(item, Periods.at(now))

    def _forget(self, client: DynamoDBClient, caller: str, leases: Iterable[str]) -> None:
        from botocore.exceptions import ClientError

        try:
            client.update_item(
                TableName=self.table_name,
                Key=_key(caller, "#usage"),
                UpdateExpression="DELETE leases :gone",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":gone": {"SS": sorted(leases)}},
            )
        except ClientError as exc:
            if error_code(exc) != CONDITION_FAILED:
                raise

    def _client(self, timeout: float) -> DynamoDBClient:
        return self._clients.get(timeout)


def _key(caller: str, sk: str) -> Item:
    return {"pk": {"S": f"{budget_key(caller)}#budget"}, "sk": {"S": sk}}


def _reservation(table: str, caller: str, charge: Charge, limits: Limits, p: Periods) -> dict[str, object]:
    """The one conditional ``UpdateItem`` of a reservation (see the module docstring)."""
    names: dict[str, str] = {}
    values: dict[str, dict[str, object]] = {":exp": {"N": str(int(p.now) + KEPT_SECONDS)}}
    adds: list[str] = []
    for i, (name, amount) in enumerate(added(charge, p).items()):
        if amount:
            names[f"#c{i}"], values[f":a{i}"] = name, {"N": str(amount)}
            adds.append(f"#c{i} :a{i}")
    conditions: list[str] = []
    roles = counter_names(p)
    for j, (limit_name, role, amount_field, _, _) in enumerate(LIMITED):
        limit, amount = getattr(limits, limit_name), getattr(charge, amount_field)
        if limit is None or amount <= 0:
            continue
        names[f"#l{j}"], values[f":m{j}"] = roles[role], {"N": str(limit - amount)}
        conditions.append(f"(attribute_not_exists(#l{j}) OR #l{j} <= :m{j})")
    if charge.lease:
        adds.append("leases :lease")
        values[":lease"] = {"SS": [charge.lease]}
        if limits.concurrent_turns is not None:
            values[":turns"] = {"N": str(limits.concurrent_turns)}
            conditions.append("(attribute_not_exists(leases) OR size(leases) < :turns)")
    expression = "SET expires_at = :exp" + (" ADD " + ", ".join(adds) if adds else "")
    request: dict[str, object] = {
        "TableName": table,
        "Key": _key(caller, "#usage"),
        "UpdateExpression": expression,
        "ExpressionAttributeValues": values,
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if names:
        request["ExpressionAttributeNames"] = names
    if conditions:
        request["ConditionExpression"] = " AND ".join(conditions)
    return request


def _usage_of(item: Item, p: Periods) -> Counters:
    counters = {
        name: int(cast(str, value["N"])) for name, value in item.items() if "#" in name and "N" in value
    }
    leases = item.get("leases", {}).get("SS")
    return Counters(counters, frozenset(cast(list[str], leases) if isinstance(leases, list) else ()), p)
