"""The Bedrock member's own cost per call (request building, SigV4, the event-stream decoding, the hand-over from its
thread to the event loop) against the Groq member's (the groq SDK over httpx), on the same scripted answer.

Both answer from loopback fakes in this process (tests/support/fake_bedrock.py, fake_llm.py in Groq's shape) with no
delay, so what is timed is the client side: from ``model.stream`` called to its first text delta, and to its final
message. The fake Bedrock does not check signatures here (its own work is not the client's). Each repetition calls
one then the other; medians, after warm-up rounds (the first call's client build, with boto3's import, is reported
apart). Target: the Bedrock member's first delta ≤ 5 ms behind the Groq member's (the chain's overhead budget).

Runnable alone: ``python -m bench.bedrock [REPS]`` prints the result as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from bench.common import median
from chatloop.deadline import Deadline
from chatloop.providers.base import ChatModel, ModelRequest, ModelResponse, TextDelta

NOVA = "amazon.nova-lite-v1:0"
GROQ = "llama-3.3-70b-versatile"
ANSWER = "A scripted answer of some forty words, written in twenty pieces as a model streams it: " * 2
PIECES = 20
TARGET_MS = 5.0
WARM = 3


async def _timed(model: ChatModel) -> tuple[float, float]:
    """Seconds to the first text delta and to the final message."""
    request = ModelRequest([{"role": "user", "content": "hi"}], Deadline.after(10))
    start = time.perf_counter()
    first = None
    async for item in model.stream(request):
        if first is None and isinstance(item, TextDelta):
            first = time.perf_counter()
        if isinstance(item, ModelResponse):
            assert item.content == ANSWER, item.content
    end = time.perf_counter()
    return (first or end) - start, end - start


def measure(reps: int) -> dict[str, Any]:
    from tests.support import fake_bedrock, fake_llm

    from chatloop.providers import bedrock
    from chatloop.providers.catalog import Catalog
    from chatloop.providers.factory import build_model

    names = ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    saved = {n: os.environ.get(n) for n in (*names, "GROQ_BASE_URL", "AWS_SESSION_TOKEN")}
    with fake_bedrock.FakeBedrock(verify=False) as aws, fake_llm.FakeLLM() as llm:
        os.environ.update(aws.environment())
        os.environ.pop("AWS_SESSION_TOKEN", None)
        os.environ["GROQ_BASE_URL"] = llm.groq_base_url
        aws.default = lambda body: fake_bedrock.text(ANSWER, pieces=PIECES)
        llm.default = lambda body: fake_llm.text(GROQ, ANSWER, pieces=PIECES, groq=True)
        bedrock.drop_clients()
        catalog = Catalog.load()
        members = {
            "bedrock": build_model(f"bedrock:{NOVA}", {}, catalog),
            "groq": build_model(f"groq:{GROQ}", {"groq": "gsk_bench_bedrock_000000"}, catalog),
        }

        async def rounds() -> dict[str, list[tuple[float, float]]]:
            timed: dict[str, list[tuple[float, float]]] = {k: [] for k in members}
            for _ in range(reps + WARM):
                for name, model in members.items():
                    assert model is not None
                    timed[name].append(await _timed(model))
            return timed

        try:
            timed = asyncio.run(rounds())
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            bedrock.drop_clients()
    out: dict[str, Any] = {"reps": reps, "pieces": PIECES}
    for name, values in timed.items():
        out[f"{name}_first_call_ms"] = values[0][1] * 1000
        out[f"{name}_first_delta_ms"] = median([v[0] for v in values[WARM:]]) * 1000
        out[f"{name}_call_ms"] = median([v[1] for v in values[WARM:]]) * 1000
    out["first_delta_added_ms"] = out["bedrock_first_delta_ms"] - out["groq_first_delta_ms"]
    out["call_added_ms"] = out["bedrock_call_ms"] - out["groq_call_ms"]
    return out


def section(r: dict[str, Any]) -> list[str]:
    """The report's section (bench/report.py)."""
    met = "met" if r["first_delta_added_ms"] <= TARGET_MS else "MISSED"
    return [
        "## Amazon Bedrock member vs Groq member",
        "",
        f"The same answer in {r['pieces']} pieces from loopback fakes, no model delay; medians of {r['reps']} calls "
        "each (ms), after warm-up:",
        "",
        "| member | to the first delta | whole call | first call of the process |",
        "|---|---|---|---|",
        f"| `bedrock:` (boto3, SigV4, event stream, a thread) | {r['bedrock_first_delta_ms']:.2f} | "
        f"{r['bedrock_call_ms']:.2f} | {r['bedrock_first_call_ms']:.0f} |",
        f"| `groq:` (groq SDK, httpx, SSE) | {r['groq_first_delta_ms']:.2f} | {r['groq_call_ms']:.2f} | "
        f"{r['groq_first_call_ms']:.0f} |",
        "",
        f"Bedrock adds **{r['first_delta_added_ms']:+.2f} ms** to the first delta (target ≤ {TARGET_MS:g} ms: {met}) "
        f"and {r['call_added_ms']:+.2f} ms to the whole call. The first call includes importing the SDK and "
        "building its client.",
        "",
    ]


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 30), indent=2))
