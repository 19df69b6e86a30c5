"""Tool calls written as text: the parser's cost per response (a 2 KB answer with no call, and a call in each
format after ~2 KB of words), and what the stream filter holds back of a plain answer (its added time to first
token)."""

from __future__ import annotations

import json
import time
from typing import Any

from bench.common import median
from chatloop.engine.textfilter import TextCallFilter
from chatloop.providers.textcall_formats import find_text_calls

TOOLS = {"execute_javascript": {"code", "timeout_seconds"}}
ARGUMENTS = {"code": "Math.round(10000 * 1.05 ** 15 * 100) / 100"}
CALL: dict[str, Any] = {"name": "execute_javascript", "arguments": ARGUMENTS}
WORDS = (
    "Compound interest grows a balance by its rate each period, so the gain itself earns interest; over fifteen "
    "years at five percent a sum roughly doubles. Here is the arithmetic, step by step, with the assumptions. "
)
PLAIN = (WORDS * 12)[:2048]
PREFIX = (WORDS * 12)[:1900] + "\n"
SAMPLES = {
    "no call (2 KB answer)": PLAIN,
    "hermes": PREFIX + f"<tool_call>{json.dumps(CALL)}</tool_call>",
    "python_tag": PREFIX + "<|python_tag|>" + json.dumps({"name": CALL["name"], "parameters": ARGUMENTS}),
    "function_tag": PREFIX + f"<function=execute_javascript>{json.dumps(ARGUMENTS)}</function>",
    "fenced_json": PREFIX + f"```json\n{json.dumps(CALL, indent=2)}\n```",
    "json": PREFIX + json.dumps(CALL),
    "flat_json": PREFIX + json.dumps({"name": CALL["name"], **ARGUMENTS}),
}


def measure(reps: int) -> dict[str, Any]:
    parse_us: dict[str, float] = {}
    for label, text in SAMPLES.items():
        found = find_text_calls(text, TOOLS)
        assert (found is None) == (label.startswith("no call")), label
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            for _ in range(20):
                find_text_calls(text, TOOLS)
            times.append((time.perf_counter() - start) / 20 * 1e6)
        parse_us[label] = median(times)
    pieces = [PLAIN[i : i + 16] for i in range(0, len(PLAIN), 16)]  # 16-character deltas, as models stream
    held_first = TextCallFilter(hold_json=True).feed(pieces[0])
    filter_us = []
    for _ in range(reps):
        box = TextCallFilter(hold_json=True)
        start = time.perf_counter()
        shown = "".join(box.feed(p) for p in pieces)
        filter_us.append((time.perf_counter() - start) / len(pieces) * 1e6)
        assert shown + box.finish(PLAIN) == PLAIN
    return {
        "parse_us": parse_us,
        "first_delta_held_chars": len(pieces[0]) - len(held_first),
        "filter_us_per_delta": median(filter_us),
    }
