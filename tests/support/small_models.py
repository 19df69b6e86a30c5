"""Scripted small open-weight models (issue #36): what Qwen2.5-Coder 0.5B on llama.cpp answered to three everyday
questions, as exact texts, and what it wrote when it was told its reply was no answer. The tests and the bench
(``bench/small_models.py``) run the same corpus.

The model, per question: the first reply is the one the issue reported (a call to a tool that does not exist, the
tool definitions echoed, a near-miss JSON call in a fence); after the server's ``UnknownTool`` error it pastes that
error back as its answer; told that was no answer (a reminder), it writes the near-miss call; given a result, it
answers from it.

Issue #41 adds two more of its turns (``QUESTIONS_41``: the same fenced call three times; after ``UnknownTool`` for
``calculateCompoundInterest``, that call again, flat, in a fence), prose that quotes a call tag (``QUOTED_TAGS``) and
a tag a tool printed that the model relays (``RELAY_CODE``, ``RELAYED_TAG``).
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
    {"error": not_run("unknown", name=UNKNOWN, arguments="{}", cap=None, available=[JS])},
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


# --- issue #41: what it wrote to two more questions, and prose that quotes a call tag ---------------------------
CAMEL = "calculateCompoundInterest"
PRIMES_CODE = (
    "let sum = 0;\nfor (let n = 2; n < 1000; n++) {\n  let prime = true;\n"
    "  for (let d = 2; d * d <= n; d++) if (n % d === 0) { prime = false; break; }\n  if (prime) sum += n;\n}\nsum"
)
PRIMES_BLOCK = "```json\n" + json.dumps({"name": JS, "arguments": {"code": PRIMES_CODE}}) + "\n```"
TRIPLE_FENCED = "\n\n".join([PRIMES_BLOCK] * 3)
"""The same fenced call three times over, as its whole reply: one block is a call, three were shown as the answer."""
CALL_CAMEL = (
    "<tool_call>\n"
    + json.dumps({"name": CAMEL, "arguments": {"principal": 10000, "rate": 0.05, "years": 15}})
    + "\n</tool_call>"
)
UNKNOWN_FENCED = (
    "```json\n" + json.dumps({"name": CAMEL, "principal": 10000, "rate": 0.05, "years": 15}) + "\n```"
)
"""After the server's ``UnknownTool`` error for ``calculateCompoundInterest``: the same call again, flat, in a fence
(flat JSON is a call only for an offered tool, so it was shown as the answer)."""
QUESTIONS_41 = {
    "triple_fenced": "What is the sum of all prime numbers below 1000? Compute it.",
    "unknown_after_error": "What does $10,000 grow to at 5% compound interest over 15 years?",
}
FIRST_REPLY_41 = {"triple_fenced": TRIPLE_FENCED, "unknown_after_error": CALL_CAMEL}
TAG_CALL = '{"name": "execute_javascript", "arguments": {"code": "1 + 1"}}'
QUOTED_TAGS = {
    "hermes, inline code": "In Hermes format a call looks like `<tool_call>…</tool_call>` and you should never run it.",
    "hermes, a call body, words after": f"In Hermes format a call looks like <tool_call>{TAG_CALL}</tool_call> and "
    "you should never run it.",
    "hermes, a fenced example": f"In Hermes format a call looks like this:\n```\n<tool_call>\n{TAG_CALL}\n"
    "</tool_call>\n```\nYou should never run it yourself.",
    "python_tag, no call body": "Llama writes <|python_tag|>{...} before a call, and you should never run it.",
    "python_tag, a call body, words after": "Llama 3.1 starts a call with <|python_tag|>"
    '{"name": "execute_javascript", "parameters": {"code": "1 + 1"}} and you should never run it.',
    "function_tag, no call body": "Groq writes <function=name>{...}</function> tags, and you should never run them.",
    "function_tag, a call body, words after": 'Groq writes <function=execute_javascript>{"code": "1 + 1"}</function> '
    "inside the text, and you should never run it.",
}
"""Prose that explains the call tags (issue #41): the whole text is the answer, in one model call."""
RELAYED_TAG = f"<tool_call>{TAG_CALL}</tool_call>"
RELAY_CODE = f"console.log({json.dumps('The page says: ' + RELAYED_TAG)})"
RELAY_QUESTION = "What does this page print? Run it."


def reply_to(messages: list[dict[str, Any]]) -> str:
    """What the scripted small model writes, given the conversation so far (OpenAI chat messages)."""
    last = messages[-1]
    question = next(m["content"] for m in messages if m["role"] == "user")
    if last["role"] == "tool":
        body = json.loads(last["content"])
        if "error" in body and UNKNOWN in body["error"]:
            return TOOL_ERROR
        if "error" in body and CAMEL in body["error"]:
            return UNKNOWN_FENCED
        if question == QUESTIONS_41["triple_fenced"] and "result" in body:
            return f"The sum of all prime numbers below 1000 is {body['result']}."
        if "result" in body:
            return f"The balance after 15 years is ${body['result']:,}."
    if last["role"] == "system" and last["content"] == NOT_AN_ANSWER_REMINDER:
        return FENCED_NEAR_MISS
    for case, asked in QUESTIONS.items():
        if asked == question:
            return FIRST_REPLY[case]
    for case, asked in QUESTIONS_41.items():
        if asked == question:
            return FIRST_REPLY_41[case]
    return "I do not know."


def fake_llm_reply(groq: bool = False) -> Callable[[dict[str, Any]], Any]:
    """``reply_to`` as the scripted upstream's default (tests/support/fake_llm.py)."""
    from tests.support.fake_llm import text

    def reply(body: dict[str, Any]) -> Any:
        content = reply_to(body["messages"])
        return text(body["model"], content, pieces=max(2, len(content) // 9), groq=groq)

    return reply


NEAR_MISS_CODE = "const p = 10000;\nconst r = 0.05;\nMath.round(p * Math.pow(1 + r, 15) * 100) / 100"
"""The compound interest the first two near misses meant to run."""

# The near-miss calls small open-weight models write as text: tests/providers/test_near_miss_calls.py repairs and runs each;
# the bench's corpus (bench/small_models.py) scripts those that call execute_javascript.
# (id, what the model wrote, the call it meant: (name, arguments))
NEAR_MISSES = [
    (
        "fenced json, raw newlines in the code string (Qwen2.5-Coder 0.5B)",
        '```json\n{"name": "execute_javascript", "arguments": {"code": "const p = 10000;\nconst r = 0.05;\n'
        'Math.round(p * Math.pow(1 + r, 15) * 100) / 100"}}\n```',
        (JS, {"code": NEAR_MISS_CODE}),
    ),
    (
        "bare json, raw newlines",
        '{"name": "execute_javascript", "arguments": {"code": "const p = 10000;\nconst r = 0.05;\n'
        'Math.round(p * Math.pow(1 + r, 15) * 100) / 100"}}',
        (JS, {"code": NEAR_MISS_CODE}),
    ),
    (
        "trailing commas",
        '{"name": "execute_javascript", "arguments": {"code": "2 ** 10",},}',
        (JS, {"code": "2 ** 10"}),
    ),
    (
        "single quotes, Python dict style",
        "{'name': 'execute_javascript', 'arguments': {'code': '2 ** 10'}}",
        (JS, {"code": "2 ** 10"}),
    ),
    (
        "missing closing brace",
        '{"name": "execute_javascript", "arguments": {"code": "2 ** 10"}',
        (JS, {"code": "2 ** 10"}),
    ),
    (
        "hermes tag, missing closing brace",
        '<tool_call>\n{"name": "execute_javascript", "arguments": {"code": "2 ** 10"}\n</tool_call>',
        (JS, {"code": "2 ** 10"}),
    ),
    (
        "hermes tag, raw newlines and no closing tag",
        '<tool_call>\n{"name": "execute_javascript", "arguments": {"code": "let x = 2;\nx ** 10"}}',
        (JS, {"code": "let x = 2;\nx ** 10"}),
    ),
    (
        "arguments as a JSON string with raw newlines",
        '{"name": "execute_javascript", "arguments": "{\\"code\\": \\"let x = 2;\nx ** 10\\"}"}',
        (JS, {"code": "let x = 2;\nx ** 10"}),
    ),
    (
        "code given as a bare string",
        '{"name": "execute_javascript", "arguments": "Math.round(10000 * Math.pow(1.05, 15) * 100) / 100"}',
        (JS, {"code": "Math.round(10000 * Math.pow(1.05, 15) * 100) / 100"}),
    ),
    (
        "python_tag, trailing comma (Llama 3.2 3B)",
        '<|python_tag|>{"name": "execute_javascript", "parameters": {"code": "2 ** 10",}}<|eom_id|>',
        (JS, {"code": "2 ** 10"}),
    ),
    (
        "function tag, raw newline in the code",
        '<function=execute_javascript>{"code": "let x = 2;\nx ** 10"}</function>',
        (JS, {"code": "let x = 2;\nx ** 10"}),
    ),
    (
        "name then JSON, single quotes (Groq failed_generation)",
        "execute_javascript{'code': '2 ** 10'}",
        (JS, {"code": "2 ** 10"}),
    ),
    (
        "Python literals True/None",
        '{"name": "execute_javascript", "arguments": {"code": "[1,2].includes(2)", "timeout_seconds": None}}',
        (JS, {"code": "[1,2].includes(2)", "timeout_seconds": None}),
    ),
    (
        "a // comment inside the object",
        '{"name": "execute_javascript", // run it\n "arguments": {"code": "2 ** 10"}}',
        (JS, {"code": "2 ** 10"}),
    ),
    (
        "words before a fenced near miss",
        'I will compute it.\n```json\n{"name": "execute_javascript", "arguments": {"code": "2 ** 10",}}\n```',
        (JS, {"code": "2 ** 10"}),
    ),
    (
        '"function" and "args" keys (ReAct-style)',
        '{"function": "execute_javascript", "args": {"code": "2 ** 10"}}',
        (JS, {"code": "2 ** 10"}),
    ),
    (
        '"tool" and "tool_input" keys (LangChain agent style)',
        '{"tool": "get_weather", "tool_input": {"city": "Oslo"}}',
        ("get_weather", {"city": "Oslo"}),
    ),
    (
        "flat call with a trailing comma",
        '{"name": "get_weather", "city": "Oslo",}',
        ("get_weather", {"city": "Oslo"}),
    ),
    (
        "unescaped double quotes inside the code",
        '{"name": "execute_javascript", "arguments": {"code": "console.log("hi")"}}',
        (JS, {"code": 'console.log("hi")'}),
    ),
]
