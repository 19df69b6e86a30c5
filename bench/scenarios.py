"""The seed scenarios as scripted models, and the baseline loop they are compared against.

Scripted models obey the request the way real APIs do: under ``tool_choice: "required"`` they must call a tool
(seed 000: the model called execute_javascript again and again); with ``parallel_tool_calls: false`` they make one
call per reply; with no tools offered they answer in text. The same models run through both loops.
"""

from __future__ import annotations

import asyncio as _asyncio
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chatloop.api.runtime import engine_limits
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.engine import EventType, TurnRequest, run_turn
from chatloop.providers.base import ModelRequest, ModelResponse, ToolCall, Usage
from chatloop.tools.base import Tool, ToolRegistry, ToolResult


def estimate_tokens(request: ModelRequest) -> int:
    """A rough count (4 characters a token) of what a request sends: the scenarios compare prompt sizes."""
    chars = sum(len(json.dumps(m)) for m in request.messages) + len(json.dumps(request.tools or []))
    return chars // 4


Script = Callable[[ModelRequest, int], ModelResponse]


class CountingModel:
    """A ChatModel over a script that counts calls and the prompt tokens each request would send."""

    def __init__(self, script: Script):
        self.script, self.name = script, "scripted:bench"
        self.calls = 0
        self.prompt_tokens = 0

    async def stream(self, request: ModelRequest):
        self.calls += 1
        self.prompt_tokens += estimate_tokens(request)
        response = self.script(request, self.calls)
        response.model = self.name
        response.usage = response.usage or Usage()
        yield response


class FakeSearch:
    name = "search_web"
    description = "Search the web for current information."
    parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}

    async def run(self, arguments: dict[str, Any], deadline: Deadline) -> ToolResult:
        return ToolResult(
            json.dumps({"results": [f"Top savings accounts for '{arguments.get('query')}'"]}), ok=True
        )


def _call(name: str, args: dict, n: int, k: int = 0) -> ToolCall:
    return ToolCall(id=f"call_{n}_{k}", name=name, arguments=json.dumps(args))


def _results(request: ModelRequest) -> list[dict]:
    last_user = max(i for i, m in enumerate(request.messages) if m["role"] == "user")
    return [json.loads(m["content"]) for m in request.messages[last_user:] if m["role"] == "tool"]


def _forced(request: ModelRequest) -> bool:
    return request.tool_choice == "required" or isinstance(request.tool_choice, dict)


def _answer(text: str) -> ModelResponse:
    return ModelResponse("", content=text, finish_reason="stop")


def _tools(*calls: ToolCall) -> ModelResponse:
    return ModelResponse("", tool_calls=list(calls), finish_reason="tool_calls")


def calculator(code: str, answer: str, stubborn: bool = False) -> Script:
    """Calls execute_javascript with ``code``; answers from the result unless forced to call a tool again (or, when
    ``stubborn``, whenever execute_javascript is still offered)."""

    def script(request: ModelRequest, n: int) -> ModelResponse:
        results = _results(request)
        offered = "execute_javascript" in request.tool_names()
        if offered and (not results or _forced(request) or stubborn):
            return _tools(_call("execute_javascript", {"code": code}, n))
        if results:
            return _answer(answer.format(result=results[-1].get("result", results[-1].get("error"))))
        return _answer("I need to calculate that.")

    return script


def two_factorials() -> Script:
    codes = [
        "let f = 1; for (let i = 2; i <= 5; i++) f *= i; f",
        "let f = 1; for (let i = 2; i <= 10; i++) f *= i; f",
    ]

    def script(request: ModelRequest, n: int) -> ModelResponse:
        results = _results(request)
        offered = "execute_javascript" in request.tool_names()
        if offered and (len(results) < 2 or _forced(request)):
            if request.parallel_tool_calls is False:
                return _tools(_call("execute_javascript", {"code": codes[min(len(results), 1)]}, n))
            return _tools(*[_call("execute_javascript", {"code": c}, n, k) for k, c in enumerate(codes)])
        values = [r.get("result") for r in results[-2:]]
        return _answer(f"5! = {values[0]} and 10! = {values[-1]}")

    return script


def error_then_fix() -> Script:
    def script(request: ModelRequest, n: int) -> ModelResponse:
        results = _results(request)
        offered = "execute_javascript" in request.tool_names()
        ok = [r for r in results if "error" not in r]
        if offered and (not ok or _forced(request)):
            code = "const rate = 0.05; 10000 * (1 + rate) ** years" if not results else "10000 * 1.05 ** 15"
            return _tools(_call("execute_javascript", {"code": code}, n))
        return _answer(f"The balance is {ok[-1]['result'] if ok else 'unknown'}.")

    return script


def calc_plus_search() -> Script:
    def script(request: ModelRequest, n: int) -> ModelResponse:
        results = _results(request)
        names = request.tool_names()
        if not results or (_forced(request) and "execute_javascript" in names and len(results) < 1):
            return _tools(_call("execute_javascript", {"code": "(10000 * 1.05 ** 15).toFixed(2)"}, n))
        if len(results) == 1 or (_forced(request) and names):
            tool = "search_web" if "search_web" in names else names[0]
            return _tools(
                _call(tool, {"query": "best savings accounts"} if tool == "search_web" else {"code": "1"}, n)
            )
        return _answer("Compound interest: $20,789.28. Savings accounts: see the search results.")

    return script


def different_failing_code() -> Script:
    def script(request: ModelRequest, n: int) -> ModelResponse:
        if "execute_javascript" in request.tool_names():
            return _tools(_call("execute_javascript", {"code": f"compute{n}(10000, 0.05, 15)"}, n))
        return _answer("I could not get the calculation to run.")

    return script


COMPOUND = "calculate compound interest: $10,000 at 5% annually for 15 years"
COMPOUND_CODE = "(10000 * Math.pow(1.05, 15)).toFixed(2)"


@dataclass
class Scenario:
    name: str
    question: str
    script: Callable[[], Script]
    expect: str | None = None
    """Text a correct answer contains."""
    tools: str = "js"
    tool_choice: str | None = None


SCENARIOS = [
    Scenario(
        "compound interest",
        COMPOUND,
        lambda: calculator(COMPOUND_CODE, "$10,000 grows to ${result}."),
        "20789.28",
    ),
    Scenario(
        "5!",
        "calculate 5 factorial",
        lambda: calculator("let f=1; for (let i=2;i<=5;i++) f*=i; f", "5! = {result}"),
        "120",
    ),
    Scenario(
        "fibonacci 10",
        "fibonacci sequence up to 10 numbers",
        lambda: calculator("const f=[0,1]; while (f.length<10) f.push(f.at(-1)+f.at(-2)); f", "{result}"),
        "34",
    ),
    Scenario("1/0", "calculate 1/0", lambda: calculator("1/0", "1/0 is {result}"), "Infinity"),
    Scenario("5! and 10!", "calculate 5! and 10!", two_factorials, "3628800"),
    Scenario("error then fix", COMPOUND, error_then_fix, "20789.28"),
    Scenario(
        "calc + search",
        "compound interest and best savings accounts",
        calc_plus_search,
        "20,789.28",
        tools="js+search",
    ),
    Scenario(
        "same calc again", COMPOUND, lambda: calculator(COMPOUND_CODE, "${result}", stubborn=True), "20789.28"
    ),
    Scenario("different failing code", COMPOUND, different_failing_code, None),
    Scenario(
        "forced tool_choice",
        COMPOUND,
        lambda: calculator(COMPOUND_CODE, "${result}"),
        "20789.28",
        tool_choice="required",
    ),
]


@dataclass
class Outcome:
    model_calls: int
    executions: int
    prompt_tokens: int
    seconds: float
    stop_reason: str
    answer: str

    def correct(self, expect: str | None) -> bool:
        return bool(self.answer.strip()) and (expect is None or expect in self.answer)


def registry_for(scenario: Scenario, js_tool) -> ToolRegistry:
    return ToolRegistry([js_tool, FakeSearch()] if scenario.tools == "js+search" else [js_tool])


async def run_engine(scenario: Scenario, js_tool) -> Outcome:
    model = CountingModel(scenario.script())
    start = time.perf_counter()
    done: dict = {}
    request = TurnRequest(
        messages=[{"role": "user", "content": scenario.question}], tool_choice=scenario.tool_choice
    )
    async for event in run_turn(
        request, model, registry_for(scenario, js_tool), Deadline.after(60), engine_limits(Settings())
    ):
        if event.type is EventType.DONE:
            done = event.data
    return Outcome(
        model.calls,
        sum(done["tool_counts"].values()),
        model.prompt_tokens,
        time.perf_counter() - start,
        done["stop_reason"],
        done["message"]["content"] or "",
    )


async def run_baseline(scenario: Scenario, js_tool, cap: int = 8) -> Outcome:
    """The seeds' starting point: tool_choice forced to "required", parallel_tool_calls false, every call executed
    (no success detection, no duplicate or loop detection), at most ``cap`` model calls, the last reply's text as
    the answer."""
    model = CountingModel(scenario.script())
    registry = registry_for(scenario, js_tool)
    messages: list[dict[str, Any]] = [{"role": "user", "content": scenario.question}]
    executions, answer, stop = 0, "", "iteration_cap"
    start = time.perf_counter()
    for iteration in range(1, cap + 1):
        request = ModelRequest(
            messages=list(messages),
            deadline=Deadline.after(60),
            tools=registry.schemas(registry.names()),
            tool_choice="required",
            parallel_tool_calls=False,
        )
        response = [item async for item in model.stream(request)][-1]
        answer = response.content
        if not response.tool_calls:
            stop = "stop"
            break
        if iteration == cap:
            break  # tooManyIterations: the calls are dropped; whatever text there is becomes the answer
        messages.append(
            {
                "role": "assistant",
                "content": response.content,
                "tool_calls": [c.to_message() for c in response.tool_calls],
            }
        )
        for call in response.tool_calls:
            tool = registry.get(call.name)
            assert tool is not None, call.name  # the scripts call only registered tools
            result = await tool.run(call.parsed_arguments() or {}, Deadline.after(30))
            executions += 1
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result.content}
            )
    return Outcome(model.calls, executions, model.prompt_tokens, time.perf_counter() - start, stop, answer)


# --- the measurement ------------------------------------------------------------------------------
def measure(js_tool: Tool, reps: int) -> list[dict[str, Any]]:
    """The seed scenarios through this engine and through the baseline loop, with the real sandbox."""
    rows = []
    for scenario in SCENARIOS:
        engine: list[Outcome] = [_asyncio.run(run_engine(scenario, js_tool)) for _ in range(reps)]
        base: list[Outcome] = [_asyncio.run(run_baseline(scenario, js_tool)) for _ in range(reps)]
        e, b = engine[0], base[0]
        rows.append(
            {
                "scenario": scenario.name,
                "engine": {
                    "calls": e.model_calls,
                    "executions": e.executions,
                    "tokens": e.prompt_tokens,
                    "ms": statistics.median([o.seconds for o in engine]) * 1000,
                    "stop": e.stop_reason,
                    "correct": e.correct(scenario.expect),
                },
                "baseline": {
                    "calls": b.model_calls,
                    "executions": b.executions,
                    "tokens": b.prompt_tokens,
                    "ms": statistics.median([o.seconds for o in base]) * 1000,
                    "stop": b.stop_reason,
                    "correct": b.correct(scenario.expect),
                },
            }
        )
    return rows
