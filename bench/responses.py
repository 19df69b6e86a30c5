"""The Responses API's cost over chat completions for the same turn: both renderers draw on the same engine events
(``final_reply``), so the difference is the renderer and its request parsing alone.

Each request goes through the Lambda handler (an API Gateway event, Mangum, the app) with a model that answers at
once, alternating the two APIs so that both see the same machine state; medians in µs.
"""

from __future__ import annotations

import time

from bench.common import AnswerAtOnce, median


def measure(reps: int) -> dict:
    from scripts.invoke_local import LocalContext
    from tests.support.events import rest_event

    import app as lambda_app
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.base import ToolRegistry

    lambda_app.app.state.runtime = Runtime(
        Settings(), chain=FallbackChain([AnswerAtOnce()]), registry=ToolRegistry()
    )
    question = "hello"
    events = {
        "chat": rest_event(
            "POST",
            "/v1/chat/completions",
            {"model": "chatloop", "messages": [{"role": "user", "content": question}]},
        ),
        "responses": rest_event("POST", "/v1/responses", {"model": "chatloop", "input": question}),
        "chat_stream": rest_event(
            "POST",
            "/v1/chat/completions",
            {"model": "chatloop", "messages": [{"role": "user", "content": question}], "stream": True},
        ),
        "responses_stream": rest_event(
            "POST", "/v1/responses", {"model": "chatloop", "input": question, "stream": True}
        ),
    }
    timings: dict[str, list[float]] = {name: [] for name in events}
    for _ in range(reps * 10):
        for name, event in events.items():
            start = time.perf_counter()
            response = lambda_app.handler(event, LocalContext())
            timings[name].append((time.perf_counter() - start) * 1e6)
            assert response["statusCode"] == 200, response
    result = {f"{name}_us": median(values) for name, values in timings.items()}
    result["ratio"] = result["responses_us"] / result["chat_us"]
    result["stream_ratio"] = result["responses_stream_us"] / result["chat_stream_us"]
    return result
