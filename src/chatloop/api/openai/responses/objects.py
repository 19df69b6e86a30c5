"""The Responses API's ``response`` object as this server builds it (its output items are ``api.items.objects``'s):
TypedDicts with the keys of openai-python's own models (``openai.types.responses``; named beside each), which are
never imported at run time (the SDK's types take longer to import than a cold start can spare).

A TypedDict is a plain ``dict`` at run time, so the JSON built with these types is what it always was. The modules
that build them import this one under ``TYPE_CHECKING`` only (its classes cost a cold start about a millisecond).

Usage::

    if TYPE_CHECKING:
        from chatloop.api.openai.responses.objects import ResponseUsage

    usage: ResponseUsage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                            "output_tokens": 2,
                            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NotRequired, TypeAlias, TypedDict

from chatloop.api.items.objects import OutputItem
from chatloop.jsontypes import JSONObject


# --- the response object ------------------------------------------------------------------------------------
class TextConfig(TypedDict):
    """``ResponseTextConfig``: the requested ``text.format`` (``{"type": "text"}`` by default); ``verbosity`` only
    when the request gave one (the spec allows one of low/medium/high, or none at all: never null)."""

    format: JSONObject
    verbosity: NotRequired[str]


class ReasoningConfig(TypedDict):
    """``Reasoning``: repeated from the request (no model here reasons in summaries)."""

    effort: str | None
    summary: None


class ConversationRef(TypedDict):
    id: str


class ResponseEcho(TypedDict):
    """The request's settings, as a ``Response`` repeats them (``api.openai.responses.render.echo_of``): the values
    the turn used, the providers' defaults where the request gave none (numbers, never null: the spec's
    ``ResponseResource`` requires them)."""

    model: str
    instructions: str | None
    max_output_tokens: int | None
    parallel_tool_calls: bool
    temperature: float
    top_p: float
    presence_penalty: float
    frequency_penalty: float
    tool_choice: str | JSONObject
    tools: list[JSONObject]
    text: TextConfig
    metadata: dict[str, str]
    truncation: str
    max_tool_calls: int | None
    reasoning: ReasoningConfig
    user: str | None
    safety_identifier: str | None
    prompt_cache_key: str | None
    service_tier: str
    top_logprobs: int
    background: bool
    store: bool
    previous_response_id: str | None
    conversation: ConversationRef | None


class InputTokensDetails(TypedDict):
    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(TypedDict):
    reasoning_tokens: int


class ResponseUsage(TypedDict):
    """``ResponseUsage``: the turn's tokens (nothing here is cached or reasoned)."""

    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(TypedDict):
    """``ResponseError``: why a ``failed`` response failed."""

    code: Literal["server_error"]
    message: str


class IncompleteDetails(TypedDict):
    """``IncompleteDetails``: why an ``incomplete`` response stopped (``max_output_tokens``, or this server's
    ``iteration_cap`` and ``deadline``)."""

    reason: str


ResponseStatus: TypeAlias = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]


class ResponseObject(ResponseEcho):
    """``Response``: the echoed settings, the ``output`` items, the status and usage; ``completed_at`` once it
    completed (null before, and for a response that did not complete)."""

    id: str
    object: Literal["response"]
    created_at: int
    completed_at: int | None
    status: ResponseStatus
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    output: list[OutputItem]
    usage: ResponseUsage | None


class FinishedResponse(ResponseObject):
    """A finished ``Response``, with ``x_chatloop``: what the turn did beyond OpenAI's fields."""

    x_chatloop: Mapping[str, object]
