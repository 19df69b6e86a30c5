"""``BudgetedModel`` around a real ``FallbackChain`` of misbehaving models: what each call reserves and what it
settles to, exactly, when the answer streams, when a model breaks mid-answer and the chain falls back, when a model
fails before writing anything, when the consumer stops reading, and when the budget refuses the call (no model is
called)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from chatloop.deadline import Deadline
from chatloop.providers.base import ModelRequest, ModelResponse, StreamItem, TextDelta, Usage
from chatloop.providers.budgeted import BudgetedModel, BudgetExhausted, BudgetUnavailable, Meter
from chatloop.providers.catalog import Catalog
from chatloop.providers.chain import FallbackChain
from chatloop.providers.errors import RateLimited, Transient
from chatloop.providers.tokens import text_tokens
from chatloop.store.budget import Charge, Counters, Held, Periods

CHEAP, DEAR = "openai:gpt-4o-mini", "openai:gpt-4.1"


class Model:
    """Streams ``pieces``, then answers with ``usage`` or raises ``error`` (a model cut or failing mid-answer)."""

    def __init__(
        self, name: str, pieces: list[str], usage: Usage | None = None, error: Exception | None = None
    ):
        self.name, self.pieces, self.usage, self.error = name, pieces, usage, error
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.calls += 1
        for piece in self.pieces:
            yield TextDelta(piece)
        if self.error is not None:
            raise self.error
        yield ModelResponse(self.name, content="".join(self.pieces), usage=self.usage)


class Account:
    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.reserved: list[Charge] = []
        self.settled: list[tuple[Charge, Charge]] = []

    async def reserve(self, charge: Charge) -> Held | None:
        if self.refuse:
            raise BudgetExhausted("spent", limit="tokens_per_day", code="insufficient_quota")
        self.reserved.append(charge)
        return Held(charge, Periods.at(0), Counters())

    async def settle(self, held: Held | None, actual: Charge) -> None:
        assert held is not None
        self.settled.append((held.charge, actual))


def request() -> ModelRequest:
    return ModelRequest(
        messages=[{"role": "user", "content": "hello there"}], deadline=Deadline.after(10), max_tokens=100
    )


async def run(model: BudgetedModel) -> list[StreamItem]:
    return [item async for item in model.stream(request())]


@pytest.fixture
def meter() -> Meter:
    return Meter(Catalog.load())


async def test_a_streamed_answer_reserves_its_estimate_and_settles_its_reported_usage(meter):
    account = Account()
    chain = FallbackChain([Model(CHEAP, ["Hi ", "there"], Usage(12, 3, 15))])
    await run(BudgetedModel(chain, account, meter))
    estimate = meter.estimate(request(), CHEAP)
    assert (
        account.reserved == [estimate]
        and estimate.tokens == meter.estimator.prompt_tokens(request().messages, None, CHEAP) + 100
    )
    assert account.settled == [(estimate, Charge(15, math.ceil(12 * 0.15 + 3 * 0.60)))]


async def test_a_model_cut_mid_answer_is_charged_its_prompt_and_text_and_the_fallback_its_usage(meter):
    account = Account()
    cut = Model(DEAR, ["The answer is forty", " and then"], error=Transient("stream cut", model=DEAR))
    chain = FallbackChain([cut, Model(CHEAP, ["Forty-two."], Usage(12, 3, 15))])
    items = await run(BudgetedModel(chain, account, meter))
    assert isinstance(items[-1], ModelResponse) and items[-1].model == CHEAP
    prompt = meter.estimator.prompt_tokens(request().messages, None, DEAR)
    written = math.ceil(text_tokens("The answer is forty") + text_tokens(" and then"))
    broken = meter.used(DEAR, prompt, written)
    ((_, actual),) = account.settled
    assert actual == Charge(broken.tokens + 15, broken.cost_micros + meter.cost(CHEAP, 12, 3))


async def test_a_model_that_failed_before_writing_costs_nothing(meter):
    account = Account()
    chain = FallbackChain(
        [Model(DEAR, [], error=RateLimited("slow down", model=DEAR)), Model(CHEAP, ["Ok."], Usage(12, 3, 15))]
    )
    await run(BudgetedModel(chain, account, meter))
    assert account.settled[0][1] == Charge(15, meter.cost(CHEAP, 12, 3))


async def test_a_reader_that_stops_mid_answer_still_settles_what_was_streamed(meter):
    account = Account()
    model = BudgetedModel(
        FallbackChain([Model(CHEAP, ["one ", "two ", "three"], Usage(12, 3, 15))]), account, meter
    )
    stream = model.stream(request())
    async for item in stream:
        if isinstance(item, TextDelta):
            break  # the client went away after the first piece
    await stream.aclose()
    ((_, actual),) = account.settled
    prompt = meter.estimator.prompt_tokens(request().messages, None, CHEAP)
    assert actual.tokens == prompt + math.ceil(text_tokens("one "))


async def test_a_refused_reservation_calls_no_model(meter):
    inner = Model(CHEAP, ["never"], Usage(1, 1, 2))
    with pytest.raises(BudgetExhausted):
        await run(BudgetedModel(FallbackChain([inner]), Account(refuse=True), meter))
    assert inner.calls == 0


async def test_the_prepaid_reservation_serves_the_first_call_only(meter):
    account = Account()
    prepaid = Held(Charge(tokens=500), Periods.at(0), Counters())
    model = BudgetedModel(
        FallbackChain([Model(CHEAP, ["a"], Usage(1, 1, 2))]), account, meter, prepaid=prepaid
    )
    await run(model)
    await run(model)
    assert len(account.reserved) == 1  # the second call reserved; the first used the admission's
    assert [held for held, _ in account.settled] == [Charge(tokens=500), account.reserved[0]]


def test_prices_and_caps_come_from_the_catalog_and_an_unknown_model_gets_the_highest(meter):
    assert meter.price("openai:gpt-4.1-mini").input == 0.40
    assert meter.output_cap("groq:openai/gpt-oss-120b") == 65536
    assert meter.price("local:some-model") == meter.highest
    assert meter.estimate_of([{"role": "user", "content": "x"}], None, None, "local:some-model").tokens > 4096


class StoreDown(Account):
    """The store failing with BUDGET_STORE_FAILURE=closed (the turn was admitted before it went down)."""

    async def reserve(self, charge: Charge) -> Held | None:
        raise BudgetUnavailable("the budget store is unavailable; the turn ends here")


@pytest.mark.parametrize("account", [Account(refuse=True), StoreDown()], ids=["refused", "store_down_closed"])
async def test_the_engine_ends_a_turn_the_budget_stops_with_stop_reason_budget(meter, account):
    from chatloop.engine import StopReason, TurnRequest, run_turn
    from chatloop.engine.events import Done, TurnError
    from chatloop.tools.base import ToolRegistry
    from tests.support.models import ScriptedModel, call, tool_results
    from tests.support.tools import FakeSearch

    def searcher(request: ModelRequest, n: int) -> ModelResponse:
        if not tool_results(request):
            return ModelResponse("", "Searching.", [call("search_web", {"query": "x"}, "c1")], "tool_calls")
        return ModelResponse("", content="Found.")

    inner = ScriptedModel(searcher, name=CHEAP)
    prepaid = Held(Charge(tokens=500), Periods.at(0), Counters())
    model = BudgetedModel(FallbackChain([inner]), account, meter, prepaid=prepaid)
    turn = TurnRequest(messages=[{"role": "user", "content": "search"}], tool_names=["search_web"])
    events = [e async for e in run_turn(turn, model, ToolRegistry([FakeSearch()]), Deadline.after(10))]
    done = events[-1]
    assert isinstance(done, Done) and done.summary.stop_reason is StopReason.BUDGET
    assert done.summary.message.content.startswith("Searching.")
    assert any(isinstance(e, TurnError) and e.code.startswith("budget") for e in events)
    assert inner.calls == 1  # the first call ran on the admission's reservation; the second was never made
