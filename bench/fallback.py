"""Fallback chain overhead: a 429 then the next model, against the same two HTTP calls made directly."""

from __future__ import annotations

import asyncio
import os
import time

from bench.common import median
from chatloop.deadline import Deadline
from chatloop.providers.base import ModelRequest
from chatloop.providers.failures import ModelError


def measure(reps: int) -> dict:
    from tests.support.fake_llm import FakeLLM, error, text

    from chatloop.providers.catalog import Catalog
    from chatloop.providers.chain import FallbackChain
    from chatloop.providers.factory import build_model

    keys = {"groq": "gsk_bench_key_0000000000"}
    with FakeLLM() as llm:
        os.environ["GROQ_BASE_URL"] = llm.groq_base_url
        catalog = Catalog.load()
        primary, second = (
            build_model(f"groq:{m}", keys, catalog)
            for m in ("llama-3.3-70b-versatile", "llama-3.1-8b-instant")
        )
        rate_limited = error(
            429, "rate_limit_exceeded", "Rate limit reached. Please try again in 30s.", {"retry-after": "30"}
        )

        async def stream(model):
            try:
                async for _ in model.stream(
                    ModelRequest([{"role": "user", "content": "hi"}], Deadline.after(10))
                ):
                    pass
            except ModelError:
                pass  # the 429 is the point of the measurement

        async def measure() -> tuple[list[float], list[float]]:
            chained, direct = [], []
            for _ in range(reps + 3):  # the first rounds warm the HTTP clients
                llm.script("llama-3.3-70b-versatile", rate_limited)
                llm.script("llama-3.1-8b-instant", text("llama-3.1-8b-instant", "hello"))
                start = time.perf_counter()
                await stream(primary)
                await stream(second)
                direct.append(time.perf_counter() - start)
                llm.script("llama-3.3-70b-versatile", rate_limited)
                llm.script("llama-3.1-8b-instant", text("llama-3.1-8b-instant", "hello"))
                assert primary is not None and second is not None  # both have a key
                chain = FallbackChain([primary, second], catalog=catalog).for_turn()
                start = time.perf_counter()
                await stream(chain)
                chained.append(time.perf_counter() - start)
            return chained[3:], direct[3:]

        chained, direct = asyncio.run(measure())
        os.environ.pop("GROQ_BASE_URL", None)
    return {
        "chain_ms": median(chained) * 1000,
        "direct_ms": median(direct) * 1000,
        "overhead_ms": (median(chained) - median(direct)) * 1000,
    }
