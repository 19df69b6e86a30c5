"""A scripted Amazon Bedrock Runtime on 127.0.0.1, for boto3's real ``bedrock-runtime`` client.

It speaks Converse (``POST /model/{modelId}/converse``, rest-json) and ConverseStream (``POST
/model/{modelId}/converse-stream``, ``application/vnd.amazon.eventstream`` frames encoded here: prelude, headers,
payload, CRC32s), checks every request's SigV4 signature against the credentials it was given (with botocore's
signer: a request signed otherwise gets 403 ``InvalidSignatureException``, as AWS answers), and records each request.
Each model id has a queue of replies: a streamed answer, tool uses, an error with AWS's shape, a stream cut by an
exception event. With none left, ``default`` (a function of the request body) answers.

Usage::

    with FakeBedrock() as bedrock:
        bedrock.script("amazon.nova-lite-v1:0", text("Hello"), error(429, "ThrottlingException", "slow down"))
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", bedrock.url)   # + bedrock.environment()
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
import zlib
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from tests.support.tls import serve_tls

ACCESS_KEY = "AKIAFAKEBEDROCK00001"
SECRET_KEY = "fake/secret/key/for/the/fake/bedrock/0001"
REGION = "us-east-1"
Event = tuple[str, dict[str, Any]]
"""``(":event-type", payload)``; an event type starting with ``!`` is an exception event."""


@dataclass
class Reply:
    status: int = 200
    events: list[Event] = field(default_factory=list)
    error_code: str = ""
    message: str = ""
    delay: float = 0.0
    event_delay: float = 0.0
    before: Callable[[int], None] | None = None
    """Called before the n-th event is written (0: before the status line): a test holds the model there."""


def error(status: int, code: str, message: str) -> Reply:
    """An error as Bedrock answers one: the status, ``x-amzn-ErrorType`` and ``{"message": ...}``."""
    return Reply(status=status, error_code=code, message=message)


def _ending(stop: str, usage: tuple[int, int], cache: tuple[int, int] = (0, 0)) -> list[Event]:
    numbers = {"inputTokens": usage[0], "outputTokens": usage[1], "totalTokens": sum(usage) + sum(cache)}
    if any(cache):
        numbers |= {"cacheReadInputTokens": cache[0], "cacheWriteInputTokens": cache[1]}
    return [
        ("messageStop", {"stopReason": stop}),
        ("metadata", {"usage": numbers, "metrics": {"latencyMs": 7}}),
    ]


def text(
    content: str, pieces: int = 3, usage: tuple[int, int] = (20, 5), cache: tuple[int, int] = (0, 0)
) -> Reply:
    """A streamed text answer in ``pieces`` deltas."""
    size = max(1, -(-len(content) // pieces))
    events: list[Event] = [("messageStart", {"role": "assistant"})]
    events += [
        ("contentBlockDelta", {"delta": {"text": content[i : i + size]}, "contentBlockIndex": 0})
        for i in range(0, len(content), size)
    ]
    events += [("contentBlockStop", {"contentBlockIndex": 0}), *_ending("end_turn", usage, cache)]
    return Reply(events=events)


def tool_use(
    calls: list[tuple[str, str, str]], preface: str = "", usage: tuple[int, int] = (30, 10)
) -> Reply:
    """Tool uses ``(toolUseId, name, input JSON)``, each input streamed in pieces, after an optional text block."""
    events: list[Event] = [("messageStart", {"role": "assistant"})]
    index = 0
    if preface:
        events += [
            ("contentBlockDelta", {"delta": {"text": preface}, "contentBlockIndex": 0}),
            ("contentBlockStop", {"contentBlockIndex": 0}),
        ]
        index = 1
    for n, (call_id, name, arguments) in enumerate(calls, start=index):
        events.append(
            (
                "contentBlockStart",
                {"start": {"toolUse": {"toolUseId": call_id, "name": name}}, "contentBlockIndex": n},
            )
        )
        size = max(1, -(-len(arguments) // 3))
        events += [
            (
                "contentBlockDelta",
                {"delta": {"toolUse": {"input": arguments[i : i + size]}}, "contentBlockIndex": n},
            )
            for i in range(0, len(arguments), size)
        ]
        events.append(("contentBlockStop", {"contentBlockIndex": n}))
    return Reply(events=events + _ending("tool_use", usage))


def cut(reply: Reply, after: int, exception: str = "modelStreamErrorException") -> Reply:
    """``reply`` cut after ``after`` events by an exception event (``throttlingException``, ...)."""
    events = [*reply.events[:after], (f"!{exception}", {"message": f"{exception} in the stream"})]
    return Reply(events=events)


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One ``application/vnd.amazon.eventstream`` message: prelude (total and headers lengths, their CRC32), string
    headers, the payload, the message's CRC32."""
    encoded = b"".join(
        bytes([len(k)]) + k.encode() + b"\x07" + struct.pack(">H", len(v.encode())) + v.encode()
        for k, v in headers.items()
    )
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event_frame(event: Event) -> bytes:
    kind, payload = event
    body = json.dumps(payload).encode()
    if kind.startswith("!"):
        headers = {
            ":message-type": "exception",
            ":exception-type": kind[1:],
            ":content-type": "application/json",
        }
    else:
        headers = {":message-type": "event", ":event-type": kind, ":content-type": "application/json"}
    return frame(headers, body)


def converse_body(reply: Reply) -> dict[str, Any]:
    """The non-streamed Converse answer the same events make."""
    blocks: dict[int, dict[str, Any]] = {}
    answer: dict[str, Any] = {"metrics": {"latencyMs": 7}}
    for kind, payload in reply.events:
        index = payload.get("contentBlockIndex", 0)
        if kind == "contentBlockStart":
            blocks[index] = {"toolUse": {**payload["start"]["toolUse"], "input": ""}}
        elif kind == "contentBlockDelta" and "text" in payload["delta"]:
            blocks.setdefault(index, {"text": ""})["text"] += payload["delta"]["text"]
        elif kind == "contentBlockDelta":
            blocks[index]["toolUse"]["input"] += payload["delta"]["toolUse"]["input"]
        elif kind == "messageStop":
            answer["stopReason"] = payload["stopReason"]
        elif kind == "metadata":
            answer["usage"] = payload["usage"]
    for block in blocks.values():
        if "toolUse" in block:
            block["toolUse"]["input"] = json.loads(block["toolUse"]["input"] or "{}")
    answer["output"] = {"message": {"role": "assistant", "content": [blocks[i] for i in sorted(blocks)]}}
    return answer


_AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request,"
    r"\s*SignedHeaders=(?P<signed>[^,]+),\s*Signature=(?P<signature>[0-9a-f]{64})"
)


def signature_valid(method: str, path: str, headers: dict[str, str], body: bytes, secret: str) -> bool:
    """Whether ``Authorization`` is a SigV4 signature of this request, by ``secret``, for the service ``bedrock``,
    recomputed with botocore's signer over the headers it names."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    match = _AUTH.fullmatch(headers.get("authorization", ""))
    if match is None or match["service"] != "bedrock":
        return False
    signed = {name: headers.get(name, "") for name in match["signed"].split(";")}
    request = AWSRequest(
        method=method, url=f"http://{headers.get('host', '')}{path}", data=body, headers=signed
    )
    request.context["timestamp"] = headers.get("x-amz-date", "")
    signer = SigV4Auth(
        Credentials(match["key"], secret, headers.get("x-amz-security-token")), "bedrock", match["region"]
    )
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    return bool(expected == match["signature"])


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeBedrock

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that closed its stream early (the turn moved on) is no failure of the fake


class _Handler(BaseHTTPRequestHandler):
    """One request to the fake: routed, its signature checked, recorded, answered from the script."""

    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        headers = {k.lower(): v for k, v in self.headers.items()}
        match = re.fullmatch(r"/model/([^/]+)/(converse|converse-stream)", self.path)
        if match is None:
            return self._error(error(404, "UnknownOperationException", f"no route {self.path}"))
        model, operation = unquote(match[1]), match[2]
        signed = fake._signed(self.path, headers, raw)
        body = json.loads(raw or b"{}")
        with fake._lock:
            fake.requests.append(
                {
                    "model": model,
                    "operation": operation,
                    "body": body,
                    "headers": headers,
                    "signed": signed,
                }
            )
            queue = fake.queues[model]
            reply = queue.popleft() if queue else None
        if not signed:
            return self._error(error(403, "InvalidSignatureException", "The request signature is wrong"))
        if reply is None:
            reply = (
                fake.default(body) if fake.default else error(404, "ResourceNotFoundException", "no script")
            )
        time.sleep(reply.delay)
        if reply.before is not None:
            reply.before(0)
        if reply.status != 200:
            return self._error(reply)
        if operation == "converse":
            return self._send(200, "application/json", json.dumps(converse_body(reply)).encode())
        try:
            self._stream(reply)
        except (BrokenPipeError, ConnectionResetError):
            with fake._lock:
                fake.aborted.append(model)

    def _error(self, reply: Reply) -> None:
        payload = json.dumps({"message": reply.message}).encode()
        self._send(
            reply.status,
            "application/json",
            payload,
            {"x-amzn-ErrorType": f"{reply.error_code}:http://internal.amazon.com/coral/com.amazon.bedrock/"},
        )

    def _send(self, status: int, kind: str, payload: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in {
            "content-type": kind,
            "content-length": str(len(payload)),
            "x-amzn-requestid": "req-1",
            **(extra or {}),
        }.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, reply: Reply) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/vnd.amazon.eventstream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-amzn-requestid", "req-1")
        self.end_headers()
        for n, event in enumerate(reply.events):
            if reply.before is not None and n > 0:
                reply.before(n)
            data = event_frame(event)
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            time.sleep(reply.event_delay)
        self.wfile.write(b"0\r\n\r\n")


class FakeBedrock:
    def __init__(
        self,
        access_key: str = ACCESS_KEY,
        secret_key: str = SECRET_KEY,
        verify: bool = True,
        tls: bool = False,
    ) -> None:
        self.access_key, self.secret_key = access_key, secret_key
        self.verify = verify
        self.bearer_token = "bedrock-api-key-fake-0000000000000000"
        """A Bedrock API key it accepts (``Authorization: Bearer ...``), as botocore sends ``AWS_BEARER_TOKEN_BEDROCK``."""
        """Check each signature (off in the bench: the server's own work is not the client's overhead)."""
        self.queues: dict[str, deque[Reply]] = defaultdict(deque)
        self.requests: list[dict[str, Any]] = []
        self.aborted: list[str] = []
        """Models whose stream the client closed before it ended."""
        self.default: Callable[[dict[str, Any]], Reply] | None = None
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.fake = self
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.ca_file: str | None = None
        if tls:  # botocore sends a Bedrock API key over HTTPS only
            self.ca_file = serve_tls(self.server)

    def _signed(self, path: str, headers: dict[str, str], body: bytes) -> bool:
        if headers.get("authorization", "").startswith("Bearer "):
            return headers["authorization"] == f"Bearer {self.bearer_token}"
        match = _AUTH.fullmatch(headers.get("authorization", ""))
        if match is None or match["key"] != self.access_key:
            return False
        if not self.verify:
            return True
        return signature_valid("POST", path, headers, body, self.secret_key)

    @property
    def url(self) -> str:
        return f"{'https' if self.ca_file else 'http'}://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """The variables that point botocore here, signing with this fake's credentials."""
        trust = {"AWS_CA_BUNDLE": self.ca_file} if self.ca_file else {}
        return {
            **trust,
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": self.url,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def script(self, model: str, *replies: Reply) -> None:
        self.queues[model].extend(replies)

    def requests_for(self, model: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["model"] == model]

    def __enter__(self) -> FakeBedrock:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.ca_file:
            import os

            os.unlink(self.ca_file)
