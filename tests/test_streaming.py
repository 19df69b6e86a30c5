"""Stream mode up to the Lambda Web Adapter's contract: `src/run.sh` started the way the adapter starts a zip
function's handler (its environment, a free port, the readiness path), and requests carrying the headers the adapter
adds (`x-amzn-lambda-context`: the Lambda runtime's Context as JSON, `deadline` in Unix ms; `x-amzn-request-context`:
API Gateway's request context). Sources: awslabs/aws-lambda-web-adapter README and src/lib.rs, and
awslabs/aws-lambda-rust-runtime lambda-runtime/src/types.rs. The adapter itself cannot be downloaded here.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.fake_llm import FakeLLM, Reply, text, tool_calls
from tests.support.processes import children_of

pytestmark = pytest.mark.slow  # each test starts a server through run.sh

ROOT = Path(__file__).resolve().parent.parent
MODEL = "llama-3.3-70b-versatile"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def run_sh(llm: FakeLLM, tmp_path: Path, **env: str) -> Iterator[tuple[str, subprocess.Popen[str], Path]]:
    """`run.sh` as the adapter starts it; yields its base URL, the process and its log file."""
    port = free_port()
    log = tmp_path / "server.log"
    environment = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",  # `python3` is the runtime's (here: the venv's)
        "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
        "AWS_LWA_INVOKE_MODE": "response_stream",
        "AWS_LWA_PORT": str(port),
        "AWS_LWA_READINESS_CHECK_PATH": "/health",
        "AWS_LAMBDA_FUNCTION_NAME": "chatloop-chat",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_METRICS_NAMESPACE": "ChatLoopTest",
        "GROQ_API_KEY": "gsk_test_key_0000000000",
        "GROQ_BASE_URL": llm.groq_base_url,
        "MODEL_CHAIN": f"groq:{MODEL}",
        **env,
    }
    with log.open("w") as out:
        server = subprocess.Popen(
            ["/bin/sh", str(ROOT / "src" / "run.sh")], env=environment, stdout=out, stderr=out, text=True
        )
    try:
        deadline = time.monotonic() + 30
        while True:  # the adapter's readiness check
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", server, log
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def adapter_headers(seconds_left: float, request_id: str | None = None) -> dict[str, str]:
    rid = request_id or str(uuid.uuid4())
    context = {
        "request_id": str(uuid.uuid4()),
        "deadline": int((time.time() + seconds_left) * 1000),
        "invoked_function_arn": "arn:aws:lambda:us-east-1:123456789012:function:chatloop-chat",
        "xray_trace_id": "Root=1-5f84c7a9-0123456789abcdef01234567",
        "client_context": None,
        "identity": None,
        "env_config": {
            "function_name": "chatloop-chat",
            "memory": 1024,
            "version": "$LATEST",
            "log_stream": "",
            "log_group": "",
        },
    }
    request_context = {"requestId": rid, "stage": "prod", "path": "/prod/chat", "httpMethod": "POST"}
    return {
        "x-amzn-lambda-context": json.dumps(context),
        "x-amzn-request-context": json.dumps(request_context),
    }


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
        run_sh(llm, tmp_path) as (url, _, log),
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
    with run_sh(llm, tmp_path, SSE_HEARTBEAT_SECONDS="0.3") as (url, _, _):
        body = httpx.post(f"{url}/chat", json=ask("busy"), headers=adapter_headers(60), timeout=30).text
    during = body[body.index("event: tool_call_start") : body.index("event: tool_call_result")]
    assert during.count(": ping") >= 2
    assert body.rstrip().endswith("}") and "event: done" in body


def test_the_deadline_comes_from_the_adapter_header(llm, tmp_path):
    llm.default = lambda body: Reply(chunks=text(MODEL, "too late", groq=True).chunks, delay=20)
    with run_sh(llm, tmp_path, REQUEST_TIMEOUT_SECONDS="110") as (url, _, _):
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
    with run_sh(llm, tmp_path) as (url, server, log):
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
