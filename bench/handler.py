"""The Lambda handler: per-request overhead, and a warm end-to-end turn over loopback HTTP."""

from __future__ import annotations

import os
import time

from bench.common import AnswerAtOnce, median, p90
from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry


def measure(reps: int, js_tool) -> dict:
    """Per-request handler overhead (instant model, no tools) and the warm end-to-end turn (one calculation:
    two model calls to a scripted model over loopback HTTP through the groq SDK, one sandbox run)."""
    from scripts.invoke_local import LocalContext
    from tests.support.events import rest_event
    from tests.support.fake_llm import FakeLLM
    from tests.support.wire_models import realistic

    import app as lambda_app
    from chatloop.api.runtime import Runtime
    from chatloop.providers.chain import FallbackChain

    body = {"messages": [{"role": "user", "content": "hello"}], "stream": False, "tools": []}
    lambda_app.app.state.runtime = Runtime(
        Settings(), chain=FallbackChain([AnswerAtOnce()]), registry=ToolRegistry([js_tool])
    )
    event = rest_event("POST", "/chat", body)
    overhead = []
    for _ in range(reps * 5):
        start = time.perf_counter()
        response = lambda_app.handler(event, LocalContext())
        overhead.append((time.perf_counter() - start) * 1e6)
        assert response["statusCode"] == 200
    with FakeLLM() as llm:
        llm.default = realistic
        os.environ["GROQ_BASE_URL"] = llm.groq_base_url
        lambda_app.app.state.runtime = Runtime(
            Settings(model_chain="groq:llama-3.3-70b-versatile"),
            registry=ToolRegistry([js_tool]),
            keys_loader=lambda s: {"groq": "gsk_bench_key_0000000000"},
        )
        event = rest_event(
            "POST", "/chat", {"messages": [{"role": "user", "content": "calculate 5!"}], "stream": False}
        )
        turns = []
        for _ in range(max(30, reps)):
            time.sleep(0.03)  # the spare is refilled between turns, as between real requests
            start = time.perf_counter()
            response = lambda_app.handler(event, LocalContext())
            turns.append((time.perf_counter() - start) * 1000)
            assert '"stop_reason":"stop"' in response["body"] and "120" in response["body"], response["body"]
        os.environ.pop("GROQ_BASE_URL", None)
    return {
        "handler_overhead_us": median(overhead),
        "warm_turn_ms": median(turns),
        "warm_turn_p90_ms": p90(turns),
        "warm_turns": len(turns),
    }
