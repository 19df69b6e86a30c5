"""Time to first token on each route: what the server adds between the model's first token and the client's first
content delta, on ``/chat``, ``/v1/chat/completions`` and ``/v1/responses`` (all streamed).

A scripted upstream (tests/support/fake_llm.py, Groq's wire shape, behind the real groq SDK) answers after
``FIRST_TOKEN_S`` and writes ``PIECES`` pieces ``PIECE_DELAY_S`` apart. The model's first token is measured as a
client next to the model sees it: the same request streamed straight from the upstream. Each repetition asks the
upstream directly and then every route, in turn, so all see the same machine state; the added time is the route's
median minus the direct median. Target: ≤ 50 ms added, and /chat and /v1 alike (issue #23).

Runnable alone: ``python -m bench.ttft [REPS]`` prints the result as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

import httpx

from bench.common import median

MODEL = "llama-3.3-70b-versatile"
FIRST_TOKEN_S = 0.2
PIECES = 20
PIECE_DELAY_S = 0.02
ANSWER = "Twenty pieces of an answer that the model writes one after the other, as real models do when they stream."
TARGET_MS = 50.0
ROUTES = ("chat", "chat_completions", "responses")


def first_delta(
    url: str, body: dict, is_delta: Callable[[str, str | None], bool], headers: dict | None = None
) -> float:
    """Milliseconds from sending ``body`` until the first SSE line ``is_delta`` accepts (given the line and the
    last ``event:`` name). The stream is then read to its end, as a client would."""
    start = time.perf_counter()
    at = None
    kind = None
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif at is None and line.startswith("data: ") and is_delta(line, kind):
                at = (time.perf_counter() - start) * 1000
    if at is None:
        raise RuntimeError(f"no content delta from {url}")
    return at


def _chat_completion_delta(line: str, kind: str | None) -> bool:
    if line == "data: [DONE]":
        return False
    choices = json.loads(line.removeprefix("data: ")).get("choices") or []
    return bool(choices and choices[0].get("delta", {}).get("content"))


def _responses_delta(line: str, kind: str | None) -> bool:
    return kind == "response.output_text.delta" or '"type":"response.output_text.delta"' in line.replace(
        " ", ""
    )


def _chat_delta(line: str, kind: str | None) -> bool:
    return kind == "delta"


def measure(reps: int) -> dict:
    from tests.support.fake_llm import FakeLLM, Reply, text
    from tests.support.server import Server

    from chatloop.api import create_app
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.tools.base import ToolRegistry

    def slow_answer(body: dict) -> Reply:
        chunks = text(body.get("model", MODEL), ANSWER, pieces=PIECES, groq=True).chunks
        return Reply(chunks=chunks, delay=FIRST_TOKEN_S, chunk_delay=PIECE_DELAY_S)

    question = [{"role": "user", "content": "hi"}]
    timings: dict[str, list[float]] = {"direct": [], **{route: [] for route in ROUTES}}
    with FakeLLM() as llm:
        llm.default = slow_answer
        os.environ["GROQ_BASE_URL"] = llm.groq_base_url
        try:
            settings = Settings(model_chain=f"groq:{MODEL}")
            runtime = Runtime(
                settings, registry=ToolRegistry(), keys_loader=lambda s: {"groq": "gsk_bench_ttft_0000000000"}
            )
            with Server(create_app(settings, runtime=runtime)) as server:
                requests = {
                    "direct": (
                        f"{llm.groq_base_url}/openai/v1/chat/completions",
                        {"model": MODEL, "messages": question, "stream": True},
                        _chat_completion_delta,
                    ),
                    "chat": (f"{server.root}/chat", {"messages": question, "stream": True}, _chat_delta),
                    "chat_completions": (
                        f"{server.base_url}/chat/completions",
                        {"model": "chatloop", "messages": question, "stream": True},
                        _chat_completion_delta,
                    ),
                    "responses": (
                        f"{server.base_url}/responses",
                        {"model": "chatloop", "input": "hi", "stream": True},
                        _responses_delta,
                    ),
                }
                # Warm up first: the SDK import, the first connection.
                for url, body, is_delta in requests.values():
                    first_delta(url, body, is_delta)
                for _ in range(reps):
                    for name, (url, body, is_delta) in requests.items():
                        timings[name].append(first_delta(url, body, is_delta))
        finally:
            os.environ.pop("GROQ_BASE_URL", None)
    direct = median(timings["direct"])
    routes = {
        route: {"first_delta_ms": median(timings[route]), "added_ms": median(timings[route]) - direct}
        for route in ROUTES
    }
    added = [r["added_ms"] for r in routes.values()]
    return {
        "reps": reps,
        "model_first_token_ms": direct,
        "model_writes_ms": PIECES * PIECE_DELAY_S * 1000,
        "routes": routes,
        "target_ms": TARGET_MS,
        "met": max(added) <= TARGET_MS,
        "spread_ms": max(added) - min(added),
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 15), indent=2))
