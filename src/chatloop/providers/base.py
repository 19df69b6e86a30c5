"""The ChatModel protocol the engine calls, and the values that cross it.

A model streams ``TextDelta`` items (and, for a fallback chain, ``ModelFallback`` notices) and ends
with exactly one ``ModelResponse``. Failures are raised as ``chatloop.providers.failures.ModelError``.

Usage::

    async for item in model.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}], deadline=d)):
        if isinstance(item, TextDelta): print(item.text, end="")
        elif isinstance(item, ModelResponse): final = item
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str
    """The raw JSON text the model produced (may be invalid JSON; the engine checks)."""

    def parsed_arguments(self) -> JSONObject | None:
        """The arguments as a dict, or None when they are not a JSON object."""
        try:
            value = json.loads(self.arguments or "{}")
        except (TypeError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def to_message(self) -> JSONObject:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def add(self, other: Usage | None) -> None:
        if other is None:
            return
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.total_tokens += other.total_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass
class ModelRequest:
    messages: list[dict[str, Any]]
    """OpenAI-shaped chat messages, sent as they are. Typed loosely on purpose: the engine, the test doubles and the
    bench read what they built (``messages[-1]["content"]``) without narrowing it; the providers read them as
    ``JSONObject``."""
    deadline: Deadline
    tools: list[JSONObject] | None = None
    """OpenAI tool definitions (``{"type": "function", "function": {"name": ..., "parameters": ...}}``)."""
    tool_choice: str | JSONObject | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    response_format: JSONObject | None = None
    """OpenAI's ``response_format`` (``json_object`` or ``json_schema``), for models whose catalog entry honours it."""
    params: JSONObject = field(default_factory=dict)
    """Further request parameters sent as they are (``stop``, ``seed``, ``reasoning_effort`` ...): a chain passes over
    models whose catalog entry does not take one of them."""
    allow_trimming: bool = True
    """When False, a conversation no model of a chain can hold is refused (``ContextTooLong``), not trimmed."""
    headers: dict[str, str] = field(default_factory=dict)
    """HTTP headers sent with the call (the trace context, ``traceparent``, when tracing is on)."""
    last_resort: bool = False
    """No model of the chain is left after this one: a first chunk that is slow to come (a small local model
    reading a long prompt) is waited for up to the deadline, as skipping to the next model is all
    ``MODEL_FIRST_CHUNK_TIMEOUT_SECONDS`` is for (issue #41: a one-model chain answered 503 after 10 s)."""

    def tool_names(self) -> list[str]:
        return [name for t in self.tools or [] if (name := tool_name(t)) is not None]


@dataclass
class TextDelta:
    text: str


@dataclass
class ModelFallback:
    """A chain switched models. ``discard_partial``: text already streamed by ``from_model`` is void."""

    from_model: str
    to_model: str | None
    reason: str
    retry_after: float | None = None
    discard_partial: bool = False
    message: str = ""


@dataclass
class ContextFit:
    """How a chain fitted the conversation to its models' windows before calling one (a logged decision).

    ``action``: ``fits`` (the first usable model holds it), ``skip`` (models too small for it were passed over),
    ``trim`` (no model could hold it: old tool results were shortened and old turns dropped to fit the largest)."""

    action: str
    estimated_tokens: int
    """For the model it fitted, the answer's reserve included."""
    window: int | None
    """That model's context window (None when the catalog does not know it)."""
    model: str | None
    skipped: list[str] = field(default_factory=list)
    trimmed_messages: int = 0
    shortened_tool_results: int = 0

    def summary(self) -> JSONObject:
        return {
            "action": self.action,
            "trimmed_messages": self.trimmed_messages,
            "shortened_tool_results": self.shortened_tool_results,
            "estimated_tokens": self.estimated_tokens,
            "window": self.window,
            "skipped_models": list(self.skipped),
        }


@dataclass
class ModelResponse:
    model: str
    """``provider:model`` that produced this message."""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    response_id: str | None = None
    """The provider's id of the completion (``chatcmpl-...``), when it sent one."""


StreamItem = TextDelta | ModelFallback | ContextFit | ModelResponse


@runtime_checkable
class ChatModel(Protocol):
    @property
    def name(self) -> str:
        """``provider:model``: the model that answers (for a chain, the one it would try first)."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]: ...


def tool_name(tool: JSONObject) -> str | None:
    """The function name of an OpenAI tool definition (None when it has none)."""
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None
