"""Lambda-sized runs: the built artefacts under a cgroup sized like a MemorySize, this branch against the base commit.

Lambda gives a function CPU in proportion to its memory (one vCPU at 1,769 MB). Each run unpacks nothing new: it
builds ``layer/`` and ``function/`` as ``scripts/package.py`` does, starts ``python3.12 -I`` with only those two on
``sys.path``, inside a cgroup (v1 ``cpu`` + ``memory``) whose CPU quota is MemorySize / 1,769 of one core and whose
memory limit is MemorySize, and drives the real handler with REST API events against a loopback model (the groq SDK
over HTTP) that takes ``MODEL_SECONDS`` a call. Reported per size and per code base:

- ``import_ms``: ``import app``; ``cold_ms``: import + the first turn, the model's time excluded;
- ``restore_ms``: the after-restore hooks + the first turn (model time excluded), after an init with
  ``AWS_LAMBDA_INITIALIZATION_TYPE=snap-start`` and the before-snapshot hooks (in one process: a simulated restore,
  without the page faults of a real one);
- ``warm_overhead_ms``: a warm turn less the model's time; ``peak_rss_mb``: the cgroup's peak resident memory
  (the handler and every Deno process, page cache excluded); ``gb_s_per_turn``: at 1 s a model call.

Needs root and cgroup v1 controllers at /sys/fs/cgroup/{cpu,memory}; elsewhere the section says why it was skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import ROOT
from bench.common import median, tree_at

SIZES = (512, 1024, 1769)
FULL_CORE_MB = 1769
MODEL_SECONDS = 0.3
MODEL_CALLS_PER_TURN = 2  # the compound-interest turn: a tool call, then the answer
BASE_COMMIT = "d9628ce"
CGROUP = Path("/sys/fs/cgroup")

# Runs inside the cgroup, on the Lambda runtime's bare interpreter: argv = [mode, turns, *sys.path entries].
CHILD = r"""
import json, os, sys, time
mode, turns = sys.argv[1], int(sys.argv[2])
sys.path[:0] = sys.argv[3:]

class Context:
    function_name = "chatloop-bench"
    function_version = "1"
    memory_limit_in_mb = int(os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"])
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:chatloop-bench"
    aws_request_id = "bench"
    log_group_name = log_stream_name = "bench"
    def get_remaining_time_in_millis(self):
        return 28000

body = json.dumps({"messages": [{"role": "user", "content": "What do $10,000 at 5% compounded annually for 15 years grow to?"}], "stream": False})
event = {
    "resource": "/{proxy+}", "path": "/chat", "httpMethod": "POST", "body": body, "isBase64Encoded": False,
    "headers": {"content-type": "application/json", "host": "bench.execute-api.us-east-1.amazonaws.com"},
    "multiValueHeaders": {"content-type": ["application/json"]},
    "queryStringParameters": None, "multiValueQueryStringParameters": None, "pathParameters": {"proxy": "chat"},
    "stageVariables": None,
    "requestContext": {"requestId": "bench", "stage": "prod", "resourcePath": "/{proxy+}", "httpMethod": "POST",
                       "path": "/prod/chat", "identity": {"sourceIp": "127.0.0.1", "apiKeyId": "bench"},
                       "requestTimeEpoch": 0},
}

def turn():
    start = time.perf_counter()
    response = app.handler(dict(event), Context())
    elapsed = (time.perf_counter() - start) * 1000
    assert response["statusCode"] == 200 and "20789.28" in response["body"], response
    return elapsed

out = {}
t = time.perf_counter()
import app
out["import_ms"] = (time.perf_counter() - t) * 1000
if mode == "restore":
    import chatloop.snapstart as snapstart
    t = time.perf_counter(); snapstart.before_snapshot(app.app.state.runtime); out["before_snapshot_ms"] = (time.perf_counter() - t) * 1000
    time.sleep(0.5)  # the snapshot is taken; a restore resumes here
    t = time.perf_counter(); snapstart.after_restore(app.app.state.runtime); out["after_restore_ms"] = (time.perf_counter() - t) * 1000
    out["first_turn_ms"] = out["after_restore_ms"] + turn()
else:
    out["first_turn_ms"] = turn()
warm = []
for _ in range(turns):
    time.sleep(0.1)  # between requests: the spare is refilled, as it is between real turns
    warm.append(turn())
out["warm_ms"] = warm
print(json.dumps(out))
"""


def available() -> str | None:
    """None when Lambda-sized runs can happen here, else why not."""
    if sys.platform != "linux":
        return "not Linux"
    if os.geteuid() != 0:
        return "not root (cgroups cannot be created)"
    for controller, name in (("cpu", "cpu.cfs_quota_us"), ("memory", "memory.limit_in_bytes")):
        if not (CGROUP / controller / name).exists():
            return f"no cgroup v1 '{controller}' controller at {CGROUP / controller}"
    if not _lambda_python():
        return "no python3.12 (the Lambda runtime's version) to run the artefacts with"
    return None


def _lambda_python() -> str | None:
    base = Path(sys.base_prefix) / "bin" / "python3.12"
    if sys.version_info[:2] == (3, 12) and base.exists():
        return str(base)
    return shutil.which("python3.12")


@contextlib.contextmanager
def cgroup(name: str, memory_mb: int) -> Iterator[tuple[Path, Path]]:
    """A cpu and a memory cgroup sized like a Lambda function of ``memory_mb``; removed afterwards."""
    cpu, memory = CGROUP / "cpu" / name, CGROUP / "memory" / name
    cpu.mkdir()
    memory.mkdir()
    try:
        period = 100_000
        (cpu / "cpu.cfs_period_us").write_text(str(period))
        (cpu / "cpu.cfs_quota_us").write_text(str(int(period * memory_mb / FULL_CORE_MB)))
        (memory / "memory.limit_in_bytes").write_text(str(memory_mb * 1024 * 1024))
        yield cpu, memory
    finally:
        for group in (cpu, memory):
            for _ in range(50):  # the Deno children may take a moment to be reaped
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def _peak_rss(memory: Path, done: threading.Event, peak: list[int]) -> None:
    """Sample the cgroup's resident memory (``total_rss``: anonymous memory of every process in it)."""
    while not done.is_set():
        with contextlib.suppress(OSError, ValueError):
            for line in (memory / "memory.stat").read_text().splitlines():
                if line.startswith("total_rss "):
                    peak[0] = max(peak[0], int(line.split()[1]))
        time.sleep(0.01)


def run_once(
    python: str, paths: list[str], memory_mb: int, mode: str, turns: int, model_url: str
) -> dict[str, Any]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": tempfile.gettempdir(),
        "LANG": "C.UTF-8",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
        "AWS_LAMBDA_FUNCTION_NAME": "chatloop-bench",
        "AWS_REGION": "us-east-1",
        "GROQ_API_KEY": "gsk_bench_key_0000000000",
        "GROQ_BASE_URL": model_url,
        "MODEL_CHAIN": "groq:llama-3.3-70b-versatile",
        "POWERTOOLS_SERVICE_NAME": "chatloop-bench",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "ChatLoopBench",
    }
    if mode == "restore":
        env["AWS_LAMBDA_INITIALIZATION_TYPE"] = "snap-start"
    name = f"chatloop-bench-{os.getpid()}-{memory_mb}-{mode}"
    with cgroup(name, memory_mb) as (cpu, memory):

        def enter() -> None:  # in the child, before exec: it and everything it starts run in the cgroup
            for group in (cpu, memory):
                (group / "cgroup.procs").write_text(str(os.getpid()))

        done, peak = threading.Event(), [0]
        sampler = threading.Thread(target=_peak_rss, args=(memory, done, peak), daemon=True)
        sampler.start()
        try:
            result = subprocess.run(
                [python, "-I", "-B", "-c", CHILD, mode, str(turns), *paths],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                preexec_fn=enter,
            )
        finally:
            done.set()
            sampler.join()
    if result.returncode != 0:
        raise RuntimeError(f"the Lambda-sized run failed: {result.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    model_ms = MODEL_CALLS_PER_TURN * MODEL_SECONDS * 1000
    out["cold_ms"] = out["import_ms"] + out["first_turn_ms"] - model_ms
    out["warm_overhead_ms"] = median(out.pop("warm_ms")) - model_ms
    out["first_turn_ms"] -= model_ms
    out["peak_rss_mb"] = peak[0] / 1024 / 1024
    return out


def build(source_root: Path, into: Path, layer_from: Path | None) -> list[str]:
    """function/ from ``source_root``'s src/ (this branch or the base), layer/ built once and shared."""
    from scripts.package import build_function, build_layer

    arch = "arm64" if platform.machine() in ("aarch64", "arm64") else "x86_64"
    build_function(into, source=source_root / "src")
    if layer_from is None:
        build_layer(arch, into)
        layer_from = into
    return [str(into / "function"), str(layer_from / "layer" / "python")]


def measure(runs: int, turns: int, sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    why = available()
    if why:
        return {"skipped": why}
    from tests.support.fake_llm import FakeLLM
    from tests.test_api import realistic

    python = _lambda_python()
    assert python is not None
    out: dict[str, Any] = {"model_seconds": MODEL_SECONDS, "base_commit": BASE_COMMIT, "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="chatloop-lambda-bench-") as tmp, FakeLLM() as llm:
        llm.default = lambda body: replace(realistic(body), delay=MODEL_SECONDS)
        base_root = tree_at(BASE_COMMIT, Path(tmp) / "base-src")
        here = build(ROOT, Path(tmp) / "here", None)
        base = build(base_root, Path(tmp) / "base", Path(tmp) / "here")
        for size in sizes:
            row: dict[str, Any] = {}
            for label, paths in (("here", here), ("base", base)):
                samples = [
                    run_once(python, paths, size, "cold", turns, llm.groq_base_url) for _ in range(runs)
                ]
                row[label] = {key: [s[key] for s in samples] for key in samples[0]}
            if (ROOT / "src" / "chatloop" / "snapstart.py").exists():
                restored = [
                    run_once(python, here, size, "restore", 1, llm.groq_base_url) for _ in range(runs)
                ]
                row["restore"] = {key: [s[key] for s in restored] for key in restored[0]}
            warm = median(row["here"]["warm_overhead_ms"])
            row["gb_s_per_turn"] = size / 1024 * (MODEL_CALLS_PER_TURN * 1.0 + warm / 1000)
            out["sizes"][str(size)] = row
    return out
