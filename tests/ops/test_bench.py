"""A quick smoke run of `make bench` so it never rots: every section is written, and the headline holds."""

import re
import subprocess
import sys

import pytest

from tests.support.repo import ROOT


@pytest.mark.slow(
    seconds=120
)  # the longest test: a parallel run hands it out first (tests/support/schedule.py)
def test_bench_smoke_run(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # a bound on a hung run, not a speed target: a clean clone builds the layer first
    )
    assert run.returncode == 0, run.stderr[-4000:]  # the bench's own traceback, not only its exit status
    report = (tmp_path / "RESULTS.md").read_text()
    for section in (
        "## 1. Scenarios",
        "## 2. Engine overhead",
        "## 3. Sandbox",
        "## 4. Cold start",
        "## 5. Fallback",
        "## 6. Tool calls written as text",
        "## 7. Response modes",
        "## 8. Responses API vs chat completions",
        "## 9. Context estimator",
        "## 10. Retried requests",
        "## 11. The chat page",
        "## 12. The conversation store",
        "## 13. Lambda-sized",
        "## 14. Time to first token",
        "## 15. MCP tools",
        "## Compaction and approvals",
        "## 16. Against",
        "## Tracing (OpenTelemetry)",
        "## 17. Small models",
        "## Amazon Bedrock member vs Groq member",
        "## WebSocket mode on Lambda: PostToConnection",
    ):
        assert section in report
    lambda_sized = report.split("## 13. Lambda-sized")[1].split("## 14.")[0]
    if (
        "Skipped:" not in lambda_sized
    ):  # where cgroups can be made: cold and restored, here and the previous main
        row = next(line for line in lambda_sized.splitlines() if line.startswith("| 512 MB (0.29)"))
        cold, restored = row.split("|")[2:4]
        assert re.search(r"\*\*\d+ ms\*\* \(\d+; ×\d", cold) and re.search(
            r"\*\*\d+ ms\*\* \(\d+; ×\d", restored
        )
        assert "Targets at 512 MB (issue #34): cold ≤ 1,200 ms" in lambda_sized
        assert re.search(r"modules compiled from source \(.*\): here 0, base \d+;", lambda_sized)
        assert "opened more than once (of those opened): here 0 (of" in lambda_sized
    row = next(line for line in report.splitlines() if line.startswith("| compound interest |"))
    calls, executions = re.findall(r"\| (\d+) / (\d+) ", row)[:2]
    assert calls[0] == "2" and executions[0] == "1"  # this engine: 2 model calls, 1 execution
    assert int(calls[1]) > 2  # the baseline needs more
    assert (tmp_path / "scenarios.png").stat().st_size > 10_000
    assert "held back **0 characters**" in report  # a plain answer's first delta is never delayed
    stream = next(line for line in report.splitlines() if line.startswith("| stream |"))
    buffered = next(line for line in report.splitlines() if line.startswith("| buffered"))
    first_event, _ = map(int, re.findall(r"\| (\d+)", stream))
    first_byte, last_byte = map(int, re.findall(r"\| (\d+)", buffered))
    assert first_event < first_byte / 2 and first_byte == last_byte  # streamed: the first event comes early
    estimator_rows = [
        line
        for line in report.splitlines()
        if line.startswith("| ") and "history" not in line and "%" in line
    ]
    assert estimator_rows and all(
        line.split("|")[4].strip().startswith("+") for line in estimator_rows
    )  # cold: safe side
