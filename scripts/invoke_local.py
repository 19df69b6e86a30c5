"""Invoke the Lambda handler locally on an event file, without Docker (``make invoke EVENT=events/rest-chat.json``).

Imports ``src/app.py`` as Lambda would, calls ``handler(event, context)`` with a fake context, and prints the
status, headers and body (decoded when base64) plus the init and invoke times.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class LocalContext:
    """The parts of the Lambda context that Powertools and the handler read."""

    remaining_ms: float = 29_000
    function_name: str = "chatloop-chat"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:chatloop-chat"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return int(self.remaining_ms - (time.monotonic() - self._started) * 1000)


def main(path: str) -> int:
    os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "chatloop")
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "ChatLoop")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    event = json.loads(Path(path).read_text())
    start = time.perf_counter()
    import app

    init_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    response = app.handler(event, LocalContext())
    invoke_ms = (time.perf_counter() - start) * 1000
    body = response.get("body") or ""
    if response.get("isBase64Encoded"):
        body = base64.b64decode(body).decode()
    print(
        f"status: {response['statusCode']}  init_ms={init_ms:.0f} invoke_ms={invoke_ms:.0f}", file=sys.stderr
    )
    print(json.dumps(response.get("headers", {})), file=sys.stderr)
    print(body)
    return 0 if response["statusCode"] < 500 else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/invoke_local.py events/<file>.json")
    sys.exit(main(sys.argv[1]))
