"""Engine overhead per iteration, and how it grows with the conversation's length."""

from __future__ import annotations

import asyncio
import time

from bench.common import InstantModel, NoopTool, median
from chatloop.api.runtime import engine_limits
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.engine import EventType, TurnRequest, run_turn
from chatloop.tools.base import ToolRegistry


async def _turn(model, registry, messages, settings) -> dict:
    done = {}
    async for event in run_turn(
        TurnRequest(messages=messages), model, registry, Deadline.after(60), settings
    ):
        if event.type is EventType.DONE:
            done = event.data
    return done


def measure(reps: int) -> dict:
    registry = ToolRegistry([NoopTool()])
    settings = engine_limits(Settings(max_iterations=12, tool_caps={}, system_prompt_guidance=False))
    question = [{"role": "user", "content": "go"}]
    per_iteration = []
    for _ in range(reps):
        start = time.perf_counter()
        done = asyncio.run(_turn(InstantModel(9), registry, question, settings))
        per_iteration.append((time.perf_counter() - start) / done["iterations"] * 1e6)
    growth = {}
    for size in (10, 100, 1000):
        history = []
        for i in range(size // 2):
            history += [
                {"role": "user", "content": f"question {i} " * 5},
                {"role": "assistant", "content": f"answer {i} " * 10},
            ]
        messages = history + question
        times = []
        for _ in range(max(3, reps // 2)):
            start = time.perf_counter()
            asyncio.run(_turn(InstantModel(1), registry, messages, settings))
            times.append((time.perf_counter() - start) * 1e6 / 2)
        growth[size] = median(times)
    return {"per_iteration_us": median(per_iteration), "growth_us": growth}
