"""``make bench``: measure the loop, the sandbox, cold start, fallback overhead, MCP tools and local throughput on this machine,
and write ``bench/RESULTS.md`` (with the machine, Python and date) and ``bench/scenarios.png``.

``python -m bench --quick --out DIR`` is the smoke run ``make test`` does (few repetitions, written elsewhere);
``--only scenarios,cold_start`` measures those steps alone and reports their sections (``make test`` runs the smoke
run as a few such groups, in parallel: tests/ops/test_bench_*.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import (
    ROOT,
    against,
    bedrock,
    budgets,
    cold_start,
    context,
    fallback,
    fleet,
    handler,
    idempotency,
    lambda_size,
    mcp_tools,
    overhead,
    page,
    report,
    responses,
    sandbox,
    scenarios,
    small_models,
    store,
    streaming,
    textcalls,
    throughput,
    tracing,
    ttft,
    webhooks,
    websocket,
)
from chatloop.tools.javascript import ExecuteJavaScriptTool, JavaScriptSandbox


def steps(quick: bool, js_tool: ExecuteJavaScriptTool) -> list[tuple[str, Callable[[], Any]]]:
    """The measurements in the order they run, each by the name its results go under (``steps(True, tool)[0][0]``
    is ``"scenarios"``); ``quick``: few repetitions."""
    reps = 2 if quick else 30
    return [
        ("scenarios", lambda: scenarios.measure(js_tool, 1 if quick else 5)),
        ("overhead", lambda: overhead.measure(3 if quick else 50)),
        ("sandbox", lambda: sandbox.measure(reps)),
        ("cold_start", lambda: cold_start.measure(1 if quick else 12)),  # 6 samples of each in make bench
        ("fallback", lambda: fallback.measure(3 if quick else 40)),
        ("handler", lambda: handler.measure(2 if quick else 30, js_tool)),
        ("throughput", lambda: throughput.measure(0.5 if quick else 5.0)),
        ("textcalls", lambda: textcalls.measure(3 if quick else 50)),
        ("streaming", lambda: streaming.measure(3 if quick else 15)),
        ("responses", lambda: responses.measure(2 if quick else 50)),
        ("context", lambda: context.measure(2 if quick else 50)),
        ("idempotency", lambda: idempotency.measure(2 if quick else 30, js_tool)),
        ("page", lambda: page.measure(2 if quick else 15)),
        ("store", lambda: store.measure(3 if quick else 50)),
        ("fleet", lambda: fleet.measure(2 if quick else 20)),
        (
            "lambda_size",
            lambda: lambda_size.measure(
                1 if quick else 5,
                1 if quick else 3,
                (512,) if quick else lambda_size.SIZES,
                bedrock=not quick,  # the Bedrock-only chain's run: ~10 s more, not in the smoke run
            ),
        ),
        ("ttft", lambda: ttft.measure(2 if quick else 15)),
        ("mcp", lambda: mcp_tools.measure(2 if quick else 30)),
        (
            "state",
            lambda: __import__("bench.state").state.measure(2 if quick else 20),
        ),  # compaction, approvals
        ("against", lambda: against.measure(1 if quick else 7, 2 if quick else 30)),
        ("budgets", lambda: budgets.measure(2 if quick else 50)),
        ("tracing", lambda: tracing.measure(2 if quick else 30)),
        ("small_models", lambda: small_models.measure(2 if quick else 50)),
        ("webhooks", lambda: webhooks.measure(2 if quick else 30)),
        ("bedrock", lambda: bedrock.measure(2 if quick else 30)),
        ("websocket", lambda: websocket.measure(2 if quick else 15)),
        (
            "websocket_lambda",  # WebSocket mode on Lambda (#44): PostToConnection per event, an idle connection
            lambda: __import__("bench.websocket_lambda").websocket_lambda.measure(2 if quick else 20),
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions (the smoke run in make test)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench", help="where RESULTS.md and scenarios.png go"
    )
    parser.add_argument(
        "--only", default="", help="comma-separated step names: measure and report only those (default: all)"
    )
    args = parser.parse_args()
    quick: bool = args.quick
    args.out.mkdir(parents=True, exist_ok=True)
    box = JavaScriptSandbox()
    js_tool = ExecuteJavaScriptTool(box)
    chosen = steps(quick, js_tool)
    if args.only:
        only = args.only.split(",")
        unknown = sorted(set(only) - {name for name, _ in chosen})
        if unknown:
            parser.error(f"--only: no step named {', '.join(unknown)}")
        chosen = [(name, step) for name, step in chosen if name in only]
    results: dict[str, Any] = {}
    for name, step in chosen:
        start = time.perf_counter()
        results[name] = step()
        print(f"bench: {name} done in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    box.close()
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    if "scenarios" in results:
        report.chart(results["scenarios"], args.out / "scenarios.png")
    (args.out / "RESULTS.md").write_text(report.report(results, quick) + "\n")
    print(f"bench: wrote {args.out / 'RESULTS.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
