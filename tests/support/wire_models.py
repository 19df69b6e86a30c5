"""Scripted models on the wire: functions of an OpenAI-compatible request body that return the FakeLLM reply a real
model would send (tests/support/fake_llm.py). Tests, the bench and the Lambda-size runs share them.

Usage::

    with FakeLLM() as llm:
        llm.default = realistic
"""

from __future__ import annotations

import json

from chatloop.providers.demo import calculation_for
from tests.support.fake_llm import Reply, text, tool_calls


def realistic(body: dict) -> Reply:
    """A model on the wire: calls execute_javascript while it is offered and has no result yet, then answers."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = [json.loads(m["content"]) for m in messages[last_user:] if m["role"] == "tool"]
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    plan = calculation_for(messages[last_user]["content"])
    if results:
        return text(
            body["model"], f"The result is {results[-1].get('result', results[-1].get('error'))}.", groq=True
        )
    if plan and "execute_javascript" in offered:
        return tool_calls(
            body["model"], [("call_1", "execute_javascript", json.dumps({"code": plan[0]}))], groq=True
        )
    return text(body["model"], "Hello! Ask me to calculate something.", groq=True)
