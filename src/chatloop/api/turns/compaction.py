"""Compaction: a long conversation's earlier turns replaced by a summary a model of the chain writes, kept in a
``compaction`` item (OpenAI's shape) that this server can read back and nobody can forge, and given back to any model
of the chain as the earlier context.

- **The item.** ``{"type": "compaction", "id": "cmp_…", "encrypted_content": "…", "created_by": "<model>"}``. Its
  content is AES-256-GCM (``cryptography``, imported on first use) under a key from ``statekey`` (purpose
  ``compaction``), with the caller as associated data: a changed byte, or an item made for another caller, fails to
  open, which is a 400 naming the item; an item always reads the same in every copy of the function, and has one
  spelling (``api.turns.sealing``). A caller with no identity gets no item and opens none (a 400 saying why): one
  sealed to no one would open for every other such caller.
- **Read back.** In a request's input, a stored chain or a conversation, a compaction item stands for everything
  before it: those items are dropped and the model gets one system message with the summary in their place (the
  items after it follow as they are).
- **Written.** ``POST /v1/responses/compact`` (OpenAI's ``responses.compact``: the user messages, then one
  compaction item), and automatically before a turn whose conversation is estimated past a threshold:
  ``context_management: [{"type": "compaction", "compact_threshold": N}]`` on the request, or
  COMPACTION_THRESHOLD_TOKENS for a stored conversation or response chain (before trimming would drop turns). The
  summary is written by COMPACTION_MODEL's chain, else the request's own; if no model can write it, the turn goes
  on uncompacted (fitted or trimmed as before), and ``/compact`` answers 503.

Usage::

    await open_items(ctx, items)                      # each compaction item's summary, or a 400
    item, usage = await compaction_item(ctx, model, messages)
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from chatloop.api.http.errors import RequestError
from chatloop.api.items.compaction import CompactionInput
from chatloop.api.turns import sealing
from chatloop.api.turns.build import summary_turn
from chatloop.api.turns.checks import model_for
from chatloop.api.turns.serve import budgeted
from chatloop.api.turns.statekey import state_key
from chatloop.engine.messages import Message
from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.observability import logger
from chatloop.providers.base import ChatModel, ModelRequest, ModelResponse, Usage
from chatloop.providers.failures import ModelError, Transient
from chatloop.providers.tokens import raw_tokens
from chatloop.store.model import new_id
from chatloop.tools.base import ToolRegistry

if TYPE_CHECKING:
    from chatloop.api.http.context import RequestContext
    from chatloop.api.items.objects import CompactionItem
    from chatloop.providers.chain import FallbackChain

PURPOSE = "compaction"
MAX_SUMMARY_CHARS = 16_000
MAX_TRANSCRIPT_CHARS = 400_000
"""What the summarizing call is given at most (the newest part of a longer transcript; a model's window is the
real bound, and the chain fits it)."""
SUMMARY_PROMPT = (
    "You compact a conversation so it can go on without its earlier turns. Write a summary that keeps every fact, "
    "name, number, decision, preference and open question the user or the assistant stated, the results of tool "
    "calls that matter, and what the user is trying to do. Write it as plain notes, oldest first; say nothing else."
)


class CompactionSetting(BaseModel):
    """One ``context_management`` entry of ``responses.create``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    type: Literal["compaction"]
    compact_threshold: Annotated[StrictInt, Field(ge=1000)] | None = None


# --- sealing --------------------------------------------------------------------------------------------------
def seal(key: bytes, owner: str, payload: JSONObject) -> str:
    """``payload`` as ``encrypted_content``: AES-256-GCM, a random 96-bit nonce, its owner (the caller it is made
    for) as associated data, in its one spelling (``api.turns.sealing``)."""
    return sealing.seal(key, _aad(owner), payload)


def unseal(key: bytes, owner: str, content: str) -> JSONObject:
    """What ``seal`` sealed for ``owner``; ``ValueError`` for anything changed, re-spelled, foreign or malformed."""
    opened = sealing.unseal(key, _aad(owner), content)
    if not isinstance(opened.get("summary"), str):
        raise sealing.Unsealable("the item holds no summary")
    return opened


def _aad(owner: str) -> bytes:
    return b"chatloop-compaction\x00" + owner.encode("utf-8", "surrogatepass")


def identified(ctx: RequestContext, param: str | None) -> str:
    """The caller a compaction item is sealed to; a 400 naming ``param`` for a caller with no identity (a Function
    URL without auth, an HTTP API without an authorizer): sealed to nobody in particular, an item would open for
    every other such caller, so they get none."""
    if ctx.caller is None:
        raise RequestError(
            400,
            "invalid_request",
            f"{param or 'compaction'}: compaction items need a caller identity (an API key, IAM or an authorizer); "
            "this request has none, and an item sealed to no one would open for anyone",
            param,
        )
    return ctx.caller


async def _key(ctx: RequestContext) -> bytes:
    return await state_key(ctx.runtime, PURPOSE)


async def open_items(ctx: RequestContext, items: Sequence[object]) -> None:
    """Open every compaction item of ``items`` (a 400 naming the first that does not open)."""
    compactions = [i for i in items if isinstance(i, CompactionInput)]
    if not compactions:
        return
    caller = identified(ctx, "input")
    key = await _key(ctx)
    for item in compactions:
        try:
            item.open(str(unseal(key, caller, item.encrypted_content)["summary"]))
        except ValueError as exc:
            raise RequestError(
                400, "invalid_request", f"compaction item {item.id or ''!r}: {exc}", "input"
            ) from None


# --- writing --------------------------------------------------------------------------------------------------
def _told(parts: list[JSONValue]) -> str:
    """A content list as the summarizing model reads it: its text, an image as ``[image]`` (never its bytes)."""
    return "".join(
        "[image]" if p.get("type") == "image_url" else str(p.get("text", ""))
        for p in parts
        if isinstance(p, dict)
    )


def transcript(messages: Sequence[Message]) -> str:
    """The conversation as the summarizing model reads it: one block per message, tool calls and results named."""
    blocks: list[str] = []
    for m in messages:
        content = m.get("content")
        text = (
            content
            if isinstance(content, str)
            else _told(content)
            if isinstance(content, list)
            else json.dumps(content, ensure_ascii=False)
            if content
            else ""
        )
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            named = [c.get("function", {}) for c in calls if isinstance(c, dict)]
            text += "".join(
                f"\n[called {f.get('name')} with {f.get('arguments')}]" for f in named if isinstance(f, dict)
            )
        blocks.append(f"{m['role']}: {text}".strip())
    whole = "\n\n".join(blocks)
    return whole[-MAX_TRANSCRIPT_CHARS:]


def summary_request(messages: Sequence[Message]) -> list[Message]:
    """What the summarizing call sends: the prompt, then the transcript of ``messages``."""
    return [{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": transcript(messages)}]


async def summarize(ctx: RequestContext, model: ChatModel, messages: Sequence[Message]) -> ModelResponse:
    """One call of the chain: the summary of ``messages`` (a ``ModelError`` when no model could write it)."""
    request = ModelRequest(
        messages=summary_request(messages),
        deadline=ctx.deadline.minus(ctx.runtime.settings.deadline_reserve_seconds),
    )
    response: ModelResponse | None = None
    async for item in model.stream(request):
        if isinstance(item, ModelResponse):
            response = item
    if response is None or not response.content.strip():
        raise Transient("the summary came back empty", model=model.name)
    return response


async def compaction_item(
    ctx: RequestContext, model: ChatModel, messages: Sequence[Message]
) -> tuple[CompactionItem, Usage, CompactionInput]:
    """A sealed ``compaction`` item summarizing ``messages``, what the summary cost, and the item as input (open)."""
    caller = identified(ctx, None)  # before the summary's model call
    started = time.perf_counter()
    response = await summarize(ctx, model, messages)
    summary = response.content.strip()[:MAX_SUMMARY_CHARS]
    payload: JSONObject = {"summary": summary, "messages": len(messages), "model": response.model}
    item: CompactionItem = {
        "id": new_id("cmp"),
        "type": "compaction",
        "encrypted_content": seal(await _key(ctx), caller, payload),
        "created_by": response.model,
    }
    logger.info(
        f"Compaction: messages={len(messages)} summary_chars={len(summary)} model={response.model} "
        f"ms={(time.perf_counter() - started) * 1000:.0f}",
        extra={
            "compaction": {"messages": len(messages), "summary_chars": len(summary), "model": response.model}
        },
    )
    given = CompactionInput.model_validate(item)
    given.open(summary)
    return item, response.usage or Usage(), given


def summary_chain(ctx: RequestContext, model_name: str | None, *, openai: bool) -> FallbackChain:
    """The chain that writes a summary: COMPACTION_MODEL's, else ``model_name``'s (the request's). A COMPACTION_MODEL
    this server cannot serve is the operator's mistake: a 503 naming the setting (logged), never a 4xx blaming the
    client's ``model``, nor the turn's own chain in its place (as MODEL_CHAIN: ``providers.factory``)."""
    configured = ctx.runtime.settings.compaction_model
    if not configured:
        return model_for(ctx.runtime, model_name, openai=openai)
    try:
        return model_for(ctx.runtime, configured)  # strict: no fallback to another chain
    except RequestError as exc:
        if exc.code != "unknown_model":
            raise
        problem = (
            f"COMPACTION_MODEL={configured!r} cannot be served here ({exc.message}); set it to an entry of MODEL_CHAIN "
            "or an available model, or unset it"
        )
        logger.error(problem)
        raise RequestError(503, "compaction_model_misconfigured", problem) from None


async def past(
    ctx: RequestContext, messages: Sequence[Message], threshold: int, model_name: str | None, *, openai: bool
) -> tuple[CompactionItem, CompactionInput] | None:
    """``messages`` compacted when they are estimated past ``threshold`` tokens (0: never), by COMPACTION_MODEL's
    chain or ``model_name``'s; None below it or when no model could write the summary (logged)."""
    if not threshold or raw_tokens(list(messages), None) <= threshold:
        return None
    model = summary_chain(ctx, model_name, openai=openai)
    # The summary is the turn's first model call: admitted as the turn is (a 429 before it: the request counted,
    # its concurrent-turn slot taken) and metered. The turn's own admission, on the compacted conversation, takes
    # that slot over; what the summary left unused of its reservation is given back at once.
    asked = summary_turn(summary_request(messages))
    metered = await budgeted(ctx, asked, model, ToolRegistry([]))
    admitted = ctx.turn_budget
    try:
        item, _, given = await compaction_item(ctx, metered, messages)
    except ModelError as exc:
        logger.warning(f"Compaction failed; the turn goes on uncompacted: {exc}")
        return None
    finally:
        if admitted is not None:
            await admitted.give_back_unused()
    return item, given
