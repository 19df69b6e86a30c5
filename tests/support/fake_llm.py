"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for the real ``groq`` and ``openai`` SDKs.

Each model id has a queue of replies: a stream of chunks (OpenAI's or Groq's shape), a stream cut mid-way,
or an error with a real-shaped body and headers. Every request is recorded. With no scripted reply left,
a model answers from ``default`` (a function of the request body), which lets the handler tests run whole
turns through the SDKs.

Usage::

    with FakeLLM() as llm:
        llm.script("llama-3.3-70b-versatile", error(429, "rate_limit_exceeded", "...", {"retry-after": "2"}))
        os.environ["GROQ_BASE_URL"] = llm.groq_base_url
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    chunks: list[dict[str, Any]] = field(default_factory=list)
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    cut_after: int | None = None
    """Close the connection after this many chunks, without ending the chunked body."""
    delay: float = 0.0
    chunk_delay: float = 0.0
    """Seconds between streamed chunks: a model that is slow to finish, not slow to start."""
    before: Callable[[int], None] | None = None
    """Called before the n-th chunk is written (n = 0: before the status line, after ``delay``): a test blocks
    there until its client has seen what must reach it before the model writes more. Streaming is then proved by
    the order things happen in, which a loaded machine cannot change, rather than by wall-clock bounds."""


def error(
    status: int,
    code: str | None,
    message: str,
    headers: dict[str, str] | None = None,
    kind: str = "invalid_request_error",
    **extra: Any,
) -> Reply:
    body = {"error": {"message": message, "type": kind, "code": code, **extra}}
    return Reply(status=status, body=body, headers=headers or {})


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def text(
    model: str,
    content: str,
    pieces: int = 3,
    usage: tuple[int, int] = (20, 5),
    groq: bool = False,
    cut_after: int | None = None,
) -> Reply:
    """A streamed text answer. OpenAI shape: a final usage-only chunk; Groq shape: ``x_groq.usage``."""
    size = max(1, -(-len(content) // pieces))
    chunks = [_chunk(model, {"role": "assistant", "content": ""})]
    chunks += [_chunk(model, {"content": content[i : i + size]}) for i in range(0, len(content), size)]
    chunks += _ending(model, "stop", usage, groq)
    return Reply(chunks=chunks, cut_after=cut_after)


def tool_calls(
    model: str,
    calls: list[tuple[str, str, str]],
    usage: tuple[int, int] = (30, 10),
    groq: bool = False,
    pieces: int = 4,
) -> Reply:
    """Streamed tool calls ``(id, name, arguments)``. OpenAI shape: name first, arguments in pieces by index;
    Groq shape: each whole call in one chunk."""
    chunks = [_chunk(model, {"role": "assistant", "content": None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        first = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments if groq else ""},
        }
        chunks.append(_chunk(model, {"tool_calls": [first]}))
        if groq:
            continue  # Groq sends each call whole
        size = max(1, -(-len(arguments) // pieces))
        for i in range(0, len(arguments), size):
            piece = {"index": index, "function": {"arguments": arguments[i : i + size]}}
            chunks.append(_chunk(model, {"tool_calls": [piece]}))
    chunks += _ending(model, "tool_calls", usage, groq)
    return Reply(chunks=chunks)


def _ending(model: str, finish: str, usage: tuple[int, int], groq: bool) -> list[dict[str, Any]]:
    numbers = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    if groq:
        return [_chunk(model, {}, finish, x_groq={"id": "req_1", "usage": numbers})]
    return [
        _chunk(model, {}, finish),
        {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": model,
            "choices": [],
            "usage": numbers,
        },
    ]


class FakeLLM:
    def __init__(self) -> None:
        self.queues: dict[str, deque[Reply]] = defaultdict(deque)
        self.requests: list[dict[str, Any]] = []
        self.default: Callable[[dict[str, Any]], Reply] | None = None
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # Without this, small streamed writes meet delayed ACKs: ~40 ms per reply that no real API has.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                    queue = fake.queues[body.get("model", "")]
                    reply = queue.popleft() if queue else None
                if reply is None:
                    reply = fake.default(body) if fake.default else error(404, "model_not_found", "no script")
                time.sleep(reply.delay)
                if reply.before is not None:
                    reply.before(0)
                if reply.status != 200:
                    payload = json.dumps(reply.body).encode()
                    self.send_response(reply.status)
                    for k, v in {
                        "content-type": "application/json",
                        "content-length": str(len(payload)),
                        **reply.headers,
                    }.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                for n, chunk in enumerate(reply.chunks):
                    if reply.cut_after is not None and n >= reply.cut_after:
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    if reply.before is not None and n > 0:
                        reply.before(n)
                    self._write(f"data: {json.dumps(chunk)}\n\n".encode())
                    time.sleep(reply.chunk_delay)
                self._write(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

            def _write(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def groq_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"  # the groq SDK appends /openai/v1/chat/completions

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, model: str, *replies: Reply) -> None:
        self.queues[model].extend(replies)

    def requests_for(self, model: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["body"].get("model") == model]

    def __enter__(self) -> FakeLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
