"""Stored responses: what ``/v1/responses`` keeps, the history a turn continues from, and the endpoints that read
it back (OpenAI's shapes: openai-python ``types/responses/``).

A response is stored when ``store`` is true, OpenAI's default, and the request names a caller (``caller_of``): its
body, the items of its input, its output items and, for a streamed one, its events. A later request continues from
it with ``previous_response_id`` (the model receives every earlier response's input and output, then the new input,
following the chain back) or joins a ``conversation`` (the model receives the conversation's items; the turn's input
and output are appended to it). Everything is the caller's own: another caller's response is exactly a 404.

Reading state a request needs (the history) is done before any model call: a missing, deleted, expired or foreign
id is a 404, a malformed one a 400, a store that fails a 503. Writing after the turn degrades instead: the answer
still goes out, with ``store: false`` when it could not be kept (and a warning in the log).

Usage (the routes, in api/app.py)::

    GET    /v1/responses/{id}                   ?stream=true&starting_after=N replays a streamed one's events
                                                (and follows it live while it runs: ``api.runs.follow``)
    POST   /v1/responses/{id}/cancel            a background response (``api.openai.responses.background``)
    DELETE /v1/responses/{id}
    GET    /v1/responses/{id}/input_items       ?order=asc&limit=20&after=msg_…

A stored streamed response is journaled while it runs (``api.runs.journal``): its record exists, ``in_progress``, from its
first events on, and its events reach the store in batches, so any container can read or follow it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.http.query import Query, invalid
from chatloop.api.http.wire import JSONBody
from chatloop.api.items.inputs import InputItem, InputMessage, ReasoningItem
from chatloop.api.items.store import (
    checked_id,
    conversation_id_of,
    not_found,
    page_query,
    starting_after,
    store_context,
    store_errors,
)
from chatloop.api.items.stored import (
    HISTORY_PAGE,
    all_items,
    as_input_items,
    conversation_history,
    stored_items,
)
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.runs.follow import follow_response, longest_turn, replay, settled
from chatloop.api.runs.journal import Journal, response_log, stored_event
from chatloop.jsontypes import JSONObject, json_object
from chatloop.observability import logger
from chatloop.store.model import Item, PageQuery, StoreUnavailable
from chatloop.store.service import CursorNotFound

if TYPE_CHECKING:
    from chatloop.api.openai.responses.objects import FinishedResponse
    from chatloop.deadline import Deadline
    from chatloop.store.service import ConversationStore

MAX_CHAIN = 100
"""How many earlier responses a ``previous_response_id`` chain may follow back (each is two reads)."""


@dataclass
class Keeping:
    """What one ``/v1/responses`` request keeps and continues from: decided before the turn, used after it."""

    store: ConversationStore | None
    owner: str | None
    deadline: Deadline | None
    conversation_id: str | None = None
    history: list[InputItem] = field(default_factory=list)
    """The earlier items (input and output) the model is given before this request's input."""
    journal: Journal | None = None
    """The running turn's journal: its record was created by it (``in_progress``), and its events written."""

    @property
    def enabled(self) -> bool:
        return self.store is not None and self.owner is not None


async def prepare(ctx: RequestContext, body: ResponsesBody) -> Keeping:
    """Decide whether this request is stored, and read the history it continues from (a 4xx or 503 before any
    model call when that history cannot be had)."""
    wants_history = body.previous_response_id is not None or body.conversation is not None
    if body.previous_response_id is not None and body.conversation is not None:
        raise RequestError(
            400,
            "invalid_request",
            "previous_response_id and conversation cannot be used together",
            param="previous_response_id",
        )
    if body.store is False and not wants_history:
        return Keeping(None, None, None)
    caller = ctx.caller
    if caller is None:
        if body.store or wants_history:
            raise RequestError(
                401,
                "unauthenticated",
                "this request names no caller (no API key id or IAM identity) to keep it for",
            )
        return Keeping(None, None, None)  # store left to its default: nothing can be kept for nobody
    runtime = ctx.runtime
    deadline = ctx.store_deadline()
    keeping = Keeping(runtime.stores.conversations() if body.store is not False else None, caller, deadline)
    store = runtime.stores.conversations()
    with store_errors():
        if body.previous_response_id is not None:
            keeping.history = await _chain(store, caller, checked_id(body.previous_response_id), deadline)
        elif body.conversation is not None:
            keeping.conversation_id = conversation_id_of(body.conversation)
            keeping.history = await conversation_history(store, caller, keeping.conversation_id, deadline)
    return keeping


async def save(
    keeping: Keeping,
    ctx: RequestContext,
    body: ResponsesBody,
    response: FinishedResponse,
    events: Sequence[Mapping[str, object]],
) -> FinishedResponse:
    """Keep the finished ``response`` (and a streamed one's ``events``); append the turn to its conversation.
    Returns the response as it should be shown: ``store: false`` when it could not be kept."""
    if keeping.owner is None or (keeping.store is None and keeping.conversation_id is None):
        return response
    store = ctx.runtime.stores.conversations()
    deadline = ctx.write_deadline()
    inputs = input_items(body)
    outputs = [Item(o["id"], json_object(o)) for o in response["output"]]
    try:
        if keeping.conversation_id is not None:
            await store.conversations.append_items(
                keeping.owner, keeping.conversation_id, [*inputs, *outputs], deadline
            )
        if keeping.store is not None and not await _journaled(keeping, store, response, outputs, deadline):
            await store.responses.create(keeping.owner, json_object(response), inputs, deadline, outputs)
            if events:
                stored = [stored_event(e) for e in events]
                await response_log(store, keeping.owner, response["id"]).append(stored, deadline)
    except StoreUnavailable as error:
        logger.warning(f"response {response['id']} not stored: {error}")
        return {**response, "store": False}
    return response


async def _journaled(
    keeping: Keeping,
    store: ConversationStore,
    response: FinishedResponse,
    outputs: list[Item],
    deadline: Deadline,
) -> bool:
    """The finished response in the record its journal made (its input items are there already); False when the
    journal made none. A record that was made but is gone now was deleted while its turn ran: deletion wins, and
    nothing is stored (it is not made again)."""
    if keeping.journal is None or keeping.owner is None:
        return False
    await keeping.journal.began.wait()
    if not keeping.journal.made:
        return False
    if not await store.responses.update(
        keeping.owner, response["id"], json_object(response), outputs, deadline
    ):
        logger.info(f"response {response['id']} was deleted while its turn ran: its end is not stored")
    return True


def input_items(body: ResponsesBody) -> list[Item]:
    """This request's input as stored items (each with a new id): what ``input_items`` lists for it."""
    items: list[InputItem] = (
        [InputMessage(role="user", content=body.input)]
        if isinstance(body.input, str)
        else [i for i in body.input if not isinstance(i, ReasoningItem)]
    )
    return stored_items(items)


# --- the endpoints --------------------------------------------------------------------------------
async def retrieve_response(request: Request) -> Response:
    """The response as it stands (``in_progress`` while its turn runs, wherever it runs); with ``stream=true``, its
    events after ``starting_after``, followed live until its terminal event (``api.runs.follow``)."""
    store, owner, deadline = store_context(request)
    response_id = checked_id(str(request.path_params["response_id"]))
    query = Query(request, known=RETRIEVE_PARAMETERS)
    stream, after = query.boolean("stream", default=False), starting_after(query)
    _refuse_retrieve_options(query)
    longest = longest_turn(RequestContext.of(request).settings)
    if stream:
        with store_errors():
            events = await response_log(store, owner, response_id).after(after, deadline)
        if events is None:
            raise not_found("response", response_id)
        ctx = RequestContext.of(request)
        followed = follow_response(store, owner, response_id, events, after, ctx.deadline, longest)
        return StreamingResponse(
            replay(followed), media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )
    with store_errors():
        stored = await settled(store, owner, response_id, longest, deadline)
    if stored is None:
        raise not_found("response", response_id)
    return JSONBody(stored.body)


RETRIEVE_PARAMETERS = ("stream", "starting_after", "include", "include_obfuscation")
"""``responses.retrieve``'s query parameters. ``starting_after`` is used only with ``stream=true``, and checked
either way: a bad value is a 400 whatever else the request says."""
ALWAYS_INCLUDED = frozenset({"code_interpreter_call.outputs"})
"""``include`` values a stored response always has (sandbox runs' outputs), as ``POST /v1/responses`` takes them."""


def _refuse_retrieve_options(query: Query) -> None:
    """``include`` beyond what is always included, and ``include_obfuscation=true``: this server cannot honour
    them (a 400 naming each, as ``POST /v1/responses`` refuses them)."""
    for value in query.values("include"):
        if value and value not in ALWAYS_INCLUDED:  # an empty one asks for nothing, as on the item lists
            raise invalid("include", "only 'code_interpreter_call.outputs' can be included (always included)")
    if query.boolean("include_obfuscation", default=False):
        raise invalid("include_obfuscation", "stream obfuscation is not offered; send false or leave it out")


async def delete_response(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    response_id = checked_id(str(request.path_params["response_id"]))
    with store_errors():
        deleted = await store.responses.delete(owner, response_id, deadline)
    if not deleted:
        raise not_found("response", response_id)
    return JSONBody({"id": response_id, "object": "response.deleted", "deleted": True})


async def list_input_items(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    response_id = checked_id(str(request.path_params["response_id"]))
    query = page_query(request)
    with store_errors():
        try:
            page = await store.responses.list_items(owner, response_id, "input", query, deadline)
        except CursorNotFound:
            raise RequestError(
                400, "invalid_request", f"after: no item {query.after!r} in this response", param="after"
            ) from None
    if page is None:
        raise not_found("response", response_id)
    return JSONBody(page.as_object())


# --- shared steps ---------------------------------------------------------------------------------
async def _chain(
    store: ConversationStore, owner: str, response_id: str, deadline: Deadline
) -> list[InputItem]:
    """Every earlier response's input and output items, oldest first, following ``previous_response_id`` back."""
    turns: list[list[JSONObject]] = []
    current: str | None = response_id
    while current is not None:
        if len(turns) >= MAX_CHAIN:
            raise RequestError(
                400,
                "invalid_request",
                f"previous_response_id: the chain is longer than {MAX_CHAIN} responses; start a conversation",
                param="previous_response_id",
            )
        stored = await store.responses.get(owner, current, deadline)
        if stored is None:  # OpenAI's code for it, on HTTP and in WebSocket mode alike
            raise RequestError(
                404,
                "previous_response_not_found",
                f"Previous response with id '{current}' not found.",
                param="previous_response_id",
            )
        read = partial(store.responses.list_items, owner, current, "input", deadline=deadline)
        inputs = await all_items(read, PageQuery("asc", HISTORY_PAGE))
        output = stored.body.get("output")
        outputs = [o for o in output if isinstance(o, dict)] if isinstance(output, list) else []
        turns.append([*(inputs or []), *outputs])
        previous = stored.body.get("previous_response_id")
        current = previous if isinstance(previous, str) else None
    return as_input_items([item for turn in reversed(turns) for item in turn])
