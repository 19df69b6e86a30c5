"""An OpenTelemetry SDK variable the SDK refuses (issue #41's review: the SDK now reads its own ``OTEL_*``) costs the
traces, never the turns: ``OTEL_METRIC_EXPORT_INTERVAL=0`` or ``OTEL_BSP_MAX_QUEUE_SIZE=0`` make the SDK raise as
its exporters are built, which must not fail every turn. The turn is answered untraced, the reason logged once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from chatloop.tracing.setup import uninstall
from tests.support.events import rest_event
from tests.support.handler import invoke
from tests.support.otlp import OTLPReceiver
from tests.support.wire_models import realistic

MODEL = "llama-3.3-70b-versatile"
KEYS = {"groq": "gsk_test0123456789", "openai": None}


@pytest.fixture
def otlp() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as receiver:
        yield receiver
    uninstall()


@pytest.mark.parametrize(
    "variable", ["OTEL_METRIC_EXPORT_INTERVAL", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_SCHEDULE_DELAY"]
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_sdk_variable_the_sdk_refuses_leaves_the_turns_answered(
    otlp, fake_llm, app_runtime, monkeypatch, caplog, variable, stream
):
    fake_llm.default = realistic
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
    assert otlp.spans() == []  # untraced: the SDK would not be built
    refusals = [r for r in caplog.records if "tracing is off" in r.getMessage()]
    assert len(refusals) == 1 and "OTEL_" in refusals[0].getMessage()
