"""Posting a turn's events to an API Gateway WebSocket connection (``api/websocket/apigw_post.py`` and
``apigw_frames.py``): against moto's Management API, which keeps what each ``PostToConnection`` sent."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatloop.api.websocket import apigw_frames, apigw_post
from chatloop.api.websocket.apigw_frames import FRAME_BYTES, MESSAGE_BYTES, coalesced, encoded, fitted
from chatloop.api.websocket.apigw_post import ConnectionPoster, management_client
from chatloop.deadline import Deadline
from tests.support.aws import FAKE_CREDENTIALS
from tests.support.connections import CONNECTION, ENDPOINT, hold_posts, make_gone, posted


@pytest.fixture
def moto(monkeypatch):
    from moto import mock_aws

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setattr(apigw_post, "_CLIENTS", {})  # a client per test: the hooks a test adds stay its own
    with mock_aws():
        yield


def delta(text: str, seq: int, item: str = "msg_1", content_index: int = 0) -> dict:
    return {
        "type": "response.output_text.delta",
        "sequence_number": seq,
        "item_id": item,
        "output_index": 0,
        "content_index": content_index,
        "delta": text,
    }


def run_turn(events: list[dict], *, coalesce: bool = True, held: int = 1):
    """Sends ``events`` to a poster as a turn would: the first ``held`` of them while the first post is held in
    flight (so the rest queue behind it), then releases it."""
    client = management_client(ENDPOINT)
    gate = hold_posts(client)
    poster = ConnectionPoster(client, CONNECTION, Deadline.after(30), coalesce=coalesce)

    async def turn() -> None:
        for n, event in enumerate(events):
            await poster(event)
            if n == held - 1:
                await asyncio.sleep(0.05)  # the first post is in flight, held
        gate.set()
        await poster.drain()

    asyncio.run(turn())
    return poster


def test_each_event_is_posted_in_order_and_deltas_that_queue_behind_a_post_go_as_one(moto):
    events = [delta(f"w{n} ", n) for n in range(40)] + [{"type": "response.completed", "sequence_number": 40}]
    poster = run_turn(events)
    got = posted(CONNECTION)
    assert poster.posts == len(got) == 3  # the first delta, the 39 that queued behind it, the completion
    assert "".join(e["delta"] for e in got if e["type"].endswith(".delta")) == "".join(
        e["delta"] for e in events[:-1]
    )
    assert [e["sequence_number"] for e in got] == [0, 39, 40]  # increasing: the joined delta's is its last's


def test_without_coalescing_every_event_is_one_post(moto):
    events = [delta(f"w{n} ", n) for n in range(40)]
    poster = run_turn(events, coalesce=False)
    assert poster.posts == len(posted(CONNECTION)) == 40


def test_deltas_of_another_part_or_with_an_event_between_are_never_joined():
    events = [
        delta("a", 0),
        delta("b", 1, content_index=1),
        {"type": "response.output_text.done", "sequence_number": 2},
        delta("c", 3, content_index=1),
        delta("d", 4, content_index=1),
    ]
    assert [e.get("delta") for e in coalesced(events)] == ["a", "b", None, "cd"]


def test_a_joined_delta_stays_within_one_frame():
    events = [delta("x" * 1000, n) for n in range(100)]
    joined = coalesced(events)
    assert all(len(encoded(e)) <= FRAME_BYTES for e in joined)
    assert "".join(e["delta"] for e in joined) == "x" * 100_000
    assert len(joined) == 4


def test_a_delta_over_a_frame_is_split_and_an_event_over_a_message_is_trimmed_and_flagged(moto):
    big_text = "é" * 100_000 + '"\\\n' * 1000  # 2-byte characters and escapes: bytes, not characters, count
    done = {
        "type": "response.completed",
        "sequence_number": 2,
        "response": {"id": "resp_1", "output": [{"content": [{"text": big_text}]}], "status": "completed"},
    }
    poster = run_turn([delta(big_text, 1), done])
    got = posted(CONNECTION)
    assert poster.posts == len(got)
    deltas = [e for e in got if e["type"].endswith(".delta")]
    assert len(deltas) > 1 and "".join(e["delta"] for e in deltas) == big_text
    assert all(len(encoded(e)) <= FRAME_BYTES for e in deltas)
    (last,) = [e for e in got if e["type"] == "response.completed"]
    assert last["chatloop_trimmed"] is True and last["response"]["status"] == "completed"
    assert len(encoded(last)) <= MESSAGE_BYTES and last["response"]["output"][0]["content"][0][
        "text"
    ].endswith("…")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=3000), min_size=1, max_size=30), st.integers(min_value=200, max_value=4000))
def test_fitting_never_loses_reorders_or_oversizes_a_delta(texts, limit):
    events = [delta(t, n) for n, t in enumerate(texts)]
    joined = coalesced(events, limit)
    parts = [p for e in joined for p in apigw_frames.split_delta(e, limit)]
    assert "".join(p["delta"] for p in parts) == "".join(texts)
    assert all(len(encoded(p)) <= limit or len(p["delta"]) == 1 for p in parts)
    sent = fitted(joined)
    assert "".join(str(e["delta"]) for e, _ in sent) == "".join(texts)
    assert all(len(data) <= FRAME_BYTES and data == encoded(e) for e, data in sent)


def test_a_gone_connection_stops_posting_and_the_turn_still_ends(moto):
    events = [delta(f"w{n} ", n) for n in range(10)] + [{"type": "response.completed", "sequence_number": 10}]
    client = management_client(ENDPOINT)
    poster = ConnectionPoster(client, CONNECTION, Deadline.after(30), coalesce=False)

    async def turn() -> None:
        for n, event in enumerate(events):
            if n == 3:
                await poster.drain()
                refused = make_gone(client, CONNECTION)
            await poster(event)
        await poster.drain()
        assert refused == [CONNECTION]  # one post refused, none tried after it

    asyncio.run(turn())
    assert poster.stopped == "gone" and poster.posts == 3 == len(posted(CONNECTION))
    assert poster.events == 11 and poster.dropped == 8


def test_posting_stops_at_the_deadline(moto):
    client = management_client(ENDPOINT)
    poster = ConnectionPoster(client, CONNECTION, Deadline.after(0))

    async def turn() -> None:
        await poster({"type": "response.created", "sequence_number": 0})
        await poster.drain()
        await poster({"type": "response.completed", "sequence_number": 1})

    asyncio.run(turn())
    assert posted(CONNECTION) == [] and poster.stopped == "deadline" and poster.dropped == 2


def test_the_client_retries_nothing_and_is_made_once_per_endpoint(moto):
    client = management_client(ENDPOINT)
    assert management_client(ENDPOINT) is client
    assert client.meta.config.retries["total_max_attempts"] == 1
    assert client.meta.region_name == "us-east-1"
    assert json.loads(json.dumps(client.meta.endpoint_url)) == ENDPOINT


def test_an_event_too_large_with_no_text_to_trim_stops_posting_instead_of_closing_the_socket(moto):
    numbers = {"type": "response.completed", "sequence_number": 1, "response": {"usage": list(range(40_000))}}
    client = management_client(ENDPOINT)
    poster = ConnectionPoster(client, CONNECTION, Deadline.after(30))

    async def turn() -> None:
        await poster({"type": "response.created", "sequence_number": 0})
        await poster.drain()
        await poster(numbers)
        await poster.drain()

    asyncio.run(turn())
    assert [e["type"] for e in posted(CONNECTION)] == ["response.created"]
    assert poster.stopped == "too_large" and poster.dropped == 1
