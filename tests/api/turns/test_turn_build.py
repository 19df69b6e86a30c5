"""The turn machinery every endpoint shares, on its own: the one ``TurnRequest`` builder (``api.turns.build``) and
observing a non-streamed turn's events as their own wrapper (``api.turns.serve.observed_by``)."""

import asyncio
from collections.abc import AsyncIterator, Iterable

import pytest

from chatloop.api.turns.build import summary_turn, turn_request
from chatloop.api.turns.schemas import ChatBody, OpenAIChatBody
from chatloop.api.turns.serve import observed_by
from chatloop.engine import StopReason, TurnSummary
from chatloop.engine.approvals import ApprovalAnswer
from chatloop.engine.events import Delta, Done, Event, Started, TurnError
from chatloop.engine.summary import AssistantMessage
from chatloop.providers.base import ToolCall
from chatloop.redaction import redact

# Secrets another test registered (process-wide) would hold back pieces of these deltas.
pytestmark = pytest.mark.usefixtures("no_registered_secrets")

MESSAGES = [{"role": "user", "content": "5!"}]
CLIENT_TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def test_tool_choice_none_offers_no_tool_at_all_and_sends_no_choice():
    body = OpenAIChatBody.model_validate({"messages": MESSAGES, "temperature": 0.2, "top_p": 0.9})
    turn = turn_request(MESSAGES, "none", body, max_tokens=50, client_tools=[CLIENT_TOOL], tool_names=None)
    assert (turn.tool_names, turn.client_tools, turn.tool_choice) == ([], [], None)
    assert (turn.temperature, turn.top_p, turn.max_tokens) == (0.2, 0.9, 50)


def test_any_other_choice_offers_what_the_endpoint_chose_and_sends_the_choice_as_it_is():
    body = ChatBody.model_validate({"messages": MESSAGES, "parallel_tool_calls": False})
    named = {"type": "function", "function": {"name": "lookup"}}
    answer = ApprovalAnswer(ToolCall("mcpr_1", "execute_javascript", "{}"), True, None)
    turn = turn_request(
        MESSAGES,
        named,
        body,
        max_tokens=None,
        tool_names=["execute_javascript"],
        client_tools=[CLIENT_TOOL],
        max_iterations=3,
        approvals=[answer],
        allow_trimming=False,
    )
    assert (turn.tool_names, turn.client_tools, turn.tool_choice) == (
        ["execute_javascript"],
        [CLIENT_TOOL],
        named,
    )
    assert (turn.parallel_tool_calls, turn.max_iterations, turn.approvals, turn.allow_trimming) == (
        False,
        3,
        (answer,),
        False,
    )
    assert turn.model_params == {} and turn.response_format is None


def test_a_summary_turn_offers_no_tool():
    turn = summary_turn(MESSAGES)
    assert (turn.messages, turn.tool_names, turn.client_tools, turn.tool_choice) == (MESSAGES, [], [], None)


async def _events(events: Iterable[Event]) -> AsyncIterator[Event]:
    for event in events:
        yield event


def test_observed_events_pass_unchanged_and_the_observer_sees_each_before_done_but_no_error():
    seen: list[Event] = []
    done = Done(TurnSummary(AssistantMessage("Hello"), StopReason.STOP, iterations=1, model="groq:m"))
    error = TurnError("model_error", "one model failed", model="groq:m")
    events = [Started("groq:m"), Delta("Hel", 1), error, Delta("lo", 1), done]

    async def read() -> list[Event]:
        return [e async for e in observed_by(seen.append, _events(events))]

    def wire(events: list[Event]) -> list[tuple[str, object]]:
        return [(e.name, e.data) for e in events]

    passed = asyncio.run(read())
    assert wire(passed) == wire(events)
    assert wire(seen) == wire([Started("groq:m"), Delta("Hel", 1), Delta("lo", 1)])


def test_a_secret_written_across_deltas_reaches_the_observer_redacted_whole():
    key = "gsk_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V2w3X4"
    seen: list[str] = []

    def observe(event: Event) -> None:
        if isinstance(event, Delta):
            seen.append(event.content)

    async def read() -> None:
        async for _ in observed_by(
            observe, _events([Delta(f"the key {key[:20]}", 1), Delta(f"{key[20:]} ok", 1)])
        ):
            pass

    asyncio.run(read())
    assert key not in "".join(seen) and "".join(seen) == redact(f"the key {key} ok")
