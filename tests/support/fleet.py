"""A fleet of app copies over one store, as Lambda runs them: each copy is `run.sh` started as the Web Adapter starts
it (tests/support/adapter.py), every request carries the adapter's headers (the Lambda context with its deadline, API
Gateway's request context with the caller's API key id), a copy serves one request at a time and is frozen (SIGSTOP
of its own process group) whenever it has none in flight, as Lambda freezes an execution environment once its
response is sent. A stand-in Lambda Invoke API takes `InvocationType: Event` invocations (boto3 reaches it through
AWS_ENDPOINT_URL_LAMBDA) and delivers each, as the adapter would, to an idle copy's pass-through path (`/events`),
with no API Gateway context.

The store is one SQLite file or one DynamoDB table on a moto server (``store="sqlite" | "dynamodb"``).

Usage::

    with FakeLLM() as llm, Fleet(llm, tmp_path, copies=2, store="dynamodb") as fleet:
        with fleet.stream("POST", "/v1/responses", json=body) as (copy, response):   # copy 0 runs it
            ...
            fleet.request("GET", f"/v1/responses/{rid}", avoid=copy)                  # served by the other one
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx

from tests.support.adapter import Served, run_sh
from tests.support.fake_llm import FakeLLM

FUNCTION = "chatloop-chat"
VERSION = "7"
REGION = "us-east-1"
TABLE = "chatloop-fleet"


def lambda_headers(seconds_left: float, api_key_id: str | None, path: str, method: str) -> dict[str, str]:
    """The adapter's two headers: the Lambda context (deadline in Unix ms) and API Gateway's request context with
    the caller's API key id; a pass-through event (``api_key_id`` None) carries no gateway context (``null``)."""
    context = {
        "request_id": str(uuid.uuid4()),
        "deadline": int((time.time() + seconds_left) * 1000),
        "invoked_function_arn": f"arn:aws:lambda:{REGION}:123456789012:function:{FUNCTION}:{VERSION}",
        "xray_trace_id": "Root=1-5f84c7a9-0123456789abcdef01234567",
        "client_context": None,
        "identity": None,
        "env_config": {
            "function_name": FUNCTION,
            "memory": 1024,
            "version": VERSION,
            "log_stream": "",
            "log_group": "",
        },
    }
    gateway: Any = None
    if api_key_id is not None:
        gateway = {
            "requestId": str(uuid.uuid4()),
            "stage": "prod",
            "path": f"/prod{path}",
            "httpMethod": method,
            "identity": {"apiKeyId": api_key_id, "sourceIp": "203.0.113.9"},
        }
    return {"x-amzn-lambda-context": json.dumps(context), "x-amzn-request-context": json.dumps(gateway)}


class Copy:
    """One execution environment: its process group is stopped while it serves nothing."""

    def __init__(self, index: int, served: Served) -> None:
        self.index, self.served = index, served
        self.pgid = os.getpgid(served.process.pid)
        self.busy = False
        self.frozen = False
        self.served_requests = 0

    @property
    def url(self) -> str:
        return self.served.url

    def thaw(self) -> None:
        if self.frozen:
            os.killpg(self.pgid, signal.SIGCONT)
            self.frozen = False

    def freeze(self) -> None:
        if not self.frozen and self.served.process.poll() is None:
            os.killpg(self.pgid, signal.SIGSTOP)
            self.frozen = True

    def kill(self) -> None:
        """The environment goes away mid-work (Lambda ends it at its timeout): nothing of it runs again."""
        self.thaw()
        os.killpg(self.pgid, signal.SIGKILL)
        self.served.process.wait()


class Fleet:
    def __init__(
        self,
        llm: FakeLLM,
        tmp_path: Path,
        *,
        copies: int = 2,
        store: str = "sqlite",
        seconds_left: float = 60.0,
        **env: str,
    ) -> None:
        self.llm, self.tmp_path, self.count, self.store = llm, tmp_path, copies, store
        self.seconds_left = seconds_left
        self.env = env
        self.copies: list[Copy] = []
        self.invocations: list[dict[str, Any]] = []
        """What the stand-in Invoke API received: function, qualifier, invocation type, payload."""
        self.deliveries: list[dict[str, Any]] = []
        """Each delivery of an event to a copy's /events: the copy and the app's answer."""
        self.delivered_to: list[Copy] = []
        """The copy each delivery went to (as it starts)."""
        self.duplicate_deliveries = 0
        """Deliver each event this many more times (Lambda may deliver one more than once, and retries)."""
        self._lock = threading.Condition()
        self._stack = contextlib.ExitStack()
        self._threads: list[threading.Thread] = []

    # --- start and stop ---------------------------------------------------------------------------
    def __enter__(self) -> Fleet:
        try:
            env = {**self._store_env(), **self._invoke_env(), **self.env}
            for index in range(self.count):
                served = self._stack.enter_context(
                    run_sh(self.llm, self.tmp_path, name=f"copy{index}", own_group=True, **env)
                )
                copy = Copy(index, served)
                copy.freeze()
                self.copies.append(copy)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for thread in self._threads:
            thread.join(30)
        for copy in self.copies:
            if copy.served.process.poll() is None:
                copy.thaw()  # a stopped process would never see its SIGTERM
        self._stack.close()

    def _store_env(self) -> dict[str, str]:
        if self.store == "sqlite":
            return {"CONVERSATION_STORE_PATH": str(self.tmp_path / "fleet.sqlite3")}
        import boto3

        from chatloop.store.dynamodb import create_table
        from tests.support.moto_server import AtomicMotoServer

        moto = AtomicMotoServer(
            ip_address="127.0.0.1", port=0, verbose=False
        )  # one request at a time, as DynamoDB
        moto.start()
        self._stack.callback(moto.stop)
        host, port = moto.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client(
            "dynamodb",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        table = f"{TABLE}-{uuid.uuid4().hex[:8]}"  # moto servers in one process share their tables
        create_table(client, table)
        self.dynamodb = client
        return {
            "CONVERSATION_TABLE_NAME": table,
            "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }

    def _invoke_env(self) -> dict[str, str]:
        fleet = self

        class InvokeAPI(BaseHTTPRequestHandler):
            """Lambda's Invoke (``POST /2015-03-31/functions/{name}/invocations``), ``Event`` type only."""

            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                url = urlparse(self.path)
                payload = self.rfile.read(int(self.headers.get("content-length", 0)))
                parts = url.path.split("/")
                call = {
                    "function": parts[3] if len(parts) > 3 else None,
                    "qualifier": parse_qs(url.query).get("Qualifier", [None])[0],
                    "type": self.headers.get("x-amz-invocation-type"),
                    "payload": json.loads(payload or b"null"),
                }
                fleet.invocations.append(call)
                self.send_response(202)
                self.send_header("content-length", "0")
                self.end_headers()
                if call["type"] == "Event":  # queued by Lambda, delivered a moment later
                    for _ in range(1 + fleet.duplicate_deliveries):
                        fleet._deliver_later(call["payload"])

        server = ThreadingHTTPServer(("127.0.0.1", 0), InvokeAPI)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._stack.callback(server.server_close)
        self._stack.callback(server.shutdown)
        return {
            "AWS_ENDPOINT_URL_LAMBDA": f"http://127.0.0.1:{server.server_address[1]}",
            "AWS_LAMBDA_FUNCTION_VERSION": VERSION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }

    # --- which copy serves --------------------------------------------------------------------------
    @contextlib.contextmanager
    def serving(self, on: Copy | None = None, avoid: Copy | None = None) -> Iterator[Copy]:
        """An idle copy (``on``, or any but ``avoid``), thawed for one request and frozen again after it."""
        with self._lock:
            while True:
                idle = [c for c in self.copies if not c.busy and c is not avoid and (on is None or c is on)]
                live = [c for c in idle if c.served.process.poll() is None]
                if live:
                    copy = live[0]
                    copy.busy = True
                    break
                if not self._lock.wait(30):
                    raise RuntimeError("no idle copy for 30 s")
        copy.thaw()
        try:
            copy.served_requests += 1
            yield copy
        finally:
            with self._lock:
                copy.freeze()
                copy.busy = False
                self._lock.notify_all()

    def request(
        self,
        method: str,
        path: str,
        *,
        on: Copy | None = None,
        avoid: Copy | None = None,
        key: str = "key-alice",
        **kwargs: Any,
    ) -> tuple[Copy, httpx.Response]:
        with self.serving(on, avoid) as copy:
            headers = lambda_headers(self.seconds_left, key, path, method)
            response = httpx.request(method, copy.url + path, headers=headers, timeout=60, **kwargs)
            return copy, response

    @contextlib.contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        on: Copy | None = None,
        avoid: Copy | None = None,
        key: str = "key-alice",
        **kwargs: Any,
    ) -> Iterator[tuple[Copy, httpx.Response]]:
        """A streamed request: its copy stays busy (and thawed) until the stream is read to its end or closed."""
        with self.serving(on, avoid) as copy:
            headers = lambda_headers(self.seconds_left, key, path, method)
            with httpx.stream(method, copy.url + path, headers=headers, timeout=60, **kwargs) as response:
                yield copy, response

    # --- the stand-in Invoke API's deliveries --------------------------------------------------------------
    def _deliver_later(self, payload: Any) -> None:
        thread = threading.Thread(target=self.deliver, args=(payload,), daemon=True)
        thread.start()
        self._threads.append(thread)

    def deliver(self, payload: Any, gateway_key: str | None = None) -> httpx.Response:
        """The adapter passing an event through to an idle copy's /events (``gateway_key``: as if it came through
        API Gateway, with that caller)."""
        with self.serving() as copy:
            self.delivered_to.append(copy)
            headers = lambda_headers(self.seconds_left, gateway_key, "/events", "POST")
            answer = httpx.post(copy.url + "/events", json=payload, headers=headers, timeout=120)
            self.deliveries.append({"copy": copy.index, "status": answer.status_code, "body": answer.text})
            return answer

    def wait_deliveries(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.deliveries) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.deliveries)} deliveries, expected {count}")
            time.sleep(0.05)


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The data of each SSE event in ``lines`` (``data:`` lines; comments and ``event:`` lines skipped)."""
    for line in lines:
        if line.startswith("data:"):
            yield json.loads(line[5:].strip())
