"""A 1 MB image kept in a stored response and a conversation, on both backends (SQLite, DynamoDB through moto): the
item as the Responses API stores it (``api.items.stored``), more than DynamoDB's 400 KB item limit, read back byte for
byte and read back as the input item it was (so a continuation sends the same image)."""

from __future__ import annotations

import json

from chatloop.api.items.inputs import InputImage, InputMessage
from chatloop.api.items.stored import as_input_items, stored_items
from chatloop.store import PageQuery, new_id
from chatloop.store.dynamodb import PART_BYTES
from tests.support.images import data_url, padded_png
from tests.support.store import soon

URL = data_url(padded_png(1_000_000))


def image_message() -> InputMessage:
    return InputMessage.model_validate(
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is on this receipt?"},
                {"type": "input_image", "image_url": URL, "detail": "high"},
            ],
        }
    )


async def test_a_stored_response_keeps_a_1_mb_image(backends):
    store = backends.store()
    (item,) = stored_items([image_message()])
    rid = new_id("resp")
    await store.responses.create("alice", {"id": rid, "object": "response", "output": []}, [item], soon())
    page = await store.responses.list_items("alice", rid, "input", PageQuery(order="asc"), soon())
    (kept,) = page.data
    assert kept.body == item.body and kept.body["content"][1]["image_url"] == URL
    (again,) = as_input_items([kept.body])
    assert isinstance(again, InputMessage) and again.images() == [
        InputImage(type="input_image", image_url=URL, detail="high")
    ]
    if backends.kind == "dynamodb":  # past the 400 KB item limit: it went in parts
        assert len(json.dumps(item.body)) > 3 * PART_BYTES


async def test_a_conversation_keeps_a_1_mb_image(backends):
    store = backends.store()
    (item,) = stored_items([image_message()])
    cid = (await store.conversations.create("alice", {}, [], soon())).id
    assert await store.conversations.append_items("alice", cid, [item], soon())
    assert await store.conversations.get_item("alice", cid, item.id, soon()) == item
    page = await store.conversations.list_items("alice", cid, PageQuery(order="asc"), soon())
    assert [i.body for i in page.data] == [item.body]
