"""``Responses``: stored responses (a ``response`` object with its ``resp_`` id), the items of their input and
output, and the events of their stream, kept for a replay, on whichever backend the ``Core`` holds.

Usage::

    responses = Responses(Core(SQLiteBackend(path), ttl_seconds=3600))
    await responses.create("alice", {"id": "resp_1", "status": "in_progress"}, input_items, deadline)
    await responses.append_events("alice", "resp_1", [StoredEvent(0, {...})], deadline)
    await responses.events_after("alice", "resp_1", -1, deadline)                  # every event, in order
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.store.core import Core, owner_key
from chatloop.store.model import Item, ListName, Page, PageQuery, StoredEvent, StoredResponse


class Responses:
    """The ``ResponseRecords`` of the store (``store.protocol``): every method scoped to ``owner``."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def create(
        self,
        owner: str,
        body: JSONObject,
        input_items: Sequence[Item],
        deadline: Deadline,
        output_items: Sequence[Item] = (),
    ) -> StoredResponse:
        """Store ``body`` (a ``response`` object with its ``resp_`` id), the items of its input and, for a finished
        response, its output items: one write."""
        response_id = str(body["id"])
        if not response_id.startswith("resp_"):
            raise ValueError("a stored response's id starts with resp_")
        core = self.core
        record = core.new_record("response", body)
        lists: dict[ListName, Sequence[Item]] = {"input": list(input_items), "output": list(output_items)}
        await core.call(deadline, core.backend.create, owner_key(owner), response_id, record, lists)
        return StoredResponse(response_id, record.created_at, body, record.expires_at)

    async def update(
        self,
        owner: str,
        response_id: str,
        body: JSONObject,
        output_items: Sequence[Item],
        deadline: Deadline,
    ) -> bool:
        """Replace the stored ``response`` object (it completed, say) and add its output items."""
        core, key = self.core, owner_key(owner)
        if await core.read(owner, response_id, "response", deadline) is None:
            return False
        if output_items and not await core.call(
            deadline, core.backend.append, key, response_id, "output", list(output_items), core.now()
        ):
            return False
        return await core.call(deadline, core.backend.replace_body, key, response_id, body, core.now())

    async def get(self, owner: str, response_id: str, deadline: Deadline) -> StoredResponse | None:
        record = await self.core.read(owner, response_id, "response", deadline)
        if record is None:
            return None
        return StoredResponse(response_id, record.created_at, record.body, record.expires_at)

    async def delete(self, owner: str, response_id: str, deadline: Deadline) -> bool:
        core = self.core
        if await core.read(owner, response_id, "response", deadline) is None:
            return False
        return await core.call(deadline, core.backend.delete, owner_key(owner), response_id, core.now())

    async def list_items(
        self,
        owner: str,
        response_id: str,
        which: Literal["input", "output"],
        query: PageQuery,
        deadline: Deadline,
    ) -> Page | None:
        if not response_id.startswith("resp_"):
            return None
        return await self.core.page(owner, response_id, which, query, deadline)

    async def append_events(
        self, owner: str, response_id: str, events: Sequence[StoredEvent], deadline: Deadline
    ) -> bool:
        """Keep a streamed response's events at their sequence numbers (a replay reads them back in order)."""
        if not response_id.startswith("resp_"):
            return False
        return await self.core.put_events(owner, response_id, events, deadline)

    async def events_after(
        self, owner: str, response_id: str, after: int, deadline: Deadline
    ) -> list[StoredEvent] | None:
        """The stored events whose sequence number is above ``after`` (-1: all), in order. None: no such response."""
        if not response_id.startswith("resp_"):
            return None
        return await self.core.events_after(owner, response_id, after, deadline)
