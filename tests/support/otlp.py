"""An OTLP/HTTP receiver on 127.0.0.1: ``/v1/traces`` and ``/v1/metrics`` (binary protobuf, as the SDK's exporters
send them) decoded with ``opentelemetry-proto`` and kept, so a test reads what actually went over the wire.

Usage::

    with OTLPReceiver() as otlp:
        settings = Settings(otel_exporter_otlp_endpoint=otlp.url)
        ...
        [span.name for span in otlp.spans()]
        print(otlp.tree())          # the turn as an indented tree
"""

from __future__ import annotations

import gzip
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes_of(item: Any) -> dict[str, Any]:
    return {a.key: value_of(a.value) for a in item.attributes}


class OTLPReceiver:
    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                encoding = self.headers.get("content-encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path == "/v1/traces":
                    request: Any = ExportTraceServiceRequest.FromString(body)
                    reply = ExportTraceServiceResponse().SerializeToString()
                    with receiver._lock:
                        receiver.traces.append(request)
                        receiver.headers.append(dict(self.headers))
                elif self.path == "/v1/metrics":
                    request = ExportMetricsServiceRequest.FromString(body)
                    reply = ExportMetricsServiceResponse().SerializeToString()
                    with receiver._lock:
                        receiver.metrics.append(request)
                else:
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OTLPReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[Span]:
        with self._lock:
            return [
                span
                for request in self.traces
                for resource in request.resource_spans
                for scope in resource.scope_spans
                for span in scope.spans
            ]

    def resource_attributes(self) -> dict[str, Any]:
        with self._lock:
            return {
                k: v
                for r in self.traces
                for res in r.resource_spans
                for k, v in attributes_of(res.resource).items()
            }

    def metric_names(self) -> set[str]:
        with self._lock:
            return {
                metric.name
                for request in self.metrics
                for resource in request.resource_metrics
                for scope in resource.scope_metrics
                for metric in scope.metrics
            }

    def tree(self) -> str:
        """The spans as an indented tree (parents before children, siblings by start time), with their kind,
        duration and a few attributes: what the README shows."""
        spans = sorted(self.spans(), key=lambda s: s.start_time_unix_nano)
        ids = {s.span_id for s in spans}
        children: dict[bytes, list[Span]] = {}
        for span in spans:
            children.setdefault(span.parent_span_id if span.parent_span_id in ids else b"", []).append(span)
        shown = (
            "gen_ai.provider.name",
            "gen_ai.request.model",
            "gen_ai.response.finish_reasons",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.tool.call.id",
            "error.type",
            "chatloop.stop_reason",
            "chatloop.sandbox.exit",
            "chatloop.sandbox.cpu_ms",
        )
        lines: list[str] = []

        def walk(span: Span, depth: int) -> None:
            ms = (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6
            kind = Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_")
            attributes = attributes_of(span)
            detail = " ".join(f"{k}={attributes[k]}" for k in shown if k in attributes)
            lines.append(f"{'  ' * depth}{span.name} [{kind}, {ms:.1f} ms] {detail}".rstrip())
            for event in span.events:
                fields = attributes_of(event)
                brief = " ".join(
                    f"{k}={fields[k]}" for k in ("iteration", "reason", "guard", "from", "to") if k in fields
                )
                lines.append(f"{'  ' * (depth + 1)}* {event.name} {brief}".rstrip())
            for child in children.get(span.span_id, []):
                walk(child, depth + 1)

        for root in children.get(b"", []):
            walk(root, 0)
        return "\n".join(lines)
