"""``POST /v1/responses/compact``: OpenAI's ``responses.compact``. The conversation a request names (``input``,
after ``previous_response_id``'s chain when it gives one, with ``instructions``) summarized by a model of the chain
into one sealed ``compaction`` item (``api.turns.compaction``); the answer is OpenAI's ``response.compaction`` object: the
conversation's user messages, then that item. Send its ``output`` (or just the item) as the next request's input and
any model of the chain continues from the summary.

Usage::

    curl -s localhost:8000/v1/responses/compact -d '{"model": "chatloop", "input": [...]}'
"""

from __future__ import annotations

import time

from pydantic import ConfigDict, StrictStr
from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext, response_id
from chatloop.api.http.errors import RequestError
from chatloop.api.http.wire import JSONBody
from chatloop.api.items.inputs import InputItem, InputMessage
from chatloop.api.openai.responses import stored
from chatloop.api.openai.responses.render import usage_of
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.openai.responses.turn import conversation_of, current_items
from chatloop.api.turns.build import summary_turn
from chatloop.api.turns.checks import conversation, read_body
from chatloop.api.turns.compaction import (
    compaction_item,
    identified,
    open_items,
    summary_chain,
    summary_request,
)
from chatloop.api.turns.serve import budgeted
from chatloop.jsontypes import JSONObject, json_object
from chatloop.providers.failures import ModelError
from chatloop.store.model import new_id
from chatloop.tools.base import ToolRegistry


class CompactBody(ResponsesBody):
    """What ``responses.compact`` sends: ``model``, ``input``, ``instructions``, ``previous_response_id`` (and
    prompt-cache hints, which change nothing here)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    prompt_cache_retention: StrictStr | None = None


async def compact(request: Request) -> Response:
    ctx = RequestContext.of(request)
    runtime = ctx.runtime
    body = await read_body(ctx, CompactBody)
    identified(ctx, None)  # a 400 before anything is counted: an item sealed to no one would open for anyone
    keeping = await stored.prepare(ctx, body.model_copy(update={"store": False}))
    items = [*keeping.history, *current_items(body)]
    await open_items(ctx, items)
    messages = conversation(conversation_of(body, keeping.history), runtime.settings.max_messages)
    model = summary_chain(ctx, body.model, openai=True)
    # The summary is a model call like any turn's: admitted by the caller's budget (a 429 before it), metered.
    asked = summary_turn(summary_request(messages))
    metered = await budgeted(ctx, asked, model, ToolRegistry([]))
    try:
        item, usage, _ = await compaction_item(ctx, metered, messages)
    except ModelError as exc:
        raise RequestError(503, "compaction_failed", f"no model could write the summary: {exc}") from None
    created = int(time.time())
    output: list[JSONObject] = [*_user_messages(items), json_object(item)]
    return JSONBody(
        {
            "id": response_id(ctx.request_id),
            "object": "response.compaction",
            "created_at": created,
            "output": output,
            "usage": json_object(usage_of(usage)),
        }
    )


def _user_messages(items: list[InputItem]) -> list[JSONObject]:
    """The user messages the compaction keeps verbatim (OpenAI's shape), oldest first."""
    return [
        {
            "type": "message",
            "id": new_id("msg"),
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": i.text()}],
        }
        for i in items
        if isinstance(i, InputMessage) and i.role == "user"
    ]
