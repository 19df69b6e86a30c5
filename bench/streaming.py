"""The two response modes: time to the first SSE event vs the whole turn, and stream mode's cold start.

Stream mode runs ``src/run.sh`` as the Lambda Web Adapter starts it (tests/support/adapter.py) and reads the SSE
as a client behind API Gateway would; buffered mode is the Mangum handler, whose first byte is its last. Both answer
the same scripted turn: a model that writes its answer in pieces over ~0.5 s.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import median

PIECES = 10
PIECE_DELAY = 0.05


def measure(reps: int) -> dict:
    from tests.support.adapter import MODEL, adapter_headers, run_sh
    from tests.support.fake_llm import FakeLLM, Reply, text

    answer = "A streamed answer arrives a piece at a time, as the model writes it, not all at the end."

    def slow_answer(body: dict) -> Reply:
        return Reply(chunks=text(MODEL, answer, pieces=PIECES, groq=True).chunks, chunk_delay=PIECE_DELAY)

    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    ready, first, total = [], [], []
    with FakeLLM() as llm, tempfile.TemporaryDirectory() as tmp:
        llm.default = slow_answer
        for _ in range(max(1, reps // 3)):  # each start is a cold start of the whole server
            with run_sh(llm, Path(tmp)) as served:
                ready.append(served.ready_ms)
        with run_sh(llm, Path(tmp)) as served:
            for _ in range(reps):
                start = time.perf_counter()
                first_at = None
                with httpx.stream(
                    "POST", f"{served.url}/chat", json=body, headers=adapter_headers(60), timeout=30
                ) as response:
                    for line in response.iter_lines():
                        if first_at is None and line.startswith("event: delta"):
                            first_at = (time.perf_counter() - start) * 1000
                total.append((time.perf_counter() - start) * 1000)
                first.append(first_at if first_at is not None else total[-1])
        buffered = buffered_turns(llm, reps)
    return {
        "run_sh_ready_ms": median(ready),
        "stream_first_event_ms": median(first),
        "stream_total_ms": median(total),
        "buffered_first_byte_ms": median(buffered),
        "buffered_total_ms": median(buffered),
        "model_writes_ms": PIECES * PIECE_DELAY * 1000,
    }


def buffered_turns(llm, reps: int) -> list[float]:
    """The same turn through the Mangum handler: API Gateway sends nothing until the handler returns."""
    from scripts.invoke_local import LocalContext
    from tests.support.events import rest_event

    import app as lambda_app
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings

    os.environ["GROQ_BASE_URL"] = llm.groq_base_url
    try:
        lambda_app.app.state.runtime = Runtime(
            Settings(model_chain="groq:llama-3.3-70b-versatile"),
            keys_loader=lambda s: {"groq": "gsk_bench_key_0000000000"},
        )
        event = rest_event("POST", "/chat", {"messages": [{"role": "user", "content": "hi"}], "stream": True})
        turns = []
        for _ in range(reps):
            start = time.perf_counter()
            response = lambda_app.handler(event, LocalContext())
            turns.append((time.perf_counter() - start) * 1000)
            assert "event: done" in response["body"], response["body"]
        return turns
    finally:
        os.environ.pop("GROQ_BASE_URL", None)
