"""The checks a turn request passes before any model call, shared by the turn endpoints: each is a clear 4xx
(a ``RequestError`` naming what is wrong) and no model call when it fails.

Usage (an endpoint)::

    body = await read_body(RequestContext.of(request), OpenAIChatBody)
    messages = conversation(body.messages, ctx.settings.max_messages)
    model = model_for(ctx.runtime, body.model, openai=True)
    check_context(model, messages, body.max_tokens)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias, TypeVar

from pydantic import BaseModel, ValidationError

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError, from_validation
from chatloop.api.http.request_limits import check_message_count, parse_json_body
from chatloop.api.runtime import Runtime, UnknownModel
from chatloop.api.turns.schemas import ClientTool, OpenAIParams, ResponseFormat
from chatloop.engine.messages import ConversationError, Message, normalize_conversation
from chatloop.engine.request import function_name
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger
from chatloop.providers.chain import FallbackChain
from chatloop.providers.factory import ChainMisconfigured
from chatloop.secrets import KeysUnavailable

Body = TypeVar("Body", bound=BaseModel)


async def read_body(ctx: RequestContext, schema: type[Body]) -> Body:
    """The context's JSON body as ``schema`` (MAX_BODY_BYTES and MAX_JSON_DEPTH enforced first)."""
    settings = ctx.settings
    raw = await ctx.raw_body(settings.max_body_bytes)
    data = parse_json_body(raw, settings.max_json_depth)
    return body_of(data, schema)


def body_of(data: object, schema: type[Body]) -> Body:
    """A parsed JSON body as ``schema`` (a 400 naming the field otherwise): a request's, or a background job's
    opened from the store."""
    if not isinstance(data, dict):
        raise RequestError(400, "invalid_request", "the body must be a JSON object")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise from_validation(exc) from None


def conversation(messages: Sequence[object], max_messages: int) -> list[Message]:
    """The client's conversation, normalised by the engine's rules (a 400 ``invalid_messages`` naming
    ``messages[i]``), after MAX_MESSAGES."""
    check_message_count(messages, max_messages)
    try:
        return normalize_conversation(messages)
    except ConversationError as exc:
        raise RequestError(400, "invalid_messages", str(exc), param="messages") from None


def model_for(runtime: Runtime, requested: str | None, *, openai: bool = False) -> FallbackChain:
    """The turn's chain. A model this server cannot serve is a 400 ``unknown_model`` on /chat, and OpenAI's 404
    ``model_not_found`` on /v1 (listing what it can serve) unless the operator chose the default chain for it
    there (UNKNOWN_MODEL_FALLBACK). A MODEL_CHAIN that cannot be built is a 503 ``model_chain_misconfigured``."""
    try:
        return runtime.models.for_turn(
            requested, strict=not (openai and runtime.settings.unknown_model_fallback)
        )
    except UnknownModel as exc:
        status, code = (404, "model_not_found") if openai else (400, "unknown_model")
        raise RequestError(status, code, str(exc), param="model") from None
    except KeysUnavailable as exc:
        raise RequestError(503, "keys_unavailable", str(exc)) from None
    except ChainMisconfigured as exc:  # never the demo model in its place
        raise RequestError(503, exc.code, str(exc)) from None


def check_context(
    model: FallbackChain, messages: list[Message], max_tokens: int | None, whole: bool = False
) -> None:
    """A conversation whose system messages and latest user message alone exceed every model's window cannot be
    answered however it is trimmed: a 413 now, no model call. With ``whole`` (trimming disabled: the Responses API's
    ``truncation: disabled``), the whole conversation must fit."""
    if whole:
        needed, param = messages, "input"
        what = "the conversation needs"
        advice = (
            'truncation is disabled; shorten it, or send truncation: "auto" to let the server drop old turns'
        )
    else:
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
        if last_user is None:
            return
        needed = [m for m in messages[:last_user] if m["role"] == "system"] + [messages[last_user]]
        param, what, advice = "messages", "the latest user message alone needs", "shorten it"
    holds, largest = model.can_hold(needed, max_tokens)
    if not holds:
        raise RequestError(
            413,
            "context_length_exceeded",
            f"{param}: {what} more than the largest context window in the chain ({largest} tokens, the answer's "
            f"reserve included); {advice}",
            param=param,
        )


def structured_output(
    model: FallbackChain, requested: ResponseFormat | None, param: str
) -> JSONObject | None:
    """The upstream ``response_format`` for a turn, never silently dropped (see ``_some_model_takes``)."""
    response_format = requested.upstream() if requested else None
    if response_format is None:
        return None
    kind = response_format["type"]
    support = model.supports(response_format=response_format)
    _some_model_takes(support, "Structured output", f"format={kind}", param)
    return response_format


def model_params(model: FallbackChain, requested: JSONObject) -> JSONObject:
    """The sampling and output parameters a turn sends as they are (``stop``, ``seed``, ``reasoning_effort`` ...),
    never silently dropped (see ``_some_model_takes``)."""
    for name in requested:
        _some_model_takes(model.supports(params=[name]), "Parameter", f"param={name}", name)
    return requested


def _some_model_takes(support: tuple[list[str], list[str]], decision: str, subject: str, param: str) -> None:
    """The chain's answer (``FallbackChain.supports``) to whether some model can be sent what a request asks for,
    logged as a decision: the models it goes to, and those it passes over for the request. When none is left, a
    400 ``unsupported_parameter`` naming ``param``, before any model call."""
    able, skipped = support
    logger.info(
        f"{decision} decision: {subject} models={','.join(able) or '-'} skipped={','.join(skipped) or '-'} "
        f"reason={'supported' if able else 'unsupported'}",
        extra={
            "model_support": {"decision": decision, "subject": subject, "models": able, "skipped": skipped}
        },
    )
    if not able:
        raise RequestError(
            400,
            "unsupported_parameter",
            f"{param}: no model in the chain supports {subject.partition('=')[2]} ({', '.join(skipped)}); pick one "
            "whose catalog entry lists it",
            param=param,
        )


def refuse_unsupported(body: OpenAIParams) -> None:
    """The first parameter this server cannot honour, as a 400 naming it (nothing is silently ignored)."""
    refused = body.refusals()
    if refused:
        raise RequestError(400, "unsupported_parameter", str(refused[0]), param=refused[0].param)
    if body.user or body.safety_identifier or body.metadata:  # honoured by being logged with the turn
        logger.info(
            "Request identity",
            extra={"user": body.user, "safety_identifier": body.safety_identifier, "metadata": body.metadata},
        )


ChatChoice: TypeAlias = "str | JSONObject | None"
"""A ``tool_choice`` as chat completions send it: ``"auto"``/``"none"``/``"required"``, a named function, or
nothing."""


def named_choice(choice: BaseModel | str | None) -> ChatChoice:
    return choice.model_dump() if isinstance(choice, BaseModel) else choice


def checked_client_tools(runtime: Runtime, tools: list[ClientTool], choice: ChatChoice) -> list[JSONObject]:
    """The client's function tools as the model is offered them: none may take a built-in tool's name, and a
    named ``tool_choice`` must name an offered tool."""
    client_tools = [t.schema_for_model() for t in tools]
    builtin = runtime.tools.names()
    names = {function_name(t) for t in client_tools}
    clash = sorted(name for name in names & set(builtin) if name is not None)
    if clash:
        raise RequestError(
            400, "invalid_request", f"tools: {clash} clash with the server's built-in tools", "tools"
        )
    offered = set(builtin) | names
    if isinstance(choice, dict) and function_name(choice) not in offered:
        raise RequestError(
            400, "invalid_request", "tool_choice names a tool that is not offered", "tool_choice"
        )
    return client_tools
