"""Running turns in the store (issue 31), on both backends (SQLite in a temp file, DynamoDB through moto): a run's
status moves once however many copies try (compare-and-set), a cancel request is kept and never undoes an end, a
/chat turn's journal is its owner's; and the journal writer batches a stream's events, keeps their order and tries
a failed batch again."""

from __future__ import annotations

import asyncio
import time

import pytest

from chatloop.api.runs.journal import Journal
from chatloop.deadline import Deadline
from chatloop.store.model import StoredEvent, StoreUnavailable
from chatloop.store.runs import Run
from tests.support.store import soon


async def test_a_queued_run_is_claimed_by_exactly_one_of_many(backends):
    runs = backends.store().runs
    await runs.begin("alice", "resp_1", "resp_1", "queued", soon(), {"input": "hi"}, background=True)
    claims = await asyncio.gather(
        *(runs.move("alice", "resp_1", "resp_1", {"queued"}, "in_progress", soon(30)) for _ in range(8))
    )
    won = [c for c in claims if c is not None]
    assert len(won) == 1 and won[0].status == "in_progress" and won[0].background
    assert (await runs.get("alice", "resp_1", soon())).status == "in_progress"
    assert await runs.request_of("alice", "resp_1", soon()) == {"input": "hi"}
    assert await runs.get("bob", "resp_1", soon()) is None  # another caller's run does not exist for them


async def test_a_cancel_request_is_kept_and_never_undoes_an_end(backends):
    runs = backends.store().runs
    await runs.begin("alice", "conv_1", "turn_a", "in_progress", soon())
    asked = await runs.cancel("alice", "conv_1", soon())
    assert asked is not None and asked.cancel and asked.active
    again = await runs.cancel("alice", "conv_1", soon())
    assert again is not None and again.cancel and again.turn == "turn_a"  # the same as the first
    ended = await runs.move("alice", "conv_1", "turn_a", {"in_progress"}, "cancelled", soon())
    assert ended is not None and ended.status == "cancelled"
    late = await runs.cancel("alice", "conv_1", soon())
    assert late is not None and late.status == "cancelled"  # ended: left as it is
    # The conversation's next turn replaces the run; the old turn can no longer move it.
    await runs.begin("alice", "conv_1", "turn_b", "in_progress", soon())
    assert await runs.move("alice", "conv_1", "turn_a", {"in_progress"}, "completed", soon()) is None
    now = await runs.get("alice", "conv_1", soon())
    assert now is not None and now.turn == "turn_b" and not now.cancel and now.active


async def test_a_turns_journal_is_read_in_order_and_only_by_its_owner(backends):
    runs = backends.store().runs
    await runs.open_journal("alice", "turn_x", soon())
    events = [
        StoredEvent(n, {"type": "delta", "sequence_number": n, "data": {"content": f"w{n}"}})
        for n in range(5)
    ]
    assert await runs.append_events("alice", "turn_x", events[2:], soon())
    assert await runs.append_events("alice", "turn_x", events[:2], soon())
    read = await runs.events_after("alice", "turn_x", 1, soon())
    assert [e.sequence_number for e in read or []] == [2, 3, 4]
    assert await runs.events_after("bob", "turn_x", -1, soon()) is None


def test_a_run_is_stale_only_while_active_and_unwritten_for_longer_than_a_turn_runs():
    now = time.time()
    assert Run("k", "t", "in_progress", False, now - 100).stale(60, now)
    assert not Run("k", "t", "in_progress", False, now - 10).stale(60, now)
    assert not Run("k", "t", "completed", False, now - 100).stale(60, now)
    assert Run("k", "t", "queued", False, now - 100).stale(60, now)


# --- the journal writer ---------------------------------------------------------------------------------------
class Recording:
    def __init__(self, failures: int = 0) -> None:
        self.batches: list[list[int]] = []
        self.failures = failures

    async def __call__(self, batch: list[StoredEvent], deadline: Deadline) -> object:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("down for a moment")
        self.batches.append([e.sequence_number for e in batch])
        return True


def event(n: int, kind: str = "response.output_text.delta") -> dict[str, object]:
    return {"type": kind, "sequence_number": n, "delta": f"w{n}"}


async def test_the_journal_writes_a_burst_in_few_batches_in_order():
    writes = Recording()
    journal = Journal(writes, "resp_1", deadline=soon, flush_events=16, flush_seconds=5.0)
    for n in range(40):
        journal.add(event(n))
    journal.add(event(40, "response.completed"))  # the terminal event is written at once, not after 5 s
    await journal.close()
    assert [n for batch in writes.batches for n in batch] == list(range(41))
    assert len(writes.batches) <= 4  # 41 events in batches of up to 16, not 41 writes
    assert journal.terminal is not None and journal.terminal["type"] == "response.completed"


async def test_the_journal_tries_a_failed_batch_again_and_shifts_numbers():
    writes = Recording(failures=1)
    begun: list[dict[str, object]] = []

    async def begin(first: dict[str, object]) -> None:
        begun.append(first)

    journal = Journal(writes, "resp_1", deadline=soon, begin=begin, offset=1, flush_seconds=0.01)
    journal.add(event(0, "response.created"))
    await asyncio.sleep(0.05)  # the first write fails
    journal.add(event(1))
    journal.add(event(2, "response.completed"))
    await journal.close()
    assert begun[0]["sequence_number"] == 1  # the record was made from the first event, numbered after queued
    assert [n for batch in writes.batches for n in batch] == [1, 2, 3]


@pytest.mark.parametrize("count", [0, 1])
async def test_closing_a_journal_with_nothing_or_one_event_ends_its_writer(count):
    writes = Recording()
    journal = Journal(writes, "resp_1", deadline=soon)
    for n in range(count):
        journal.add(event(n))
    await asyncio.wait_for(journal.close(), 10)
    assert [n for batch in writes.batches for n in batch] == list(range(count))
