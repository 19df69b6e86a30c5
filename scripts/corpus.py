"""A fixed corpus of requests through the real Lambda handler, recorded so that two trees can be compared (issue 42:
"behaviour unchanged", checked as the previous re-cut was).

Each case sends API-Gateway REST events (tests/support/events.py) to ``src/app.py``'s ``handler`` with a scripted
model (tests/support/models.py) and records, normalised, what came back and what was logged: statuses, headers,
bodies (SSE split into events), and every log line. Ids, times and durations are replaced by stable placeholders
(the n-th distinct id of its kind in a case), so two runs of one tree record the same bytes.

Usage::

    .venv/bin/python -m scripts.corpus /work/corpus-base.json          # record this tree
    .venv/bin/python -m scripts.corpus --compare A.json B.json          # 0 when identical, the diff otherwise
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import io
import json
import logging
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
Case = Callable[["Recorder"], None]


# --- normalising ---------------------------------------------------------------------------------------------------
_ID_PATTERNS = [
    ("uuid", re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")),
    (
        "prefixed",
        re.compile(
            r"\b(?:resp|msg|conv|fc|mcpr|appr|cmp|item|rs|ci|chatcmpl|call|ctc|req)_[A-Za-z0-9_-]{6,}"
        ),
    ),
    ("hex", re.compile(r"\b[0-9a-f]{24,}\b")),
    ("token", re.compile(r"\b[A-Za-z0-9_-]{40,}\b")),
]
_TIME_KEYS = re.compile(
    r"(^|[_-])(retry|reset|timestamp|time|created|created_at|completed_at|updated_at|expires_at|started|ms|seconds|duration|"
    r"elapsed|latency|ttfb|remaining|deadline|epoch|at|ts|took|cold_start|xray_trace_id|function_request_id)($|[_-])"
)
_DURATIONS = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s)\b|\b\d+h\d+m\d+s\b")
_TIMED_FIELDS = re.compile(r"\b(\w*(?:ms|seconds|retry_after|elapsed|took|age)\w*)=\d+(?:\.\d+)?")
_TIMES = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?")


class Normaliser:
    """Replaces ids with ``<kind:n>`` (n: order of first appearance within one case) and times with ``<time>``."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def text(self, value: str) -> str:
        for kind, pattern in _ID_PATTERNS:
            value = pattern.sub(functools.partial(self._match, kind), value)
        value = _TIMES.sub("<time>", value)
        value = _TIMED_FIELDS.sub(lambda m: f"{m.group(1)}=<n>", value)
        return _DURATIONS.sub("<duration>", value)

    def _match(self, kind: str, match: re.Match[str]) -> str:
        return self._id(kind, match.group(0))

    def _id(self, kind: str, raw: str) -> str:
        if raw.startswith("<"):
            return raw
        prefix = raw.split("_", 1)[0] + "_" if kind == "prefixed" else ""
        if raw not in self.seen:
            self.seen[raw] = f"<{prefix}{kind}:{len(self.seen)}>"
        return self.seen[raw]

    def value(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: self.value(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, key) for v in value]
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float) and _TIME_KEYS.search(key.lower()):
            return "<number>"
        if isinstance(value, str):
            if _TIME_KEYS.search(key.lower()) and re.fullmatch(r"[\dhms.:TZ+ -]+", value):
                return "<time>"
            return self.text(value)
        return value


def _parse_body(text: str, content_type: str) -> Any:
    if "event-stream" in content_type:
        events = []
        for block in text.split("\n\n"):
            if not block.strip():
                continue
            fields: dict[str, Any] = {}
            for line in block.splitlines():
                name, _, data = line.partition(": ")
                fields[name] = _json_or_text(data) if name == "data" else data
            events.append(fields)
        return {"sse": events}
    return _json_or_text(text)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


# --- recording -----------------------------------------------------------------------------------------------------
class Recorder:
    """One case's record: each exchange (request, status, headers, body) and the log lines it wrote."""

    def __init__(self, logs: io.StringIO) -> None:
        self.exchanges: list[dict[str, Any]] = []
        self.logs = logs
        self.norm = Normaliser()

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        caller: str | None = "key-a",
        query: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        from tests.support.events import rest_event
        from tests.support.handler import invoke

        event = rest_event(method, path, body)
        if caller is not None:
            event["requestContext"]["identity"]["apiKeyId"] = caller
        if query:
            event["queryStringParameters"] = dict(query)
            event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
        status, text, headers = invoke(event)
        parsed = _parse_body(text, headers.get("content-type", ""))
        exchange = {
            "request": [method, path, body, query],
            "status": status,
            "headers": headers,
            "body": parsed,
        }
        self._keep(exchange)
        return status, parsed

    def worker(self, payload: dict[str, Any]) -> Any:
        from tests.support.handler import handle

        answer = handle(payload)
        self._keep({"worker": payload, "answer": answer})
        return answer

    def _keep(self, exchange: dict[str, Any]) -> None:
        lines = [_json_or_text(line) for line in self.logs.getvalue().splitlines() if line.strip()]
        self.logs.seek(0)
        self.logs.truncate()
        exchange["logs"] = [_drop_noise(line) for line in lines]
        self.exchanges.append(self.norm.value(exchange))


_TREE_PATHS = re.compile(r'(?<=")[^"]*?/(src|tests|scripts)/')
_FRAME_LINES = re.compile(r'(?<=line )\d+|(?<="line": )\d+')
NOISE = ("timestamp", "xray_trace_id", "sampling_rate", "cold_start", "function_request_id", "taskName")
"""Log keys that differ run to run whatever the code does (the host's, the process's)."""


def _drop_noise(line: Any) -> Any:
    """A log line without its ``NOISE`` keys, and without the line number of its ``location`` (a re-cut moves
    code; the function that logged is kept)."""
    if isinstance(line, dict):
        for key in NOISE:
            line.pop(key, None)
        if isinstance(line.get("location"), str):
            line["location"] = line["location"].rsplit(":", 1)[0]
        if "exception" in line or "stack_trace" in line:  # a traceback: the tree's path and line numbers vary
            text = _TREE_PATHS.sub(r"<tree>/\1/", json.dumps({k: line.pop(k) for k in list(line)}))
            line.update(json.loads(_FRAME_LINES.sub('"<n>"', text).replace('line "<n>"', "line <n>")))
    return line


def _without_line_numbers(record: dict[str, Any]) -> dict[str, Any]:
    """A record as ``_drop_noise`` leaves it (one recorded before it dropped line numbers compares too)."""
    for exchanges in record.values():
        for exchange in exchanges:
            for line in exchange.get("logs", []):
                _drop_noise(line)
    return record


@contextlib.contextmanager
def captured_logs() -> Iterator[io.StringIO]:
    """Every line the Powertools logger (and the EMF metrics, on stdout) writes, into one buffer."""
    from chatloop.observability import SERVICE

    buffer = io.StringIO()
    handlers = logging.getLogger(SERVICE).handlers
    saved = [(h, getattr(h, "stream", None)) for h in handlers]
    for handler in handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(buffer)
    try:
        with contextlib.redirect_stdout(buffer):
            yield buffer
    finally:
        for handler, stream in saved:
            if isinstance(handler, logging.StreamHandler) and stream is not None:
                handler.setStream(stream)


def record(out: Path) -> None:
    os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "chatloop")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ["POWERTOOLS_METRICS_NAMESPACE"] = "ChatLoop"
    for path in (ROOT / "src", ROOT):
        sys.path.insert(0, str(path))
    from scripts.corpus_cases import CASES

    results: dict[str, Any] = {}
    with captured_logs() as logs:
        for name, case in CASES.items():
            with tempfile.TemporaryDirectory() as tmp, case_runtime(tmp) as prepare:
                recorder = Recorder(logs)
                try:
                    case(prepare(recorder))
                except Exception as error:  # a case that breaks is recorded as such, and the others still run
                    recorder.exchanges.append({"case_failed": f"{type(error).__name__}: {error}"})
                results[name] = recorder.exchanges
    out.write_text(json.dumps(results, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    failed = [n for n, r in results.items() if any("case_failed" in e for e in r)]
    print(
        f"{len(results)} cases, {sum(len(r) for r in results.values())} exchanges -> {out}; failed: {failed}"
    )


@contextlib.contextmanager
def case_runtime(tmp: str) -> Iterator[Callable[[Recorder], Recorder]]:
    """The handler's runtime put back after a case; the case's store in ``tmp``."""
    from tests.support.handler import AppRuntime

    swap = AppRuntime()

    def prepare(recorder: Recorder) -> Recorder:
        recorder.tmp = tmp  # type: ignore[attr-defined]
        recorder.swap = swap  # type: ignore[attr-defined]
        return recorder

    try:
        yield prepare
    finally:
        swap.restore()


def compare(a: Path, b: Path) -> int:
    left = _without_line_numbers(json.loads(a.read_text()))
    right = _without_line_numbers(json.loads(b.read_text()))
    if left == right:
        cases = len(left)
        lines = sum(len(e.get("logs", [])) for r in left.values() for e in r)
        print(f"identical: {cases} cases, {lines} log lines")
        return 0
    for name in sorted(set(left) | set(right)):
        if left.get(name) != right.get(name):
            one = json.dumps(left.get(name), indent=1, sort_keys=True).splitlines()
            two = json.dumps(right.get(name), indent=1, sort_keys=True).splitlines()
            print(f"--- case {name}")
            sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(one, two, lineterm="", n=2))
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    parser.add_argument("out", nargs="?", type=Path)
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("give the record's path, or --compare A B")
    record(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
