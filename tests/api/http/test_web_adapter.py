"""Stream mode up to the Lambda Web Adapter's contract (tests/support/adapter.py): `src/run.sh` started as the
adapter starts it, requests carrying the adapter's headers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile

import httpx
import pytest

from tests.support.adapter import MODEL, ROOT, adapter_headers, run_sh
from tests.support.fake_llm import FakeLLM, Reply, text, tool_calls
from tests.support.processes import children_of

pytestmark = pytest.mark.slow  # each test starts a server through run.sh


def ask(content: str) -> dict:
    return {"messages": [{"role": "user", "content": content}], "stream": True}


@pytest.fixture
def llm():
    with FakeLLM() as server:
        yield server


def test_the_first_event_arrives_while_a_slow_model_is_still_answering(llm, tmp_path):
    answer = "The answer arrives a piece at a time, as the model writes it."
    llm.script(MODEL, Reply(chunks=text(MODEL, answer, pieces=8, groq=True).chunks, chunk_delay=0.4))
    with (
        run_sh(llm, tmp_path) as (url, _, log, _),
        httpx.stream(
            "POST", f"{url}/chat", json=ask("hi"), headers=adapter_headers(60, "corr-stream-1"), timeout=30
        ) as response,
    ):
        start = time.monotonic()
        first_delta_at = None
        for line in response.iter_lines():
            if line.startswith("event: delta") and first_delta_at is None:
                first_delta_at = time.monotonic() - start
        total = time.monotonic() - start
    assert first_delta_at is not None and first_delta_at < total / 2  # streamed, not buffered until the end
    assert "corr-stream-1" in log.read_text()  # the correlation id comes from x-amzn-request-context


def test_heartbeats_flow_during_a_long_tool_run(llm, tmp_path):
    busy = json.dumps(
        {"code": "const t = Date.now(); while (Date.now() - t < 1500) {}; 42", "timeout_seconds": 5}
    )
    llm.script(
        MODEL,
        tool_calls(MODEL, [("call_busy", "execute_javascript", busy)], groq=True),
        text(MODEL, "42.", groq=True),
    )
    with run_sh(llm, tmp_path, SSE_HEARTBEAT_SECONDS="0.3") as (url, _, _, _):
        body = httpx.post(f"{url}/chat", json=ask("busy"), headers=adapter_headers(60), timeout=30).text
    during = body[body.index("event: tool_call_start") : body.index("event: tool_call_result")]
    assert during.count(": ping") >= 2
    assert body.rstrip().endswith("}") and "event: done" in body


def test_the_deadline_comes_from_the_adapter_header(llm, tmp_path):
    llm.default = lambda body: Reply(chunks=text(MODEL, "too late", groq=True).chunks, delay=20)
    with run_sh(llm, tmp_path, REQUEST_TIMEOUT_SECONDS="110") as (url, _, _, _):
        start = time.monotonic()
        body = httpx.post(f"{url}/chat", json=ask("hi"), headers=adapter_headers(4.0), timeout=30).text
        elapsed = time.monotonic() - start
    done = json.loads(body.split("event: done\ndata: ")[1].split("\n")[0])
    assert done["stop_reason"] == "deadline" and elapsed < 4.0  # the turn ends before Lambda would stop it


def test_a_client_that_disconnects_stops_the_loop(llm, tmp_path):
    long_run = json.dumps(
        {"code": "const t = Date.now(); while (Date.now() - t < 8000) {}; 1", "timeout_seconds": 10}
    )
    llm.script(MODEL, tool_calls(MODEL, [("call_long", "execute_javascript", long_run)], groq=True))
    llm.default = lambda body: text(MODEL, "should never be asked", groq=True)
    with run_sh(llm, tmp_path) as (url, server, log, _):
        with httpx.stream(
            "POST", f"{url}/chat", json=ask("long"), headers=adapter_headers(60), timeout=30
        ) as response:
            lines = response.iter_lines()  # kept referenced: a dropped line iterator closes the response
            for line in lines:
                if line.startswith("event: tool_call_start"):
                    break
            time.sleep(0.5)  # the run has taken the spare and is busy (a new spare starts only after the run)
            running = children_of(server.pid)
            response.close()  # the client goes away mid-run
        time.sleep(2.0)  # the disconnect reaches the app; the run is killed at once, not after its 8 s
        still = children_of(server.pid)
        assert running and not (running & still), (running, still)
        assert len(llm.requests) == 1  # no model call after the client left
        assert "client_disconnected" in log.read_text()


def test_the_function_zip_holds_an_executable_run_sh(tmp_path):
    subprocess.run(
        [sys.executable, "scripts/package.py", "function", "--build-dir", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    with zipfile.ZipFile(tmp_path / "function.zip") as archive:
        info = archive.getinfo("run.sh")
        assert (info.external_attr >> 16) & 0o111 == 0o111
        assert archive.read("run.sh").startswith(b"#!/bin/sh")


def test_the_readiness_path_needs_no_secret_model_or_sandbox(llm, tmp_path):
    """The adapter holds every invocation until the readiness path answers: it must answer from settings alone. Here
    the secret lives behind an endpoint that refuses connections and the model is never asked."""
    with run_sh(
        llm,
        tmp_path,
        PROVIDER_KEYS_SECRET_ARN="arn:aws:secretsmanager:us-east-1:123456789012:secret:chatloop-keys-AbCdEf",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",  # the discard port: nothing listens
        GROQ_API_KEY="",
    ) as (url, server, _, _):
        health = httpx.get(f"{url}/health", timeout=5).json()
        assert health["status"] == "ok" and health["model_chain"] == [f"groq:{MODEL}"]
        assert not children_of(server.pid)  # no sandbox process started for it
        assert llm.requests == []
