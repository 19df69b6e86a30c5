"""Turns that live in the store (issue 31): what the journal, the runs and the followers cost.

Two copies of the app (each its own runtime and store client, served by uvicorn in a thread of this process) over
one SQLite file, a model that streams 40 deltas 25 ms apart:

- store calls per turn (backend operations, each one SQLite transaction or one DynamoDB request/transaction): plain
  (``store: false``), stored, streamed and stored (journaled), background (queued, claimed, journaled);
- the delay a follower on the other copy sees behind the client of the running turn (median, p95), and its reads;
- the time from ``POST /v1/responses/{id}/cancel`` on the other copy to the terminal event a follower receives (the
  request travels through the store: the in-process shortcut is turned off for it);
- the first token with and without the journal (stored vs unstored streamed responses).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.common import median

DELTAS = 40
DELTA_SECONDS = 0.025
READS = {"read", "page", "position_of", "get_child"}


class Streamer:
    """Answers at once (first delta) and then one delta every ``DELTA_SECONDS``; slowly (10x) when asked."""

    name = "bench:streamer"

    async def stream(self, request: Any) -> Any:
        from chatloop.providers.base import ModelResponse, TextDelta

        last = str(request.messages[-1]["content"])
        pause = DELTA_SECONDS * (10 if "slowly" in last else 1)
        for i in range(DELTAS):
            if i:
                await asyncio.sleep(pause)
            yield TextDelta(f"w{i} ")
        yield ModelResponse(
            self.name, content=" ".join(f"w{i}" for i in range(DELTAS)) + " ", finish_reason="stop"
        )


class Counting:
    """A backend that counts its operations (by name) and passes them on."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.backend, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(*args, **kwargs)

        return call

    def split(self) -> dict[str, int]:
        reads = sum(n for name, n in self.calls.items() if name in READS)
        return {"writes": sum(self.calls.values()) - reads, "reads": reads}


def _copy(path: Path, table: str = "") -> tuple[Any, Counting]:
    from tests.support.handler import build_runtime
    from tests.support.server import Server

    from chatloop.api import create_app
    from chatloop.config import Settings
    from chatloop.store import Store
    from chatloop.store.sqlite import SQLiteBackend

    if table:
        from chatloop.store.dynamodb import DynamoDBBackend

        backend = Counting(DynamoDBBackend(table))
    else:
        backend = Counting(SQLiteBackend(path))
    # A generous store-call time: what is measured is how long calls take, and the smoke run in a loaded make test
    # once saw a queued request refused as store_unavailable (the default 5 s, moto in this process).
    settings = Settings(
        conversation_store_path=str(path),
        conversation_table_name=table,
        conversation_store_timeout_seconds=60.0,
    )
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.base import ToolRegistry

    runtime = build_runtime(
        settings,
        chain=FallbackChain([Streamer()]),
        registry=ToolRegistry(),
        state=Store(backend, 3600),
    )
    return Server(create_app(settings, runtime=runtime)), backend


def _events(response: httpx.Response) -> Any:
    for line in response.iter_lines():
        if line.startswith("data:"):
            yield json.loads(line[5:])


def _wait_done(client: httpx.Client, rid: str) -> None:
    while client.get(f"/v1/responses/{rid}").json()["status"] in ("queued", "in_progress"):
        time.sleep(0.02)


def _per_turn(a: httpx.Client, checker: httpx.Client, counted: Counting) -> dict[str, dict[str, int]]:
    bodies: dict[str, dict[str, Any]] = {
        "plain": {"input": "hi", "store": False},
        "stored": {"input": "hi"},
        "streamed_stored": {"input": "hi", "stream": True},
        "background": {"input": "hi", "background": True},
    }
    calls = {}
    for name, body in bodies.items():
        counted.calls.clear()
        if body.get("stream"):
            with a.stream("POST", "/v1/responses", json=body) as response:
                for _ in _events(response):
                    pass
        else:
            answer = a.post("/v1/responses", json=body).json()
            if name == "background":
                _wait_done(checker, answer["id"])  # read through the other copy: not counted
        calls[name] = counted.split()
    return calls


def _follower_delays(a: httpx.Client, b: httpx.Client, b_counted: Counting) -> dict[str, float]:
    origin: dict[int, float] = {}
    followed: dict[int, float] = {}
    created = threading.Event()
    rid: list[str] = []

    def run() -> None:
        with a.stream("POST", "/v1/responses", json={"input": "hi", "stream": True}) as response:
            for data in _events(response):
                origin[data["sequence_number"]] = time.perf_counter()
                if data["type"] == "response.created":
                    rid.append(data["response"]["id"])
                    created.set()

    thread = threading.Thread(target=run)
    thread.start()
    created.wait(10)
    # The record exists once the first batch is written: wait for it (a fixed pause lost that race on a busy
    # machine, and the follower read a 404 with no events).
    waited = time.perf_counter() + 10
    while b.get(f"/v1/responses/{rid[0]}").status_code == 404 and time.perf_counter() < waited:
        time.sleep(0.01)
    b_counted.calls.clear()
    started = time.perf_counter()
    with b.stream("GET", f"/v1/responses/{rid[0]}?stream=true&starting_after=0") as response:
        for data in _events(response):
            followed[data["sequence_number"]] = time.perf_counter()
    seconds = time.perf_counter() - started
    thread.join()
    delays = sorted((followed[n] - origin[n]) * 1000 for n in followed if n in origin)
    return {
        "median_ms": median(delays),
        "p95_ms": delays[int(0.95 * (len(delays) - 1))],
        "events": len(delays),
        "reads_per_second": b_counted.split()["reads"] / seconds,
    }


def _cancel_to_end(a: httpx.Client, b: httpx.Client) -> float:
    from chatloop.api.openai.responses import background

    posted = a.post("/v1/responses", json={"input": "slowly", "background": True})
    assert posted.status_code == 200, f"queueing answered {posted.status_code}: {posted.text}"
    queued = posted.json()
    while b.get(f"/v1/responses/{queued['id']}").json()["status"] != "in_progress":
        time.sleep(0.01)
    time.sleep(0.1)
    ended: list[float] = []

    def follow() -> None:
        with b.stream("GET", f"/v1/responses/{queued['id']}?stream=true&starting_after=0") as response:
            for data in _events(response):
                if data["type"] in ("response.completed", "response.failed", "response.incomplete"):
                    ended.append(time.perf_counter())
                    return

    follower = threading.Thread(target=follow)
    follower.start()
    time.sleep(0.1)
    shortcut = background.stop_here
    background.stop_here = lambda key: False  # as from another container: through the store
    try:
        start = time.perf_counter()
        assert b.post(f"/v1/responses/{queued['id']}/cancel").json()["status"] == "cancelled"
    finally:
        background.stop_here = shortcut
    follower.join(30)
    return (ended[0] - start) * 1000


def _batching(
    a: httpx.Client, b: httpx.Client, counted_a: Counting, b_counted: Counting
) -> list[dict[str, float]]:
    """The journal's flush interval against what it costs (writes per streamed turn) and buys (a follower's delay)."""
    from chatloop.api.runs import journal

    chosen = journal.FLUSH_SECONDS
    rows = []
    try:
        for seconds in (0.05, 0.15, 0.3):
            journal.FLUSH_SECONDS = seconds
            counted_a.calls.clear()
            delay = _follower_delays(a, b, b_counted)
            writes = counted_a.split()["writes"]
            rows.append({"flush_seconds": seconds, "writes": writes, "median_ms": delay["median_ms"]})
    finally:
        journal.FLUSH_SECONDS = chosen
    return rows


def _first_token(a: httpx.Client, reps: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"journaled": [], "unstored": []}
    for _ in range(reps):
        for name, store in (("journaled", True), ("unstored", False)):
            start = time.perf_counter()
            with a.stream(
                "POST", "/v1/responses", json={"input": "hi", "stream": True, "store": store}
            ) as response:
                first = None
                for data in _events(response):
                    if first is None and data["type"] == "response.output_text.delta":
                        first = (time.perf_counter() - start) * 1000
                times[name].append(first or 0.0)
    return {"journaled_ms": median(times["journaled"]), "unstored_ms": median(times["unstored"])}


def measure(reps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.sqlite3"
        (server_a, counted_a), (server_b, counted_b) = _copy(path), _copy(path)
        with server_a, server_b:
            headers = {"x-api-key": "bench"}
            a = httpx.Client(base_url=server_a.root, headers=headers, timeout=60)
            b = httpx.Client(base_url=server_b.root, headers=headers, timeout=60)
            per_turn = _per_turn(a, b, counted_a)
            batching = _batching(a, b, counted_a, counted_b)
            delays = [_follower_delays(a, b, counted_b) for _ in range(max(1, reps // 5))]
            cancels = [_cancel_to_end(a, b) for _ in range(max(1, reps // 10))]
            first = _first_token(a, reps)
        dynamodb = _on_dynamodb(Path(tmp), max(1, reps // 10))
    return {
        "per_turn": per_turn,
        "batching": batching,
        "follower_median_ms": median([d["median_ms"] for d in delays]),
        "follower_p95_ms": median([d["p95_ms"] for d in delays]),
        "follower_reads_per_second": median([d["reads_per_second"] for d in delays]),
        "cancel_to_end_ms": median(cancels),
        "first_token": first,
        "runs": len(delays),
        "dynamodb": dynamodb,
    }


def _on_dynamodb(tmp: Path, runs: int) -> dict[str, Any]:
    """The same two copies over one DynamoDB table on a moto server (over HTTP, as a region is, minus its latency)."""
    import logging
    import os

    import boto3
    from tests.support.moto_server import AtomicMotoServer

    from chatloop.store.dynamodb import create_table

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    # One request at a time, as DynamoDB applies each: moto's backend is not thread-safe, and two copies writing at
    # once could fail one write with a 500.
    moto = AtomicMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL_DYNAMODB": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        create_table(boto3.client("dynamodb"), "bench-fleet")
        (server_a, counted_a), (server_b, counted_b) = (
            _copy(tmp / "unused", "bench-fleet"),
            _copy(tmp, "bench-fleet"),
        )
        with server_a, server_b:
            headers = {"x-api-key": "bench"}
            a = httpx.Client(base_url=server_a.root, headers=headers, timeout=60)
            b = httpx.Client(base_url=server_b.root, headers=headers, timeout=60)
            per_turn = _per_turn(a, b, counted_a)
            delays = [_follower_delays(a, b, counted_b) for _ in range(runs)]
            cancels = [_cancel_to_end(a, b) for _ in range(runs)]
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        moto.stop()
    return {
        "per_turn": per_turn,
        "follower_median_ms": median([d["median_ms"] for d in delays]),
        "follower_p95_ms": median([d["p95_ms"] for d in delays]),
        "cancel_to_end_ms": median(cancels),
    }


def section(r: dict[str, Any]) -> list[str]:
    """The report's section (bench/report.py)."""
    turns = r["per_turn"]
    lines = [
        "## Turns in the store (journal, runs, followers)",
        "",
        f"Two app copies over one SQLite file, a model streaming {DELTAS} deltas {DELTA_SECONDS * 1000:.0f} ms apart.",
        "Store calls per turn (one SQLite transaction, or one DynamoDB request/transaction, each):",
        "",
        "| turn | writes | reads |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {c['writes']} | {c['reads']} |" for name, c in turns.items()]
    dynamodb = r.get("dynamodb")
    if dynamodb:
        lines += [
            "",
            "On DynamoDB (a moto server over HTTP; a region adds its latency to each call):",
            "",
            "| turn | writes | reads |",
            "|---|---|---|",
        ]
        lines += [f"| {name} | {c['writes']} | {c['reads']} |" for name, c in dynamodb["per_turn"].items()]
        lines += [
            "",
            f"DynamoDB: a follower {dynamodb['follower_median_ms']:.0f} ms behind (median; p95 "
            f"{dynamodb['follower_p95_ms']:.0f} ms), cancel to the terminal event {dynamodb['cancel_to_end_ms']:.0f} ms.",
        ]
    lines += [
        "",
        "The journal's flush interval (FLUSH_SECONDS): writes per streamed turn against a follower's delay:",
        "",
        "| flush interval | writes per turn | follower delay (median) |",
        "|---|---|---|",
    ]
    lines += [
        f"| {row['flush_seconds'] * 1000:.0f} ms | {row['writes']:.0f} | {row['median_ms']:.0f} ms |"
        for row in r.get("batching", [])
    ]
    first = r["first_token"]
    lines += [
        "",
        f"A follower on the other copy: **{r['follower_median_ms']:.0f} ms** behind the running turn's own client "
        f"(median; p95 {r['follower_p95_ms']:.0f} ms; goal ≤ 500 ms), {r['follower_reads_per_second']:.1f} "
        "journal reads a second while it follows.",
        f"Cancel on the other copy to the follower's terminal event: **{r['cancel_to_end_ms']:.0f} ms** (median).",
        f"First token, streamed: journaled {first['journaled_ms']:.1f} ms, unstored {first['unstored_ms']:.1f} ms "
        "(the journal is written off the stream's path).",
        "",
    ]
    return lines
