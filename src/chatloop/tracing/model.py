"""``TracedModel``: a ChatModel around one model of a fallback chain, one ``chat {model}`` span per call.

The chain itself is untouched: each of its member models is wrapped, so a fallback shows in the trace as it
happened, a failed call (``error.type``: the failure's kind) followed by the next model's call, both children of the
turn's ``invoke_agent`` span. The call's request carries the span's ``traceparent`` header, so a provider (or a
proxy) that traces sees its part under it. The GenAI client metrics are recorded as each call ends.

Usage::

    chain.models = [TracedModel(m, telemetry, turn_context) for m in chain.models]
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace

from opentelemetry.context import Context
from opentelemetry.propagate import inject
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context

from chatloop.observability import logger
from chatloop.providers.base import ChatModel, ModelRequest, ModelResponse, StreamItem, TextDelta
from chatloop.providers.catalog import split_entry
from chatloop.providers.failures import ModelError
from chatloop.tracing.content import input_messages, output_messages, system_instructions
from chatloop.tracing.setup import Telemetry

OPERATION = "chat"
PROVIDER_NAMES = {"bedrock": "aws.bedrock"}
"""The chain's provider names the GenAI conventions spell otherwise (``gen_ai.provider.name``'s well-known values)."""


def provider_and_model(name: str) -> tuple[str, str]:
    """``groq:openai/gpt-oss-120b`` -> ``("groq", "openai/gpt-oss-120b")``: the provider as the chain names it
    (``groq``, ``openai``; ``local`` for any OpenAI-compatible server), or as the conventions do where they name it
    otherwise (``bedrock`` -> ``aws.bedrock``), the model as the provider does."""
    try:
        provider, model = split_entry(name)
    except ValueError:
        return "_OTHER", name
    return PROVIDER_NAMES.get(provider, provider), model


class TracedModel:
    """``inner``, each call a CLIENT span under ``parent`` (the turn's span)."""

    def __init__(
        self,
        inner: ChatModel,
        telemetry: Telemetry,
        parent: Context,
        conversation_id: str | None,
        open_spans: set[Span] | None = None,
    ):
        self.inner = inner
        self.telemetry = telemetry
        self.parent = parent
        self.conversation_id = conversation_id
        self.open_spans = open_spans if open_spans is not None else set()
        """Calls under way: a turn closed early ends them (its streams are closed only when collected)."""
        self.provider, self.model_id = provider_and_model(inner.name)

    @property
    def name(self) -> str:
        return self.inner.name

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        telemetry = self.telemetry
        span = telemetry.tracer.start_span(
            f"{OPERATION} {self.model_id}",
            context=self.parent,
            kind=SpanKind.CLIENT,
            attributes=self._request_attributes(request),
        )
        self.open_spans.add(span)
        carrier: dict[str, str] = {}
        inject(carrier, context=set_span_in_context(span))
        sent = replace(request, headers={**request.headers, **carrier})
        started = time.perf_counter()
        first: float | None = None
        error: str | None = None
        response: ModelResponse | None = None
        try:
            async for item in self.inner.stream(sent):
                if first is None and isinstance(item, TextDelta):
                    first = time.perf_counter() - started
                elif isinstance(item, ModelResponse):
                    response = item
                yield item
        except ModelError as exc:
            error = exc.kind
            span.set_status(Status(StatusCode.ERROR, exc.kind))
            raise
        except (GeneratorExit, asyncio.CancelledError):  # the turn's deadline, or the client went away
            error = "cancelled"
            span.set_status(Status(StatusCode.ERROR, error))
            raise
        except BaseException as exc:  # not a provider failure: a bug, named by its class
            error = type(exc).__name__
            span.set_status(Status(StatusCode.ERROR, error))
            raise
        finally:
            try:
                self._end(span, time.perf_counter() - started, first, response, error)
            except Exception:  # a fault in tracing is logged, never the call's
                logger.exception("tracing: a chat span could not be ended")

    def _request_attributes(self, request: ModelRequest) -> dict[str, str | bool | int | float]:
        attributes: dict[str, str | bool | int | float] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model_id,
            "gen_ai.request.stream": True,
        }
        if self.conversation_id:
            attributes["gen_ai.conversation.id"] = self.conversation_id
        sampling = {
            "gen_ai.request.temperature": request.temperature,
            "gen_ai.request.top_p": request.top_p,
            "gen_ai.request.max_tokens": request.max_tokens,
        }
        attributes.update({name: value for name, value in sampling.items() if value is not None})
        if self.telemetry.capture_content:
            attributes["gen_ai.input.messages"] = input_messages(request.messages)
            instructions = system_instructions(request.messages)
            if instructions is not None:
                attributes["gen_ai.system_instructions"] = instructions
        return attributes

    def _end(
        self,
        span: Span,
        seconds: float,
        first: float | None,
        response: ModelResponse | None,
        error: str | None,
    ) -> None:
        self.open_spans.discard(span)
        if not span.is_recording():  # ended already, by its turn closing early
            return
        telemetry = self.telemetry
        metric: dict[str, str] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model_id,
        }
        if first is not None:
            span.set_attribute("gen_ai.response.time_to_first_chunk", first)
        if response is not None:
            _, response_model = provider_and_model(response.model)
            metric["gen_ai.response.model"] = response_model
            span.set_attribute("gen_ai.response.model", response_model)
            if response.response_id:
                span.set_attribute("gen_ai.response.id", response.response_id)
            if response.finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
            if response.usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", response.usage.prompt_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", response.usage.completion_tokens)
                for kind, count in (
                    ("input", response.usage.prompt_tokens),
                    ("output", response.usage.completion_tokens),
                ):
                    telemetry.token_usage.record(count, {**metric, "gen_ai.token.type": kind})
            if telemetry.capture_content:
                calls = [c.to_message() for c in response.tool_calls]
                span.set_attribute(
                    "gen_ai.output.messages", output_messages(response.content, calls, response.finish_reason)
                )
        if first is not None:
            telemetry.time_to_first_chunk.record(first, metric)
        if error is not None:
            span.set_attribute("error.type", error)
            metric["error.type"] = error
        telemetry.duration.record(seconds, metric)
        span.end()
