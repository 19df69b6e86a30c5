"""The operator's view: the dashboard and alarms name only metrics the code really emits (captured from the EMF
the real handler prints for real turns), the saved Logs Insights query answers "why did it stop calling tools?"
over real decision lines, and `make insights` runs it against a moto server."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest

import app as lambda_app
from chatloop.config import Settings
from chatloop.engine.events import StopReason
from chatloop.providers.base import ModelResponse
from chatloop.providers.chain import FallbackChain
from chatloop.providers.failures import Transient
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.cfn import resolve
from tests.support.events import FakeContext, rest_event
from tests.support.handler import build_runtime, handle, serving
from tests.support.models import ScriptedModel, js
from tests.support.repo import ROOT

NAMESPACE = "ChatLoop"
ASSERTED_ELSEWHERE = {
    "IdempotencyErrors"
}  # tests/api/idempotency/test_idempotency.py checks the handler emits it
ASSERTED_ELSEWHERE |= {
    "BudgetRefusals",
    "BudgetStoreFailures",
}  # tests/api/turns/test_budgets.py checks the handler emits them


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> dict[str, Any]:
    target = tmp_path_factory.mktemp("cfn") / "template.json"
    subprocess.run(
        [sys.executable, "scripts/translate_template.py", "template.yaml", str(target)], cwd=ROOT, check=True
    )
    translation: dict[str, Any] = json.loads(target.read_text())
    return translation


@pytest.fixture(scope="module")
def translated(raw) -> dict[str, Any]:
    """What CloudFormation deploys in stream mode with an alarm e-mail given."""
    return resolve(raw, {"ResponseMode": "stream", "AlarmEmail": "ops@example.com"})


def dashboard_body(translated: dict[str, Any]) -> dict[str, Any]:
    text, variables = translated["Resources"]["OperationsDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    assert set(variables) == {"Function"}
    filled = re.sub(
        r"\$\{[^}]+\}", "x", text
    )  # ${AWS::Region}, ${Function}, ...: what CloudFormation fills in
    body: dict[str, Any] = json.loads(filled)
    return body


def dashboard_metrics(body: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The ChatLoop metric names the dashboard names, and the name prefixes its SEARCH expressions use."""
    names, prefixes = set(), set()
    for widget in body["widgets"]:
        for metric in widget["properties"]["metrics"]:
            if isinstance(metric[0], dict):
                prefixes.update(re.findall(r'MetricName=\\?"(\w+)\\?"', metric[0]["expression"]))
            elif metric[0] == NAMESPACE:
                names.add(metric[1])
    return names, prefixes


@pytest.fixture(scope="module")
def emitted(sandbox) -> set[str]:
    """The metric names the real handler prints as EMF for turns that run code, fail code, repeat a call, fall
    back, fail every model, and reject bad input."""

    def calculator(request, n):
        if n == 1:
            return ModelResponse(
                "", tool_calls=[js("throw new Error('bad code')", "c1"), js("1 + 1", "c2"), js("1 + 1", "c3")]
            )
        return ModelResponse("", content="Done.")

    def flaky(request, n):
        raise Transient("upstream down", model="scripted:flaky")

    names: set[str] = set()
    runs = [
        (
            FallbackChain(
                [ScriptedModel(flaky, name="scripted:flaky"), ScriptedModel(calculator, name="scripted:calc")]
            ),
            {"messages": [{"role": "user", "content": "go"}], "stream": False},
        ),
        (
            FallbackChain([ScriptedModel(flaky, name="scripted:flaky")]),
            {"messages": [{"role": "user", "content": "go"}], "stream": False},
        ),
        (FallbackChain([ScriptedModel(calculator, name="scripted:calc")]), {"messages": "not a list"}),
    ]
    import contextlib
    import io

    for chain, body in runs:
        runtime = build_runtime(
            Settings(), chain=chain, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)])
        )
        out = io.StringIO()
        with serving(runtime), contextlib.redirect_stdout(out):
            handle(rest_event("POST", "/chat", body))
        for line in out.getvalue().splitlines():
            if line.startswith('{"_aws"'):
                record = json.loads(line)
                for directive in record["_aws"]["CloudWatchMetrics"]:
                    assert directive["Namespace"] in {NAMESPACE, "ChatLoopTest"}
                    names.update(m["Name"] for m in directive["Metrics"])
    return names


def test_the_turns_emit_the_breakdowns_the_dashboard_shows(emitted):
    assert {
        "ToolCallsSkipped_duplicate",
        "SandboxErrors",
        "FallbackFrom_scripted_flaky",
        "Stop_all_models_failed",
    } <= emitted
    assert {"Requests", "Status4xx", "Status5xx", "SandboxMilliseconds", "ModelFallbacks"} <= emitted


def test_the_dashboard_names_only_metrics_the_code_emits(translated, emitted):
    names, prefixes = dashboard_metrics(dashboard_body(translated))
    # Every stop reason is a Stop_<reason> metric by construction (record_turn_metrics); the rest were captured.
    possible = emitted | {f"Stop_{reason.value}" for reason in StopReason} | ASSERTED_ELSEWHERE
    assert names and not names - possible, names - possible
    mcp = {
        "MCPToolCalls",
        "MCPToolErrors",
    }  # per server: emitted by MCP calls, asserted in tests/tools/test_mcp.py
    assert prefixes == {"ToolCallsSkipped_", "FallbackFrom_"} | mcp
    assert all(any(name.startswith(prefix) for name in emitted) for prefix in prefixes - mcp)
    kinds = {
        m[0]
        for w in dashboard_body(translated)["widgets"]
        for m in w["properties"]["metrics"]
        if isinstance(m[0], str)
    }
    assert {"AWS/Lambda", "AWS/ApiGateway", NAMESPACE} <= kinds
    stats = {
        json.dumps(m[-1])
        for w in dashboard_body(translated)["widgets"]
        for m in w["properties"]["metrics"]
        if isinstance(m[0], str) and m[1] == "SandboxMilliseconds"
    }
    assert any('"p50"' in s for s in stats) and any('"p95"' in s for s in stats)


def test_the_alarms_watch_emitted_metrics_with_parameter_thresholds(raw, translated, emitted):
    resources = translated["Resources"]
    alarms = {name: r["Properties"] for name, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert set(alarms) == {
        "AllModelsFailedAlarm",
        "FallbackRateAlarm",
        "DeadlineStopsAlarm",
        "ServerErrorRateAlarm",
        "SandboxErrorsAlarm",
        "BudgetRefusalsAlarm",
    }
    possible = emitted | {f"Stop_{reason.value}" for reason in StopReason} | ASSERTED_ELSEWHERE
    for name, alarm in alarms.items():
        assert alarm["Threshold"]["Ref"] in translated["Parameters"], name
        assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}], name  # AlarmEmail given: the topic notifies
        watched = (
            [alarm]
            if "MetricName" in alarm
            else [q["MetricStat"]["Metric"] for q in alarm["Metrics"] if "MetricStat" in q]
        )
        for metric in watched:
            assert metric["Namespace"] == "AWS/ApiGateway" or metric["MetricName"] in possible, (name, metric)
    topic = resources["AlarmTopic"]["Properties"]
    assert topic["Subscription"] == [{"Protocol": "email", "Endpoint": {"Ref": "AlarmEmail"}}]
    quiet = resolve(raw, {"AlarmEmail": ""})["Resources"]
    assert "AlarmTopic" not in quiet and all(
        "AlarmActions" not in r["Properties"] for r in quiet.values() if r["Type"] == "AWS::CloudWatch::Alarm"
    )


# --- "why did it stop calling tools?" ----------------------------------------------------------------
def run_query(query: str, records: list[str]) -> list[tuple[str, int]]:
    """The saved query's commands (filter ... like, parse, stats count by, sort desc), evaluated the way Logs
    Insights does over log lines: moto's Logs Insights cannot run parse or stats."""
    commands = [c.strip() for c in query.strip().split("|")]
    lines = records
    reasons: list[str] = []
    for command in commands:
        if command.startswith("filter"):
            needles = re.findall(r"@message like /(.+?)/", command)
            lines = [line for line in lines if all(re.search(n, line) for n in needles)]
        elif command.startswith("parse"):
            found = re.search(r"parse @message /(.+)/", command)
            assert found, command
            pattern = found.group(1).replace("(?<", "(?P<")
            reasons = [m.group("reason") for line in lines if (m := re.search(pattern, line))]
        elif command.startswith("stats"):
            assert command == "stats count(*) as decisions by reason"
        elif command.startswith("sort"):
            assert command == "sort decisions desc"
    return Counter(reasons).most_common()


def test_the_saved_query_answers_from_real_decision_lines(translated, sandbox, caplog, app_runtime):
    query = translated["Resources"]["WhyNoToolsQuery"]["Properties"]["QueryString"]
    assert translated["Resources"]["WhyNoToolsQuery"]["Properties"]["LogGroupNames"] == [
        {"Ref": "ChatLogGroup"}
    ]
    from scripts.insights import saved_query

    assert saved_query() == query  # make insights runs exactly the saved query

    def model(request, n):
        if n == 1:
            return ModelResponse("", tool_calls=[js("6 * 7", "c1")])
        if n == 2:
            return ModelResponse("", tool_calls=[js("6 * 7", "c2")])  # runs it again after it succeeded
        return ModelResponse("", content="42.")

    app_runtime(
        Settings(), model=ScriptedModel(model), registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    )
    caplog.set_level("INFO")
    lambda_app.handler(
        rest_event("POST", "/chat", {"messages": [{"role": "user", "content": "6*7"}], "stream": False}),
        FakeContext(),
    )
    lines = [json.dumps({"level": r.levelname, "message": r.getMessage()}) for r in caplog.records]
    rows = dict(run_query(query, lines))
    decisions = [line for line in lines if "Tool execution decision" in line]
    assert len(decisions) == 3 and rows
    assert sum(rows.values()) == sum("shouldExecuteTools=false" in line for line in decisions)
    assert "no_tool_calls" in rows  # the model answered


@pytest.mark.slow  # make, the AWS CLI and a moto server
def test_make_insights_runs_the_query_against_a_moto_server(tmp_path):
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {
            "PATH": "/usr/bin:/bin",
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        }
        logs = boto3.client(
            "logs",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        group = "/aws/lambda/chatloop-insights-chat"
        logs.create_log_group(logGroupName=group)
        logs.create_log_stream(logGroupName=group, logStreamName="s")
        line = "Tool execution decision: iteration=2 hasToolCalls=false shouldExecuteTools=false reason=no_tool_calls"
        logs.put_log_events(
            logGroupName=group,
            logStreamName="s",
            logEvents=[{"timestamp": int(time.time() * 1000), "message": json.dumps({"message": line})}],
        )
        result = subprocess.run(
            [
                shutil.which("make") or "make",
                "--no-print-directory",
                "insights",
                "STACK=chatloop-insights",
                "SINCE=1h",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert (
            result.stdout.strip()
        )  # rows, or says there were none (moto's engine cannot run parse or stats)
        from scripts.insights import saved_query

        (query,) = [q for q in logs.describe_queries(logGroupName=group)["queries"]]
        assert query["queryString"] == saved_query() and query["status"] == "Complete"
    finally:
        server.stop()
