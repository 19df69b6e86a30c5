"""The offline demo model (``demo:offline``): used when no API key is configured, always labelled as such.

Deterministic: it turns simple calculation questions (compound interest, factorials, Fibonacci, plain
arithmetic) into one ``execute_javascript`` call and answers from the result, so a new user sees the whole
loop (real sandbox, real decision logs) without a key. It is not a language model.

Usage::

    model = DemoModel()
    async for item in model.stream(ModelRequest(messages=[{"role": "user", "content": "5!"}], tools=..., deadline=d)):
        ...
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from chatloop.providers.base import ModelRequest, ModelResponse, StreamItem, TextDelta, ToolCall, Usage

LABEL = "(offline demo model: set GROQ_API_KEY or OPENAI_API_KEY to use a real model)"

_MONEY = r"\$?\s*([\d,]+(?:\.\d+)?)"
_COMPOUND = re.compile(_MONEY + r"[^\d%]*?([\d.]+)\s*%[^\d]*?(\d+)\s*years?", re.IGNORECASE)
_FACTORIAL = re.compile(r"(\d+)\s*!|(\d+)\s+factorial|factorial\s+of\s+(\d+)", re.IGNORECASE)
_FIBONACCI = re.compile(r"fibonacci\D*(\d+)", re.IGNORECASE)
_ARITHMETIC = re.compile(r"[-+*/^%().\d\s]*\d[-+*/^%().\d\s]*[-+*/^%][-+*/^%().\d\s]*\d[-+*/^%().\d\s]*")


def calculation_for(question: str) -> tuple[str, str] | None:
    """``(javascript, how to phrase the answer)`` for a question the demo understands, else None."""
    if m := _COMPOUND.search(question):
        principal, rate, years = float(m.group(1).replace(",", "")), float(m.group(2)), int(m.group(3))
        code = (
            f"const principal = {principal:g}, rate = {rate:g} / 100, years = {years};\n"
            "Math.round(principal * Math.pow(1 + rate, years) * 100) / 100"
        )
        return (
            code,
            f"${principal:,.2f} at {rate:g}% compounded annually for {years} years grows to ${{result:,.2f}}.",
        )
    if found := [int(next(g for g in m.groups() if g)) for m in _FACTORIAL.finditer(question)]:
        numbers = list(dict.fromkeys(found))[:10]
        code = (
            "const factorial = (n) => { let f = 1n; for (let i = 2n; i <= BigInt(n); i++) f *= i; return f; };\n"
            f"Object.fromEntries({json.dumps(numbers)}.map((n) => [n + '!', factorial(n)]))"
        )
        return code, "{result}"
    if m := _FIBONACCI.search(question):
        count = min(int(m.group(1)), 200)
        code = (
            f"const fib = [0, 1];\nwhile (fib.length < {count}) fib.push(fib.at(-1) + fib.at(-2));\n"
            f"fib.slice(0, {count})"
        )
        return code, f"The first {count} Fibonacci numbers are {{result}}."
    if m := _ARITHMETIC.search(question):
        expression = m.group(0).strip().replace("^", "**")
        return expression, f"{expression.replace('**', '^')} = {{result}}"
    return None


class DemoModel:
    name = "demo:offline"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        response = self._respond(request)
        for i in range(0, len(response.content), 16):
            yield TextDelta(response.content[i : i + 16])
        yield response

    def _respond(self, request: ModelRequest) -> ModelResponse:
        question, results = _current_turn(request.messages)
        plan = calculation_for(question)
        if results:
            body = results[-1]
            if "error" in body:
                text = f"The calculation failed: {body['error']}."
            else:
                value = body.get("result")
                if isinstance(value, dict):
                    value = ", ".join(f"{k} = {v}" for k, v in value.items())
                elif isinstance(value, list):
                    value = ", ".join(str(v) for v in value)
                template = plan[1] if plan else "The result is {result}."
                text = template.format(result=value)
            return self._answer(f"{text} {LABEL}")
        if plan and "execute_javascript" in request.tool_names():
            call = ToolCall(
                id=f"call_demo_{len(request.messages)}",
                name="execute_javascript",
                arguments=json.dumps({"code": plan[0]}),
            )
            return ModelResponse(
                model=self.name, tool_calls=[call], finish_reason="tool_calls", usage=_usage(request, 20)
            )
        if plan:
            return self._answer(
                f"I would calculate this with execute_javascript, but tools are off for this request. {LABEL}"
            )
        return self._answer(
            "I am the offline demo model: I can only answer simple calculations such as "
            f'"$10,000 at 5% for 15 years", "5! and 10!", "fibonacci 10" or "(3 + 4) * 12". {LABEL}'
        )

    def _answer(self, text: str) -> ModelResponse:
        return ModelResponse(
            model=self.name,
            content=text,
            finish_reason="stop",
            usage=Usage(0, len(text) // 4, len(text) // 4),
        )


def _current_turn(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The last user message and the tool results that came after it."""
    question, results = "", list[dict[str, Any]]()
    for message in messages:
        if message["role"] == "user":
            question, results = str(message.get("content") or ""), []
        elif message["role"] == "tool":
            try:
                body = json.loads(message["content"])
            except ValueError:
                body = {"result": message["content"]}
            results.append(body if isinstance(body, dict) else {"result": body})
    return question, results


def _usage(request: ModelRequest, completion: int) -> Usage:
    prompt = sum(len(str(m.get("content") or "")) for m in request.messages) // 4
    return Usage(prompt, completion, prompt + completion)
