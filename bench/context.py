"""The context estimator: what it costs per model call, and how far its estimate is from real token counts.

Real counts come from OpenAI's o200k_base encoding (GPT-4o, GPT-4.1, gpt-oss), computed offline by the
``gpt-tokenizer`` npm package (tests/clients/count_tokens.mjs). Positive errors are overestimates: the safe side,
where a conversation is trimmed a little early rather than rejected by the provider.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import replace
from typing import Any

from bench import ROOT
from bench.common import median

MODEL = "openai:gpt-4.1-mini"


def conversations() -> dict[str, list[dict[str, Any]]]:
    """100-message histories of four kinds of content."""
    prose: list[dict[str, Any]] = []
    code: list[dict[str, Any]] = []
    data: list[dict[str, Any]] = []
    cyrillic: list[dict[str, Any]] = []
    for n in range(50):
        prose += [
            {
                "role": "user",
                "content": f"Could you explain, in a few sentences, why the sky looks blue at noon on day {n}?",
            },
            {
                "role": "assistant",
                "content": "Sunlight scatters off the molecules of the air, and the shorter blue wavelengths scatter far more than the red ones, so blue reaches your eyes from every part of the sky.",
            },
        ]
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {
                "name": "execute_javascript",
                "arguments": json.dumps(
                    {
                        "code": f"const xs = Array.from({{length: {n + 5}}}, (_, i) => i * i);\nxs.filter((x) => x % 3 === 0).reduce((a, b) => a + b, 0)"
                    }
                ),
            },
        }
        code += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": f"call_{n}",
                "name": "execute_javascript",
                "content": json.dumps({"result": n * 17, "output": ""}),
            },
        ]
        data += [
            {"role": "user", "content": f"Order {n}?"},
            {
                "role": "assistant",
                "content": json.dumps(
                    {
                        "order_id": f"A-{1000 + n}",
                        "items": [{"sku": f"SKU-{n}-{i}", "qty": i, "price": 9.99 + i} for i in range(4)],
                        "status": "shipped",
                    }
                ),
            },
        ]
        cyrillic += [
            {"role": "user", "content": f"Почему небо голубое в полдень, день {n}?"},
            {
                "role": "assistant",
                "content": "Солнечный свет рассеивается молекулами воздуха, и короткие синие волны рассеиваются сильнее красных.",
            },
        ]
    return {"English prose": prose, "code and tool results": code, "JSON": data, "Cyrillic prose": cyrillic}


def real_counts(histories: list[list[dict[str, Any]]]) -> list[int] | None:
    node = shutil.which("node")
    script = ROOT / "tests" / "clients" / "count_tokens.mjs"
    if node is None or not (ROOT / "node_modules" / "gpt-tokenizer").is_dir():
        return None
    done = subprocess.run(
        [node, str(script)],
        input=json.dumps(histories),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    counts: list[int] = json.loads(done.stdout)
    return counts


def measure(reps: int) -> dict:
    from chatloop.deadline import Deadline
    from chatloop.providers.base import ModelRequest
    from chatloop.providers.tokens import TokenEstimator

    kinds = conversations()
    requests = {
        k: ModelRequest(messages=v, deadline=Deadline.after(60), max_tokens=1) for k, v in kinds.items()
    }
    estimator = TokenEstimator()
    cold = {k: estimator.prompt_tokens(r.messages, None, MODEL) for k, r in requests.items()}
    truth = real_counts([r.messages for r in requests.values()])
    rows: dict[str, dict[str, Any]] = {}
    if truth is not None:
        real = dict(zip(kinds, truth, strict=True))
        earlier = real_counts([r.messages[:-10] for r in requests.values()]) or []
        for (kind, request), count in zip(requests.items(), earlier, strict=True):
            # The model reported usage for this conversation five exchanges ago; the next call is estimated.
            learner = TokenEstimator()
            learner.observe(MODEL, replace(request, messages=request.messages[:-10]), count)
            warm = learner.prompt_tokens(request.messages, None, MODEL)
            rows[kind] = {
                "real": real[kind],
                "cold": cold[kind],
                "cold_error": cold[kind] / real[kind] - 1,
                "calibrated": warm,
                "calibrated_error": warm / real[kind] - 1,
            }
    request = requests["code and tool results"]
    timings = []
    for _ in range(reps * 20):
        start = time.perf_counter()
        estimator.tokens(request, MODEL)
        timings.append((time.perf_counter() - start) * 1e6)
    return {"rows": rows, "estimate_us": median(timings), "messages": len(request.messages)}
