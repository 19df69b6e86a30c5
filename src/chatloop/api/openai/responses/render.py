"""The Responses API's output: the engine's events as a ``response`` object or its event stream
(``ResponsesRenderer``; the items themselves are ``api.items.output``'s), and the request's settings as a response
repeats them (``echo_of``).

Usage::

    renderer = ResponsesRenderer("req-1", echo_of(body, "groq:llama-3.3-70b-versatile"))
    return await serve_turn(ctx, renderer, events, stream=True)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from chatloop.api.http.context import response_id
from chatloop.api.http.errors import stream_error
from chatloop.api.items.output import ResponseEvents, ResponseOutput
from chatloop.api.openai.extension import extension
from chatloop.api.openai.responses.mcp_servers import ResponsesMcpTool
from chatloop.api.openai.responses.schemas import ResponsesBody, ResponsesFunctionTool
from chatloop.api.turns.serve import INTERNAL_ERROR, failed_turn
from chatloop.engine import Event, TurnSummary
from chatloop.engine.events import Done, TurnError
from chatloop.jsontypes import JSONObject, json_object
from chatloop.providers.base import Usage

if TYPE_CHECKING:
    from chatloop.api.items.objects import CompactionItem, McpListTools, OutputItem
    from chatloop.api.openai.responses.objects import (
        FinishedResponse,
        ResponseEcho,
        ResponseObject,
        ResponseStatus,
        ResponseUsage,
        TextConfig,
    )

INCOMPLETE = {"length": "max_output_tokens", "iteration_cap": "iteration_cap", "deadline": "deadline"}
"""Stop reasons that leave a response ``incomplete``, and the reason ``incomplete_details`` gives."""


SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
"""What applies when a request gives none of these: a turn sends the model only what was given
(``providers.sdk``), and OpenAI's and Groq's chat completions take 1, 1, 0 and 0 then (their API references).
The spec's ``ResponseResource`` requires each as a number, so a response states these rather than null."""


def echo_of(
    body: ResponsesBody, model: str, stored: bool = False, conversation: str | None = None
) -> ResponseEcho:
    """The request's settings, as a response object repeats them; ``model`` is the one the turn starts with (the
    finished response names the one that answered). Sampling values are the ones the turn used (``SAMPLING_DEFAULTS``
    where the request gave none); function tools are echoed whole (``strict`` null when not given)."""
    choice = body.tool_choice
    sampling = {name: getattr(body, name) for name in SAMPLING_DEFAULTS}
    used = {name: float(SAMPLING_DEFAULTS[name] if v is None else v) for name, v in sampling.items()}
    return {
        "model": model,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "parallel_tool_calls": True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        "temperature": used["temperature"],
        "top_p": used["top_p"],
        "presence_penalty": used["presence_penalty"],
        "frequency_penalty": used["frequency_penalty"],
        "tool_choice": choice.model_dump()
        if choice is not None and not isinstance(choice, str)
        else choice or "auto",
        "tools": [_tool(t) for t in body.tools or []],
        "text": _text(body),
        "metadata": body.metadata or {},
        "truncation": body.truncation or "disabled",
        "max_tool_calls": body.max_tool_calls,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        "user": body.user,
        "safety_identifier": body.safety_identifier,
        "prompt_cache_key": body.prompt_cache_key,
        "service_tier": "default",  # the tier used: the provider's own ("auto" asks for it; others are refused)
        "top_logprobs": body.top_logprobs or 0,
        "background": bool(body.background),
        "store": stored,
        "previous_response_id": body.previous_response_id,
        "conversation": {"id": conversation} if conversation else None,
    }


def _tool(tool: ResponsesFunctionTool | ResponsesMcpTool) -> JSONObject:
    """A function tool whole (the spec's ``FunctionTool`` requires ``description``, ``parameters`` and ``strict``,
    each possibly null); an MCP tool as given, less its credentials (``exclude``) and what it left out."""
    if isinstance(tool, ResponsesFunctionTool):
        return json_object(tool.model_dump())
    return json_object(tool.model_dump(exclude_none=True))


def _text(body: ResponsesBody) -> TextConfig:
    """``text`` as the turn used it: ``verbosity`` only when given (the spec allows it left out, never null); a
    ``json_schema`` format whole (``description`` null and ``strict`` false, chat completions' default, when not
    given)."""
    options = body.text
    fmt: JSONObject = {"type": "text"}
    if options is not None and options.format is not None:
        fmt = json_object(options.format.model_dump(by_alias=True, exclude_none=True))
        if options.format.type == "json_schema":
            fmt = {**fmt, "description": options.format.description, "strict": bool(options.format.strict)}
    text: TextConfig = {"format": fmt}
    if options is not None and options.verbosity is not None:
        text["verbosity"] = options.verbosity
    return text


def as_spec(body: JSONObject) -> JSONObject:
    """A stored ``response`` as the spec requires it. One kept before these fields were written (issue 44; records
    live CONVERSATION_TTL_SECONDS) is given them as they applied then: ``completed_at`` null, the sampling defaults
    where a number is null or missing, function tools whole, no null ``verbosity``, ``cache_write_tokens`` 0. One
    kept since is returned as it is.

    Usage::

        return JSONBody(as_spec(stored.body))
    """
    if "completed_at" in body:
        return body
    missing = {n: v for n, v in SAMPLING_DEFAULTS.items() if not isinstance(body.get(n), int | float)}
    fixed: dict[str, object] = {**body, "completed_at": None, **missing}
    tools = body.get("tools")
    if isinstance(tools, list):
        whole = {"description": None, "parameters": None, "strict": None}
        fixed["tools"] = [
            {**whole, **t} if isinstance(t, dict) and t.get("type") == "function" else t for t in tools
        ]
    text = body.get("text")
    if isinstance(text, dict) and text.get("verbosity", "") is None:
        fixed["text"] = {k: v for k, v in text.items() if k != "verbosity"}
    usage = body.get("usage")
    if isinstance(usage, dict) and isinstance(details := usage.get("input_tokens_details"), dict):
        fixed["usage"] = {**usage, "input_tokens_details": {"cache_write_tokens": 0, **details}}
    return json_object(fixed)


# --- output ------------------------------------------------------------------------------------------
def skeleton(request_id: str, echo: ResponseEcho, created: int) -> ResponseObject:
    """The ``response`` before its turn ran: ``in_progress``, no output, the request's settings echoed."""
    return {
        "id": response_id(request_id),
        "object": "response",
        "created_at": created,
        "completed_at": None,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "output": [],
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "truncation": "disabled",
        "usage": None,
        "user": None,
        **echo,
    }


def usage_of(usage: Usage) -> ResponseUsage:
    """A turn's tokens as a ``response`` counts them."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def response_object(
    summary: TurnSummary,
    request_id: str,
    echo: ResponseEcho,
    output: list[OutputItem],
    created: int | None = None,
) -> FinishedResponse:
    """The finished ``response``: ``incomplete`` (with its reason) when the turn stopped on the output-token cap, the
    iteration cap or the deadline; the stop reason and tool records under ``x_chatloop``."""
    body = skeleton(request_id, echo, created or int(time.time()))
    reason = INCOMPLETE.get(summary.stop_reason)
    status: ResponseStatus = "incomplete" if reason else "completed"
    return {  # the skeleton's keys keep their places; x_chatloop comes last
        **body,
        "model": summary.model or echo["model"],
        "status": status,
        "completed_at": None if reason else int(time.time()),
        "incomplete_details": {"reason": reason} if reason else None,
        "output": output,
        "usage": usage_of(summary.usage),
        "x_chatloop": extension(summary),
    }


Keep: TypeAlias = "Callable[[FinishedResponse, list[dict[str, object]]], Awaitable[FinishedResponse]]"
"""Stores a finished response (and its stream's events) and returns it as it should be shown."""


class ResponsesRenderer:
    """A ``response``, or its event stream. The stream always ends with its terminal event: ``response.completed``,
    ``response.incomplete`` or ``response.failed`` (after an ``error`` event when something broke mid-way). With
    ``keep``, the finished response is stored before its terminal event goes out (read-after-write holds)."""

    stream_failure_log = "response event stream failed"

    def __init__(
        self,
        request_id: str,
        echo: ResponseEcho,
        keep: Keep | None = None,
        listener: Callable[[dict[str, object]], None] | None = None,
        listed: Sequence[McpListTools | CompactionItem] = (),
        *,
        stream: bool = True,
    ) -> None:
        self.request_id, self.echo, self.keep = request_id, echo, keep
        self.created = int(time.time())
        self.emit = ResponseEvents(record=keep is not None and stream, listener=listener)
        self.output = ResponseOutput(request_id, self.emit, listed)
        if not stream:  # the stream lists them after response.created; a response object just holds them
            self.output.start()

    async def frames(self, events: AsyncIterator[Event]) -> AsyncIterator[str]:
        """The events, framed. ``response.created`` goes out at once; frames that become known together leave as
        one chunk (fewer writes through the heartbeat wrapper and the socket)."""
        emit, output = self.emit, self.output
        started = skeleton(self.request_id, self.echo, self.created)
        head = [emit("response.created", response=started), emit("response.in_progress", response=started)]
        yield "".join(head + output.start())
        async for event in events:
            if isinstance(event, TurnError) and event.code in ("all_models_failed", "cancelled"):
                # OpenAI names no event for a cancelled response: it ends as a failed one does, status cancelled
                yield emit("response.failed", response=self._failed(event.message, event.code == "cancelled"))
                return
            if isinstance(event, Done):
                frames = output.finish(event.summary.message.tool_calls or ())
                final = response_object(event.summary, self.request_id, self.echo, output.items, self.created)
                kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
                if self.keep is not None:
                    # The terminal event is stored as it will be sent: numbered next, with the rest.
                    number = len(emit.recorded or [])
                    terminal: dict[str, object] = {"type": kind, "sequence_number": number, "response": final}
                    final = await self.keep(final, [*(emit.recorded or []), terminal])
                yield "".join([*frames, emit(kind, response=final)])
                return
            frames = output.feed(event)
            if frames:
                yield "".join(frames)

    def broken(self) -> str:
        if self.emit.ended:
            return ""
        error = self.emit("error", **stream_error(INTERNAL_ERROR.code, INTERNAL_ERROR.message))
        return error + self.emit("response.failed", response=self._failed(INTERNAL_ERROR.message))

    def _failed(self, message: str, cancelled: bool = False) -> ResponseObject:
        failed = skeleton(self.request_id, self.echo, self.created)
        if cancelled:
            failed["status"] = "cancelled"
        else:
            failed.update({"status": "failed", "error": {"code": "server_error", "message": message}})
        return failed

    async def answer(self, summary: TurnSummary, errors: Sequence[TurnError]) -> tuple[int, object]:
        """The ``response`` built from the events (``observed_by(renderer.output.feed, events)`` gave it them); a
        turn every model failed is an error response (429 or 503: ``failed_turn``), and is not kept."""
        if failure := failed_turn(summary, errors):
            raise failure
        self.output.finish(summary.message.tool_calls or ())
        response = response_object(summary, self.request_id, self.echo, self.output.items)
        if self.keep is not None:
            response = await self.keep(response, [])
        return 200, response
