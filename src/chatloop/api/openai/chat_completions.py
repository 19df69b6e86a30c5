"""``POST /v1/chat/completions``: OpenAI's chat completions over the same turn, as a ``chat.completion`` or as
``chat.completion.chunk`` SSE ending in ``data: [DONE]``.

Usage::

    client = openai.OpenAI(base_url="http://localhost:8000/v1", api_key="unused")
    client.chat.completions.create(model="chatloop", messages=[{"role": "user", "content": "5!"}])
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import openai_error
from chatloop.api.http.wire import sse_frame
from chatloop.api.openai.extension import extension
from chatloop.api.turns.admission import Admission
from chatloop.api.turns.checks import conversation
from chatloop.api.turns.images import ImageLimits, chat_images
from chatloop.api.turns.pipeline import Admitted, Door, Plan, run_door
from chatloop.api.turns.schemas import OpenAIChatBody
from chatloop.api.turns.serve import INTERNAL_ERROR, failed_turn, serve_turn
from chatloop.engine import Event, TurnSummary
from chatloop.engine.events import Delta, Done, FallbackMade, LlmResponse, Started, TurnError

FINISH_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}
DONE_LINE = "data: [DONE]\n\n"


def finish_reason(stop_reason: str) -> str:
    """OpenAI's finish_reason for a stop reason (guards end a turn with an answer: ``stop``)."""
    return FINISH_REASONS.get(stop_reason, "stop")


def openai_message(summary: TurnSummary) -> dict[str, object]:
    message = summary.message
    out: dict[str, object] = {"role": "assistant", "content": message.content or None}
    if message.tool_calls:
        out["tool_calls"] = [c.to_message() for c in message.tool_calls]
    elif out["content"] is None:
        out["content"] = ""
    return out


def openai_completion(summary: TurnSummary, request_id: str, created: int | None = None) -> dict[str, object]:
    return {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": summary.model,
        "choices": [
            {
                "index": 0,
                "message": openai_message(summary),
                "finish_reason": finish_reason(summary.stop_reason),
                "logprobs": None,
            }
        ],
        "usage": summary.usage.as_dict(),
        "x_chatloop": extension(summary),
    }


class CompletionRenderer:
    """``chat.completion.chunk`` SSE ending in ``data: [DONE]``: the role chunk as the turn starts, each piece of text
    as the model writes it (seams included, so the chunks add up to the answer), the client's tool calls and the
    finish reason at the end. With ``include_usage`` every chunk carries ``usage`` (null until the last), as
    OpenAI's do. Not streamed: a ``chat.completion``."""

    stream_failure_log = "chat.completion.chunk stream failed"

    def __init__(self, request_id: str, include_usage: bool = False) -> None:
        self.request_id = request_id
        self.include_usage = include_usage
        self._finished = False
        self._answered = (
            False  # the finish chunk or an error chunk went out: a break after it only ends the stream
        )

    async def frames(self, events: AsyncIterator[Event]) -> AsyncIterator[str]:
        created = int(time.time())
        base = {"id": f"chatcmpl-{self.request_id}", "object": "chat.completion.chunk", "created": created}
        model = "unknown"
        usage_field: dict[str, object] = {"usage": None} if self.include_usage else {}

        def chunk(delta: Mapping[str, object], finish: str | None = None, **extra: object) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return sse_frame({**base, "model": model, "choices": [choice], **usage_field, **extra})

        started = failed = False
        async for event in events:
            if isinstance(event, Started) and not started:
                model = event.model or model
                started = True
                yield chunk({"role": "assistant", "content": ""})
            elif isinstance(event, FallbackMade) and event.to_model:
                model = event.to_model
            elif isinstance(event, LlmResponse):
                model = event.model
            elif failed:
                continue  # after an error chunk, nothing but [DONE]
            elif isinstance(event, Delta):
                yield chunk({"content": event.content})
            elif isinstance(event, TurnError) and event.code == "all_models_failed":
                failed = self._answered = True
                error = openai_error(event.message, "all_models_failed", "service_unavailable")
                yield sse_frame(error)  # OpenAI clients raise on an error chunk
            elif isinstance(event, Done):
                summary = event.summary
                model = summary.model or model
                if summary.message.tool_calls:
                    calls = [{"index": i, **c.to_message()} for i, c in enumerate(summary.message.tool_calls)]
                    yield chunk({"tool_calls": calls})
                yield chunk({}, finish_reason(summary.stop_reason), x_chatloop=extension(summary))
                self._answered = True
                if self.include_usage:
                    usage = summary.usage.as_dict()
                    yield sse_frame({**base, "model": model, "choices": [], "usage": usage})
        self._finished = True
        yield DONE_LINE

    def broken(self) -> str:
        if self._finished:
            return ""
        if self._answered:  # a second error chunk, or one after the finish, would contradict it; it is logged
            return DONE_LINE
        error = openai_error(INTERNAL_ERROR.message, "internal_error", "server_error")
        return sse_frame(error) + DONE_LINE

    async def answer(self, summary: TurnSummary, errors: Sequence[TurnError]) -> tuple[int, object]:
        """A turn every model failed is an error response (429 or 503: ``failed_turn``), as OpenAI's is."""
        if failure := failed_turn(summary, errors):
            raise failure
        return 200, openai_completion(summary, self.request_id)


@dataclass(eq=False, repr=False)  # not compared or printed: only __init__ generated (cold start)
class CompletionsPlan(Plan):
    body: OpenAIChatBody = field(kw_only=True)


class CompletionsDoor(Door[OpenAIChatBody, CompletionsPlan]):
    """Chat completions in the turn pipeline: stateless, so a tool that waits for a person is not offered (there is
    no item to ask with: docs/tools.md)."""

    schema = OpenAIChatBody
    approvals = "hide"

    async def prepare(
        self, ctx: RequestContext, body: OpenAIChatBody, admission: Admission
    ) -> CompletionsPlan:
        images = chat_images(body.messages, ImageLimits.of(ctx.runtime.settings))
        return CompletionsPlan(
            conversation(body.messages, ctx.runtime.settings.max_messages),
            body.tool_choice,
            body,
            body.model,
            body.max_completion_tokens or body.max_tokens,
            functions=body.tools or [],
            requested_format=lambda: body.response_format,
            forwarded=body.forwarded(),
            images=images,
            body=body,
        )

    async def serve(
        self,
        ctx: RequestContext,
        plan: CompletionsPlan,
        admitted: Admitted,
        events: AsyncIterator[Event],
    ) -> Response:
        body = plan.body
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        renderer = CompletionRenderer(ctx.request_id, include_usage)
        return await serve_turn(ctx, renderer, events, stream=body.stream)


async def chat_completions(request: Request) -> Response:
    return await run_door(RequestContext.of(request), CompletionsDoor())
