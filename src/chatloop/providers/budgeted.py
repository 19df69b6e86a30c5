"""``BudgetedModel``: a ChatModel around the turn's chain that reserves an estimate from the caller's budget before
every model call and settles it to what the call really used after it, whatever happened (answered, streamed, cut,
failed, fallen back, cancelled at the deadline or by the client).

The estimate of a call (``Meter.estimate``) is the chain's context estimate of its prompt plus ``max_tokens`` or, when
the request sets none, the first model's output cap from the catalog (``max_output_tokens``); its cost at that
model's catalog price (``price_per_million_tokens``; a model without one is charged the highest price the catalog
knows, so a call is never unmetered because its cost is unknown). What a call used: the usage its model reported;
for an attempt that streamed and then broke (a cut stream, a model that failed mid-answer before a fallback), its
prompt estimate and the text it streamed; an attempt that failed before writing anything costs nothing.

A reservation the budget refuses raises ``BudgetExhausted`` (a ``ModelError`` the engine ends the turn with:
``stop_reason: budget``, the answer so far and the fallback text), and no model is called.

Usage::

    model = BudgetedModel(chain, account, Meter(catalog, chain.health.estimator), prepaid=held)
    async for item in model.stream(request): ...
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from chatloop.jsontypes import JSONObject
from chatloop.providers.base import (
    ChatModel,
    ModelFallback,
    ModelRequest,
    ModelResponse,
    StreamItem,
    TextDelta,
)
from chatloop.providers.catalog import Catalog
from chatloop.providers.errors import ModelError
from chatloop.providers.tokens import TokenEstimator, text_tokens
from chatloop.store.budget import Charge, Held

DEFAULT_OUTPUT_CAP = 4096
"""Reserved for the answer of a model whose catalog entry names no output cap, when the request sets no max_tokens."""


class BudgetExhausted(ModelError):
    """The caller's budget refused the next model call (no model was called)."""

    kind = "budget"
    fallback = False

    def __init__(self, message: str, *, limit: str, code: str, retry_after: float | None = None):
        super().__init__(message, retry_after=retry_after)
        self.limit, self.code = limit, code


class BudgetUnavailable(ModelError):
    """The budget store failed and BUDGET_STORE_FAILURE is ``closed``: no model call without a reservation."""

    kind = "budget_unavailable"
    fallback = False


class Account(Protocol):
    """One caller's budget for one turn (``api.turns.budgets.CallerAccount``)."""

    async def reserve(self, charge: Charge) -> Held | None:
        """Hold ``charge``; None when it is not metered (the store failed open). ``BudgetExhausted`` when refused."""
        ...

    async def settle(self, held: Held | None, actual: Charge) -> None:
        """Replace the reservation by what was used; never raises (the tokens were spent)."""
        ...


@dataclass(frozen=True)
class Price:
    """USD per million tokens, which is micro-USD per token."""

    input: float
    output: float


class Meter:
    """Estimates and prices model calls from the catalog."""

    def __init__(self, catalog: Catalog, estimator: TokenEstimator | None = None):
        self.catalog = catalog
        self.estimator = estimator or TokenEstimator()
        known = [p for name in catalog.models if (p := self._listed(name)) is not None]
        self.highest = Price(
            max((p.input for p in known), default=0.0), max((p.output for p in known), default=0.0)
        )

    def price(self, model: str) -> Price:
        return self._listed(model) or self.highest

    def output_cap(self, model: str) -> int:
        cap = self._entry(model).get("max_output_tokens")
        return int(cap) if isinstance(cap, int) and cap > 0 else DEFAULT_OUTPUT_CAP

    def estimate(self, request: ModelRequest, model: str) -> Charge:
        """The reservation for a call of ``request`` that ``model`` answers first."""
        return self.estimate_of(request.messages, request.tools, request.max_tokens, model)

    def estimate_of(
        self, messages: list[JSONObject], tools: list[JSONObject] | None, max_tokens: int | None, model: str
    ) -> Charge:
        prompt = self.estimator.prompt_tokens(messages, tools, model)
        answer = max_tokens or self.output_cap(model)
        return Charge(tokens=prompt + answer, cost_micros=self.cost(model, prompt, answer))

    def used(self, model: str, prompt: int, completion: int) -> Charge:
        return Charge(tokens=prompt + completion, cost_micros=self.cost(model, prompt, completion))

    def cost(self, model: str, prompt: int, completion: int) -> int:
        price = self.price(model)
        return math.ceil(prompt * price.input + completion * price.output)

    def _entry(self, model: str) -> JSONObject:
        entry = self.catalog.models.get(model)
        return entry if isinstance(entry, dict) else {}

    def _listed(self, model: str) -> Price | None:
        listed = self._entry(model).get("price_per_million_tokens")
        if not isinstance(listed, dict):
            return None
        given, taken = listed.get("input"), listed.get("output")
        if not isinstance(given, int | float) or not isinstance(taken, int | float):
            return None
        return Price(float(given), float(taken))


class _Spent:
    """What a call has used so far, from what its stream shows."""

    def __init__(self, meter: Meter, request: ModelRequest, model: str):
        self.meter, self.request = meter, request
        self.model = model
        self.streamed = 0.0
        """Estimated tokens of the text the current attempt streamed."""
        self.total = Charge()

    def see(self, item: StreamItem) -> None:
        if isinstance(item, TextDelta):
            self.streamed += text_tokens(item.text)
        elif isinstance(item, ModelFallback):
            if (
                item.discard_partial
            ):  # the attempt wrote text, then failed: its prompt and that text were spent
                self._add_broken(item.from_model)
            self.streamed = 0.0
            self.model = item.to_model or self.model
        elif isinstance(item, ModelResponse):
            usage = item.usage
            if usage is not None and usage.total_tokens > 0:
                prompt, completion = usage.prompt_tokens, usage.completion_tokens
                completion = completion or max(0, usage.total_tokens - prompt)
            else:  # a provider that reports no usage: the estimate of what was sent and written
                prompt = self._prompt(item.model)
                written = item.content + "".join(c.name + c.arguments for c in item.tool_calls)
                completion = math.ceil(text_tokens(written))
            self._add(self.meter.used(item.model, prompt, completion))
            self.streamed = 0.0

    def broke(self) -> None:
        """The stream ended without its response (cut, failed, cancelled): what the attempt streamed was spent."""
        if self.streamed > 0:
            self._add_broken(self.model)
        self.streamed = 0.0

    def _add_broken(self, model: str) -> None:
        self._add(self.meter.used(model, self._prompt(model), math.ceil(self.streamed)))

    def _prompt(self, model: str) -> int:
        return self.meter.estimator.prompt_tokens(self.request.messages, self.request.tools, model)

    def _add(self, charge: Charge) -> None:
        self.total = Charge(self.total.tokens + charge.tokens, self.total.cost_micros + charge.cost_micros)


class BudgetedModel:
    """``inner`` metered by ``account`` (see the module docstring). ``prepaid``: the first call's reservation,
    made when the turn was admitted (so a refused turn is a 429 before its response starts)."""

    def __init__(self, inner: ChatModel, account: Account, meter: Meter, prepaid: Held | None = None):
        self.inner, self.account, self.meter = inner, account, meter
        self.prepaid = prepaid

    @property
    def name(self) -> str:
        return self.inner.name

    def take_prepaid(self) -> Held | None:
        """The admission's reservation, when no call has used it (the turn's end releases it)."""
        held, self.prepaid = self.prepaid, None
        return held

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        held = self.take_prepaid()
        if held is None:
            held = await self.account.reserve(self.meter.estimate(request, self.inner.name))
        spent = _Spent(self.meter, request, self.inner.name)
        try:
            async for item in self.inner.stream(request):
                spent.see(item)
                yield item
        finally:
            spent.broke()
            # Shielded: a turn cancelled at its deadline, or closed when its client left, still settles.
            await asyncio.shield(self.account.settle(held, spent.total))
