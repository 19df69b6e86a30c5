"""Scripted small open-weight models (issue #36): what Qwen2.5-Coder 0.5B on llama.cpp answered to three everyday
questions, as exact texts, and what it wrote when it was told its reply was no answer. The tests and the bench
(``bench/small_models.py``) run the same corpus.

The model, per question: the first reply is the one the issue reported (a call to a tool that does not exist, the
tool definitions echoed, a near-miss JSON call in a fence); after the server's ``UnknownTool`` error it pastes that
error back as its answer; told that was no answer (a reminder), it writes the near-miss call; given a result, it
answers from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from chatloop.engine.prompts import NOT_AN_ANSWER_REMINDER, not_run
from chatloop.tools.javascript.tool import ExecuteJavaScriptTool

JS = "execute_javascript"
UNKNOWN = "calculate_compound_interest"
QUESTIONS = {
    "unknown_tool": "What is $10,000 at 5% compounded yearly for 15 years?",
    "tools_echoed": "How much is 10000 * 1.05^15, rounded to cents?",
    "fenced_near_miss": "Compute the compound interest on $10,000 at 5% for 15 years.",
}
TOOL_ERROR = json.dumps(
    {"error": not_run("unknown", name=UNKNOWN, arguments="{}", budget=None, available=[JS])},
    ensure_ascii=False,
)
"""The raw tool-error JSON it gave as its answer (the server's own UnknownTool message, pasted back)."""
CALL_UNKNOWN = (
    "<tool_call>\n"
    + json.dumps({"name": UNKNOWN, "arguments": {"principal": 10000, "rate": 0.05, "years": 15}})
    + "\n</tool_call>"
)
TOOLS_ECHOED = (
    "<tools>\n"
    + json.dumps(
        {
            "type": "function",
            "function": {
                "name": JS,
                "description": ExecuteJavaScriptTool.description,
                "parameters": ExecuteJavaScriptTool.parameters,
            },
        }
    )
    + "\n</tools>"
)
"""The tool definitions echoed back, as Qwen's chat template wraps them, as the answer of the first and only call."""
FENCED_NEAR_MISS = (
    '```json\n{"name": "execute_javascript", "arguments": {"code": "const principal = 10000;\n'
    "const rate = 0.05;\nconst years = 15;\nconst amount = principal * Math.pow(1 + rate, years);\n"
    'Math.round(amount * 100) / 100"}}\n```'
)
"""A fenced call whose code string has raw newlines: not JSON, so it was shown as the answer instead of run."""
FIRST_REPLY = {
    "unknown_tool": CALL_UNKNOWN,
    "tools_echoed": TOOLS_ECHOED,
    "fenced_near_miss": FENCED_NEAR_MISS,
}


def reply_to(messages: list[dict[str, Any]]) -> str:
    """What the scripted small model writes, given the conversation so far (OpenAI chat messages)."""
    last = messages[-1]
    question = next(m["content"] for m in messages if m["role"] == "user")
    if last["role"] == "tool":
        body = json.loads(last["content"])
        if "error" in body and UNKNOWN in body["error"]:
            return TOOL_ERROR
        if "result" in body:
            return f"The balance after 15 years is ${body['result']:,}."
    if last["role"] == "system" and last["content"] == NOT_AN_ANSWER_REMINDER:
        return FENCED_NEAR_MISS
    for case, asked in QUESTIONS.items():
        if asked == question:
            return FIRST_REPLY[case]
    return "I do not know."


def fake_llm_reply(groq: bool = False) -> Callable[[dict[str, Any]], Any]:
    """``reply_to`` as the scripted upstream's default (tests/support/fake_llm.py)."""
    from tests.support.fake_llm import text

    def reply(body: dict[str, Any]) -> Any:
        content = reply_to(body["messages"])
        return text(body["model"], content, pieces=max(2, len(content) // 9), groq=groq)

    return reply
