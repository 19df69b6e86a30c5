"""Message content as the GenAI conventions record it (opt-in only), redacted as every log line is.

Prompts, answers, tool arguments and results reach a span only when the operator opted in
(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT), and then only through here: every string is redacted before it
is serialised, and the JSON once more after (a secret split by escaping is still caught whole).

Usage::

    span.set_attribute("gen_ai.input.messages", input_messages(request.messages))
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from chatloop.redaction import redact


def redacted_json(value: object) -> str:
    """``value`` as JSON, every string in it redacted, then the text redacted again."""
    return redact(json.dumps(_redact_strings(value), ensure_ascii=False, default=str))


def _redact_strings(value: object) -> object:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {str(k): _redact_strings(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_strings(v) for v in value]
    return value


def _parts(message: Mapping[str, Any]) -> list[dict[str, object]]:
    """One OpenAI-shaped message as the conventions' parts (text, tool calls, a tool's response)."""
    parts: list[dict[str, object]] = []
    content = message.get("content")
    if message.get("role") == "tool":
        return [{"type": "tool_call_response", "id": message.get("tool_call_id"), "response": content}]
    if isinstance(content, str) and content:
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        texts = [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        parts.extend({"type": "text", "content": t} for t in texts)
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
    return parts


def input_messages(messages: Sequence[Mapping[str, Any]]) -> str:
    """``gen_ai.input.messages``: the chat history sent (system messages are ``system_instructions``)."""
    return redacted_json(
        [{"role": m.get("role"), "parts": _parts(m)} for m in messages if m.get("role") != "system"]
    )


def system_instructions(messages: Iterable[Mapping[str, Any]]) -> str | None:
    """``gen_ai.system_instructions``: the system messages' text, None when there is none."""
    parts = [p for m in messages if m.get("role") == "system" for p in _parts(m)]
    return redacted_json(parts) if parts else None


def output_messages(content: str, tool_calls: Iterable[Mapping[str, Any]], finish_reason: str | None) -> str:
    """``gen_ai.output.messages``: the one message a call (or the turn) answered with."""
    message = {"role": "assistant", "content": content, "tool_calls": list(tool_calls)}
    return redacted_json(
        [{"role": "assistant", "parts": _parts(message), "finish_reason": finish_reason or ""}]
    )
