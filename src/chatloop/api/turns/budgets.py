"""Per-caller budgets on every turn endpoint: admitting a turn (``admit``), the rate-limit headers
(``rate_limit_headers``), and ``GET /v1/usage``.

``admit`` runs once a turn's request is checked, before any model call: with no BUDGET_* limit set it returns the
chain as it is (no store call). Otherwise, in one conditional write, it counts the request, takes a concurrent-turn
slot and reserves the first model call's estimate; a refusal is OpenAI's 429 (``rate_limit_exceeded`` for a
per-minute or concurrency limit, ``insufficient_quota`` for a day's or month's tokens or dollars) with
``retry-after`` and the ``x-ratelimit-*`` headers, a log line and a ``BudgetRefusals`` metric, and no model call.
The turn then runs with a ``BudgetedModel`` that reserves and settles every later call; the response carries the
``x-ratelimit-*`` headers, and when it has been sent the turn's slot and any unused reservation are given back
(``api/ratelimit.RateLimitHeaders``).

The store failing: BUDGET_STORE_FAILURE ``closed`` answers 503 ``budget_unavailable`` (no model call), ``open``
answers unmetered with a warning and a ``BudgetStoreFailures`` metric.

Counters (an endpoint)::

    metered = await budgeted(ctx, turn, model, registry)    # serve.budgeted -> admit: 429 / 503 now
    events = turn_events(ctx, turn, model, registry, metered=metered)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit, single_metric
from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.http.wire import JSONBody
from chatloop.engine import TurnRequest
from chatloop.observability import NAMESPACE, SERVICE, logger
from chatloop.providers.base import ChatModel
from chatloop.providers.budgeted import Book, BudgetedModel, BudgetExhausted, BudgetUnavailable
from chatloop.providers.chain import FallbackChain
from chatloop.store.budget import BudgetRefused, Charge, Counters, Held, Limits, ended_lease, lease_of
from chatloop.store.model import StoreUnavailable
from chatloop.tools.base import ToolRegistry

if TYPE_CHECKING:
    from chatloop.api.runtime import Runtime

NO_CALLER = "none"


def book_of(runtime: Runtime) -> Book | None:
    """The runtime's ``Book``, None when no BUDGET_* limit is set (no budget is kept: no store call)."""
    return runtime.budgets()


def caller_for_budget(ctx: RequestContext) -> str | None:
    """The identity a budget is kept under: the caller, else BUDGET_ANONYMOUS_CALLER's shared budget (or none)."""
    if ctx.caller is not None:
        return ctx.caller
    anonymous = ctx.settings.budget_anonymous_caller
    return None if anonymous.lower() == NO_CALLER else f"anonymous:{anonymous}"


class CallerAccount:
    """One caller's budget for one turn: the ``Account`` a ``BudgetedModel`` reserves from and settles to."""

    def __init__(self, ctx: RequestContext, book: Book, caller: str, limits: Limits):
        self.ctx, self.book, self.caller, self.limits = ctx, book, caller, limits

    async def reserve(self, charge: Charge) -> Held | None:
        try:
            return await self.book.ledger.reserve(self.caller, charge, self.limits, self.ctx.store_deadline())
        except BudgetRefused as refused:
            refusal_logged(self.ctx, refused, mid_turn=True)
            raise BudgetExhausted(
                f"this caller's {describe(refused.limit)} is used up; the turn ends here",
                limit=refused.limit,
                code=refused.code,
                retry_after=refused.retry_after,
            ) from None
        except StoreUnavailable as exc:
            if store_failed(self.ctx, self.book, exc):
                raise BudgetUnavailable("the budget store is unavailable; the turn ends here") from None
            return None

    async def settle(self, held: Held | None, actual: Charge) -> None:
        if held is None:
            return
        try:
            await self.book.ledger.settle(self.caller, held, actual, self.ctx.write_deadline())
        except StoreUnavailable as exc:  # the tokens were spent: the turn goes on, the miss is counted
            logger.warning(
                "Budget settle failed", extra={"budget": {"error": str(exc), "tokens": actual.tokens}}
            )
            count(self.ctx, "BudgetStoreFailures")


@dataclass
class TurnBudget:
    """An admitted turn: its headers, and what its end gives back (its slot, an unused first reservation)."""

    account: CallerAccount
    model: BudgetedModel
    headers: dict[str, str]
    lease: str | None

    async def finish(self) -> None:
        """Once: at the end of the turn's events, or of its response when the events never ran (whichever first)."""
        await self.give_back_unused()
        lease, self.lease = self.lease, None
        if lease is None:
            return
        try:
            await self.account.book.ledger.end_turn(
                self.account.caller, lease, self.account.ctx.write_deadline()
            )
        except StoreUnavailable as exc:  # the lease runs out by itself
            logger.warning("Budget release failed", extra={"budget": {"error": str(exc)}})

    async def give_back_unused(self) -> None:
        """The first call's reservation, when no call used it, given back (the turn's slot stays held)."""
        unused = self.model.take_prepaid()
        if unused is None:
            return
        try:
            await self.account.book.ledger.settle(
                self.account.caller, unused, Charge(), self.account.ctx.write_deadline()
            )
        except StoreUnavailable as exc:  # counted until the period ends: logged, as a settle's miss
            logger.warning("Budget release failed", extra={"budget": {"error": str(exc)}})


async def admit(
    ctx: RequestContext,
    turn: TurnRequest,
    model: FallbackChain,
    registry: ToolRegistry,
    *,
    longest: float | None = None,
) -> ChatModel:
    """``model`` metered by the caller's budget, its first call reserved now (see the module docstring): the
    client's messages, the tools the turn offers and the answer's reserve (the engine's guidance note and any
    excess of the real usage are settled after the call). A request is counted (a request, a concurrent turn) once:
    a background job's turn was when it was queued (``admit_queued``: ``ctx.prior.counted``); a turn that starts
    with a summary takes over the summary's admission (``compaction.past``: its slot). ``longest``: the longest the turn may run, which
    its concurrent-turn lease lasts (and ``LEASE_MARGIN_SECONDS``); the request's deadline by default."""
    earlier = ctx.turn_budget
    taken = earlier if isinstance(earlier, TurnBudget) else None
    counted = not ctx.prior.counted and taken is None
    book = book_of(ctx.runtime)
    caller = caller_for_budget(ctx) if book is not None else None
    if book is None or caller is None:
        return model
    deadline = ctx.store_deadline()
    try:
        limits = (await book.ledger.limits(caller, deadline)).over(book.defaults)
        if not limits.any():
            return model
        offered = registry.names() if turn.tool_names is None else turn.tool_names
        tools = registry.schemas(offered) + list(turn.client_tools)
        meter = book.meter_for(model)
        first = meter.estimate_of(list(turn.messages), tools or None, turn.max_tokens, model.name)
        lasts = ctx.deadline.remaining() if longest is None else longest
        lease = (
            lease_of(ctx.request_id, book.ledger.clock(), lasts)
            if limits.concurrent_turns is not None and counted
            else None
        )
        held = await book.ledger.reserve(
            caller, replace(first, requests=int(counted), lease=lease), limits, deadline
        )
    except BudgetRefused as refused:
        refusal_logged(ctx, refused, mid_turn=False)
        headers = {"retry-after": str(max(1, math.ceil(refused.retry_after)))}
        headers.update(rate_limit_headers(refused.limits, refused.usage))
        raise RequestError(429, refused.code, refusal_message(refused), headers=headers) from None
    except StoreUnavailable as exc:
        if store_failed(ctx, book, exc):
            raise RequestError(
                503, "budget_unavailable", "the budget store is unavailable; try again"
            ) from None
        return model
    if taken is not None:
        lease, taken.lease = taken.lease, None
    account = CallerAccount(ctx, book, caller, limits)
    budgeted = BudgetedModel(model, account, meter, prepaid=held)
    ctx.turn_budget = TurnBudget(account, budgeted, rate_limit_headers(limits, held.usage), lease)
    return budgeted


# --- background turns: admitted at the door, their slot held by the worker -----------------------------------
async def admit_queued(
    ctx: RequestContext, turn: TurnRequest, model: FallbackChain, registry: ToolRegistry
) -> TurnBudget | None:
    """A background turn admitted before anything is queued, as a plain turn is: the request counted, a concurrent
    turn's slot taken for BACKGROUND_TIMEOUT_SECONDS, the first call's estimate checked (reserved, and given back at
    once: the worker reserves its own calls). A refusal is the plain turn's 429, with nothing queued, invoked or
    kept. The admission returned gives its slot back (``finish``) when the turn is not queued after all; once queued,
    the worker holds it (``renew_queued``) and gives it back as the turn ends (``end_queued``). None: unmetered."""
    await admit(ctx, turn, model, registry, longest=ctx.settings.background_timeout_seconds)
    # Its slot outlives this response: not given back with it (``RateLimitHeaders``).
    admitted, ctx.turn_budget = ctx.turn_budget, None
    if not isinstance(admitted, TurnBudget):
        return None
    await admitted.give_back_unused()
    logger.info(f"Budget decision: admitted background turn lease={admitted.lease is not None}")
    return admitted


async def renew_queued(ctx: RequestContext) -> str | None:
    """The worker's side of a queued turn's slot: renewed from now for as long as the worker may run it (the time it
    waited in the queue is not taken from the turn). None when no concurrent-turn limit applies, or the store failed
    (logged: the slot taken when it was queued holds until it expires)."""
    book = book_of(ctx.runtime)
    caller = caller_for_budget(ctx) if book is not None else None
    if book is None or caller is None:
        return None
    try:
        limits = (await book.ledger.limits(caller, ctx.store_deadline())).over(book.defaults)
        if limits.concurrent_turns is None:
            return None
        lease = lease_of(ctx.request_id, book.ledger.clock(), ctx.deadline.remaining())
        await book.ledger.renew_turn(caller, lease, ctx.store_deadline())
    except StoreUnavailable as exc:
        logger.warning("Budget lease renewal failed", extra={"budget": {"error": str(exc)}})
        return None
    return lease


async def release_queued(ctx: RequestContext, turn_id: str) -> None:
    """A queued turn that will not run (cancelled while queued, or gone before its worker started): the slot its
    queueing took given back now, not when it expires. Its lease is replaced by one that has already ended, then
    ended (the queued lease's exact expiry is not known here)."""
    book = book_of(ctx.runtime)
    caller = caller_for_budget(ctx) if book is not None else None
    if book is None or caller is None:
        return
    lease = ended_lease(turn_id, book.ledger.clock())
    try:
        await book.ledger.renew_turn(caller, lease, ctx.write_deadline())
        await book.ledger.end_turn(caller, lease, ctx.write_deadline())
    except StoreUnavailable as exc:  # the lease runs out by itself
        logger.warning("Budget release failed", extra={"budget": {"error": str(exc)}})


async def end_queued(ctx: RequestContext, lease: str | None) -> None:
    """The queued turn has ended (however it ended): its slot given back."""
    book = book_of(ctx.runtime)
    caller = caller_for_budget(ctx) if book is not None else None
    if lease is None or book is None or caller is None:
        return
    try:
        await book.ledger.end_turn(caller, lease, ctx.write_deadline())
    except StoreUnavailable as exc:  # the lease runs out by itself
        logger.warning("Budget release failed", extra={"budget": {"error": str(exc)}})


# --- refusals and failures -------------------------------------------------------------------------------
def describe(limit: str) -> str:
    return {
        "tokens_per_day": "tokens per day",
        "tokens_per_month": "tokens per month",
        "cost_per_day_micros": "spend per day",
        "requests_per_minute": "requests per minute",
        "tokens_per_minute": "tokens per minute",
        "concurrent_turns": "concurrent turns",
    }.get(limit, limit.replace("_", " "))


def refusal_message(refused: BudgetRefused) -> str:
    seconds = max(1, math.ceil(refused.retry_after))
    if refused.code == "insufficient_quota":
        return f"You exceeded your {describe(refused.limit)} budget; it renews in {seconds} s."
    return f"Rate limit reached for {describe(refused.limit)}; try again in {seconds} s."


def refusal_logged(ctx: RequestContext, refused: BudgetRefused, *, mid_turn: bool) -> None:
    logger.info(
        f"Budget decision: refused limit={refused.limit} code={refused.code} mid_turn={str(mid_turn).lower()} "
        f"retry_after={refused.retry_after:.0f}",
        extra={"budget": {"limit": refused.limit, "code": refused.code, "mid_turn": mid_turn}},
    )
    count(ctx, "BudgetRefusals")


def store_failed(ctx: RequestContext, book: Book, error: StoreUnavailable) -> bool:
    """Log and count a budget store failure; True when the turn must not go on (BUDGET_STORE_FAILURE closed)."""
    closed = book.fails_closed()
    logger.warning(
        f"Budget store failed: {'refusing (closed)' if closed else 'answering unmetered (open)'}",
        extra={"budget": {"error": str(error), "closed": closed}},
    )
    count(ctx, "BudgetStoreFailures")
    return closed


def count(ctx: RequestContext, name: str) -> None:
    """One EMF record now (a refusal ends the request before any turn metrics are flushed). Outside Lambda nothing
    would collect it."""
    if not ctx.in_lambda:
        return
    with single_metric(
        name=name,
        unit=MetricUnit.Count,
        value=1,
        namespace=NAMESPACE,
        default_dimensions={"service": SERVICE},
    ):
        pass


# --- headers ---------------------------------------------------------------------------------------------
def rate_limit_headers(limits: Limits, usage: Counters) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers for the limits that apply: requests per minute, and the token limit with
    the least left (per minute, day or month)."""
    headers: dict[str, str] = {}
    p = usage.periods
    if limits.requests_per_minute is not None:
        left = max(0, limits.requests_per_minute - usage.get("requests_min"))
        headers.update(_triple("requests", limits.requests_per_minute, left, p.seconds_to("minute")))
    windows = [
        (limit, limit - usage.get(role), period)
        for limit, role, period in (
            (limits.tokens_per_minute, "tokens_min", "minute"),
            (limits.tokens_per_day, "tokens_day", "day"),
            (limits.tokens_per_month, "tokens_month", "month"),
        )
        if limit is not None
    ]
    if windows:
        limit, left, period = min(windows, key=lambda w: w[1])
        headers.update(_triple("tokens", limit, max(0, left), p.seconds_to(period)))
    return headers


def _triple(kind: str, limit: int, remaining: int, reset: float) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{kind}": str(limit),
        f"x-ratelimit-remaining-{kind}": str(remaining),
        f"x-ratelimit-reset-{kind}": duration(reset),
    }


def duration(seconds: float) -> str:
    """OpenAI's reset format: ``1s``, ``6m0s``, ``2h3m4s``."""
    whole = max(1, math.ceil(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


# --- GET /v1/usage ---------------------------------------------------------------------------------------
async def usage(request: Request) -> Response:
    """The caller's own usage and limits (no other caller's: the record is found by the caller's own identity)."""
    ctx = RequestContext.of(request)
    book = book_of(ctx.runtime)
    caller = caller_for_budget(ctx)
    body: dict[str, object] = {"object": "usage", "metered": False, "limits": None, "usage": None}
    if book is None or caller is None:
        return JSONBody(body)
    deadline = ctx.store_deadline()
    try:
        limits = (await book.ledger.limits(caller, deadline)).over(book.defaults)
        used = await book.ledger.usage(caller, deadline)
    except StoreUnavailable:
        raise RequestError(503, "budget_unavailable", "the budget store is unavailable; try again") from None
    p = used.periods
    body.update(
        caller=caller,  # the caller's own identity, as `make budget CALLER=...` takes it
        metered=limits.any(),
        limits={
            "tokens_per_day": limits.tokens_per_day,
            "tokens_per_month": limits.tokens_per_month,
            "cost_per_day_usd": None
            if limits.cost_per_day_micros is None
            else limits.cost_per_day_micros / 1e6,
            "requests_per_minute": limits.requests_per_minute,
            "tokens_per_minute": limits.tokens_per_minute,
            "concurrent_turns": limits.concurrent_turns,
        },
        usage={
            "day": p.day,
            "month": p.month,
            "tokens_today": used.get("used_day"),
            "tokens_this_month": used.get("used_month"),
            "tokens_reserved_today": max(0, used.get("tokens_day") - used.get("used_day")),
            "cost_today_usd": used.get("cost_used_day") / 1e6,
            "requests_this_minute": used.get("requests_min"),
            "tokens_this_minute": used.get("tokens_min"),
            "running_turns": used.running(),
        },
    )
    return JSONBody(body, headers=rate_limit_headers(limits, used))
