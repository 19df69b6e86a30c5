"""Time to first token on each route: what the server adds between the model's first token and the client's first
content delta, on ``/chat``, ``/v1/chat/completions`` and ``/v1/responses`` (all streamed).

A scripted upstream (tests/support/fake_llm.py, Groq's wire shape, behind the real groq SDK) answers after
``FIRST_TOKEN_S`` and writes ``PIECES`` pieces ``PIECE_DELAY_S`` apart. The upstream runs in this process, so the
moment it writes the model's first token and the moment the client reads its first content delta are read from
one clock: the added time is their difference, per request. As a floor, the same is measured for a client reading
the upstream directly (loopback and SSE parsing alone). Each repetition asks the upstream directly, then every
route in turn, so all see the same machine state; medians. Target: ≤ 50 ms added, and /chat and /v1 alike (#23).

Runnable alone: ``python -m bench.ttft [REPS]`` prints the result as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from bench.common import median

MODEL = "llama-3.3-70b-versatile"
FIRST_TOKEN_S = 0.2
PIECES = 20
PIECE_DELAY_S = 0.02
ANSWER = "Twenty pieces of an answer that the model writes one after the other, as real models do when they stream."
TARGET_MS = 50.0
SAME_MS = 20.0
"""Routes whose added times differ by at most this much count as "the same"."""
ROUTES = ("chat", "chat_completions", "responses")


class TimedChunks(list):
    """A reply's chunks that note when the upstream takes the first content chunk (index 1, after the role chunk)
    to write it: the model's first token, on this process's clock."""

    first_token_at: float | None = None

    def __iter__(self) -> Iterator[Any]:
        for index, chunk in enumerate(list.__iter__(self)):
            if index == 1:
                self.first_token_at = time.perf_counter()
            yield chunk


def first_delta(url: str, body: dict, is_delta: Callable[[str, str | None], bool]) -> tuple[float, float]:
    """Send ``body`` and read the stream to its end, as a client would. Returns when the request was sent and when
    the first SSE line ``is_delta`` accepts (given the line and the last ``event:`` name) arrived."""
    start = time.perf_counter()
    at = None
    kind = None
    with httpx.stream("POST", url, json=body, timeout=30) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif at is None and line.startswith("data: ") and is_delta(line, kind):
                at = time.perf_counter()
    if at is None:
        raise RuntimeError(f"no content delta from {url}")
    return start, at


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

    latest: list[TimedChunks] = []

    def slow_answer(body: dict) -> Reply:
        chunks = TimedChunks(text(body.get("model", MODEL), ANSWER, pieces=PIECES, groq=True).chunks)
        latest[:] = [chunks]  # one request at a time: the one being measured
        return Reply(chunks=chunks, delay=FIRST_TOKEN_S, chunk_delay=PIECE_DELAY_S)

    question = [{"role": "user", "content": "hi"}]
    first: dict[str, list[float]] = {"direct": [], **{route: [] for route in ROUTES}}
    added: dict[str, list[float]] = {"direct": [], **{route: [] for route in ROUTES}}
    with FakeLLM() as llm, tempfile.TemporaryDirectory() as tmp:
        llm.default = slow_answer
        os.environ["GROQ_BASE_URL"] = llm.groq_base_url
        try:
            # Responses are stored by default (as OpenAI does): here in a scratch store, not the user's data dir.
            settings = Settings(model_chain=f"groq:{MODEL}", conversation_store_path=f"{tmp}/store.sqlite3")
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
                        sent, arrived = first_delta(url, body, is_delta)
                        token_at = latest[0].first_token_at
                        assert token_at is not None, "the upstream wrote no content"
                        first[name].append((arrived - sent) * 1000)
                        added[name].append((arrived - token_at) * 1000)
        finally:
            os.environ.pop("GROQ_BASE_URL", None)
    routes = {
        route: {"first_delta_ms": median(first[route]), "added_ms": median(added[route])} for route in ROUTES
    }
    medians = [r["added_ms"] for r in routes.values()]
    return {
        "reps": reps,
        "model_first_token_ms": FIRST_TOKEN_S * 1000 + PIECE_DELAY_S * 1000,
        "model_writes_ms": PIECES * PIECE_DELAY_S * 1000,
        "direct": {"first_delta_ms": median(first["direct"]), "added_ms": median(added["direct"])},
        "routes": routes,
        "target_ms": TARGET_MS,
        "met": max(medians) <= TARGET_MS,
        "spread_ms": max(medians) - min(medians),
        "same_ms": SAME_MS,
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 15), indent=2))
