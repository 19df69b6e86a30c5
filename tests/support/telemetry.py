"""The OpenTelemetry SDK's in-memory exporter and metric reader, installed as chatloop's tracing, for tests that
read the spans and metrics of a turn (tests/tracing/test_spans_and_metrics.py, tests/api/turns/test_budgets.py).

Usage::

    telemetry = InMemoryTelemetry()
    try:
        ...  # a turn
        assert telemetry.agent().attributes["chatloop.stop_reason"] == "stop"
    finally:
        uninstall()
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chatloop.tracing.setup import install


class InMemoryTelemetry:
    """Installs tracing (``chatloop.tracing.setup.install``) with the SDK's in-memory exporter and metric reader, and
    reads what they caught. The caller uninstalls it (``chatloop.tracing.setup.uninstall``)."""

    def __init__(self, capture_content: bool = False) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        install(provider, MeterProvider(metric_readers=[self.reader]), capture_content=capture_content)

    def spans(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    def agent(self) -> ReadableSpan:
        (span,) = self.named("invoke_agent")
        return span

    def metrics(self) -> dict[str, Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
