"""The OpenTelemetry SDK, set up once per process from the ``OTEL_*`` settings: spans and the GenAI metrics exported
over OTLP/HTTP, or whatever providers a test or the bench installs.

The providers are this package's own, not the global ones: a layer or library that sets up its own tracing (the
ADOT Python wrapper, a test framework) is neither replaced nor exported through.

Usage::

    telemetry = telemetry_for(settings)        # built on first use
    telemetry.tracer.start_span("invoke_agent chatloop")
    flush_all()                                # before a Lambda invocation returns

    install(TracerProvider(...), MeterProvider(...), capture_content=True)   # tests: in-memory exporters
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from opentelemetry.metrics import Histogram, Meter, MeterProvider
from opentelemetry.trace import Tracer, TracerProvider

from chatloop import tracing
from chatloop.config import Settings
from chatloop.observability import SERVICE, logger
from chatloop.redaction import redact, register_secret

if TYPE_CHECKING:
    import requests
    from opentelemetry.sdk.resources import Resource

SCOPE = "chatloop"
"""The instrumentation scope of every span and metric."""

TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
"""``gen_ai.client.token.usage``'s explicit bucket boundaries, as the GenAI metrics conventions give them."""
SECONDS_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
"""``gen_ai.client.operation.duration`` and ``...time_to_first_chunk``'s boundaries (seconds)."""


@dataclass
class Telemetry:
    """The tracer, the GenAI instruments and the providers to flush."""

    tracer: Tracer
    token_usage: Histogram
    duration: Histogram
    time_to_first_chunk: Histogram
    capture_content: bool
    tracer_provider: TracerProvider
    meter_provider: MeterProvider | None
    flush_timeout_ms: int = 3000
    flush_does_io: bool = False
    """Whether a flush waits on the network (the OTLP exporters): then it runs off the event loop."""

    @classmethod
    def of(
        cls,
        tracer_provider: TracerProvider,
        meter_provider: MeterProvider | None,
        capture_content: bool,
        flush_timeout_ms: int = 3000,
        flush_does_io: bool = False,
    ) -> Telemetry:
        from opentelemetry.metrics import NoOpMeterProvider

        meter: Meter = (meter_provider or NoOpMeterProvider()).get_meter(SCOPE)
        return cls(
            tracer=tracer_provider.get_tracer(SCOPE),
            token_usage=meter.create_histogram(
                "gen_ai.client.token.usage",
                unit="{token}",
                description="Number of input and output tokens used.",
                explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
            ),
            duration=meter.create_histogram(
                "gen_ai.client.operation.duration",
                unit="s",
                description="GenAI operation duration.",
                explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
            ),
            time_to_first_chunk=meter.create_histogram(
                "gen_ai.client.operation.time_to_first_chunk",
                unit="s",
                description="Time to receive the first chunk of a streamed response.",
                explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
            ),
            capture_content=capture_content,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            flush_timeout_ms=flush_timeout_ms,
            flush_does_io=flush_does_io,
        )

    def flush(self, within_ms: float | None = None) -> None:
        """Export every finished span, then the metrics recorded so far, waiting at most the export timeout (and at
        most ``within_ms``: what the request has left) for both together. An endpoint that is down costs a request
        that long, never more; what was not sent by then is sent by the exporter's thread, or dropped."""
        budget = min(self.flush_timeout_ms, within_ms if within_ms is not None else self.flush_timeout_ms)
        started = time.monotonic()
        for provider in (self.tracer_provider, self.meter_provider):
            left = int(budget - (time.monotonic() - started) * 1000)
            force_flush = getattr(provider, "force_flush", None)
            if force_flush is None:
                continue
            if left <= 0:
                break
            force_flush(left)


_LOCK = threading.Lock()
_TELEMETRY: list[Telemetry] = []
_REFUSED: list[str] = []
"""Why the SDK could not be built from the environment (once per process: not retried, not logged again)."""


class TelemetryUnavailable(RuntimeError):
    """The SDK refused its settings (an ``OTEL_*`` variable it reads itself, say ``OTEL_METRIC_EXPORT_INTERVAL=0``
    or ``OTEL_BSP_MAX_QUEUE_SIZE=0``): turns run untraced, the reason logged once as an error."""


def install(
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider | None = None,
    capture_content: bool = False,
) -> Telemetry:
    """Trace every turn with these providers from now on (tests and the bench: in-memory exporters)."""
    telemetry = Telemetry.of(tracer_provider, meter_provider, capture_content)
    with _LOCK:
        _TELEMETRY[:] = [telemetry]
    tracing.mark_installed(True)
    return telemetry


def uninstall() -> None:
    """Back to the environment's configuration, the providers in use shut down (tests)."""
    with _LOCK:
        current = list(_TELEMETRY)
        _TELEMETRY.clear()
        _REFUSED.clear()
    tracing.mark_installed(False)
    for telemetry in current:
        for provider in (telemetry.tracer_provider, telemetry.meter_provider):
            shutdown = getattr(provider, "shutdown", None)
            if shutdown is not None:
                shutdown()


def telemetry_for(settings: Settings) -> Telemetry:
    """The process's telemetry: the installed one, else built once from ``settings``. ``TelemetryUnavailable`` when
    the SDK refuses its settings: a tracing setting costs the traces, never the turns (issue #41's review)."""
    with _LOCK:
        if not _TELEMETRY:
            if _REFUSED:
                raise TelemetryUnavailable(_REFUSED[0])
            try:
                _TELEMETRY.append(_from_settings(settings))
            except Exception as exc:  # the SDK validates the OTEL_* variables it reads as it is built
                why = redact(f"{type(exc).__name__}: {exc}")
                _REFUSED.append(why)
                logger.error(
                    "OpenTelemetry: the SDK refused its settings (an OTEL_* variable it reads, such as "
                    f"OTEL_METRIC_EXPORT_INTERVAL or OTEL_BSP_*): {why}; tracing is off, turns are answered untraced"
                )
                raise TelemetryUnavailable(why) from None
        return _TELEMETRY[0]


def flush_all() -> None:
    with _LOCK:
        current = list(_TELEMETRY)
    for telemetry in current:
        telemetry.flush()


def _from_settings(settings: Settings) -> Telemetry:
    """OTLP/HTTP exporters for the configured endpoints, batched (a turn's spans leave in one request)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    general = settings.otel_exporter_otlp_headers
    trace_headers = parse_headers(settings.otel_exporter_otlp_traces_headers or general)
    metric_headers = parse_headers(settings.otel_exporter_otlp_metrics_headers or general)
    for value in [*trace_headers.values(), *metric_headers.values()]:
        register_secret(value)  # a backend's key never appears in a log line or a span
    # The headers (registered for redaction) and the timeouts (3 s by default, not the exporter's 10, and read in
    # milliseconds as the spec has them) are the project's, a signal's own before the general ones; the batch
    # processor (OTEL_BSP_*), the metric reader (OTEL_METRIC_EXPORT_INTERVAL, _TIMEOUT) and the compression
    # (OTEL_EXPORTER_OTLP_COMPRESSION) are given nothing, so the SDK reads its own variables.
    traces_timeout, metrics_timeout = settings.otel_export_timeouts()
    traces = settings.otel_traces_endpoint()
    tracer_provider = SDKTracerProvider(resource=resource_for(settings))
    tracer_provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(
                endpoint=traces, headers=trace_headers, timeout=traces_timeout, session=_session_for(traces)
            )
        )
    )
    meter_provider = None
    metrics = settings.otel_metrics_endpoint()
    if metrics:
        # Exported when flushed (each Lambda invocation) and otherwise every OTEL_METRIC_EXPORT_INTERVAL (a minute).
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(
                endpoint=metrics,
                headers=metric_headers,
                timeout=metrics_timeout,
                session=_session_for(metrics),
            )
        )
        meter_provider = SDKMeterProvider(resource=tracer_provider.resource, metric_readers=[reader])
    return Telemetry.of(
        tracer_provider,
        meter_provider,
        settings.otel_capture_content(),
        flush_timeout_ms=settings.otel_exporter_otlp_timeout,
        flush_does_io=True,
    )


def resource_for(settings: Settings) -> Resource:
    """The SDK's resource (OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, read by the SDK, the latter first) with the
    service named OTEL_SERVICE_NAME, else as the attributes name it, else POWERTOOLS_SERVICE_NAME or ``chatloop``."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create()
    named = str(resource.attributes.get(SERVICE_NAME, ""))
    if settings.otel_service_name:
        named = settings.otel_service_name
    elif named.startswith("unknown_service"):  # the SDK's stand-in: no variable named it
        named = SERVICE
    return resource.merge(Resource({SERVICE_NAME: named}))


def parse_headers(raw: str) -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS``: ``key=value`` pairs, comma-separated, values URL-encoded (the spec's format).

    >>> parse_headers("x-api-key=abc%3D,  other = 1")
    {'x-api-key': 'abc=', 'other': '1'}
    """
    headers: dict[str, str] = {}
    for pair in raw.split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip():
            headers[key.strip()] = unquote(value.strip())
    return headers


def xray_region(url: str) -> str | None:
    """The region of X-Ray's OTLP endpoint (``https://xray.<region>.amazonaws.com/v1/traces``), else None.

    >>> xray_region("https://xray.eu-west-1.amazonaws.com/v1/traces")
    'eu-west-1'
    """
    host = urlsplit(url).hostname or ""
    parts = host.split(".")
    if len(parts) == 4 and parts[0] == "xray" and parts[2:] == ["amazonaws", "com"]:
        return parts[1]
    return None


def _session_for(url: str) -> requests.Session | None:
    """A session that signs each export with SigV4 when ``url`` is X-Ray's OTLP endpoint (the function's role needs
    X-Ray write access, which the template grants), else None (the exporter's own session)."""
    region = xray_region(url)
    if region is None:
        return None
    import requests

    from chatloop.tracing.sigv4 import SigV4Auth

    session = requests.Session()
    session.auth = SigV4Auth("xray", region)
    return session
