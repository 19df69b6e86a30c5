"""The bench's smoke run, group "fleet" (tests/support/bench_smoke.py): fallback and local throughput, the chat page,
the conversation store, turns that live in the store, webhooks."""

import pytest

from tests.support.bench_smoke import smoke_run


@pytest.mark.slow(seconds=45)
def test_bench_smoke_run_fleet(tmp_path):
    report = smoke_run("fleet", tmp_path)
    for section in (
        "## 5. Fallback",
        "## 11. The chat page",
        "## 12. The conversation store",
        "## Turns in the store",
        "## Webhooks",
    ):
        assert section in report
