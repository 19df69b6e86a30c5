"""A ``/v1/responses`` request as the turn it asks for: its input items (after the history it continues from) as
the chat conversation the engine runs (``conversation_of``), compacted first when it is past the threshold
(``when_past_threshold``), and every check passed before any model call (``turn_of``: a 4xx otherwise).

Usage::

    messages = conversation_of(body)                        # then normalize_conversation(messages)
    turn, model, servers, compacted = await turn_of(ctx, body, keeping.history)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.items.compaction import CompactionInput
from chatloop.api.items.inputs import InputItem, InputMessage
from chatloop.api.items.messages import messages_of
from chatloop.api.openai.responses.mcp_servers import client_servers
from chatloop.api.openai.responses.schemas import ResponsesBody, ResponsesFunctionTool
from chatloop.api.turns import compaction
from chatloop.api.turns.approvals import answers_of, release
from chatloop.api.turns.build import turn_request
from chatloop.api.turns.checks import (
    ChatChoice,
    check_context,
    checked_client_tools,
    conversation,
    model_for,
    model_params,
    structured_output,
)
from chatloop.api.turns.worker import is_worker
from chatloop.config import MCPServerConfig
from chatloop.engine import TurnRequest
from chatloop.engine.messages import Message
from chatloop.providers.chain import FallbackChain

if TYPE_CHECKING:
    from chatloop.api.items.objects import CompactionItem


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
    ctx: RequestContext, body: ResponsesBody, messages: Sequence[Message], continued: bool
) -> tuple[CompactionItem, CompactionInput] | None:
    """The compaction a turn starts with: when ``messages`` are estimated past the request's ``compact_threshold``
    (or, for a stored chain or conversation it ``continued``, COMPACTION_THRESHOLD_TOKENS). None below it, or when
    no model could write the summary (logged: the turn goes on uncompacted, fitted as before)."""
    if body.background and not is_worker(
        ctx.request
    ):  # queued: its worker compacts, once, when it runs the turn
        return None
    settings = ctx.runtime.settings
    threshold = body.compact_threshold() or (settings.compaction_threshold_tokens if continued else 0)
    return await compaction.past(ctx, messages, threshold, body.model, openai=True)


async def turn_of(
    ctx: RequestContext, body: ResponsesBody, history: Sequence[InputItem]
) -> tuple[TurnRequest, FallbackChain, list[MCPServerConfig], list[CompactionItem]]:
    """The turn a request asks for, its chain, its own MCP servers and the compaction item it starts with (when its
    conversation was past the threshold), every check passed (a 4xx before any model call otherwise)."""
    runtime = ctx.runtime
    items = [*history, *current_items(body)]
    if body.context_management:  # a summary would be sealed to its caller: a 400 when there is none
        compaction.identified(ctx, "context_management")
    await compaction.open_items(ctx, items)
    # The request's own MCP servers, checked before its approval answers are: an answer is sealed to the server
    # it was asked for (its URL and headers), and is claimed only once every check passed.
    servers = await client_servers(
        body.tools, runtime.settings, runtime.tools.mcp_labels(), identified=ctx.caller is not None
    )
    answers = await answers_of(ctx, items, len(history), servers)
    messages = conversation(conversation_of(body, history, answers.ids), runtime.settings.max_messages)
    try:
        compacted = await when_past_threshold(ctx, body, messages, bool(history))
    except RequestError:  # the summary's call refused by the budget: nothing ran, the answers are not used up
        await release(ctx, answers.answers)
        raise
    if compacted is not None:  # the summary stands for it all; the request's newest question follows it
        messages = conversation(continued(body, compacted[1], answers.ids), runtime.settings.max_messages)
    chat_choice: ChatChoice = None
    if isinstance(body.tool_choice, str):
        chat_choice = body.tool_choice
    elif body.tool_choice is not None:  # the Responses API names a function flat; chat completions nest it
        chat_choice = {"type": "function", "function": {"name": body.tool_choice.name}}
    functions = [t.as_chat_tool() for t in body.tools or [] if isinstance(t, ResponsesFunctionTool)]
    client_tools = checked_client_tools(runtime, functions, chat_choice)
    model = model_for(runtime, body.model, openai=True)
    trimming = body.truncation == "auto"  # OpenAI's default is "disabled": refuse what does not fit
    check_context(model, messages, body.max_output_tokens, whole=not trimming)
    try:
        requested_format = body.text.format.as_response_format() if body.text and body.text.format else None
    except ValueError as exc:
        raise RequestError(400, "invalid_request", str(exc), param="text.format") from None
    response_format = structured_output(model, requested_format, "text.format")
    params = model_params(model, body.forwarded())
    turn = turn_request(
        messages,
        chat_choice,
        body,
        max_tokens=body.max_output_tokens,
        client_tools=client_tools,
        response_format=response_format,
        model_params=params,
        max_tool_calls=body.max_tool_calls,
        allow_trimming=trimming,
        approvals=answers.answers,
    )
    return turn, model, servers, [compacted[0]] if compacted else []
