"""What a chain does when a model's tool call failed to parse (Groq's 400 ``tool_use_failed``), before giving up on it.

The call the model meant is often whole in the error's ``failed_generation``, written as text: recovered from there
(offered tools only), it is the model's answer and nothing is asked again. Otherwise the model is asked once more
with a corrective note, when the deadline leaves time for it.

Usage::

    response = recovered_calls(error, request, model.name)
    if response is None and may_retry(request):
        request = with_corrective_note(request, error)
"""

from __future__ import annotations

from dataclasses import replace

from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.providers.failures import ToolUseFailed
from chatloop.providers.textcall_formats import find_text_calls, tool_keys

TOOL_USE_NOTE = (
    "Your previous tool call could not be parsed ({detail}). Call tools only with the official function-calling "
    "format and valid JSON arguments that match the schema, or answer in plain text."
)
RETRY_MIN_SECONDS = 1.0
"""A corrective retry is made only with more than this left of the deadline."""


def recovered_calls(error: ToolUseFailed, request: ModelRequest, model: str) -> ModelResponse | None:
    """``model``'s answer as the tool calls its ``failed_generation`` holds, or None when it holds none."""
    found = find_text_calls(error.failed_generation or "", tool_keys(request.tools or []), offered_only=True)
    if not found:
        return None
    return ModelResponse(model=model, tool_calls=found.calls, finish_reason="tool_calls")


def may_retry(request: ModelRequest) -> bool:
    """Whether the deadline leaves time to ask the same model again."""
    return request.deadline.remaining() > RETRY_MIN_SECONDS


def with_corrective_note(request: ModelRequest, error: ToolUseFailed) -> ModelRequest:
    """``request`` with a system note saying what went wrong with the last tool call."""
    note = TOOL_USE_NOTE.format(detail=error.message[:200])
    return replace(request, messages=[*request.messages, {"role": "system", "content": note}])
