"""Shared by the approval tests (tests/api/turns/test_approvals.py, over the API, and tests/browser/test_approvals.py, in the
page): the provider keys both copies of the app hold, and a scripted calculator that keeps asking for its sandbox
run until it has a result, as models do.

Usage::

    with app_server(settings, model=calculator(), registry=registry, keys=KEYS) as server: ...
"""

from __future__ import annotations

import json

from chatloop.providers.base import ModelRequest, ModelResponse
from tests.support.models import ScriptedModel, js, offered

KEYS = {"groq": "gsk_approvals_test_key_0123456789", "openai": None}
"""The same provider keys for both copies: the state key (approval seals) is derived from them."""


def said(tool_message: str) -> str:
    """What a tool message says, in the model's own words (a model answers from a result; it does not paste the
    tool's JSON, which the answer check would not show)."""
    body = json.loads(tool_message)
    return str(body.get("result", body.get("error", tool_message)))


def calculator() -> ScriptedModel:
    """Runs 6*7 in the sandbox while it has no result for the last question; then answers with the result (or
    the denial it was told)."""

    def script(request: ModelRequest, n: int) -> ModelResponse:
        messages = request.messages
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
        if "execute_javascript" in offered(request) and not results:
            return ModelResponse("", "", [js("return 6 * 7", id=f"call_{n}")], "tool_calls")
        return ModelResponse("", f"Result: {said(results[-1]) if results else 'none'}", finish_reason="stop")

    return ScriptedModel(script)
