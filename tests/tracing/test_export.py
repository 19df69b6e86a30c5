"""Spans and metrics over the wire: OTLP/HTTP from the Lambda handler (buffered, and SSE) and from the app under
uvicorn behind the Web Adapter's headers, to a real receiver on 127.0.0.1 decoding the protobuf
(tests/support/otlp.py), each there by the time the invocation's response is complete (flushed, not left to the batch
timer: a frozen Lambda environment exports nothing). With no exporter configured, OpenTelemetry is never imported."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from chatloop.config import ConfigError, Settings
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from chatloop.tracing.setup import parse_headers, uninstall, xray_region
from tests.support.adapter import adapter_headers
from tests.support.events import parse_sse, rest_event
from tests.support.handler import invoke
from tests.support.otlp import OTLPReceiver, attributes_of
from tests.support.repo import ROOT
from tests.support.server import app_server
from tests.support.wire_models import realistic

MODEL = "llama-3.3-70b-versatile"
QUESTION = "calculate compound interest: $10,000 at 5% annually for 15 years"
KEYS = {"groq": "gsk_test0123456789", "openai": None}


@pytest.fixture
def otlp() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as receiver:
        yield receiver
    uninstall()


@pytest.fixture
def realistic_llm(fake_llm):
    fake_llm.default = realistic
    return fake_llm


def settings_for(otlp: OTLPReceiver, **more: object) -> Settings:
    return Settings(
        model_chain=f"groq:{MODEL}",
        otel_exporter_otlp_endpoint=otlp.url,
        otel_exporter_otlp_headers="x-backend-key=backend-secret-123",
        otel_service_name="chatloop-traced",
        **more,  # type: ignore[arg-type]
    )


def calculation(stream: bool) -> dict:
    return rest_event(
        "POST", "/chat", {"messages": [{"role": "user", "content": QUESTION}], "stream": stream}
    )


def names(spans: list[Span]) -> list[str]:
    return sorted(s.name for s in spans)


TURN = sorted(["invoke_agent chatloop", f"chat {MODEL}", f"chat {MODEL}", "execute_tool execute_javascript"])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_the_lambda_handler_exports_the_turn_before_it_returns(
    otlp, realistic_llm, sandbox, app_runtime, stream
):
    app_runtime(settings_for(otlp), registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]), keys=KEYS)
    status, body, _ = invoke(calculation(stream))
    assert status == 200 and "20789.28" in body
    if stream:
        assert parse_sse(body)[-1][0] == "done"
    # No waiting: what the handler returned after is already at the receiver.
    spans = otlp.spans()
    assert names(spans) == TURN
    agent = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert {s.trace_id for s in spans} == {agent.trace_id}
    assert {s.parent_span_id for s in spans if s is not agent} == {agent.span_id}
    assert attributes_of(agent)["chatloop.stop_reason"] == "stop"
    assert otlp.resource_attributes()["service.name"] == "chatloop-traced"
    assert otlp.headers[0]["x-backend-key"] == "backend-secret-123"
    assert otlp.headers[0]["content-type"] == "application/x-protobuf"
    assert {
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
    } <= otlp.metric_names()


def test_the_app_under_uvicorn_behind_the_adapter_exports_before_the_stream_ends(
    otlp, realistic_llm, sandbox
):
    settings = settings_for(otlp, trust_adapter_headers=True)
    registry = ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    with app_server(settings, registry=registry, keys=KEYS) as server:
        headers = adapter_headers(60)
        context = json.loads(headers["x-amzn-lambda-context"])
        context["xray_trace_id"] = (
            "Root=1-5f84c7a9-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"
        )
        headers["x-amzn-lambda-context"] = json.dumps(context)
        body = {"messages": [{"role": "user", "content": QUESTION}], "stream": True}
        with httpx.stream("POST", f"{server.root}/chat", json=body, headers=headers, timeout=60) as response:
            text = response.read().decode()
        assert response.status_code == 200 and "20789.28" in text
        spans = otlp.spans()  # the response is complete: so is the export
        assert names(spans) == TURN
        agent = next(s for s in spans if s.name.startswith("invoke_agent"))
        assert agent.trace_id.hex() == "5f84c7a90123456789abcdef01234567"  # the invocation's X-Ray trace


def test_a_request_not_on_lambda_is_exported_by_the_batch_not_flushed_per_turn(otlp, realistic_llm, sandbox):
    registry = ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    with app_server(settings_for(otlp), registry=registry, keys=KEYS) as server:
        response = httpx.post(
            f"{server.root}/chat", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=60
        )
        assert response.status_code == 200
        from chatloop import tracing

        tracing.flush()  # what a long-running server leaves to the batch timer, sent now
        assert names(otlp.spans()) == sorted(["invoke_agent chatloop", f"chat {MODEL}"])


@pytest.mark.slow
def test_run_sh_under_the_adapters_contract_exports_from_the_standard_variables(otlp, tmp_path):
    """Stream mode as deployed: ``src/run.sh`` started as the Web Adapter starts it, configured by OTEL_* variables
    alone, the turn's spans and metrics at the receiver once the streamed response is complete."""
    from tests.support.adapter import run_sh
    from tests.support.fake_llm import FakeLLM

    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
        "OTEL_SERVICE_NAME": "chatloop-stream",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
    }
    with FakeLLM() as llm, run_sh(llm, tmp_path, **env) as served:
        llm.default = realistic
        body = {"messages": [{"role": "user", "content": QUESTION}], "stream": True}
        headers = {
            **adapter_headers(60),
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        }
        with httpx.stream("POST", f"{served.url}/chat", json=body, headers=headers, timeout=60) as response:
            text = response.read().decode()
        assert response.status_code == 200 and "20789.28" in text
        spans = otlp.spans()
        assert names(spans) == TURN
        assert {s.trace_id.hex() for s in spans} == {"0af7651916cd43dd8448eb211c80319c"}
        assert otlp.resource_attributes()["service.name"] == "chatloop-stream"
        chat = next(s for s in spans if s.name.startswith("chat "))
        assert "calculate compound interest" in attributes_of(chat)["gen_ai.input.messages"]  # opted in
        assert "gsk_test_key" not in str(spans)
        assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= otlp.metric_names()


def test_with_no_exporter_opentelemetry_is_never_imported():
    code = """
import sys, json, app
from tests.support.events import FakeContext, rest_event
body = {"messages": [{"role": "user", "content": "calculate 2 to the 10th power"}], "stream": False}
response = app.handler(rest_event("POST", "/chat", body), FakeContext())
assert response["statusCode"] == 200, response
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
assert not loaded, loaded
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "HOME": str(ROOT / ".none")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]


@pytest.mark.parametrize(
    ("env", "traces", "metrics"),
    [
        ({}, "", ""),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318/"},
            "http://localhost:4318/v1/traces",
            "http://localhost:4318/v1/metrics",
        ),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://xray.eu-west-1.amazonaws.com/v1/traces"},
            "https://xray.eu-west-1.amazonaws.com/v1/traces",
            "",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRICS_EXPORTER": "none"},
            "http://c:4318/v1/traces",
            "",
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, "", ""),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, "", ""),
    ],
)
def test_the_standard_variables_decide_where_spans_and_metrics_go(env, traces, metrics):
    settings = Settings.from_env(env)
    assert (settings.otel_traces_endpoint(), settings.otel_metrics_endpoint()) == (traces, metrics)


def test_an_unsupported_exporter_stops_the_start_and_content_capture_reads_the_conventions_values():
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER"):
        Settings.from_env({"OTEL_TRACES_EXPORTER": "console"})
    capture = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    on = [
        v
        for v in ("true", "SPAN_ONLY", "SPAN_AND_EVENT", "NO_CONTENT", "false", "")
        if Settings.from_env({capture: v}).otel_capture_content()
    ]
    assert on == ["true", "SPAN_ONLY", "SPAN_AND_EVENT"]
    assert parse_headers("a=1,b=x%20y") == {"a": "1", "b": "x y"}
    assert xray_region("https://xray.us-east-2.amazonaws.com/v1/traces") == "us-east-2"
    assert xray_region("http://localhost:4318/v1/traces") is None


def test_exports_to_xrays_endpoint_are_signed_with_sigv4(monkeypatch):
    import requests

    from chatloop.tracing.sigv4 import SigV4Auth

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE12")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret/example")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    request = requests.Request(
        "POST",
        "https://xray.eu-west-1.amazonaws.com/v1/traces",
        data=b"\x0a\x00",
        headers={"Content-Type": "application/x-protobuf"},
    ).prepare()
    signed = SigV4Auth("xray", "eu-west-1")(request)
    authorization = signed.headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIAEXAMPLEEXAMPLE12/")
    assert "/eu-west-1/xray/aws4_request" in authorization and "x-amz-date" in {
        k.lower() for k in signed.headers
    }


# --- the template: TraceExport decides the OTEL_* variables, the layer and the role ---------------------------
@pytest.fixture(scope="module")
def translated(tmp_path_factory) -> dict:
    target = tmp_path_factory.mktemp("cfn") / "template.json"
    subprocess.run(
        [sys.executable, "scripts/translate_template.py", "template.yaml", str(target)], cwd=ROOT, check=True
    )
    return json.loads(target.read_text())


def deployed_function(translated: dict, **parameters: str) -> tuple[dict, list]:
    """The function's properties and the role's policy statements, as CloudFormation would create them."""
    from tests.support.cfn import resolve

    resources = resolve(translated, parameters)["Resources"]
    (function,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    (policy,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::IAM::ManagedPolicy"]
    return function, policy["PolicyDocument"]["Statement"]


@pytest.mark.parametrize("mode", ["stream", "buffered"])
def test_the_template_sets_up_each_trace_export(translated, mode):
    function, statements = deployed_function(translated, ResponseMode=mode)
    env = function["Environment"]["Variables"]
    assert not {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} & set(env)  # none: off
    assert not Settings.from_env({k: v for k, v in env.items() if isinstance(v, str)}).otel_traces_endpoint()
    assert not [s for s in statements if "xray:PutTraceSegments" in s["Action"]]
    assert {"Ref": "OtelCollectorLayerArn"} not in function["Layers"]

    function, statements = deployed_function(translated, ResponseMode=mode, TraceExport="xray")
    env = function["Environment"]["Variables"]
    assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == {
        "Fn::Sub": "https://xray.${AWS::Region}.${AWS::URLSuffix}/v1/traces"
    }
    assert env["OTEL_METRICS_EXPORTER"] == "none"
    (xray,) = [s for s in statements if "xray:PutTraceSegments" in s["Action"]]
    assert xray["Resource"] == "*"

    layer = "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-collector-arm64-ver-0-115-0:3"
    function, _ = deployed_function(
        translated,
        ResponseMode=mode,
        TraceExport="otlp",
        OtelExporterEndpoint="http://localhost:4318",
        OtelCollectorLayerArn=layer,
    )
    env = function["Environment"]["Variables"]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == {"Ref": "OtelExporterEndpoint"}
    assert {"Ref": "OtelCollectorLayerArn"} in function["Layers"]
    settings = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"})
    assert settings.otel_metrics_endpoint() == "http://localhost:4318/v1/metrics"


class SlowProvider:
    """A provider whose flush takes ``seconds`` of the budget it is given (an endpoint that does not answer)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.given: list[int] = []

    def force_flush(self, timeout_millis: int) -> bool:
        self.given.append(timeout_millis)
        time.sleep(min(self.seconds, timeout_millis / 1000))
        return False

    def get_tracer(self, *args: object, **kwargs: object) -> object:
        from opentelemetry.trace import NoOpTracer

        return NoOpTracer()


def test_a_flush_shares_one_budget_spans_first_and_never_outlasts_the_request():
    from chatloop.tracing.setup import Telemetry

    spans, metrics = SlowProvider(0.2), SlowProvider(0.0)
    telemetry = Telemetry.of(spans, None, capture_content=False, flush_timeout_ms=3000)
    telemetry.meter_provider = metrics
    telemetry.flush(within_ms=250)  # the request has 250 ms left: the export timeout (3 s) does not apply
    (given,) = spans.given
    assert 0 < given <= 250 and len(metrics.given) == 1 and metrics.given[0] <= given - 200  # what spans left
    telemetry.flush(within_ms=0)  # nothing left: nothing waited for
    assert len(spans.given) == 1 and len(metrics.given) == 1
    telemetry.flush()  # no deadline: the export timeout
    assert 2900 < spans.given[-1] <= 3000


@pytest.mark.parametrize(
    "variable", ["OTEL_METRIC_EXPORT_INTERVAL", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_SCHEDULE_DELAY"]
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_sdk_variable_the_sdk_refuses_costs_the_traces_not_the_turns(
    otlp, realistic_llm, app_runtime, monkeypatch, caplog, variable, stream
):
    """Issue #41's review: the SDK reads its own ``OTEL_*`` variables and raises as its exporters are built for a
    value it refuses (``0`` here), inside the first traced turn: every turn then failed. It is logged once, and the
    turns are answered untraced."""
    monkeypatch.setenv(variable, "0")
    settings = Settings(model_chain=f"groq:{MODEL}", otel_exporter_otlp_endpoint=otlp.url)
    app_runtime(settings, registry=ToolRegistry(), keys=KEYS)
    for _ in range(2):
        event = rest_event(
            "POST", "/chat", {"messages": [{"role": "user", "content": "hi"}], "stream": stream}
        )
        status, body, _ = invoke(event)
        assert status == 200, body
        assert "internal" not in body and "error" not in body.split("done")[0], body
    assert otlp.spans() == []  # untraced: the SDK could not be built
    refusals = [r for r in caplog.records if "tracing is off" in r.getMessage()]
    assert len(refusals) == 1 and "OTEL_" in refusals[0].getMessage()
