"""The one turn pipeline under the three wire APIs: read -> normalise -> admit -> run -> serve, written once.

Each wire API is a ``Door`` (Mangum's shape: one handler per event source behind one protocol): its body schema,
how its input becomes the conversation (``prepare``), its policy values (``approvals``: ask for a person's answer,
or hide the tools that would), and how it answers (``serve``). ``run_door`` runs the steps every turn shares, in this
order, each from this one place (tests/api/test_pipeline.py checks it):

1. read the body (``read_body``; a 400 naming the field) and refuse what the server cannot honour
   (``refuse_unsupported``: the /v1 doors' OpenAI parameters);
2. ``prepare``: the door's conversation (history, approval answers claimed by ``Admission.claim``, compaction), inside
   the admission;
3. the turn's checks: ``tool_choice``, its tools, the model, the context window, structured output, parameters,
   then the ``TurnRequest`` (a 4xx before any model call);
4. a background turn is queued instead (``queue``, the door's), its budget slot taken first;
5. the turn's tools (the built-in ones and its MCP servers'), the approvals it may ask for, the caller's budget;
6. the engine's events, served by the door.

Steps 2-5 are one admission (``api.turns.admission``): whatever they took is given back if any of them fails.

Usage (a door's route)::

    async def chat(request: Request) -> Response:
        return await run_door(RequestContext.of(request), ChatDoor())

    await run_door(RequestContext.for_job(runtime, job), ResponsesDoor(), body)   # a background job's turn
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from pydantic import BaseModel
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.turns.admission import Admission
from chatloop.api.turns.build import turn_request
from chatloop.api.turns.checks import (
    ChatChoice,
    check_context,
    checked_client_tools,
    model_for,
    model_params,
    named_choice,
    read_body,
    refuse_unsupported,
    structured_output,
)
from chatloop.api.turns.images import see_images
from chatloop.api.turns.schemas import OpenAIParams
from chatloop.api.turns.serve import turn_events
from chatloop.jsontypes import JSONObject
from chatloop.tools.base import ToolRegistry

if TYPE_CHECKING:
    from chatloop.api.runtime import Runtime
    from chatloop.api.turns.approvals import ApprovalRule
    from chatloop.api.turns.build import Sampling
    from chatloop.api.turns.schemas import ClientTool, ResponseFormat
    from chatloop.config import MCPServerConfig
    from chatloop.engine import Event, TurnRequest
    from chatloop.engine.approvals import ApprovalAnswer
    from chatloop.engine.messages import Message
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.mcp import TurnTools

Body = TypeVar("Body", bound=BaseModel)
ApprovalMode = Literal["ask", "hide"]


def _no_format() -> ResponseFormat | None:
    return None


@dataclass(eq=False, repr=False)  # not compared or printed: only __init__ generated (cold start)
class Plan:
    """What a door made of its body (``Door.prepare``): the conversation and the turn's own values, before the checks
    every door shares. A door keeps its own state in a subclass."""

    messages: list[Message]
    choice: ChatChoice | BaseModel
    """The request's ``tool_choice``, chat-completions-shaped (a dict or a model that dumps to one) or a string."""
    sampling: Sampling
    """The body whose ``temperature``, ``top_p`` and ``parallel_tool_calls`` the turn takes."""
    model: str | None
    max_tokens: int | None
    openai: bool = True
    """``model_not_found`` for an unknown model (the /v1 APIs) rather than the default chain."""
    functions: list[ClientTool] = field(default_factory=list)
    requested_format: Callable[[], ResponseFormat | None] = _no_format
    """The structured output asked for, read after the context check (its 400 comes after a 413)."""
    format_param: str = "response_format"
    forwarded: JSONObject = field(default_factory=dict)
    allow_trimming: bool = True
    max_iterations: int | None = None
    max_tool_calls: int | None = None
    approvals: Sequence[ApprovalAnswer] = ()
    servers: list[MCPServerConfig] = field(default_factory=list)
    """The request's own MCP servers (the Responses API's ``mcp`` tools)."""
    rules: Mapping[str, ApprovalRule] = field(default_factory=dict)
    conversation_id: str | None = None
    images: list[str] = field(default_factory=list)
    """The params of the request's own image parts (``messages[0].content[1]``), checked by the door
    (``api.turns.images``): the first is named when no model of the chain can see them."""
    input_param: str = "messages"
    """What the door calls its input (``input`` on the Responses API): named when only the history holds images."""


P = TypeVar("P", bound=Plan)


@dataclass(eq=False, repr=False)  # not compared or printed: only __init__ generated (cold start)
class Admitted:
    """The turn once admitted: what the door serves."""

    turn: TurnRequest
    model: FallbackChain
    registry: ToolRegistry
    mcp: TurnTools | None


class Door(Generic[Body, P]):
    """One wire API's part of a turn. Subclasses set ``schema`` and ``approvals`` and write ``prepare`` and
    ``serve``; the rest has defaults."""

    schema: type[Body]
    approvals: ApprovalMode = "ask"
    bare_without_tools: bool = False
    """A turn offered no tool gets an empty registry (no sandbox started, no MCP server listed): /chat's way."""
    lists_servers: bool = False
    """Every turn asks the runtime for its MCP tools (the Responses API's ``mcp_list_tools`` items), even with no
    server configured; otherwise the MCP package is not imported until a server is."""

    async def prepare(self, ctx: RequestContext, body: Body, admission: Admission) -> P:
        """The conversation and the turn's values; approval answers are claimed by ``admission.claim``."""
        raise NotImplementedError

    def tool_names(self, runtime: Runtime, plan: P, choice: ChatChoice) -> list[str] | None:
        """The built-in tools a turn may use by name (None: all of them); the /v1 APIs offer them all."""
        return None

    def client_tools(self, runtime: Runtime, plan: P, choice: ChatChoice) -> list[JSONObject]:
        """The client's function tools as the model is offered them (a 400 for a clash or a named choice that
        names no offered tool)."""
        return checked_client_tools(runtime, plan.functions, choice)

    async def queue(
        self,
        ctx: RequestContext,
        plan: P,
        turn: TurnRequest,
        model: FallbackChain,
        admission: Admission,
    ) -> Response | None:
        """The answer of a turn run later (a background response), or None to run it now."""
        return None

    async def serve(
        self, ctx: RequestContext, plan: P, admitted: Admitted, events: AsyncIterator[Event]
    ) -> Response:
        raise NotImplementedError


async def run_door(ctx: RequestContext, door: Door[Body, P], body: Body | None = None) -> Response:
    """The turn of ``ctx`` (an HTTP request's, a background job's: no request at all) through ``door``: ``body``
    when it was read already (a job's, opened from the store), else the context's (``read_body``)."""
    if body is None:
        body = await read_body(ctx, door.schema)
    if isinstance(
        body, OpenAIParams
    ):  # the /v1 doors: what this server cannot honour is refused, not ignored
        refuse_unsupported(body)
    async with Admission(ctx) as admission:
        plan = await door.prepare(ctx, body, admission)
        turn, model = checked_turn(ctx.runtime, door, plan)
        later = await door.queue(ctx, plan, turn, model, admission)
        if later is not None:
            return later
        registry, mcp = await turn_tools(ctx, door, turn, plan.servers)
        await offered_approvals(ctx, door.approvals, turn, registry, mcp, plan)
        metered = await admission.budget(turn, model, registry)
    events = turn_events(ctx, turn, model, registry, plan.conversation_id, metered=metered)
    return await door.serve(ctx, plan, Admitted(turn, model, registry, mcp), events)


def checked_turn(runtime: Runtime, door: Door[Body, P], plan: P) -> tuple[TurnRequest, FallbackChain]:
    """The turn ``plan`` asks for and its chain, every check passed (a 4xx before any model call otherwise)."""
    choice = plan.choice if isinstance(plan.choice, dict) else named_choice(plan.choice)
    tool_names = door.tool_names(runtime, plan, choice)
    client_tools = door.client_tools(runtime, plan, choice)
    model = model_for(runtime, plan.model, openai=plan.openai)
    check_context(model, plan.messages, plan.max_tokens, whole=not plan.allow_trimming)
    see_images(model, plan.messages, plan.images, plan.input_param)
    response_format = structured_output(model, plan.requested_format(), plan.format_param)
    turn = turn_request(
        plan.messages,
        choice,
        plan.sampling,
        max_tokens=plan.max_tokens,
        tool_names=tool_names,
        client_tools=client_tools,
        max_iterations=plan.max_iterations,
        response_format=response_format,
        model_params=model_params(model, plan.forwarded),
        max_tool_calls=plan.max_tool_calls,
        allow_trimming=plan.allow_trimming,
        approvals=plan.approvals,
    )
    return turn, model


async def turn_tools(
    ctx: RequestContext, door: Door[Body, P], turn: TurnRequest, servers: Sequence[MCPServerConfig]
) -> tuple[ToolRegistry, TurnTools | None]:
    """The turn's registry: the built-in tools and every MCP tool reachable for it (the operator's servers and the
    request's own; None: none listed), as the door's policy says (``bare_without_tools``, ``lists_servers``)."""
    if door.bare_without_tools and turn.tool_names == []:
        return ToolRegistry(), None
    runtime = ctx.runtime
    if not door.lists_servers and not runtime.settings.mcp_servers and not servers:
        return runtime.tools.registry(), None  # nothing to list: the MCP package is not imported
    mcp = await runtime.tools.mcp_for_turn(ctx.deadline, servers)
    return runtime.tools.registry().with_tools(mcp.tools, mcp.skipped), mcp


async def offered_approvals(
    ctx: RequestContext,
    mode: ApprovalMode,
    turn: TurnRequest,
    registry: ToolRegistry,
    mcp: TurnTools | None,
    plan: Plan,
) -> None:
    """Which of the turn's tools wait for a person: asked for (``ask``: the answer comes back as an item), or not
    offered (``hide``: a door with no way to ask). Nothing to do, and nothing imported, when no tool waits."""
    settings = ctx.settings
    if not settings.approval_required_tools and not plan.rules:
        return
    from chatloop.api.turns import approvals  # only with a tool that waits for a person (cold start)

    if mode == "hide":
        turn.tool_names = approvals.without_approval(settings, registry, turn.tool_names)
        return
    tools = mcp.tools if mcp is not None else []
    await approvals.ask_for(ctx, turn, registry, tools, plan.rules, plan.servers)
