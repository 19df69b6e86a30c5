"""The Responses API's remaining state (issue 37): what compaction costs the server (the summary call's request, the
item sealed, the bytes before and after, at 100 and 1,000 messages; an instant scripted summarizer, so the model's
own time, which dominates with a real model, is left out), the latency an approval round trip adds to a turn
(the asking request and the answering one, against the same call run unasked), through the real handler with
REST events, a SQLite store and an instant model, and what sealing a queued background request's secrets costs.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import InstantModel, NoopTool, median
from chatloop.providers.base import ModelRequest, ModelResponse

SIZES = (100, 1000)


class InstantSummarizer:
    """Answers a summary request at once with one line per tenth of the conversation (a summary's typical size)."""

    name = "scripted:summarizer"

    async def stream(self, request: ModelRequest) -> Any:
        lines = request.messages[-1]["content"].count("\n\n") // 10 + 1
        yield ModelResponse(
            self.name, content="\n".join(f"- note {i}" for i in range(lines)), finish_reason="stop"
        )


def _conversation(messages: int) -> list[dict[str, Any]]:
    said = "How much is 10,000 at 5 % a year, compounded monthly, after 30 years? Show the formula."
    answer = "With monthly compounding the balance is P(1 + r/12)^(12t): 44,677.44 after 30 years."
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": said if i % 2 == 0 else answer}
        for i in range(messages)
    ]


def compaction(reps: int) -> dict[str, Any]:
    from starlette.applications import Starlette
    from starlette.requests import Request

    from chatloop.api.http.context import RequestContext
    from chatloop.api.runtime import Runtime
    from chatloop.api.turns.compaction import compaction_item
    from chatloop.config import Settings
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.base import ToolRegistry

    runtime = Runtime(
        Settings(),
        chain=FallbackChain([InstantSummarizer()]),
        registry=ToolRegistry(),
        keys_loader=lambda s: {"groq": "gsk_bench_key"},
    )
    app = Starlette()
    app.state.runtime = runtime  # what create_app does
    results: dict[str, Any] = {}

    def context() -> RequestContext:
        headers = [(b"x-api-key", b"bench")]
        return RequestContext.of(
            Request({"type": "http", "method": "POST", "path": "/", "headers": headers, "app": app})
        )

    asyncio.run(
        compaction_item(context(), runtime.models.chain(), _conversation(2))
    )  # the first use: imports, the key
    for size in SIZES:
        messages = _conversation(size)
        times: list[float] = []
        item: Any = None
        for _ in range(reps):
            ctx = context()
            start = time.perf_counter()
            item, _, given = asyncio.run(compaction_item(ctx, runtime.models.chain(), messages))
            times.append((time.perf_counter() - start) * 1000)
        before = len(json.dumps(messages).encode())
        after = len(json.dumps([given.message()]).encode())
        results[str(size)] = {
            "ms": median(times),
            "bytes_before": before,
            "bytes_after": after,
            "item_bytes": len(json.dumps(item).encode()),
        }
    return results


def approvals(reps: int) -> dict[str, Any]:
    from scripts.invoke_local import LocalContext
    from tests.support.events import rest_event

    import app as lambda_app
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.base import ToolRegistry

    def post(body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        event = rest_event("POST", "/v1/responses", body)
        event["requestContext"]["identity"]["apiKeyId"] = "bench-key"
        start = time.perf_counter()
        response = lambda_app.handler(event, LocalContext())
        elapsed = (time.perf_counter() - start) * 1000
        assert response["statusCode"] == 200, response
        return json.loads(response["body"]), elapsed

    saved = getattr(lambda_app.app.state, "runtime", None)
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "bench.sqlite3")
        direct: list[float] = []
        asked: list[float] = []
        answered: list[float] = []
        try:
            for policy, out in (("", direct), ("noop", None)):
                settings = Settings(conversation_store_path=store, approval_required_tools=policy)
                lambda_app.app.state.runtime = Runtime(
                    settings,
                    chain=FallbackChain([InstantModel(1)]),
                    registry=ToolRegistry([NoopTool()]),
                    keys_loader=lambda s: {"groq": "gsk_bench_key"},
                )
                for _ in range(reps * 5):
                    body, ms = post({"model": "chatloop", "input": "go"})
                    if out is not None:
                        out.append(ms)
                        continue
                    request = next(o for o in body["output"] if o["type"] == "mcp_approval_request")
                    asked.append(ms)
                    answer = {
                        "type": "mcp_approval_response",
                        "approval_request_id": request["id"],
                        "approve": True,
                    }
                    _, ms = post({"model": "chatloop", "previous_response_id": body["id"], "input": [answer]})
                    answered.append(ms)
        finally:
            lambda_app.app.state.runtime = saved
    return {
        "direct_ms": median(direct),
        "ask_ms": median(asked),
        "answer_ms": median(answered),
        "added_ms": median(asked) + median(answered) - median(direct),
        "reps": reps * 5,
    }


def queued_secrets(reps: int) -> dict[str, Any]:
    """A background request's secrets sealed when it is queued and opened by its worker (issue 41), per request,
    with the key as a warm container holds it: a body with two client MCP servers (authorization and headers)."""
    from chatloop.api.openai.responses.sealed_request import open_secrets, seal_secrets
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.base import ToolRegistry

    runtime = Runtime(
        Settings(),
        chain=FallbackChain([InstantModel(1)]),
        registry=ToolRegistry(),
        keys_loader=lambda s: {"groq": "gsk_bench_key"},
    )
    tools = [
        {
            "type": "mcp",
            "server_label": f"s{i}",
            "server_url": f"https://mcp{i}.example/mcp",
            "authorization": "tok_" + "x" * 40,
            "headers": {"X-Tenant": "tenant-" + "y" * 24},
        }
        for i in range(2)
    ]
    body: dict[str, Any] = {"model": "chatloop", "input": "go", "background": True, "tools": tools}

    async def run() -> tuple[list[float], list[float]]:
        sealing: list[float] = []
        opening: list[float] = []
        await open_secrets(runtime, "o", "resp_0", await seal_secrets(runtime, "o", "resp_0", body))  # warm
        for i in range(reps * 50):
            rid = f"resp_{i}"
            start = time.perf_counter()
            kept = await seal_secrets(runtime, "apikey:bench", rid, body)
            sealing.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            opened = await open_secrets(runtime, "apikey:bench", rid, kept)
            opening.append((time.perf_counter() - start) * 1000)
            assert opened == body
        return sealing, opening

    sealing, opening = asyncio.run(run())
    return {"seal_ms": median(sealing), "open_ms": median(opening), "reps": reps * 50}


def measure(reps: int) -> dict[str, Any]:
    return {
        "compaction": compaction(reps),
        "approvals": approvals(reps),
        "queued_secrets": queued_secrets(reps),
        "reps": reps,
    }


def section(results: dict[str, Any]) -> list[str]:
    """The report's section (bench/report.py)."""
    c, a = results["compaction"], results["approvals"]
    lines = [
        "## Compaction and approvals",
        "",
        "Compaction's server-side cost (the summary request built, an instant summarizer's answer, the item sealed "
        "with AES-GCM; a real model's own time comes on top) and the bytes a conversation takes before and after:",
        "",
        "| messages | compaction (ms) | bytes before | bytes after (the summary message) | the item (bytes) |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {n} | {c[n]['ms']:.2f} | {c[n]['bytes_before']:,} | {c[n]['bytes_after']:,} | {c[n]['item_bytes']:,} |"
        for n in c
    ]
    lines += [
        "",
        f"An approval round trip through the handler (REST events, SQLite store, instant model, an in-process tool), "
        f"medians over {a['reps']}: the call run unasked {a['direct_ms']:.1f} ms; asked {a['ask_ms']:.1f} ms, then "
        f"answered and run {a['answer_ms']:.1f} ms: **{a['added_ms']:.1f} ms added** by the round trip (a person's "
        "own time aside).",
        "",
    ]
    q = results.get("queued_secrets")
    if q is not None:
        lines += [
            f"A background request's secrets (two client MCP servers' authorization and headers) sealed when it is "
            f"queued, medians over {q['reps']}: **{q['seal_ms'] * 1000:.0f} µs** (target ≤ 1 ms), opened by its "
            f"worker {q['open_ms'] * 1000:.0f} µs.",
            "",
        ]
    return lines
