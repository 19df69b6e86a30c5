"""The OpenTelemetry SDK's standard variables are honoured, not overridden by hand (issue #41): the metric reader's
export interval, the per-signal export timeouts and the resource's service name, each seen at a real OTLP/HTTP
receiver on 127.0.0.1 (tests/support/otlp.py) or a listener that never answers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from chatloop.config import Settings
from chatloop.tracing.setup import telemetry_for, uninstall
from tests.support.otlp import OTLPReceiver, attributes_of

OTEL_VARIABLES = (
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_METRIC_EXPORT_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SERVICE_NAME",
)


@pytest.fixture
def otlp(monkeypatch) -> Iterator[OTLPReceiver]:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with OTLPReceiver() as receiver:
        yield receiver
        uninstall()  # the exporters' threads stopped before the receiver goes


def record_one(settings: Settings) -> None:
    telemetry = telemetry_for(settings)
    telemetry.token_usage.record(7, {"gen_ai.token.type": "input"})


def wait_for(condition, seconds: float) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_metrics_leave_on_the_export_interval_set_and_on_the_sdks_default_without_it(otlp, monkeypatch):
    settings = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url})
    record_one(
        settings
    )  # no OTEL_METRIC_EXPORT_INTERVAL: the SDK's minute, so nothing leaves in the next second
    assert not wait_for(lambda: otlp.metrics, 1.0)
    uninstall()  # (its shutdown exports what it held)
    exported_by_shutdown = len(otlp.metrics)

    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")
    record_one(settings)
    # no flush: the reader's own timer sends it (twice, to be sure it is the interval and not a one-off)
    assert wait_for(lambda: len(otlp.metrics) >= exported_by_shutdown + 2, 20)
    assert "gen_ai.client.token.usage" in otlp.metric_names()


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """An address that accepts connections and never answers (an OTLP endpoint that hangs)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


def test_the_per_signal_export_timeout_is_honoured_over_the_general_one(silent_listener, monkeypatch):
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    settings = Settings.from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": silent_listener,
            "OTEL_EXPORTER_OTLP_TIMEOUT": "10000",
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "200",
            "OTEL_METRICS_EXPORTER": "none",
        }
    )
    telemetry = telemetry_for(settings)
    try:
        telemetry.tracer.start_span("invoke_agent chatloop").end()
        started = time.monotonic()
        telemetry.flush()  # bounded by the general 10 s: the traces' 200 ms must end the export long before
        took = time.monotonic() - started
    finally:
        uninstall()
    assert took < 5, took


def test_the_resource_comes_from_otel_resource_attributes(otlp, monkeypatch):
    monkeypatch.setenv(
        "OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes,deployment.environment=staging"
    )
    telemetry = telemetry_for(Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url}))
    telemetry.tracer.start_span("invoke_agent chatloop").end()
    telemetry.flush()
    resource = otlp.resource_attributes()
    assert resource["service.name"] == "from-attributes" and resource["deployment.environment"] == "staging"


def test_otel_service_name_wins_and_without_any_the_powertools_name_is_used(otlp, monkeypatch):
    from chatloop.observability import SERVICE

    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url, "OTEL_SERVICE_NAME": "named"}
    telemetry = telemetry_for(Settings.from_env(env))
    telemetry.tracer.start_span("one").end()
    telemetry.flush()
    assert otlp.resource_attributes()["service.name"] == "named"
    uninstall()
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES")
    otlp.traces.clear()
    telemetry = telemetry_for(Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url}))
    telemetry.tracer.start_span("two").end()
    telemetry.flush()
    assert otlp.resource_attributes()["service.name"] == SERVICE
    assert [attributes_of(r.resource)["service.name"] for t in otlp.traces for r in t.resource_spans] == [
        SERVICE
    ]


def test_a_signals_own_headers_replace_the_general_ones_and_are_redacted(otlp):
    from chatloop.redaction import redact

    settings = Settings.from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
            "OTEL_EXPORTER_OTLP_HEADERS": "x-general=general-value-123",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-traces-key=traces-secret-4567",
        }
    )
    telemetry = telemetry_for(settings)
    telemetry.tracer.start_span("invoke_agent chatloop").end()
    telemetry.flush()
    sent = {k.lower(): v for k, v in otlp.headers[0].items()}
    assert sent.get("x-traces-key") == "traces-secret-4567" and "x-general" not in sent
    assert "traces-secret-4567" not in redact("the key traces-secret-4567 in a log line")
