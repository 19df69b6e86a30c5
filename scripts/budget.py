"""Set or show one caller's budget overrides (``make budget CALLER=... TOKENS_PER_DAY=...``).

The caller is the identity string the app keys budgets by (``apikey:<API key id>``, ``jwt:<issuer> <subject>``,
``local-key:<hash>`` ..., as ``GET /v1/usage`` shows it to the caller). Each limit takes a number (0 blocks the
caller), ``unlimited`` (lifts the BUDGET_* default for this caller) or ``default`` (removes the override). With no
limit given, the caller's overrides are printed.

Where: the deployed stack's conversation table (``--stack``, looked up through CloudFormation), a table by name
(``--table``), or ``--local``: the SQLite file ``make run`` uses (CONVERSATION_STORE_PATH or its default).

Usage::

    python scripts/budget.py --stack chatloop --caller apikey:k1x2 --tokens-per-day 200000 --concurrent-turns 2
    python scripts/budget.py --local --caller local --tokens-per-day unlimited
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from awsutil import client, run  # scripts/awsutil.py (a script runs with its folder on sys.path)
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.store.budget import UNLIMITED, Ledger, Limits
from chatloop.store.budget_dynamodb import DynamoDBLedger
from chatloop.store.budget_sqlite import SQLiteLedger

OPTIONS = {
    "tokens_per_day": "tokens_per_day",
    "tokens_per_month": "tokens_per_month",
    "cost_per_day_usd": "cost_per_day_micros",
    "requests_per_minute": "requests_per_minute",
    "tokens_per_minute": "tokens_per_minute",
    "concurrent_turns": "concurrent_turns",
}
"""Command-line option -> ``Limits`` field."""


def parse_value(option: str, raw: str) -> int | None:
    """An option's value as an override: a number, ``unlimited`` (-1), or ``default`` (None: no override)."""
    text = raw.strip().lower()
    if text == "default":
        return None
    if text == "unlimited":
        return UNLIMITED
    number = float(text)
    if number < 0:
        raise ValueError(f"--{option.replace('_', '-')} must be 0 or more, unlimited or default")
    return round(number * 1_000_000) if option == "cost_per_day_usd" else int(number)


def ledger_for(args: argparse.Namespace) -> Ledger:
    if args.local:
        return SQLiteLedger(Settings.from_env().store_path())
    table = args.table
    if not table:
        found = client("cloudformation").describe_stack_resource(
            StackName=args.stack, LogicalResourceId="ConversationTable"
        )
        table = found["StackResourceDetail"]["PhysicalResourceId"]
    return DynamoDBLedger(table)


def shown(limits: Limits) -> dict[str, object]:
    out: dict[str, object] = {}
    for option, name in OPTIONS.items():
        value = getattr(limits, name)
        if value is None:
            continue
        if value < 0:
            out[option] = "unlimited"
        else:
            out[option] = value / 1_000_000 if option == "cost_per_day_usd" else value
    return out


async def apply(args: argparse.Namespace) -> int:
    ledger = ledger_for(args)
    current = await ledger.limits(args.caller, Deadline.after(10))
    given = {option: getattr(args, option) for option in OPTIONS if getattr(args, option) is not None}
    if given:
        changes = {OPTIONS[option]: parse_value(option, raw) for option, raw in given.items()}
        current = replace(current, **changes)
        await ledger.set_limits(args.caller, current, Deadline.after(10))
    print(json.dumps({"caller": args.caller, "overrides": shown(current)}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--caller", required=True, help="the caller identity, as GET /v1/usage shows it")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--stack", default="chatloop", help="the deployed stack whose conversation table to use"
    )
    where.add_argument("--table", help="a DynamoDB table by name")
    where.add_argument("--local", action="store_true", help="the SQLite file make run uses")
    for option in OPTIONS:
        parser.add_argument(
            f"--{option.replace('_', '-')}", dest=option, help="a number, unlimited or default"
        )
    args = parser.parse_args()
    try:
        return asyncio.run(apply(args))
    except ValueError as exc:
        print(f"budget.py: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    run(main, __file__)
