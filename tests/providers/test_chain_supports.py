"""``FallbackChain.supports``: the one capability question asked of the chain (the API's checks ask it before a
turn, to refuse what no model takes with a 400; ``stream`` skips models by the same rule during the turn)."""

from __future__ import annotations

import asyncio

from chatloop.deadline import Deadline
from chatloop.providers.base import ChatModel, ModelRequest, ModelResponse
from chatloop.providers.catalog import Catalog
from chatloop.providers.chain import FallbackChain
from tests.support.models import ScriptedModel

LLAMA = "groq:llama-3.3-70b-versatile"  # the catalog lists stop and seed, and json_object
OSS = "groq:openai/gpt-oss-120b"  # ... stop, seed and reasoning_effort, and json_object and json_schema
NEW = "openai:gpt-brand-new"  # not in the catalog: it says nothing, so it is tried
SCHEMA = {"type": "json_schema", "json_schema": {"name": "person", "schema": {"type": "object"}}}


def answers(name: str) -> ChatModel:
    def script(request: ModelRequest, number: int) -> ModelResponse:
        return ModelResponse(name, "ok")

    model: ChatModel = ScriptedModel(script, name=name)
    return model


def chain() -> FallbackChain:
    return FallbackChain([answers(name) for name in (LLAMA, OSS, NEW)], catalog=Catalog.load())


def test_a_model_whose_entry_says_no_is_passed_over_and_one_that_says_nothing_is_tried():
    assert chain().supports(params=["reasoning_effort"]) == ([OSS, NEW], [LLAMA])
    assert chain().supports(response_format=SCHEMA) == ([OSS, NEW], [LLAMA])
    assert chain().supports(params=["seed"], response_format={"type": "json_object"}) == (
        [LLAMA, OSS, NEW],
        [],
    )
    assert chain().supports() == ([LLAMA, OSS, NEW], [])
    assert chain().supports(params=["stop", "logit_bias"]) == ([NEW], [LLAMA, OSS])


def test_the_turn_goes_to_the_models_the_answer_names_and_skips_the_others():
    for asked in ({"params": {"reasoning_effort": "low"}}, {"response_format": SCHEMA}):
        models = chain()
        able, passed_over = models.supports(
            params=list(asked.get("params", {})), response_format=asked.get("response_format")
        )
        request = ModelRequest(
            messages=[{"role": "user", "content": "hi"}], deadline=Deadline.after(10), **asked
        )

        async def run(models: FallbackChain = models, request: ModelRequest = request) -> list[object]:
            return [item async for item in models.stream(request)]

        items = asyncio.run(run())
        answered = next(i for i in items if isinstance(i, ModelResponse))
        assert answered.model == able[0] and passed_over == [LLAMA], (asked, items)
        assert [m.calls for m in models.models] == [
            0,
            1,
            0,
        ]  # the first model the answer passed over: not asked
