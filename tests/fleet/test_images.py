"""Images kept across a fleet (issue 44): two copies of the app as Lambda runs them over one SQLite file
(tests/support/fleet.py). A stored response with a 1 MB image is read back, and continued, on the other copy; a
conversation given an image on one copy sends it to the model from the other; a /chat turn's image in a conversation
is kept as the Responses API shows it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fake_llm import FakeLLM, Reply, text
from tests.support.fleet import Fleet
from tests.support.images import data_url, padded_png, png

pytestmark = pytest.mark.slow

SCOUT = "meta-llama/llama-4-scout-17b-16e-instruct"
BIG = data_url(padded_png(1_000_000))
SMALL = data_url(png(320, 200))


def answer(body: dict[str, Any]) -> Reply:
    return text(body["model"], "I see it.", groq=True)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[tuple[Fleet, FakeLLM]]:
    with FakeLLM() as llm:
        llm.default = answer
        with Fleet(
            llm, tmp_path_factory.mktemp("fleet-images"), copies=2, MODEL_CHAIN=f"groq:{SCOUT}"
        ) as running:
            yield running, llm


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}


def last_sent(llm: FakeLLM) -> list[dict[str, Any]]:
    """The user messages of the model's last call (the system prompt left out)."""
    messages: list[dict[str, Any]] = llm.requests_for(SCOUT)[-1]["body"]["messages"]
    return [m for m in messages if m["role"] == "user"]


def test_a_stored_response_with_a_1_mb_image_is_read_and_continued_on_the_other_copy(fleet):
    running, llm = fleet
    content = [{"type": "input_text", "text": "Total?"}, {"type": "input_image", "image_url": BIG}]
    first, created = running.request(
        "POST", "/v1/responses", json={"model": "chatloop", "input": [{"role": "user", "content": content}]}
    )
    assert created.status_code == 200, created.text
    rid = created.json()["id"]
    _, listed = running.request("GET", f"/v1/responses/{rid}/input_items", avoid=first)
    (item,) = listed.json()["data"]
    assert item["content"][1] == {"type": "input_image", "image_url": BIG, "file_id": None, "detail": "auto"}
    _, continued = running.request(
        "POST",
        "/v1/responses",
        avoid=first,
        json={"model": "chatloop", "input": "And the tax?", "previous_response_id": rid, "store": False},
    )
    assert continued.status_code == 200, continued.text
    sent = last_sent(llm)
    assert sent[0]["content"][1] == image_part(BIG) and sent[-1] == {
        "role": "user",
        "content": "And the tax?",
    }


def test_a_conversations_images_reach_the_model_from_either_copy(fleet):
    running, llm = fleet
    given = [{"type": "input_text", "text": "My chart:"}, {"type": "input_image", "image_url": SMALL}]
    first, made = running.request(
        "POST", "/v1/conversations", json={"items": [{"role": "user", "content": given}]}
    )
    assert made.status_code == 200, made.text
    cid = made.json()["id"]
    _, answered = running.request(
        "POST",
        "/v1/responses",
        avoid=first,
        json={"model": "chatloop", "input": "Describe it.", "conversation": cid},
    )
    assert answered.status_code == 200, answered.text
    assert last_sent(llm)[0]["content"][1] == image_part(SMALL)
    chat = {
        "conversation": cid,
        "stream": False,
        "messages": [{"role": "user", "content": [image_part(SMALL)]}],
    }
    _, said = running.request("POST", "/chat", on=first, json=chat)
    assert said.status_code == 200, said.text
    _, items = running.request("GET", f"/v1/conversations/{cid}/items?order=asc", avoid=first)
    kept = [i for i in items.json()["data"] if i["type"] == "message" and i["role"] == "user"]
    assert [part["type"] for i in kept for part in i["content"]] == [
        "input_text",
        "input_image",
        "input_text",
        "input_image",
    ]
    assert kept[-1]["content"][-1]["image_url"] == SMALL
