"""Print a function's CloudWatch log events, one per line, for ``make logs | grep ...``.

Each line is ``<UTC time> <level> <correlation id> <message text>``: Powertools' JSON records are unpacked so the
message text (``Tool execution decision: ... hasSuccessfulJsExecution=true ...``) stands on one line; other
lines (Lambda's START/END/REPORT, plain prints) are printed as they are. Honours AWS_ENDPOINT_URL and AWS_REGION.

Usage::

    python scripts/logs.py --log-group /aws/lambda/chatloop-chat --since 10m [--filter "Tool execution decision"] [--follow]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import UTC, datetime

from awsutil import client, run  # scripts/awsutil.py (a script runs with its folder on sys.path)

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> float:
    """``"10m"``, ``"2h"``, ``"1d"`` or ``"30s"`` in seconds."""
    match = re.fullmatch(r"(\d+)([smhd]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"--since takes a number with s, m, h or d, not {text!r}")
    return int(match.group(1)) * UNITS[match.group(2) or "m"]


def render(event: dict) -> str:
    when = datetime.fromtimestamp(event["timestamp"] / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"
    raw = event["message"].rstrip("\n")
    try:
        record = json.loads(raw)
    except ValueError:
        return f"{when} {raw}".replace("\n", " ")
    if not isinstance(record, dict) or "message" not in record:
        return f"{when} {raw}".replace("\n", " ")
    level = record.get("level", "-")
    correlation = record.get("correlation_id") or record.get("function_request_id") or "-"
    text = str(record["message"])
    if record.get("exception"):
        text += f" | {record['exception']}"
    return f"{when} {level} {correlation} {text}".replace("\n", " ")


def fetch(logs_client, group: str, start_ms: int, pattern: str | None):
    kwargs = {"logGroupName": group, "startTime": start_ms, "interleaved": True}
    if pattern:
        kwargs["filterPattern"] = pattern
    for page in logs_client.get_paginator("filter_log_events").paginate(**kwargs):
        yield from page.get("events", [])


def main() -> int:
    parser = argparse.ArgumentParser(description="Print a Lambda function's log events, one per line.")
    parser.add_argument("--log-group", required=True)
    parser.add_argument("--since", type=parse_since, default=parse_since("10m"))
    parser.add_argument(
        "--filter", default="", help="a CloudWatch Logs filter pattern (plain terms or a quoted phrase)"
    )
    parser.add_argument("--follow", action="store_true", help="keep polling for new events")
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args()
    logs_client = client("logs")
    start_ms = int((time.time() - args.since) * 1000)
    seen: set[str] = set()
    try:
        while True:
            newest = start_ms
            for event in fetch(logs_client, args.log_group, start_ms, args.filter or None):
                if event["eventId"] in seen:
                    continue
                seen.add(event["eventId"])
                newest = max(newest, event["timestamp"])
                print(render(event), flush=True)
            if not args.follow:
                return 0
            start_ms = newest
            time.sleep(args.interval)
    except logs_client.exceptions.ResourceNotFoundException:
        print(f"no log group {args.log_group} (deployed yet? right AWS_REGION?)", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `make logs | head`
        return 0
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    run(main, __file__)
