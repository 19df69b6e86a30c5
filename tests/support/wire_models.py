"""Scripted models on the wire: functions of an OpenAI-compatible request body that return the FakeLLM reply a real
model would send (tests/support/fake_llm.py). Tests, the bench and the Lambda-size runs share them.

Usage::

    with FakeLLM() as llm:
        llm.default = realistic
    with FakeBedrock() as bedrock:  # the same model on Bedrock's wire (Converse)
        bedrock.default = realistic_bedrock
"""

from __future__ import annotations

import json

from chatloop.providers.demo import calculation_for
from tests.support.fake_bedrock import Reply as BedrockReply
from tests.support.fake_bedrock import text as bedrock_text
from tests.support.fake_bedrock import tool_use as bedrock_tool_use
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


def realistic_bedrock(body: dict) -> BedrockReply:
    """``realistic`` on Bedrock's wire (a Converse body, a fake_bedrock reply): calls execute_javascript while it is
    offered and has no result yet (a ``toolResult`` block after the last user text), then answers."""
    messages = body["messages"]
    texts = [
        i for i, m in enumerate(messages) if m["role"] == "user" and any("text" in b for b in m["content"])
    ]
    last_user = texts[-1]
    question = " ".join(b["text"] for b in messages[last_user]["content"] if "text" in b)
    results = [
        block["toolResult"]["content"][0]
        for m in messages[last_user:]
        for block in m["content"]
        if "toolResult" in block
    ]
    offered = [t["toolSpec"]["name"] for t in (body.get("toolConfig") or {}).get("tools", [])]
    plan = calculation_for(question)
    if results:
        value = results[-1].get("json", {})
        return bedrock_text(f"The result is {value.get('result', value.get('error'))}.")
    if plan and "execute_javascript" in offered:
        return bedrock_tool_use([("tooluse_1", "execute_javascript", json.dumps({"code": plan[0]}))])
    return bedrock_text("Hello! Ask me to calculate something.")
