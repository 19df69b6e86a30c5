"""The bench's smoke run, group "streams" (tests/support/bench_smoke.py): the sandbox, stream vs buffered response
modes, time to first token, tracing, small models, WebSocket mode vs HTTP SSE."""

import re

import pytest

from tests.support.bench_smoke import smoke_run


@pytest.mark.slow(seconds=45)
def test_bench_smoke_run_streams(tmp_path):
    report = smoke_run("streams", tmp_path)
    for section in (
        "## 3. Sandbox",
        "## 7. Response modes",
        "## 14. Time to first token",
        "## Tracing (OpenTelemetry)",
        "## 17. Small models",
        "## WebSocket mode vs HTTP SSE",
    ):
        assert section in report
    stream = next(line for line in report.splitlines() if line.startswith("| stream |"))
    buffered = next(line for line in report.splitlines() if line.startswith("| buffered"))
    first_event, _ = map(int, re.findall(r"\| (\d+)", stream))
    first_byte, last_byte = map(int, re.findall(r"\| (\d+)", buffered))
    assert first_event < first_byte / 2 and first_byte == last_byte  # streamed: the first event comes early
