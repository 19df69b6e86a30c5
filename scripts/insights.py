"""Run the template's saved Logs Insights query ("why did it stop calling tools?") over a function's log group for the
last ``--since``, and print one line per result row. The query text is read from template.yaml
(``WhyNoToolsQuery``), so `make insights` and the console's saved query never drift apart. Honours AWS_ENDPOINT_URL
and AWS_REGION.

Usage::

    python scripts/insights.py --log-group /aws/lambda/chatloop-chat --since 1h
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent.parent / "template.yaml"


def saved_query(template: Path = TEMPLATE) -> str:
    from samtranslator.yaml_helper import yaml_parse

    resource = yaml_parse(template.read_text())["Resources"]["WhyNoToolsQuery"]
    query: str = resource["Properties"]["QueryString"]
    return query


def main() -> int:
    from awsutil import client  # scripts/awsutil.py (a script runs with its folder on sys.path)
    from logs import parse_since  # type: ignore[import-not-found]  # scripts/logs.py, beside this script

    parser = argparse.ArgumentParser(description="Why did the function stop calling tools? (Logs Insights)")
    parser.add_argument("--log-group", required=True)
    parser.add_argument("--since", type=parse_since, default=parse_since("1h"))
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    logs_client = client("logs")
    now = int(time.time())
    query_id = logs_client.start_query(
        logGroupName=args.log_group,
        startTime=now - int(args.since),
        endTime=now,
        queryString=saved_query(),
    )["queryId"]
    deadline = time.monotonic() + args.timeout
    while True:
        answer = logs_client.get_query_results(queryId=query_id)
        if answer["status"] not in {"Scheduled", "Running"}:
            break
        if time.monotonic() > deadline:
            print(f"the query did not finish within {args.timeout:g} s")
            return 1
        time.sleep(1)
    if answer["status"] != "Complete":
        print(f"the query ended {answer['status']}")
        return 1
    rows = [[f for f in row if not f["field"].startswith("@ptr")] for row in answer.get("results", [])]
    rows = [row for row in rows if row]
    for row in rows:
        print(" ".join(f"{f['field']}={f['value']}" for f in row))
    if not rows:
        print("no decision lines with shouldExecuteTools=false in this period")
    return 0


if __name__ == "__main__":
    from awsutil import run

    run(main, __file__)
