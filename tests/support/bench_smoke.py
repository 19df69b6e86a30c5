"""The smoke run of ``make bench`` in groups: each group's steps run in one ``python -m bench --quick --only ...``
process, and each group is a test file of its own (tests/ops/test_bench_*.py), so pytest-xdist's workers run the
groups side by side instead of one ~2-minute run bounding the whole suite's time. The groups together are every
step (tests/ops/test_bench.py checks that), balanced by what each step takes (the bench prints ``bench: <step> done
in <s> s``); the two that run the built layer (``cold_start``, ``lambda_size``: bench/artefacts.py builds it once,
the other waits on its lock) are in different groups, with little else after them.

Usage::

    report = smoke_run("streams", tmp_path)   # RESULTS.md of the group's sections; asserts the run exited 0
    assert "## 7. Response modes" in report
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.repo import ROOT

GROUPS: dict[str, tuple[str, ...]] = {
    "cold": (
        *("scenarios", "overhead", "handler", "cold_start", "textcalls", "context", "mcp", "against"),
        *("fallback", "throughput", "page", "store", "webhooks"),
    ),
    "lambda": ("lambda_size", "responses", "idempotency", "state", "budgets", "bedrock", "websocket_lambda"),
    "fleet": ("fleet",),  # ~24 s alone: two copies over one store, SQLite then DynamoDB
    "streams": ("sandbox", "streaming", "ttft", "tracing", "small_models", "websocket"),
}
"""The bench's steps (bench/__main__.py ``steps``) by smoke group; a section needing two steps (``overhead`` with
``handler``, ``fallback`` with ``throughput``) has both in one group."""


def smoke_run(group: str, out: Path) -> str:
    """Runs ``group``'s steps with few repetitions, writing into ``out``; returns the RESULTS.md it wrote."""
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", ",".join(GROUPS[group]), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # a bound on a hung run, not a speed target: a clean clone builds the layer first
    )
    assert run.returncode == 0, run.stderr[-4000:]  # the bench's own traceback, not only its exit status
    return (out / "RESULTS.md").read_text()


def step_names() -> list[str]:
    """Every step ``make bench`` runs, in order, asked of bench/__main__.py in a child process (importing the bench
    package sets its own environment)."""
    code = "import bench.__main__ as m; print(','.join(name for name, _ in m.steps(True, None)))"
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    return run.stdout.strip().splitlines()[-1].split(",")
