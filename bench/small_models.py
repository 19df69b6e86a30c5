"""Small models (issue #36): the cost of repairing a near-miss call and of judging an answer on a 100 KB reply, and
the tool-run rate of the scripted small-model corpus here and before the issue (main at ``BEFORE_COMMIT``).

The corpus is the tests' own: the three answers Qwen2.5-Coder 0.5B gave (tests/support/small_models.py) and the
near-miss calls (``NEAR_MISSES`` there, run by tests/providers/test_near_miss_calls.py) for ``execute_javascript``. Each
case is a scripted model that writes its text, and, told its reply was no answer (any note the engine adds), writes
the near-miss call of the issue's third answer; given a result, it answers from it. Each tree runs the corpus with
its own engine and the real sandbox, in a fresh interpreter.

Usage::

    .venv/bin/python -m bench.small_models          # prints JSON; make bench reports it
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import ROOT
from bench.common import child_values, median, tree_at

BEFORE_COMMIT = "f2bf02a"
"""main when issue #36 was taken up."""
BEFORE_41 = "ac06bfd"
"""main when issue #41 was taken up."""
TARGET_MS = 2.0

# Runs in a fresh interpreter inside one tree (its src/ first on sys.path); the corpus comes on stdin.
CHILD = r"""
import asyncio, json, sys
from chatloop.deadline import Deadline
from chatloop.engine import run_turn
from chatloop.engine.request import TurnRequest
from chatloop.providers.base import ModelResponse, TextDelta
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool, JavaScriptSandbox

corpus = json.load(sys.stdin)

class Scripted:
    name = "scripted:small"
    def __init__(self, case):
        self.case = case
    async def stream(self, request):
        messages = request.messages
        last = messages[-1]
        user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        noted = any(m["role"] == "system" for m in messages[user:])
        if last["role"] == "tool":
            body = json.loads(last["content"])
            if "result" in body:
                content = "The balance after 15 years is $%s." % body["result"]
            elif self.case["unknown"] in str(body.get("error")):
                content = self.case["tool_error"]
            else:
                content = "I could not compute it."
        elif noted:
            content = self.case["on_reminder"]
        else:
            content = self.case["first"]
        for i in range(0, len(content), 9):
            yield TextDelta(content[i : i + 9])
        yield ModelResponse(model=self.name, content=content, finish_reason="stop")

async def run(box):
    ran = junk = 0
    registry = ToolRegistry([ExecuteJavaScriptTool(box)])
    for case in corpus:
        done = None
        async for event in run_turn(TurnRequest(messages=[{"role": "user", "content": case["question"]}]),
                                    Scripted(case), registry, Deadline.after(30)):
            if event.type == "done":
                done = event.data
        ran += done["tool_counts"].get("execute_javascript", 0) > 0
        answer = done["message"]["content"]
        junk += any(mark in answer for mark in ('"error"', "<tools>", "```", '"name"', "RAW TOOL RESULTS"))
    return {"cases": len(corpus), "tool_ran": ran, "junk_answers": junk}

box = JavaScriptSandbox()
box.warm()
try:
    print(json.dumps(asyncio.run(run(box))))
finally:
    box.close()
"""

# The repeated-narration cases of issue #36, run by each tree's engine: a scripted model (or chain) per case; how many
# model calls the turn made and how often the case's first sentence is in the answer (1: said once).
RETRY_CHILD = r"""
import asyncio, json
from chatloop.deadline import Deadline
from chatloop.engine import run_turn
from chatloop.engine.request import TurnRequest
from chatloop.providers.base import ModelResponse, TextDelta
from chatloop.providers.chain import FallbackChain
try:
    from chatloop.providers.failures import Transient
except ImportError:  # the tree before #32 named the module by its old name
    from chatloop.providers.errors import Transient
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool, JavaScriptSandbox

class Says:
    def __init__(self, name, replies, cut=None):
        self.name, self.replies, self.cut, self.calls = name, replies, cut, 0
    async def stream(self, request):
        content = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        shown = content if self.cut is None else content[: self.cut]
        for i in range(0, len(shown), 7):
            yield TextDelta(shown[i : i + 7])
        if self.cut is not None:
            raise Transient("the stream was cut mid-reply", model=self.name)
        yield ModelResponse(model=self.name, content=content, finish_reason="stop")

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
           "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ANSWER = "The balance after 15 years is $20,789.28. It more than doubles the deposit."
QUOTED = {
    "hermes tag in prose": 'In Hermes format a call looks like `<tool_call>{"name": "execute_javascript", '
        '"arguments": {"code": "1"}}</tool_call>`. The server reads it.',
    "Llama's tag in prose": 'Llama 3.1 starts a call with <|python_tag|>{"name": "execute_javascript", '
        '"parameters": {"code": "1"}} and a stop token. Plain answers need none.',
    "Groq's tag in prose": "Groq's legacy dialect writes <function=execute_javascript>{\"code\": \"1\"}</function> "
        "inside the text. That is why it fails.",
    "hermes tag, no call body": "In Hermes format a call looks like <tool_call>{...}</tool_call> and you should "
        "never run it.",
    "a fenced example": "A call looks like this:\n```\n<tool_call>\n{\"name\": \"execute_javascript\", "
        "\"arguments\": {\"code\": \"1\"}}\n</tool_call>\n```\nYou should never run it yourself.",
    "RAW TOOL RESULTS: echo": 'Here is what the sandbox returned. RAW TOOL RESULTS: [{"result": 2}]',
}

def cases():
    for label, text in QUOTED.items():
        yield label, [Says("m:a", [text])], {}, text.split("<")[0].split("RAW")[0].strip()[:30]
    yield ("the forced client call ignored", [Says("m:a", ["It is sunny in Oslo today."])],
           {"client_tools": [WEATHER], "tool_choice": "required"}, "It is sunny in Oslo today.")
    yield ("a cut, the next model restarts", [Says("m:a", [ANSWER], cut=40), Says("m:b", [ANSWER])], {},
           "The balance after 15 years")
    yield "a nudge after an empty reply", [Says("m:a", ["", "It is 42."])], {}, "It is 42."

async def run(box):
    registry = ToolRegistry([ExecuteJavaScriptTool(box)])
    out = {}
    for label, models, extra, sentence in cases():
        chain = FallbackChain(models)
        done = None
        request = TurnRequest(messages=[{"role": "user", "content": "?"}], **extra)
        async for event in run_turn(request, chain, registry, Deadline.after(30)):
            if event.type == "done":
                done = event.data
        out[label] = {"calls": sum(m.calls for m in models),
                      "said": done["message"]["content"].count(sentence)}
    return out

box = JavaScriptSandbox()
box.warm()
try:
    print(json.dumps(asyncio.run(run(box))))
finally:
    box.close()
"""


def corpus() -> list[dict[str, str]]:
    """The scripted small-model cases (the tests' tables)."""
    from tests.support import small_models as s

    base = {"unknown": s.UNKNOWN, "tool_error": s.TOOL_ERROR, "on_reminder": s.FENCED_NEAR_MISS}
    cases = [{**base, "question": s.QUESTIONS[c], "first": s.FIRST_REPLY[c]} for c in s.QUESTIONS]
    cases += [
        {**base, "question": f"near miss: {label}", "first": text, "on_reminder": text}
        for label, text, (name, _) in s.NEAR_MISSES
        if name == s.JS
    ]
    return cases + corpus_41()


def corpus_41() -> list[dict[str, str]]:
    """Issue #41's turns: the same fenced call three times; after ``UnknownTool``, the unknown call again (flat, in
    a fence)."""
    from tests.support import small_models as s

    return [
        {
            "question": s.QUESTIONS_41[case],
            "first": s.FIRST_REPLY_41[case],
            "unknown": s.CAMEL,
            "tool_error": s.UNKNOWN_FENCED,
            "on_reminder": s.FENCED_NEAR_MISS,
        }
        for case in s.QUESTIONS_41
    ]


def _run_corpus(tree: Path, cases: list[dict[str, str]], child: str = CHILD) -> dict[str, Any]:
    return child_values(tree, child, stdin=json.dumps(cases))


def replies_100kb() -> dict[str, str]:
    """Two 100 KB replies: an answer with no call (prose with braces and a JSON example), and the same words ending
    in a near-miss call whose 8 KB of code has raw newlines (so it is repaired)."""
    words = (
        "Compound interest grows a balance by its rate each period, so the gain itself earns interest {like this}; "
        'a JSON example: {"rate": 0.05, "years": 15}. '
    )
    prose = (words * (100_000 // len(words) + 1))[:100_000]
    code = "let total = 10000;\n" + "total = total * 1.05;\n" * 370 + "Math.round(total * 100) / 100"
    call = '\n```json\n{"name": "execute_javascript", "arguments": {"code": "' + code + '"}}\n```'
    return {"answer, no call": prose, "near-miss call at the end": prose[: 100_000 - len(call)] + call}


def measure(reps: int, corpus_runs: bool = True) -> dict[str, Any]:
    from chatloop.engine.answers import judge_answer
    from chatloop.providers.textcall_formats import find_text_calls, tool_keys
    from chatloop.tools.base import ToolRegistry
    from chatloop.tools.javascript import ExecuteJavaScriptTool

    schemas = ToolRegistry([ExecuteJavaScriptTool(None)]).schemas(["execute_javascript"])  # type: ignore[arg-type]
    keys = tool_keys(schemas)
    cost_ms: dict[str, float] = {}
    for label, reply in replies_100kb().items():
        found = find_text_calls(reply, keys)
        assert (found is not None) == label.startswith("near-miss"), label
        times = []
        for _ in range(reps):  # as the engine reads a reply: calls recovered, and an answer judged
            start = time.perf_counter()
            if find_text_calls(reply, keys) is None:
                judge_answer(reply, schemas, calls_read=True)
            times.append((time.perf_counter() - start) * 1000)
        cost_ms[label] = median(times)
    code = "let total = 10000;\n" + "total = total * 1.05;\n" * 40  # a 1 KB call with trailing commas
    near_miss = '{"name": "execute_javascript", "arguments": {"code": ' + json.dumps(code) + ",},}"
    assert find_text_calls(near_miss, keys) is not None
    repair = []
    for _ in range(reps):
        start = time.perf_counter()
        find_text_calls(near_miss, keys)
        repair.append((time.perf_counter() - start) * 1000)
    out: dict[str, Any] = {"cost_ms": cost_ms, "target_ms": TARGET_MS, "json_repair_1kb_ms": median(repair)}
    if corpus_runs:
        cases = corpus()
        with tempfile.TemporaryDirectory(prefix="chatloop-small-models-") as tmp:
            before = tree_at(BEFORE_COMMIT, Path(tmp) / "before")
            out["corpus"] = {"before": _run_corpus(before, cases), "here": _run_corpus(ROOT, cases)}
            issue = corpus_41()
            before_41 = tree_at(BEFORE_41, Path(tmp) / "before_41")
            out["corpus_41"] = {"before": _run_corpus(before_41, issue), "here": _run_corpus(ROOT, issue)}
            out["retries"] = {
                "before": _run_corpus(before, [], RETRY_CHILD),
                "here": _run_corpus(ROOT, [], RETRY_CHILD),
            }
        out["before_commit"] = BEFORE_COMMIT
    return out


def section(x: dict[str, Any]) -> list[str]:
    """The report's section for these measurements."""
    lines = [
        "## 17. Small models: near-miss repair, the answer check, the tool-run rate",
        "",
        "Cost of reading a 100 KB reply as the engine does, `find_text_calls` (with the repair) then, for an answer, "
        "`judge_answer` (median ms, target "
        f"≤ {x['target_ms']:g} ms): "
        + ", ".join(
            f"{label}: **{ms:.2f}** ({'met' if ms <= x['target_ms'] else 'MISSED'})"
            for label, ms in x["cost_ms"].items()
        )
        + f". A 1 KB call with trailing commas, which only `json-repair` (pure Python) reads: "
        f"**{x['json_repair_1kb_ms']:.2f} ms**; it is given at most 8 KB.",
        "",
    ]
    if "corpus" in x:
        c = x["corpus"]
        lines += [
            f"The scripted small-model corpus ({c['here']['cases']} turns: issue #36's three answers, the "
            "`execute_javascript` near misses, and issue #41's two), run by each tree's engine with the real sandbox:",
            "",
            "| tree | turns where the tool ran | answers that were junk |",
            "|---|---|---|",
            f"| main at {x['before_commit']} (before) | {c['before']['tool_ran']} / {c['before']['cases']} | "
            f"{c['before']['junk_answers']} |",
            f"| here | {c['here']['tool_ran']} / {c['here']['cases']} | {c['here']['junk_answers']} |",
            "",
        ]
    if "corpus_41" in x:
        b, h = x["corpus_41"]["before"], x["corpus_41"]["here"]
        lines += [
            "Of those, issue #41's two turns (the same fenced call three times; the unknown tool's call again after "
            f"its `UnknownTool` error): the tool ran in {b['tool_ran']} of {b['cases']} at main {BEFORE_41} "
            f"({b['junk_answers']} "
            f"junk answers), {h['tool_ran']} of {h['cases']} here ({h['junk_answers']} junk).",
            "",
        ]
    if "retries" in x:
        r = x["retries"]
        lines += [
            "A call made again for the reply it began (issue #36's cases, scripted): model calls, and how many times "
            "the case's first sentence is in the answer (1: said once), before and here:",
            "",
            "| case | calls before | said before | calls here | said here |",
            "|---|---|---|---|---|",
        ]
        for case, was in r["before"].items():
            now = r["here"][case]
            lines.append(f"| {case} | {was['calls']} | {was['said']} | {now['calls']} | {now['said']} |")
        lines.append("")
    return lines


def main() -> int:
    print(json.dumps(measure(20), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
