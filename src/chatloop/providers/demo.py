"""The offline demo model (``demo:offline``): used when no API key is configured, always labelled as such.

Deterministic: it turns simple calculation questions (compound interest, factorials, Fibonacci, plain
arithmetic, exact with BigInt for integers) into one ``execute_javascript`` call and answers from the result, so a
new user sees the whole loop (real sandbox, real decision logs) without a key. It honours what a client asks for:
``tool_choice`` (``required`` or a named function) gets a call to the client's tool with arguments valid for its
schema, and ``response_format`` gets JSON valid for the schema. It is not a language model.

Usage::

    model = DemoModel()
    async for item in model.stream(ModelRequest(messages=[{"role": "user", "content": "5!"}], tools=..., deadline=d)):
        ...
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.providers.base import ModelRequest, ModelResponse, StreamItem, TextDelta, ToolCall, Usage
from chatloop.providers.schema_values import Hints, value_for

LABEL = "(offline demo model: set GROQ_API_KEY or OPENAI_API_KEY to use a real model)"
QUESTION_CHARS = 2_000
"""Of a question, at most this much is read: the demo answers short calculations, and no text makes it work long."""
RESULT_CHARS = 500
"""A tool result longer than this is quoted in part."""

# Every pattern is linear in the text: possessive quantifiers, numbers that start only where a number starts and
# have a bounded length, and gaps that cannot overlap what follows them (a question of 2,000 "1 " once took 7 s).
_COMPOUND = re.compile(
    r"(?<![\d,.])\$?\s*+([\d,]{1,24}+(?:\.\d{1,12}+)?)[^\d%]*?(\d{1,12}+(?:\.\d{1,12}+)?|\.\d{1,12}+)\s*+%"
    r"[^\d]*?(\d{1,4}+)\s*+years?",
    re.IGNORECASE,
)
_FACTORIAL = re.compile(
    r"(?<!\d)(\d{1,4}+)\s*+!|(?<!\d)(\d{1,4}+)\s++factorial|factorial\s++of\s++(\d{1,4}+)(?!\d)",
    re.IGNORECASE,
)
_FIBONACCI = re.compile(r"fibonacci\D{0,40}+(\d{1,6}+)", re.IGNORECASE)
_ARITHMETIC_RUN = re.compile(r"[-+*/^%().\d\s]+")
_DIGIT = re.compile(r"\d")
_OPERATOR = re.compile(r"[-+*/^%]")


def calculation_for(question: str) -> tuple[str, str] | None:
    """``(javascript, how to phrase the answer)`` for a question the demo understands, else None."""
    question = question[:QUESTION_CHARS]
    if m := _COMPOUND.search(question):
        principal, rate, years = float(m.group(1).replace(",", "") or 0), float(m.group(2)), int(m.group(3))
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
    if expression := _arithmetic(question):
        expression = expression.replace("^", "**")
        return exact(expression), f"{expression.replace('**', '^')} = {{result}}"
    return None


def _arithmetic(question: str) -> str | None:
    """The first run of arithmetic characters holding a digit, then an operator, then a digit (one pass)."""
    for run in _ARITHMETIC_RUN.finditer(question):
        text = run.group(0)
        digit = _DIGIT.search(text)
        operator = _OPERATOR.search(text, digit.end()) if digit else None
        if operator and _DIGIT.search(text, operator.end()):
            return text.strip()
    return None


def exact(expression: str) -> str:
    """Integer arithmetic in BigInt, so ``2**64`` is 18446744073709551616, not a float's 18446744073709552000;
    an expression with a division or a decimal point stays in floating point."""
    if re.search(r"[./]", expression):
        return expression
    return re.sub(r"\d+", lambda m: m.group(0) + "n", expression)


class DemoModel:
    name = "demo:offline"
    server_tools = frozenset({"execute_javascript"})

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        response = self._respond(request)
        for i in range(0, len(response.content), 16):
            yield TextDelta(response.content[i : i + 16])
        yield response

    def _respond(self, request: ModelRequest) -> ModelResponse:
        question, results = _current_turn(request.messages)
        plan = calculation_for(question)
        # tool_choice holds on every call it is sent with, tool results or not (OpenAI's contract: the client, or
        # the engine, resets it).
        if (chosen := self._chosen_tool(request, question, answered=bool(results))) is not None:
            return self._call(request, chosen, question, results[-1].body.get("result") if results else None)
        if results:
            text = self._from_result(results[-1], plan)
            return self._answer(request, text, question, results[-1].body.get("result"))
        if plan and "execute_javascript" in request.tool_names() and request.tool_choice != "none":
            call = ToolCall(
                id=f"call_demo_{len(request.messages)}",
                name="execute_javascript",
                arguments=json.dumps({"code": plan[0]}),
            )
            return ModelResponse(
                model=self.name, tool_calls=[call], finish_reason="tool_calls", usage=_usage(request, 20)
            )
        if plan:
            text = "I would calculate this with execute_javascript, but tools are off for this request."
            return self._answer(request, text, question)
        text = (
            "I am the offline demo model: I can only answer simple calculations such as "
            '"$10,000 at 5% for 15 years", "5! and 10!", "fibonacci 10" or "(3 + 4) * 12".'
        )
        return self._answer(request, text, question)

    def _chosen_tool(self, request: ModelRequest, question: str, answered: bool) -> JSONObject | None:
        """The tool ``tool_choice`` asks for: the named one, or for ``required`` the client tool the question
        mentions (else the first). A calculation under ``required`` goes to execute_javascript as usual, and so does
        ``required`` with no client tool offered. Nothing for ``auto``, ``none`` or no choice."""
        choice = request.tool_choice
        tools = _functions(request)
        if isinstance(choice, dict):
            named = choice.get("function")
            return tools.get(_name_of(named) or "") if isinstance(named, dict) else None
        if choice != "required" or not tools:
            return None
        client = {n: f for n, f in tools.items() if n not in self.server_tools}
        if not client or (not answered and calculation_for(question) and "execute_javascript" in tools):
            return tools.get("execute_javascript") or next(iter(tools.values()))
        asked = set(re.findall(r"[a-z]{4,}", question[:QUESTION_CHARS].lower()))
        mentioned = [f for n, f in client.items() if asked & set(re.findall(r"[a-z]{4,}", n.lower()))]
        return (mentioned or list(client.values()))[0]

    def _call(
        self, request: ModelRequest, function: JSONObject, question: str, result: JSONValue = None
    ) -> ModelResponse:
        """A call to ``function``; a client tool's arguments are drawn, like a structured answer, from the latest
        tool result when it is a number (the sandbox's 20789.28), else from the question."""
        name = _name_of(function) or ""
        arguments: JSONValue
        if name == "execute_javascript":
            plan = calculation_for(question)
            arguments = {"code": plan[0] if plan else "'no calculation found in the question'"}
        else:
            arguments = value_for(function.get("parameters") or {"type": "object"}, _hints(question, result))
        call = ToolCall(f"call_demo_{len(request.messages)}", name, json.dumps(arguments))
        return ModelResponse(
            model=self.name, tool_calls=[call], finish_reason="tool_calls", usage=_usage(request, 20)
        )

    @staticmethod
    def _from_result(result: _ToolResult, plan: tuple[str, str] | None) -> str:
        """The answer from the latest tool result: the calculation's phrasing for an ``execute_javascript``
        ``{"result": ...}``, otherwise the result quoted as it came, whatever its shape."""
        body = result.body
        if "error" in body and "result" not in body:
            return f"The tool call failed: {_quoted(body['error'])}."
        if "result" in body and set(body) <= {"result", "output"}:
            value = body["result"]
            if isinstance(value, dict):
                value = ", ".join(f"{k} = {v}" for k, v in value.items())
            elif isinstance(value, list):
                value = ", ".join(str(v) for v in value)
            if plan:
                try:
                    return plan[1].format(result=value)
                except (ValueError, TypeError):  # a money format for a result that is not a number
                    pass
            return f"The result is {_quoted(value)}."
        who = f"{result.name} returned" if result.name else "The tool returned"
        return f"{who}: {_quoted(result.content)}."

    def _answer(
        self, request: ModelRequest, text: str, question: str, result: JSONValue = None
    ) -> ModelResponse:
        """Text with the demo's label, or JSON when the request asks for a response format."""
        response_format = request.response_format or {}
        if response_format.get("type") == "json_schema":
            hints = _hints(question, result, text)
            spec = response_format.get("json_schema")
            content = json.dumps(
                value_for((spec.get("schema") if isinstance(spec, dict) else None) or {}, hints)
            )
        elif response_format.get("type") == "json_object":
            content = json.dumps({"answer": text, "result": result, "model": self.name, "note": LABEL})
        else:
            content = f"{text} {LABEL}"
        finish = "stop"
        if request.max_tokens is not None and len(content) > 4 * request.max_tokens:
            content, finish = content[: 4 * request.max_tokens], "length"  # ~4 characters a token, as counted
        return ModelResponse(
            model=self.name, content=content, finish_reason=finish, usage=_usage(request, len(content) // 4)
        )


def _hints(question: str, result: JSONValue = None, text: str | None = None) -> Hints:
    """What a structured value is drawn from: the question's words, and the tool's result when it is a number (else
    the question's numbers)."""
    asked = Hints.from_text(question)
    number = _number(result)
    numbers = [number] if number is not None else asked.numbers
    return Hints(words=asked.words, numbers=numbers, text=asked.text if text is None else text)


def _number(value: JSONValue) -> float | None:
    """``value`` as a float when it is a finite number or a string that reads as one (never a bool). A JSON integer
    past a float's range reads as an int in Python, and ``"nan"`` or ``"1e999"`` as a float no JSON can hold."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _name_of(function: JSONObject) -> str | None:
    name = function.get("name")
    return name if isinstance(name, str) else None


def _functions(request: ModelRequest) -> dict[str, JSONObject]:
    """The functions of the request's tools, by name."""
    functions: dict[str, JSONObject] = {}
    for tool in request.tools or []:
        function = tool.get("function")
        if isinstance(function, dict) and (name := _name_of(function)) is not None:
            functions[name] = function
    return functions


@dataclass(frozen=True)
class _ToolResult:
    content: str
    """The tool message's text, as it came."""
    body: JSONObject
    """Its JSON when that is an object, else ``{"result": <the JSON or the text>}``."""
    name: str | None = None


def _quoted(value: JSONValue) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= RESULT_CHARS else text[: RESULT_CHARS - 1] + "…"


def _current_turn(messages: list[JSONObject]) -> tuple[str, list[_ToolResult]]:
    """The last user message and the tool results that came after it."""
    question, results = "", list[_ToolResult]()
    for message in messages:
        if message["role"] == "user":
            question, results = str(message.get("content") or ""), []
        elif message["role"] == "tool":
            content = message.get("content")
            content = content if isinstance(content, str) else json.dumps(content, default=str)
            try:
                body = json.loads(content[: 64 * 1024])
            except ValueError:
                body = {"result": content}
            name = message.get("name")
            results.append(
                _ToolResult(
                    content,
                    body if isinstance(body, dict) else {"result": body},
                    name if isinstance(name, str) else None,
                )
            )
    return question, results


def _usage(request: ModelRequest, completion: int) -> Usage:
    """Estimated as real models count roughly: four characters a token, the tool schemas included."""
    prompt = (len(json.dumps(request.messages)) + len(json.dumps(request.tools or []))) // 4
    completion = max(1, completion)
    return Usage(prompt, completion, prompt + completion)
