"""The bench's smoke run, group "cold" (tests/support/bench_smoke.py): scenarios, engine overhead, cold start (the
built layer's `import app`), fallback and local throughput, tool calls written as text, the context estimator, the
chat page, the conversation store, MCP tools, against an earlier cut, webhooks."""

import re

import pytest

from tests.support.bench_smoke import smoke_run


@pytest.mark.slow(
    seconds=150
)  # builds the layer on a clean clone: handed out first (tests/support/schedule.py)
def test_bench_smoke_run_cold(tmp_path):
    report = smoke_run("cold", tmp_path)
    for section in (
        "## 1. Scenarios",
        "## 2. Engine overhead",
        "## 4. Cold start",
        "## 5. Fallback",
        "## 6. Tool calls written as text",
        "## 9. Context estimator",
        "## 11. The chat page",
        "## 12. The conversation store",
        "## 15. MCP tools",
        "## 16. Against",
        "## Webhooks",
    ):
        assert section in report
    row = next(line for line in report.splitlines() if line.startswith("| compound interest |"))
    calls, executions = re.findall(r"\| (\d+) / (\d+) ", row)[:2]
    assert calls[0] == "2" and executions[0] == "1"  # this engine: 2 model calls, 1 execution
    assert int(calls[1]) > 2  # the baseline needs more
    assert (tmp_path / "scenarios.png").stat().st_size > 10_000
    assert "held back **0 characters**" in report  # a plain answer's first delta is never delayed
    estimator_rows = [
        line
        for line in report.splitlines()
        if line.startswith("| ") and "history" not in line and "%" in line
    ]
    assert estimator_rows and all(
        line.split("|")[4].strip().startswith("+") for line in estimator_rows
    )  # cold: safe side
