"""What one model call is asked with, and how its reply is read.

The tools offered (``next_offer``: none once tool use ended, the client's own on the last call when its
``tool_choice`` requires one), the ``tool_choice`` sent, the deadline it gets (less the reserve kept for the answer
while tools are offered), the filter that holds back text that may be a call, and the reading of the reply (calls
written as text recovered; for every answer, a text that is no answer cut to the words before it).

Usage::

    offer = next_offer(setup, state)
    request = model_request(setup, state, offer.tools)
    reply = read_reply(setup, state, response, request, offer, shown="")
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from chatloop.engine.answers import Judged, describe, judge_answer
from chatloop.engine.request import function_name
from chatloop.engine.state import TurnSetup, TurnState
from chatloop.engine.summary import StopReason
from chatloop.engine.textcalls import Reply, read_text_calls, refused_tools
from chatloop.engine.textfilter import TextCallFilter
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.providers.textcall_formats import tool_keys

MIN_CALL_SECONDS = 0.5
"""Below this, no model call is started: the turn answers with the fallback text."""
RENDER_MARGIN_SECONDS = 0.25
"""Kept back from the last model call so the response is rendered before the deadline."""


class Offer(NamedTuple):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    """What the next model call may use: tool names, and the guard that withheld every tool, if one did."""

    tools: list[str]
    withheld_by: StopReason | None = None


def next_offer(setup: TurnSetup, state: TurnState) -> Offer:
    """The tools offered to the next call, or none, with the guard (cap or deadline) that withheld them. When the
    client's ``tool_choice`` requires one of its tools, its tools stay offered to the last call."""
    last_call = sorted(setup.client_names) if setup.client_required else []
    if state.tools_ended:
        return Offer(last_call)
    available = state.ledger.offerable(setup.builtin) + sorted(setup.client_names)
    if not available:
        return Offer([])
    if state.iteration >= setup.max_iterations:
        return Offer(last_call, StopReason.ITERATION_CAP)
    if setup.deadline.remaining() < setup.limits.deadline_reserve_seconds + MIN_CALL_SECONDS:
        return Offer(last_call, StopReason.DEADLINE)
    return Offer(available)


def tool_choice(setup: TurnSetup, state: TurnState, offered: list[str]) -> str | JSONObject | None:
    """The client's ``tool_choice`` goes with the first call, and with the last call when it requires a client
    tool; any other call chooses freely, so a forced server tool is not forced again every round (seed 001)."""
    choice = setup.request.tool_choice
    if not offered or choice is None:
        return None
    last_call = setup.client_required and (state.tools_ended or not set(offered) - setup.client_names)
    if state.iteration != 1 and not last_call:
        return None
    if isinstance(choice, dict) and function_name(choice) not in offered:
        return None
    return choice


def model_request(setup: TurnSetup, state: TurnState, offered: list[str]) -> ModelRequest:
    r = setup.request
    # A call made while tools are offered must leave the reserve for the answer that follows.
    reserve = setup.limits.deadline_reserve_seconds if offered else RENDER_MARGIN_SECONDS
    schemas = setup.tools.schemas(n for n in offered if n not in setup.client_names)
    schemas += [t for t in r.client_tools if function_name(t) in offered]
    return ModelRequest(
        messages=list(state.messages),
        deadline=setup.deadline.minus(reserve),
        tools=schemas or None,
        tool_choice=tool_choice(setup, state, offered),
        parallel_tool_calls=r.parallel_tool_calls if schemas else None,
        temperature=r.temperature,
        top_p=r.top_p,
        max_tokens=r.max_tokens,
        response_format=r.response_format,
        params=dict(r.model_params),
        allow_trimming=r.allow_trimming,
    )


def text_filter(setup: TurnSetup, state: TurnState, request: ModelRequest, offer: Offer) -> TextCallFilter:
    """Holds back what may be a call written as text, or no answer, until ``read_reply`` has judged it: in a turn
    with tools, on every call (offered or withdrawn), the JSON forms too."""
    tools = request.tools or turn_tools(setup)
    return TextCallFilter(hold_json=bool(tools), tools=tool_keys(tools))


def read_reply(
    setup: TurnSetup,
    state: TurnState,
    response: ModelResponse,
    request: ModelRequest,
    offer: Offer,
    shown: str,
) -> Reply:
    """The reply as the engine reads it: calls written as text recovered; then, for every answer (tools offered,
    withdrawn, or none), a text that is no answer (a pseudo call, a tool error, the tools or their results echoed)
    cut to the words before it (as they were ``shown``, so the answer is what was streamed), logged."""
    tools = request.tools or turn_tools(setup)
    reply = read_text_calls(response, request.tools, request.messages, withdrawn=tools)
    if response.tool_calls or reply.relayed:
        return reply
    if reply.not_an_answer:  # a call to a tool the server already said does not exist
        judged = Judged(response.content or "", reply.not_an_answer)
        logger.warning(describe(judged), extra={"iteration": state.iteration, "reason": judged.reason})
        return reply
    structured = bool(request.response_format)
    refused = refused_tools(request.messages, tools)
    judged = judge_answer(
        response.content, tools, structured, calls_read=bool(request.tools), refused=refused
    )
    if judged.reason is None:
        return reply
    logger.warning(describe(judged), extra={"iteration": state.iteration, "reason": judged.reason})
    same = judged.content and shown.strip() == judged.content
    response.content = shown if same else judged.content
    return replace(reply, not_an_answer=judged.reason)


def turn_tools(setup: TurnSetup) -> list[JSONObject]:
    """Every tool of the turn, the server's and the client's, offered to this call or not."""
    return setup.tools.schemas(setup.builtin) + list(setup.request.client_tools)
