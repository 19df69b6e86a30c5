"""The bench's smoke run, group "lambda" (tests/support/bench_smoke.py): the built artefacts under a Lambda-sized
cgroup, and the sections measured through the handler (Responses API, retried requests, compaction and approvals,
budgets, Bedrock)."""

import re

import pytest

from tests.support.bench_smoke import smoke_run


@pytest.mark.slow(
    seconds=150
)  # builds the layer on a clean clone: handed out first (tests/support/schedule.py)
def test_bench_smoke_run_lambda(tmp_path):
    report = smoke_run("lambda", tmp_path)
    for section in (
        "## 8. Responses API vs chat completions",
        "## 10. Retried requests",
        "## 13. Lambda-sized",
        "## Compaction and approvals",
        "## Budgets",
        "## Amazon Bedrock member vs Groq member",
        "## WebSocket mode on Lambda: PostToConnection",
    ):
        assert section in report
    lambda_sized = report.split("## 13. Lambda-sized")[1].split("\n## ")[0]  # to the next section
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
