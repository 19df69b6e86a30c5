"""The budget ledger on both backends (SQLite in a temp file, DynamoDB through moto in-process): reservations that
fail past a limit, settlement to real usage, releases, leases, period rollover with an injected clock, overrides,
caller isolation, and many concurrent reservations never taking more than the limit."""

from __future__ import annotations

import asyncio
import calendar
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from chatloop.deadline import Deadline
from chatloop.store.budget import UNLIMITED, BudgetRefused, Charge, Ledger, Limits, Periods, lease_of
from chatloop.store.budget_dynamodb import DynamoDBLedger
from chatloop.store.budget_sqlite import SQLiteLedger
from chatloop.store.dynamodb_layout import create_table
from tests.support.aws import FAKE_CREDENTIALS, one_request_at_a_time
from tests.support.repo import ROOT
from tests.support.store import TABLE

NOON = calendar.timegm((2026, 11, 27, 12, 0, 30))


class Clock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def soon() -> Deadline:
    return Deadline.after(10)


@pytest.fixture(params=["sqlite", "dynamodb"])
def ledger(request, tmp_path: Path, monkeypatch) -> Iterator[tuple[Ledger, Clock]]:
    clock = Clock()
    if request.param == "sqlite":
        yield SQLiteLedger(tmp_path / "conversations.sqlite3", clock), clock
        return
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    one_request_at_a_time(monkeypatch)
    with mock_aws():
        create_table(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
        yield DynamoDBLedger(TABLE, clock), clock


async def test_a_reservation_past_the_daily_limit_is_refused_and_settling_frees_the_difference(ledger):
    book, _ = ledger
    limits = Limits(tokens_per_day=1000)
    held = await book.reserve("alice", Charge(tokens=600), limits, soon())
    with pytest.raises(BudgetRefused) as refused:
        await book.reserve("alice", Charge(tokens=600), limits, soon())
    assert refused.value.limit == "tokens_per_day" and refused.value.code == "insufficient_quota"
    assert refused.value.retry_after == pytest.approx(12 * 3600 - 30)  # to midnight UTC
    usage = await book.settle(
        "alice", held, Charge(tokens=150), soon()
    )  # the call used less than its estimate
    assert usage.get("tokens_day") == 150 and usage.get("used_day") == 150
    await book.reserve("alice", Charge(tokens=600), limits, soon())  # now it fits


async def test_a_release_gives_the_whole_estimate_back_and_records_no_use(ledger):
    book, _ = ledger
    limits = Limits(tokens_per_day=1000)
    held = await book.reserve("alice", Charge(tokens=900), limits, soon())
    usage = await book.settle("alice", held, Charge(), soon())
    assert usage.get("tokens_day") == 0 and usage.get("used_day") == 0
    assert (await book.usage("alice", soon())).get("used_day") == 0


async def test_a_settlement_over_the_estimate_is_recorded_whole(ledger):
    """The tokens were spent: settling never refuses, so a limit is passed by at most a call's overshoot."""
    book, _ = ledger
    limits = Limits(tokens_per_day=1000)
    held = await book.reserve("alice", Charge(tokens=900), limits, soon())
    usage = await book.settle("alice", held, Charge(tokens=1100), soon())
    assert usage.get("used_day") == 1100
    with pytest.raises(BudgetRefused):
        await book.reserve("alice", Charge(tokens=1), limits, soon())


async def test_requests_per_minute_and_tokens_per_minute_roll_over_with_the_minute(ledger):
    book, clock = ledger
    limits = Limits(requests_per_minute=2, tokens_per_minute=100)
    await book.reserve("alice", Charge(tokens=10, requests=1), limits, soon())
    await book.reserve("alice", Charge(tokens=10, requests=1), limits, soon())
    with pytest.raises(BudgetRefused) as refused:
        await book.reserve("alice", Charge(tokens=10, requests=1), limits, soon())
    assert refused.value.limit == "requests_per_minute" and refused.value.code == "rate_limit_exceeded"
    assert refused.value.retry_after == pytest.approx(30)
    with pytest.raises(BudgetRefused) as refused:
        await book.reserve("alice", Charge(tokens=81), limits, soon())
    assert refused.value.limit == "tokens_per_minute"
    clock.now += 30  # the next minute
    await book.reserve("alice", Charge(tokens=90, requests=1), limits, soon())


async def test_the_day_and_the_month_roll_over_at_midnight_utc(ledger):
    book, clock = ledger
    clock.now = calendar.timegm((2026, 11, 30, 23, 59, 0))
    limits = Limits(tokens_per_day=100, tokens_per_month=150)
    held = await book.reserve("alice", Charge(tokens=100), limits, soon())
    with pytest.raises(BudgetRefused):
        await book.reserve("alice", Charge(tokens=1), limits, soon())
    clock.now += 120  # 1 December: a new day and a new month
    await book.settle("alice", held, Charge(tokens=100), soon())  # settles to the day it was reserved in
    usage = await book.usage("alice", soon())
    assert usage.get("used_day") == 0 and usage.get("used_month") == 0
    await book.reserve("alice", Charge(tokens=100), limits, soon())
    clock.now = calendar.timegm((2026, 12, 2, 0, 0, 1))
    with pytest.raises(BudgetRefused) as refused:  # the day is new, the month is not: 100 + 60 > 150
        await book.reserve("alice", Charge(tokens=60), limits, soon())
    assert refused.value.limit == "tokens_per_month"
    assert refused.value.retry_after == pytest.approx(Periods.at(clock.now).seconds_to("month"))


async def test_callers_are_isolated(ledger):
    book, _ = ledger
    limits = Limits(tokens_per_day=100)
    await book.reserve("alice", Charge(tokens=100), limits, soon())
    with pytest.raises(BudgetRefused):
        await book.reserve("alice", Charge(tokens=1), limits, soon())
    await book.reserve("bob", Charge(tokens=100), limits, soon())
    assert (await book.usage("bob", soon())).get("tokens_day") == 100


async def test_concurrent_turn_leases_hold_a_slot_until_the_turn_ends_or_the_lease_expires(ledger):
    book, clock = ledger
    limits = Limits(concurrent_turns=1)
    await book.reserve("alice", Charge(requests=1, lease=f"t1@{int(clock.now) + 60}"), limits, soon())
    with pytest.raises(BudgetRefused) as refused:
        await book.reserve("alice", Charge(requests=1, lease=f"t2@{int(clock.now) + 60}"), limits, soon())
    assert refused.value.limit == "concurrent_turns"
    await book.end_turn("alice", f"t1@{int(clock.now) + 60}", soon())
    await book.reserve("alice", Charge(requests=1, lease=f"t2@{int(clock.now) + 60}"), limits, soon())
    clock.now += 61  # t2's container died: its lease runs out
    await book.reserve("alice", Charge(requests=1, lease=f"t3@{int(clock.now) + 60}"), limits, soon())
    assert (await book.usage("alice", soon())).running() == 1


async def test_a_renewed_lease_replaces_its_turns_earlier_one_and_outlives_it(ledger):
    """A queued turn's worker renews the slot its queueing took (issue 41): the renewed lease holds past the first
    one's expiry, the turn holds one slot, not two, and ending the renewed lease frees it."""
    book, clock = ledger
    limits = Limits(concurrent_turns=2)
    queued = lease_of("t1", clock.now, 100)
    await book.reserve("alice", Charge(requests=1, lease=queued), limits, soon())
    await book.reserve("alice", Charge(requests=1, lease=lease_of("other", clock.now, 1000)), limits, soon())
    clock.now += 50
    renewed = lease_of("t1", clock.now, 1000)
    await book.renew_turn("alice", renewed, soon())
    held = (await book.usage("alice", soon())).leases
    assert renewed in held and queued not in held and len(held) == 2
    clock.now += 200  # past the queued lease's expiry: the renewed one still holds the slot
    with pytest.raises(BudgetRefused):
        await book.reserve("alice", Charge(requests=1, lease=lease_of("t2", clock.now, 10)), limits, soon())
    await book.end_turn("alice", renewed, soon())
    await book.reserve("alice", Charge(requests=1, lease=lease_of("t2", clock.now, 10)), limits, soon())


async def test_overrides_are_per_caller_and_can_lift_a_default(ledger):
    book, _ = ledger
    defaults = Limits(tokens_per_day=100, requests_per_minute=5)
    await book.set_limits("vip", Limits(tokens_per_day=UNLIMITED, requests_per_minute=50), soon())
    await book.set_limits("leaked", Limits(tokens_per_day=0), soon())
    vip = (await book.limits("vip", soon())).over(defaults)
    assert vip == Limits(tokens_per_day=None, requests_per_minute=50)
    assert (await book.limits("alice", soon())).over(defaults) == defaults
    await book.reserve("vip", Charge(tokens=10_000), vip, soon())
    leaked = (await book.limits("leaked", soon())).over(defaults)
    with pytest.raises(BudgetRefused):
        await book.reserve("leaked", Charge(tokens=1), leaked, soon())


async def test_cost_per_day_is_held_in_micro_dollars(ledger):
    book, _ = ledger
    limits = Limits(cost_per_day_micros=1000)
    await book.reserve("alice", Charge(tokens=1, cost_micros=700), limits, soon())
    with pytest.raises(BudgetRefused) as refused:
        await book.reserve("alice", Charge(tokens=1, cost_micros=400), limits, soon())
    assert refused.value.limit == "cost_per_day_micros"


async def test_fifty_concurrent_reservations_take_no_more_than_the_limit(ledger):
    book, _ = ledger
    limits = Limits(tokens_per_day=1000)

    async def one() -> bool:
        try:
            await book.reserve("alice", Charge(tokens=100), limits, soon())
            return True
        except BudgetRefused:
            return False

    granted = await asyncio.gather(*(one() for _ in range(50)))
    assert sum(granted) == 10
    assert (await book.usage("alice", soon())).get("tokens_day") == 1000


def test_the_budget_script_has_an_option_for_every_limit():
    import importlib.util
    from dataclasses import fields

    path = ROOT / "scripts" / "budget.py"
    spec = importlib.util.spec_from_file_location("budget_script", path)
    assert spec is not None and spec.loader is not None
    import sys

    sys.path.insert(0, str(path.parent))
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    assert set(module.OPTIONS.values()) == {f.name for f in fields(Limits)}


# --- the ledger against a model of it, on random sequences ----------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 400), st.integers(0, 400), st.booleans()), min_size=1, max_size=25
    )
)
def test_committed_tokens_are_always_what_the_calls_reserved_and_used(tmp_path_factory, steps):
    """Reserve ``estimate``, then settle to ``used`` (at most the estimate) or leave it outstanding: whatever the
    order, the day's committed tokens equal the settled usage plus the outstanding estimates, and never pass the
    limit."""
    limit = 1000
    book = SQLiteLedger(tmp_path_factory.mktemp("fuzz") / "b.sqlite3", Clock())

    async def run() -> None:
        outstanding: list[tuple[object, int]] = []
        used_total = 0
        for estimate, used, settle_now in steps:
            try:
                held = await book.reserve(
                    "alice", Charge(tokens=estimate), Limits(tokens_per_day=limit), soon()
                )
            except BudgetRefused:
                committed = (await book.usage("alice", soon())).get("tokens_day")
                assert committed + estimate > limit  # refused only when it would not fit
                continue
            if settle_now:
                actual = min(used, estimate)
                await book.settle("alice", held, Charge(tokens=actual), soon())
                used_total += actual
            else:
                outstanding.append((held, estimate))
            counters = await book.usage("alice", soon())
            assert counters.get("tokens_day") == used_total + sum(e for _, e in outstanding) <= limit
            assert counters.get("used_day") == used_total

    asyncio.run(run())
