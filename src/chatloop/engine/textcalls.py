"""What the engine makes of a model response that wrote its tool calls as text.

While tools are offered, a response with no native tool calls whose content is (or ends with) a call in a known
format (``chatloop.providers.textcall_formats``) gets those calls, fresh ids and JSON-string arguments; its content keeps
only the words before them. A tagged pseudo-call that cannot be read (truncated, malformed, or written while no
tool was offered) is cut out of the content and reported, so the model is reminded instead of the user seeing it.

Usage::

    reply = read_text_calls(response, request.tools)
    reply.text_calls          # TextCalls(format="hermes", calls=[...], prefix="...") or None
    reply.unrunnable_text_call
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chatloop.jsontypes import JSONObject
from chatloop.providers.base import ModelResponse
from chatloop.providers.textcall_formats import (
    TextCalls,
    find_text_calls,
    has_tag_call,
    strip_tag_calls,
    tool_keys,
)


@dataclass(frozen=True)
class Reply:
    """A model response as the engine reads it."""

    response: ModelResponse
    text_calls: TextCalls | None = None
    """Calls recovered from the content (now also in ``response.tool_calls``)."""
    unrunnable_text_call: bool = False
    """A tagged call was written as text but could not be read: it was cut from the content."""
    not_an_answer: str | None = None
    """Why the text was no answer (``engine.answers``: a tool's error, the tools echoed, ...): it was cut."""


def read_text_calls(response: ModelResponse, tools: Sequence[JSONObject] | None) -> Reply:
    """Recover calls written as text (only while ``tools`` are offered), and never leave a pseudo-call in the
    content. Mutates ``response``: its content and tool calls are what the rest of the turn sees."""
    content = response.content or ""
    if response.tool_calls:
        if has_tag_call(content):  # native calls beside a pseudo one: the native ones are the calls
            response.content = strip_tag_calls(content)
        return Reply(response)
    found = find_text_calls(content, tool_keys(tools)) if tools else None
    if found is not None:
        response.tool_calls = found.calls
        response.content = found.prefix
        return Reply(response, text_calls=found)
    if has_tag_call(content):
        response.content = strip_tag_calls(content)
        return Reply(response, unrunnable_text_call=True)
    return Reply(response)
