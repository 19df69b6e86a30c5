"""Scripted ChatModels for tests. They behave like real models do (seeds 000-004): they keep calling a tool
while it is offered, answer in text once no tools are offered, sometimes return empty content with tool
calls, or write ``<function=...>`` text. Every conversation they receive is checked for validity."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

from chatloop.providers.base import ModelRequest, ModelResponse, TextDelta, ToolCall, Usage

Script = Callable[[ModelRequest, int], ModelResponse]


def assert_valid_conversation(messages: list[dict[str, Any]]) -> None:
    """What every provider requires: each tool message answers exactly one earlier, unanswered tool call of the
    assistant message before it; every call is answered before the next non-tool message; no duplicates."""
    pending: dict[str, str] = {}
    answered: set[str] = set()
    for i, m in enumerate(messages):
        assert m["role"] in {"system", "user", "assistant", "tool"}, (i, m)
        if m["role"] == "tool":
            assert isinstance(m["content"], str), (i, m)
            assert m["tool_call_id"] in pending, f"messages[{i}] answers no pending call: {m}"
            assert m["name"] == pending.pop(m["tool_call_id"]), (i, m)
            answered.add(m["tool_call_id"])
            continue
        assert not pending, f"messages[{i}] comes before calls {pending} are answered"
        if m["role"] == "assistant" and m.get("tool_calls"):
            for call in m["tool_calls"]:
                assert call["id"] not in answered and call["id"] not in pending, f"duplicate id {call['id']}"
                assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)
                pending[call["id"]] = call["function"]["name"]
    assert not pending, f"unanswered calls at the end: {pending}"


class ScriptedModel:
    """A ChatModel test double: ``script(request, call_number)`` returns the response for each call."""

    def __init__(self, script: Script, name: str = "scripted:model", chunk: int = 8):
        self.script, self.name, self.chunk = script, name, chunk
        self.requests: list[ModelRequest] = []

    @property
    def calls(self) -> int:
        return len(self.requests)

    async def stream(self, request: ModelRequest):
        self.requests.append(copy.deepcopy(request))
        assert_valid_conversation(request.messages)
        response = self.script(request, len(self.requests))
        response.model = response.model or self.name
        if response.usage is None:
            prompt = sum(len(str(m.get("content") or "")) for m in request.messages) // 4
            response.usage = Usage(
                prompt, len(response.content) // 4 + 1, prompt + len(response.content) // 4 + 1
            )
        for i in range(0, len(response.content), self.chunk):
            yield TextDelta(response.content[i : i + self.chunk])
        yield response


# --- helpers to write scripts ---------------------------------------------------------------------
def call(name: str, arguments: dict | str, id: str | None = None) -> ToolCall:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=id or f"call_{name}_{abs(hash(args)) % 10**8}", name=name, arguments=args)


def js(code: str, id: str | None = None) -> ToolCall:
    return call("execute_javascript", {"code": code}, id)


def tool_results(request: ModelRequest) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request.messages if m["role"] == "tool"]


def last_result(request: ModelRequest) -> Any:
    for m in reversed(request.messages):
        if m["role"] == "tool":
            body = json.loads(m["content"])
            return body.get("result", body.get("error"))
    return None


def offered(request: ModelRequest) -> list[str]:
    return request.tool_names()


def stubborn_calculator(code: str, answer: str = "The answer is {result}.") -> Script:
    """Seed 000's model: asks for the same calculation whenever execute_javascript is offered (as under a forced
    tool_choice), and answers from the last result when it is not."""

    def script(request: ModelRequest, n: int) -> ModelResponse:
        if "execute_javascript" in offered(request):
            return ModelResponse(
                model="", content="", tool_calls=[js(code, id=f"call_{n}")], finish_reason="tool_calls"
            )
        return ModelResponse(
            model="", content=answer.format(result=last_result(request)), finish_reason="stop"
        )

    return script


class Conversational:
    """Runs the sandbox when asked to compute, answers slowly (piece by piece), and keeps every conversation."""

    name = "scripted:conversational"

    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []

    async def stream(self, request: ModelRequest):
        self.seen.append(request.messages)
        last = request.messages[-1]
        if last["role"] == "user" and "compute" in last["content"] and request.tools:
            yield ModelResponse(self.name, tool_calls=[js("6 * 7", "call_six")], finish_reason="tool_calls")
            return
        users = [m["content"] for m in request.messages if m["role"] == "user"]
        result = last_result(request) if last["role"] == "tool" else None
        text = f"Turn {len(users)}: {users[-1]}" + (f" = {result}" if result is not None else "")
        for word in text.split(" "):
            await asyncio.sleep(0.15 if "slowly" in users[-1] else 0)
            yield TextDelta(word + " ")
        yield ModelResponse(self.name, content=" ".join(text.split(" ")) + " ", finish_reason="stop")


SLOW = "answer slowly please, " + " ".join(f"word{n}" for n in range(40))
"""``Conversational`` writes this answer a word at a time, 0.15 s apart: about six seconds, time enough to reload
in the middle of it on a busy machine."""
