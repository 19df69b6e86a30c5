"""OpenTelemetry tracing's cost: a calculation-shaped turn through the Lambda handler with tracing on (the SDK with an
in-memory exporter and metric reader) and off, rounds alternating; and ``import app`` with no exporter configured
(nothing of OpenTelemetry loaded) against importing the tracing modules a first traced turn loads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from bench import ROOT
from bench.common import InstantModel, NoopTool, median

TARGET_US = 1000.0
"""The issue's budget: at most 1 ms of handler time per turn for tracing."""


def measure(reps: int) -> dict[str, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from scripts.invoke_local import LocalContext
    from tests.support.events import rest_event

    import app as lambda_app
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.base import ToolRegistry
    from chatloop.tracing.setup import install, uninstall

    saved = lambda_app.app.state.runtime
    # A calculation's shape without the sandbox or a network: two model calls and one tool run.
    lambda_app.app.state.runtime = Runtime(
        Settings(), chain=FallbackChain([InstantModel(1)]), registry=ToolRegistry([NoopTool()])
    )
    event = rest_event("POST", "/chat", {"messages": [{"role": "user", "content": "go"}], "stream": False})

    def turn() -> float:
        start = time.perf_counter()
        response = lambda_app.handler(event, LocalContext())
        elapsed = (time.perf_counter() - start) * 1e6
        assert response["statusCode"] == 200, response
        return elapsed

    on: list[float] = []
    off: list[float] = []
    spans_per_turn = 0
    try:
        for _ in range(3):  # warm both paths (the SDK's first spans, the handler's first request)
            turn()
        for i in range(reps * 10):
            traced = i % 2 == 0
            if traced:
                exporter = InMemorySpanExporter()  # a provider's shutdown shuts its exporter down
                provider = TracerProvider()
                provider.add_span_processor(SimpleSpanProcessor(exporter))
                install(provider, MeterProvider(metric_readers=[InMemoryMetricReader()]))
                on.append(turn())
                spans_per_turn = len(exporter.get_finished_spans())
                uninstall()
            else:
                off.append(turn())
    finally:
        uninstall()
        lambda_app.app.state.runtime = saved
    overhead = median(on) - median(off)
    return {
        "turn_on_us": median(on),
        "turn_off_us": median(off),
        "overhead_us": overhead,
        "within_target": overhead <= TARGET_US,
        "spans_per_turn": spans_per_turn,
        "turns": len(on) + len(off),
        **_imports(max(3, reps // 3)),
    }


def _imports(reps: int) -> dict[str, Any]:
    """``import app`` with no exporter (and whether anything of OpenTelemetry was loaded), and the tracing modules'
    own import (what the first traced turn of a container pays)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT / "src")

    def timed(statement: str) -> tuple[float, str]:
        code = (
            f"import time, sys; t = time.perf_counter(); {statement}; ms = (time.perf_counter() - t) * 1000; "
            "print(ms, sorted(m for m in sys.modules if m.startswith('opentelemetry'))[:1], file=sys.stderr)"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        ms, loaded = result.stderr.strip().splitlines()[-1].split(" ", 1)
        return float(ms), loaded

    app_runs = [timed("import app") for _ in range(reps)]
    sdk_runs = [timed("import app; import chatloop.tracing.turn") for _ in range(reps)]
    return {
        "import_app_ms": median([ms for ms, _ in app_runs]),
        "otel_loaded_by_import_app": app_runs[-1][1] != "[]",
        "import_app_and_tracing_ms": median([ms for ms, _ in sdk_runs]),
    }


def section(t: dict[str, Any]) -> list[str]:
    return [
        "## Tracing (OpenTelemetry)",
        "",
        f"A calculation-shaped turn through the Lambda handler (an instant model, two calls and one no-op tool run: "
        f"the handler's own cost), tracing on (the SDK, {t['spans_per_turn']} spans a turn to an in-memory exporter, "
        f"the GenAI metrics to an in-memory reader) and off, alternating, {t['turns']} turns (medians). The export "
        "itself, a network call at the end of a Lambda invocation, is not in it:",
        "",
        "| | µs a turn |",
        "|---|---|",
        f"| tracing off | {t['turn_off_us']:.0f} |",
        f"| tracing on | {t['turn_on_us']:.0f} |",
        f"| **overhead** (target ≤ 1000) | **{t['overhead_us']:.0f}** ({'met' if t['within_target'] else 'MISSED'}) |",
        "",
        f"- `import app` with no exporter configured: {t['import_app_ms']:.0f} ms, OpenTelemetry loaded: "
        f"{'yes (regression)' if t['otel_loaded_by_import_app'] else 'no'}",
        f"- `import app` and the tracing modules (the SDK, the OTLP exporter; paid once, by a container's first "
        f"traced turn): {t['import_app_and_tracing_ms']:.0f} ms",
        "",
    ]
