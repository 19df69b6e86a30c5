"""The bench's smoke run, group "fleet" (tests/support/bench_smoke.py): turns that live in the store (two copies
of the app over one SQLite file, then over one DynamoDB table)."""

import pytest

from tests.support.bench_smoke import smoke_run


@pytest.mark.slow(seconds=45)
def test_bench_smoke_run_fleet(tmp_path):
    report = smoke_run("fleet", tmp_path)
    assert "## Turns in the store" in report
