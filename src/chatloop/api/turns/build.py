"""The one place a ``TurnRequest`` is built from a checked request, for every turn endpoint (``/chat``,
``/v1/chat/completions``, ``/v1/responses``): the sampling fields every body carries, and ``tool_choice: "none"``
read the same way everywhere (no tool offered, built-in or the client's, and no choice sent upstream).

Usage (an endpoint, once every check passed)::

    turn = turn_request(messages, choice, body, max_tokens=body.max_tokens, client_tools=client_tools)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from chatloop.engine import TurnRequest

if TYPE_CHECKING:  # types only: a Protocol class costs the import of the app a fraction of a millisecond
    from chatloop.api.turns.checks import ChatChoice
    from chatloop.engine.approvals import ApprovalAnswer
    from chatloop.engine.messages import Message
    from chatloop.jsontypes import JSONObject

    class Sampling(Protocol):
        """What every turn body carries as it is (``ChatBody``, ``OpenAIChatBody``, ``ResponsesBody``)."""

        @property
        def parallel_tool_calls(self) -> bool | None: ...

        @property
        def temperature(self) -> float | None: ...

        @property
        def top_p(self) -> float | None: ...


def turn_request(
    messages: list[Message],
    choice: ChatChoice,
    body: Sampling,
    *,
    max_tokens: int | None,
    tool_names: list[str] | None = None,
    client_tools: Sequence[JSONObject] = (),
    max_iterations: int | None = None,
    response_format: JSONObject | None = None,
    model_params: JSONObject | None = None,
    max_tool_calls: int | None = None,
    allow_trimming: bool = True,
    approvals: Sequence[ApprovalAnswer] = (),
) -> TurnRequest:
    """The turn for ``messages``: ``choice`` (a chat completions ``tool_choice``) ``"none"`` offers no tool at all and
    sends no choice; otherwise ``tool_names`` (None: every built-in tool) and ``client_tools`` are offered."""
    no_tools = choice == "none"
    return TurnRequest(
        messages=messages,
        tool_names=[] if no_tools else tool_names,
        client_tools=[] if no_tools else list(client_tools),
        tool_choice=None if no_tools else choice,
        parallel_tool_calls=body.parallel_tool_calls,
        temperature=body.temperature,
        top_p=body.top_p,
        max_tokens=max_tokens,
        max_iterations=max_iterations,
        response_format=response_format,
        model_params=model_params or {},
        max_tool_calls=max_tool_calls,
        allow_trimming=allow_trimming,
        approvals=tuple(approvals),
    )


def summary_turn(messages: list[Message]) -> TurnRequest:
    """A call that only writes, as a compaction's summary is: no tool offered, the chain's own sampling. (Admitted and
    metered by the caller's budget as a turn is: ``serve.budgeted``.)"""
    return TurnRequest(messages=messages, tool_names=[])
