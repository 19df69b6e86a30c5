"""Spend limits by caller: what a budget is (``Limits``), what one model call or turn takes of it (``Charge``), the
counters a caller's usage is kept in (``Counters``), and the ``Ledger`` its two backends implement
(``budget_sqlite.SQLiteLedger``, ``budget_dynamodb.DynamoDBLedger``), in the conversation store's own SQLite file or
DynamoDB table.

One record per caller (keyed by the store's hash of the caller, never the identity itself) holds counters named by
their UTC period, so a new period starts at zero with no reset job; counters of past periods are dropped by the
next write that knows them::

    tokens_day#2026-11-27    tokens committed today: settled usage plus the estimates of calls still running
    used_day#2026-11-27      tokens settled today (what /v1/usage reports)
    tokens_month#2026-11     ... and this month
    cost_day#2026-11-27      micro-USD committed today (catalog prices), cost_used_day#... settled
    requests_min#2026-11-27T08:45, tokens_min#2026-11-27T08:45    this minute's turns and tokens
    leases                   running turns, as "<turn id>@<expiry epoch>" (the concurrent-turns limit)

A reservation adds its estimate to every committed counter **only if** each stays within its limit after the add:
one conditional write (a DynamoDB ``ConditionExpression``; a SQLite ``BEGIN IMMEDIATE`` transaction), never a read
and then a write, so no burst of concurrent requests in any number of containers overruns a limit. Settling adds
the difference between the real usage and the estimate (unconditionally: the tokens were spent), so a limit is
overrun by at most what calls running at once used beyond their estimates. A release is a settle to nothing.

Usage::

    ledger = open_ledger(settings)                       # chatloop.store: only when a BUDGET_* limit is set
    limits = (await ledger.limits(caller, deadline)).over(Limits.of(settings))
    held = await ledger.reserve(caller, Charge(tokens=900, requests=1), limits, deadline)   # or BudgetRefused
    await ledger.settle(caller, held, Charge(tokens=412), deadline)
"""

from __future__ import annotations

import calendar
import functools
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, TypeVar

import anyio
from anyio import to_thread

from chatloop.deadline import Deadline
from chatloop.store.model import StoreUnavailable
from chatloop.store.service import owner_key

if TYPE_CHECKING:
    from chatloop.config import Settings

Clock = Callable[[], float]
T = TypeVar("T")
KEPT_SECONDS = 40 * 24 * 3600
"""How long a caller's usage record outlives its last write (TTL): past the longest period, a month."""
LEASE_MARGIN_SECONDS = 60
"""What a turn's lease adds to the longest the turn may run (``lease_of``): a background turn's wait in Lambda's
queue before its worker starts (the worker renews the lease then: ``Ledger.renew_turn``), and clocks that differ
between containers. The lease ends with the turn; a container that died mid-turn frees its slot when it expires."""
UNLIMITED = -1
"""An override that lifts a limit the defaults set (``make budget CALLER=... TOKENS_PER_DAY=unlimited``)."""


@dataclass(frozen=True)
class Limits:
    """A caller's limits; None: no limit of that kind. 0 blocks."""

    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    cost_per_day_micros: int | None = None
    """BUDGET_COST_PER_DAY_USD in micro-dollars (a price per million tokens in USD is micro-USD per token)."""
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_turns: int | None = None

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        """The operator's defaults (0 in a setting: no limit)."""
        cost = settings.budget_cost_per_day_usd
        return cls(
            tokens_per_day=settings.budget_tokens_per_day or None,
            tokens_per_month=settings.budget_tokens_per_month or None,
            cost_per_day_micros=round(cost * 1_000_000) if cost > 0 else None,
            requests_per_minute=settings.budget_requests_per_minute or None,
            tokens_per_minute=settings.budget_tokens_per_minute or None,
            concurrent_turns=settings.budget_concurrent_turns or None,
        )

    def any(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def over(self, defaults: Limits) -> Limits:
        """These overrides over ``defaults``: a value set here wins; ``UNLIMITED`` lifts the default."""
        values: dict[str, int | None] = {}
        for f in fields(self):
            mine = getattr(self, f.name)
            values[f.name] = getattr(defaults, f.name) if mine is None else None if mine < 0 else mine
        return Limits(**values)

    def as_overrides(self) -> dict[str, int]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_overrides(cls, values: Mapping[str, object]) -> Limits:
        known = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in values.items() if k in known and isinstance(v, int | float)})


@dataclass(frozen=True)
class Charge:
    """What a reservation or a settlement takes: tokens, micro-USD, a turn (one request) and its lease."""

    tokens: int = 0
    cost_micros: int = 0
    requests: int = 0
    lease: str | None = None
    """A turn id to hold a concurrent-turn slot for (admission only)."""


@dataclass(frozen=True)
class Periods:
    """The UTC periods a moment falls in, and how long until each ends."""

    day: str
    month: str
    minute: str
    now: float

    @classmethod
    def at(cls, now: float) -> Periods:
        t = time.gmtime(now)
        return cls(
            time.strftime("%Y-%m-%d", t), time.strftime("%Y-%m", t), time.strftime("%Y-%m-%dT%H:%M", t), now
        )

    def seconds_to(self, period: str) -> float:
        t = time.gmtime(self.now)
        if period == "minute":
            end = (math.floor(self.now / 60) + 1) * 60
        elif period == "day":
            end = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0)) + 86400
        else:
            year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
            end = calendar.timegm((year, month, 1, 0, 0, 0))
        return max(0.0, end - self.now)


def counter_names(p: Periods) -> dict[str, str]:
    """Each counter of the periods ``p`` by its role."""
    return {
        "tokens_day": f"tokens_day#{p.day}",
        "used_day": f"used_day#{p.day}",
        "tokens_month": f"tokens_month#{p.month}",
        "used_month": f"used_month#{p.month}",
        "cost_day": f"cost_day#{p.day}",
        "cost_used_day": f"cost_used_day#{p.day}",
        "requests_min": f"requests_min#{p.minute}",
        "tokens_min": f"tokens_min#{p.minute}",
    }


LIMITED: tuple[tuple[str, str, str, str, str], ...] = (
    # limit field, committed counter, what the charge adds (Charge field), period, OpenAI's code
    ("requests_per_minute", "requests_min", "requests", "minute", "rate_limit_exceeded"),
    ("tokens_per_minute", "tokens_min", "tokens", "minute", "rate_limit_exceeded"),
    ("tokens_per_day", "tokens_day", "tokens", "day", "insufficient_quota"),
    ("tokens_per_month", "tokens_month", "tokens", "month", "insufficient_quota"),
    ("cost_per_day_micros", "cost_day", "cost_micros", "day", "insufficient_quota"),
)
"""Each counted limit: OpenAI answers a per-minute limit with ``rate_limit_exceeded`` and a spent quota with
``insufficient_quota``."""


@dataclass(frozen=True)
class Counters:
    """A caller's counters as last read or written, for headers and /v1/usage."""

    counters: Mapping[str, int] = field(default_factory=dict)
    leases: frozenset[str] = frozenset()
    periods: Periods = field(default_factory=lambda: Periods.at(time.time()))

    def get(self, role: str) -> int:
        return int(self.counters.get(counter_names(self.periods)[role], 0))

    def running(self) -> int:
        return len(live_leases(self.leases, self.periods.now))


@dataclass(frozen=True)
class Held:
    """A reservation: what it took, in which periods (a settlement adjusts those counters, even after they end)."""

    charge: Charge
    periods: Periods
    usage: Counters


class BudgetRefused(Exception):
    """A reservation that would pass a limit. ``limit`` names it (a ``Limits`` field, or ``concurrent_turns``)."""

    def __init__(self, limit: str, code: str, retry_after: float, usage: Counters, limits: Limits):
        self.limit, self.code, self.retry_after, self.usage, self.limits = (
            limit,
            code,
            retry_after,
            usage,
            limits,
        )
        super().__init__(f"budget {limit} reached")


def refusal(usage: Counters, charge: Charge, limits: Limits) -> BudgetRefused | None:
    """Which limit ``charge`` would pass, given ``usage`` (None: it fits). The SQLite ledger decides with it inside
    its transaction; the DynamoDB ledger names with it the limit a failed condition stood for."""
    p = usage.periods
    for limit_name, role, amount_field, period, code in LIMITED:
        limit = getattr(limits, limit_name)
        amount = getattr(charge, amount_field)
        if limit is None or amount <= 0:
            continue
        if usage.get(role) + amount > limit:
            retry = p.seconds_to(period)
            return BudgetRefused(limit_name, code, retry, usage, limits)
    if charge.lease and limits.concurrent_turns is not None and usage.running() >= limits.concurrent_turns:
        return BudgetRefused("concurrent_turns", "rate_limit_exceeded", 1.0, usage, limits)
    return None


def live_leases(leases: frozenset[str], now: float) -> set[str]:
    return {lease for lease in leases if _lease_expiry(lease) > now}


def _lease_expiry(lease: str) -> float:
    try:
        return float(lease.rpartition("@")[2])
    except ValueError:
        return 0.0


def lease_of(turn_id: str, now: float, longest: float) -> str:
    """A concurrent-turn slot for ``turn_id``, held from ``now`` until ``longest`` seconds (the longest the turn may
    run: its deadline, or BACKGROUND_TIMEOUT_SECONDS for a queued one) and ``LEASE_MARGIN_SECONDS`` have passed:
    never shorter than the turn, however long a setting lets it run."""
    return f"{turn_id}@{math.ceil(now + longest + LEASE_MARGIN_SECONDS)}"


def ended_lease(turn_id: str, now: float) -> str:
    """A lease of ``turn_id`` that has run out already: renewed in place of the turn's own, then ended, it gives
    the turn's slot back without knowing when its lease would have run out."""
    return f"{turn_id}@{math.floor(now)}"


def turn_of_lease(lease: str) -> str:
    """The turn a lease holds a slot for (``lease_of``'s ``turn_id``)."""
    return lease.rpartition("@")[0]


def added(charge: Charge, p: Periods) -> dict[str, int]:
    """The counters a reservation of ``charge`` adds to (committed ones only: usage is added when settled)."""
    names = counter_names(p)
    return {
        names["tokens_day"]: charge.tokens,
        names["tokens_month"]: charge.tokens,
        names["tokens_min"]: charge.tokens,
        names["cost_day"]: charge.cost_micros,
        names["requests_min"]: charge.requests,
    }


def settled(held: Held, actual: Charge) -> dict[str, int]:
    """The counters a settlement changes: committed ones by real minus reserved, used ones by the real usage."""
    names = counter_names(held.periods)
    reserved = held.charge
    delta = actual.tokens - reserved.tokens
    return {
        names["tokens_day"]: delta,
        names["tokens_month"]: delta,
        names["tokens_min"]: delta,
        names["cost_day"]: actual.cost_micros - reserved.cost_micros,
        names["used_day"]: actual.tokens,
        names["used_month"]: actual.tokens,
        names["cost_used_day"]: actual.cost_micros,
    }


def stale(counters: Mapping[str, int], keep: set[str]) -> list[str]:
    """The counters of past periods (nothing is decided on them any more), but those about to be written."""
    return [name for name in counters if name not in keep]


class Ledger:
    """A budget store: each operation runs its backend's blocking call (``_reserve`` ...) in a worker thread, within
    ``deadline``. ``StoreUnavailable`` when the store fails or the deadline passes."""

    clock: Clock

    async def limits(self, caller: str, deadline: Deadline) -> Limits:
        """The caller's overrides (an empty ``Limits`` when none)."""
        return await in_thread(deadline, lambda timeout: self._limits(caller, timeout))

    async def set_limits(self, caller: str, overrides: Limits, deadline: Deadline) -> None:
        await in_thread(deadline, lambda timeout: self._set_limits(caller, overrides, timeout))

    async def reserve(self, caller: str, charge: Charge, limits: Limits, deadline: Deadline) -> Held:
        """Take ``charge`` if every limit holds after it, atomically; else ``BudgetRefused``."""
        return await in_thread(deadline, lambda timeout: self._reserve(caller, charge, limits, timeout))

    async def settle(self, caller: str, held: Held, actual: Charge, deadline: Deadline) -> Counters:
        """Replace what ``held`` reserved by ``actual`` (zero: a release)."""
        return await in_thread(deadline, lambda timeout: self._settle(caller, held, actual, timeout))

    async def end_turn(self, caller: str, lease: str, deadline: Deadline) -> None:
        """Free a concurrent-turn slot."""
        await in_thread(deadline, lambda timeout: self._end_turn(caller, lease, timeout))

    async def renew_turn(self, caller: str, lease: str, deadline: Deadline) -> None:
        """Hold ``lease`` in place of its turn's earlier leases: the worker of a queued turn extends the slot its
        queueing took, from when it starts. Taken even when the earlier one has expired (the turn was admitted; it is
        not refused for the time it waited)."""
        await in_thread(deadline, lambda timeout: self._renew_turn(caller, lease, timeout))

    async def usage(self, caller: str, deadline: Deadline) -> Counters:
        return await in_thread(deadline, lambda timeout: self._usage(caller, timeout))

    # --- what a backend implements: one blocking operation each, bounded by ``timeout`` seconds ---------
    def _limits(self, caller: str, timeout: float) -> Limits:
        raise NotImplementedError

    def _set_limits(self, caller: str, overrides: Limits, timeout: float) -> None:
        raise NotImplementedError

    def _reserve(self, caller: str, charge: Charge, limits: Limits, timeout: float) -> Held:
        raise NotImplementedError

    def _settle(self, caller: str, held: Held, actual: Charge, timeout: float) -> Counters:
        raise NotImplementedError

    def _end_turn(self, caller: str, lease: str, timeout: float) -> None:
        raise NotImplementedError

    def _renew_turn(self, caller: str, lease: str, timeout: float) -> None:
        raise NotImplementedError

    def _usage(self, caller: str, timeout: float) -> Counters:
        raise NotImplementedError


def budget_key(caller: str) -> str:
    """What a caller's budget is stored under: the store's owner hash (no identity stored)."""
    return owner_key(caller)


async def in_thread(deadline: Deadline, call: Callable[[float], T]) -> T:
    """``call(timeout)`` in a worker thread, abandoned (and ``StoreUnavailable``) at ``deadline``."""
    remaining = deadline.remaining()
    if remaining <= 0:
        raise StoreUnavailable("no time was left for the budget store")
    try:
        with anyio.fail_after(remaining):
            return await to_thread.run_sync(functools.partial(call, remaining), abandon_on_cancel=True)
    except TimeoutError:
        raise StoreUnavailable(f"the budget store did not answer within {remaining:.1f} s") from None
