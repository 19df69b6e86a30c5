"""bench/state.py's measurements hold what they claim, on a tiny run (no timing asserted: that is the bench's)."""

from __future__ import annotations

import os
from types import ModuleType


def bench_state() -> ModuleType:
    """bench.state, without the bench package's environment settings (quiet Powertools, metrics off) leaking into
    the other tests, as tests/ops/test_lambda_size.py imports its module."""
    saved = dict(os.environ)
    try:
        from bench import state
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return state


def test_compaction_shrinks_a_conversation_and_an_approval_round_trip_is_measured():
    state = bench_state()
    results = state.measure(1)
    for size in ("100", "1000"):
        row = results["compaction"][size]
        assert row["bytes_after"] * 10 < row["bytes_before"] and row["item_bytes"] > row["bytes_after"]
    approvals = results["approvals"]
    assert approvals["reps"] == 5 and approvals["ask_ms"] > 0 and approvals["answer_ms"] > 0
    assert any(line.startswith("| 1000 |") for line in state.section(results))
    # A queued request's secrets: sealed and opened back whole (the bench asserts the round trip), and reported.
    assert results["queued_secrets"]["reps"] == 50 and results["queued_secrets"]["seal_ms"] > 0
    assert any("sealed when it is queued" in line for line in state.section(results))
