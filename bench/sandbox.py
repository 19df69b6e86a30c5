"""Sandbox latency: cold and pre-spawned runs, parallel runs, a runaway's kill time, peak memory."""

from __future__ import annotations

import resource
import threading
import time
from typing import Any

from bench.common import COMPOUND_SNIPPET, TRIVIAL, median, p90
from chatloop.tools.javascript import JavaScriptSandbox


def measure(reps: int) -> dict:
    out: dict[str, Any] = {}
    cold = JavaScriptSandbox(prespawn=False)
    warm = JavaScriptSandbox(prespawn=True)
    try:
        for label, code in (("trivial", TRIVIAL), ("compound", COMPOUND_SNIPPET)):
            cold_ms = [cold.run(code, 5).duration_ms for _ in range(reps)]
            warm_ms = []
            for _ in range(reps):
                warm.warm()
                _wait_for_spare(warm)
                result = warm.run(code, 5)
                assert result.prespawned and result.ok, result.payload
                warm_ms.append(result.duration_ms)
            out[label] = {
                "cold": (median(cold_ms), p90(cold_ms)),
                "prespawned": (median(warm_ms), p90(warm_ms)),
            }
        one = [cold.run(COMPOUND_SNIPPET, 5).duration_ms for _ in range(max(3, reps // 3))]
        four = []
        for _ in range(max(3, reps // 3)):
            start = time.perf_counter()
            threads = [threading.Thread(target=cold.run, args=(COMPOUND_SNIPPET, 5)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            four.append((time.perf_counter() - start) * 1000)
        out["parallel"] = {"one_ms": median(one), "four_ms": median(four)}
        start = time.perf_counter()
        killed = cold.run("while (true) {}", 1.0)
        out["runaway_kill_ms"] = (time.perf_counter() - start) * 1000 - 1000
        assert str(killed.payload["error"]).startswith("TimeoutError")
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    finally:
        cold.close()
        warm.close()
    out["cpu_per_run"] = cpu_per_run(max(10, reps))
    return out


def cpu_per_run(runs: int) -> dict[str, float]:
    """CPU (ms, every process: the handler's side and each Deno process, reaped at the end) and wall per run of the
    compound snippet, 50 ms apart, with the replacement of the spare included: pre-spawned (the process that answered
    serves the next run) and cold (a process started for each run)."""
    out: dict[str, float] = {}
    for label, prespawn in (("prespawned", True), ("cold", False)):
        box = JavaScriptSandbox(prespawn=prespawn)
        box.warm()
        if prespawn:
            _wait_for_spare(box)
        before = _cpu()
        walls = []
        for _ in range(runs):
            walls.append(box.run(COMPOUND_SNIPPET, 5).duration_ms)
            time.sleep(0.05)  # runs 50 ms apart, as a model's answer separates them: the next worker is ready
            if prespawn:
                _wait_for_spare(box)
        box.close()  # reaps the last process: its CPU counts
        time.sleep(0.05)
        out[f"{label}_cpu_ms"] = (_cpu() - before) / runs * 1000
        out[f"{label}_wall_ms"] = median(walls)
    return out


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _wait_for_spare(box: JavaScriptSandbox) -> None:
    deadline = time.monotonic() + 5
    while box._spare is None and time.monotonic() < deadline:
        time.sleep(0.002)
