"""A ``/v1/responses`` request as the turn it asks for: its input items (after the history it continues from) as
the chat conversation the engine runs (``conversation_of``), compacted first when it is past the threshold
(``when_past_threshold``), and the turn's values as the pipeline takes them (``plan_of``: ``api.turns.pipeline``
runs the checks every door shares).

Usage::

    messages = conversation_of(body)                        # then normalize_conversation(messages)
    plan = await plan_of(ctx, body, keeping, admission, queues=False)   # the pipeline's Door.prepare
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.items.compaction import CompactionInput
from chatloop.api.items.inputs import InputItem, InputMessage
from chatloop.api.items.messages import messages_of
from chatloop.api.openai.responses.mcp_servers import client_rules, client_servers
from chatloop.api.openai.responses.schemas import ResponsesBody, ResponsesFunctionTool
from chatloop.api.openai.responses.stored import Keeping
from chatloop.api.turns import compaction
from chatloop.api.turns.admission import Admission
from chatloop.api.turns.checks import ChatChoice, conversation
from chatloop.api.turns.images import ImageLimits
from chatloop.api.turns.input_images import response_images
from chatloop.api.turns.pipeline import Plan
from chatloop.engine.messages import Message

if TYPE_CHECKING:
    from chatloop.api.items.objects import CompactionItem
    from chatloop.api.turns.schemas import ResponseFormat


def conversation_of(
    body: ResponsesBody, history: Sequence[InputItem] = (), answering: frozenset[str] = frozenset()
) -> list[Message]:
    """The chat conversation for ``instructions``, the earlier items a request continues from (``history``: a
    previous response's chain, or a conversation's items) and ``input``: ``developer`` is ``system``, consecutive
    ``function_call`` items join the assistant message before them, ``function_call_output`` is a tool message,
    reasoning items carry nothing this server needs. ``answering``: the approval requests this request answers
    (the turn runs them first)."""
    messages: list[Message] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    return messages + messages_of([*history, *current_items(body)], answering)


def current_items(body: ResponsesBody) -> list[InputItem]:
    """The request's ``input`` as items (a string is one user message)."""
    return [InputMessage(role="user", content=body.input)] if isinstance(body.input, str) else body.input


def continued(body: ResponsesBody, compacted: CompactionInput, answering: frozenset[str]) -> list[Message]:
    """The conversation a turn runs on once compacted: its instructions, the summary, then the request's input from
    its newest question on (the summary holds everything before it)."""
    current = current_items(body)
    users = [i for i, item in enumerate(current) if isinstance(item, InputMessage) and item.role == "user"]
    instructions: list[Message] = (
        [{"role": "system", "content": body.instructions}] if body.instructions else []
    )
    return [*instructions, *messages_of([compacted, *current[users[-1] if users else 0 :]], answering)]


async def when_past_threshold(
    ctx: RequestContext, body: ResponsesBody, messages: Sequence[Message], continued: bool, queues: bool
) -> tuple[CompactionItem, CompactionInput] | None:
    """The compaction a turn starts with: when ``messages`` are estimated past the request's ``compact_threshold``
    (or, for a stored chain or conversation it ``continued``, COMPACTION_THRESHOLD_TOKENS). None below it, or when
    no model could write the summary (logged: the turn goes on uncompacted, fitted as before), or when the turn
    ``queues`` (its worker compacts, once, when it runs the turn)."""
    if queues:
        return None
    settings = ctx.runtime.settings
    threshold = body.compact_threshold() or (settings.compaction_threshold_tokens if continued else 0)
    return await compaction.past(ctx, messages, threshold, body.model, openai=True)


@dataclass
class ResponsesPlan(Plan):
    """A ``/v1/responses`` turn as the pipeline runs it, and what the door keeps of it to answer."""

    body: ResponsesBody = field(kw_only=True)
    keeping: Keeping = field(kw_only=True)
    compacted: list[CompactionItem] = field(kw_only=True)
    """The compaction item the turn starts with (when its conversation was past the threshold), or none."""


async def plan_of(
    ctx: RequestContext, body: ResponsesBody, keeping: Keeping, admission: Admission, queues: bool
) -> ResponsesPlan:
    """The turn a request asks for, before the checks every door shares: its conversation (compacted when past the
    threshold, unless the turn ``queues``), its own MCP servers and their approval rules, and the approval answers
    it claims (given back by ``admission`` if the turn is refused)."""
    runtime = ctx.runtime
    history = keeping.history
    images = response_images(current_items(body), ImageLimits.of(runtime.settings))
    items = [*history, *current_items(body)]
    if body.context_management:  # a summary would be sealed to its caller: a 400 when there is none
        compaction.identified(ctx, "context_management")
    await compaction.open_items(ctx, items)
    # The request's own MCP servers, checked before its approval answers are: an answer is sealed to the server
    # it was asked for (its URL and headers), and is claimed only once every check passed.
    servers = await client_servers(
        body.tools, runtime.settings, runtime.tools.mcp_labels(), identified=ctx.caller is not None
    )
    answers = await admission.claim(items, len(history), servers)
    messages = conversation(conversation_of(body, history, answers.ids), runtime.settings.max_messages)
    compacted = await when_past_threshold(ctx, body, messages, bool(history), queues)
    if compacted is not None:  # the summary stands for it all; the request's newest question follows it
        messages = conversation(continued(body, compacted[1], answers.ids), runtime.settings.max_messages)
    chat_choice: ChatChoice = None
    if isinstance(body.tool_choice, str):
        chat_choice = body.tool_choice
    elif body.tool_choice is not None:  # the Responses API names a function flat; chat completions nest it
        chat_choice = {"type": "function", "function": {"name": body.tool_choice.name}}
    return ResponsesPlan(
        messages,
        chat_choice,
        body,
        body.model,
        body.max_output_tokens,
        functions=[t.as_chat_tool() for t in body.tools or [] if isinstance(t, ResponsesFunctionTool)],
        requested_format=lambda: requested_format(body),
        format_param="text.format",
        forwarded=body.forwarded(),
        allow_trimming=body.truncation == "auto",  # OpenAI's default is "disabled": refuse what does not fit
        max_tool_calls=body.max_tool_calls,
        approvals=answers.answers,
        servers=servers,
        rules=client_rules(body.tools),
        conversation_id=keeping.conversation_id,
        images=images,
        input_param="input",
        body=body,
        keeping=keeping,
        compacted=[compacted[0]] if compacted else [],
    )


def requested_format(body: ResponsesBody) -> ResponseFormat | None:
    """``text.format`` as chat completions' ``response_format`` (a 400 naming it when it cannot be one)."""
    try:
        return body.text.format.as_response_format() if body.text and body.text.format else None
    except ValueError as exc:
        raise RequestError(400, "invalid_request", str(exc), param="text.format") from None
