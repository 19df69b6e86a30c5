"""Stream mode up to the Lambda Web Adapter's contract, for tests and the bench: `src/run.sh` started the way the
adapter starts a zip function's handler (its environment, a free port, polling the readiness path), and the headers
the adapter adds to each request (`x-amzn-lambda-context`: the Lambda runtime's Context as JSON, `deadline` in Unix
ms; `x-amzn-request-context`: API Gateway's request context). Sources: awslabs/aws-lambda-web-adapter README,
docs/guide and src/lib.rs, and awslabs/aws-lambda-rust-runtime lambda-runtime/src/types.rs. The adapter itself
cannot be downloaded here.

Usage::

    with run_sh(llm, tmp_path) as served:
        httpx.post(f"{served.url}/chat", json=body, headers=adapter_headers(60))
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx

from tests.support.fake_llm import FakeLLM
from tests.support.repo import ROOT

MODEL = "llama-3.3-70b-versatile"
READINESS_HEALTHY_STATUS = "100-499,503"
"""AWS_LWA_READINESS_CHECK_HEALTHY_STATUS as template.yaml sets it: the adapter's default (100-499) and the 503 of a
copy whose MODEL_CHAIN cannot be built (it starts, and answers every turn with a 503 naming the setting)."""


def healthy_statuses(spec: str) -> set[int]:
    """The statuses an AWS_LWA_READINESS_CHECK_HEALTHY_STATUS value names (``200,201,301-399``), as the adapter
    reads it."""
    statuses: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        statuses.update(range(int(low), int(high or low) + 1))
    return statuses


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served(NamedTuple):
    url: str
    process: subprocess.Popen[str]
    log: Path
    ready_ms: float
    """From starting run.sh to the readiness path's first healthy answer, as the adapter waits for it."""


@contextlib.contextmanager
def run_sh(
    llm: FakeLLM, tmp_path: Path, *, name: str = "server", own_group: bool = False, **env: str
) -> Iterator[Served]:
    """`run.sh` as the adapter starts it: the adapter's environment, a free port, the readiness check. ``own_group``:
    in a process group of its own (tests/support/fleet.py freezes a copy's whole group, as Lambda freezes it)."""
    port = free_port()
    log = tmp_path / f"{name}.log"
    environment = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",  # `python3` is the runtime's (here: the venv's)
        "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
        "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001",  # Lambda sets it for the runtime (here: nothing listens)
        "AWS_LWA_INVOKE_MODE": "response_stream",
        "AWS_LWA_PORT": str(port),
        "AWS_LWA_READINESS_CHECK_PATH": "/health",
        "AWS_LWA_READINESS_CHECK_HEALTHY_STATUS": READINESS_HEALTHY_STATUS,
        "AWS_LAMBDA_FUNCTION_NAME": "chatloop-chat",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_METRICS_NAMESPACE": "ChatLoopTest",
        "GROQ_API_KEY": "gsk_test_key_0000000000",
        "GROQ_BASE_URL": llm.groq_base_url,
        "MODEL_CHAIN": f"groq:{MODEL}",
        **env,
    }
    healthy = healthy_statuses(environment["AWS_LWA_READINESS_CHECK_HEALTHY_STATUS"])
    started = time.perf_counter()
    with log.open("w") as out:
        server = subprocess.Popen(
            ["/bin/sh", str(ROOT / "src" / "run.sh")],
            env=environment,
            stdout=out,
            stderr=out,
            text=True,
            start_new_session=own_group,
        )
    try:
        deadline = time.monotonic() + 30
        while True:  # the adapter's readiness check
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code in healthy:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"run.sh did not become ready:\n{log.read_text()}")
            time.sleep(0.01)
        ready_ms = (time.perf_counter() - started) * 1000
        yield Served(f"http://127.0.0.1:{port}", server, log, ready_ms)
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
