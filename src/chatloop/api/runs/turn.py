"""One running turn, whichever wire API started it: a ``/chat`` turn in a stored conversation, or a stored, streamed
``/v1/responses`` turn (a background one too). The doors differ only in what they hand it: the turn's key (what a
stop names: the conversation's id, or the response's), its journal, and how its end is told (its status, and what
follows it: a background response's webhook).

A ``RunningTurn``:

- journals: its ``journal`` (``api.runs.journal``) is written while it runs and closed when it ends;
- runs to its end whether or not its client stays (``run``: ``api.runs.running.run_to_the_end``);
- stops: ``stoppable`` ends its events where they are when a client asks, in this process (``stop_here``) or from
  any other (a cancel request on its run, read by ``api.runs.record.watcher`` while it runs, when it is ``recorded``);
- ends: the journal closed, its status settled (``status``), its run moved to that status (when ``recorded``), then
  ``ended`` (a background response's webhook).

Following it from any copy is ``api.runs.follow`` (both kinds, one ``follow``); asking it to stop from any copy is
``ask_to_stop`` (and ``cancel_queued`` ends a background response's run that no worker has claimed yet).

Usage (``api.chat.threads``, ``api.openai.responses.journaled``)::

    running = chat_turn(store, owner, "conv_1")            # or response_turn(store, owner, "resp_1", background=…)
    events = running.stoppable(events, ending=lambda: [TurnError("stopped", "…"), Done(…)])
    return running.run(events, finish=store_the_turn)      # the events, produced to the end by a task of their own
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from chatloop.api.runs.journal import CHAT_TERMINAL, Journal, chat_turn_log, response_log
from chatloop.api.runs.record import call_deadline, end_run, watcher
from chatloop.api.runs.running import Stop, Tracked, run_to_the_end, stop_here, stoppable
from chatloop.api.runs.webhooks import notify
from chatloop.deadline import Deadline
from chatloop.jsontypes import json_object
from chatloop.observability import logger
from chatloop.store.model import Item, StoreUnavailable, new_id
from chatloop.store.protocol import StateStore
from chatloop.store.runs import Run, RunStatus

if TYPE_CHECKING:
    from chatloop.config import Settings

T = TypeVar("T")


@dataclass
class RunningTurn:
    """A stored turn as it runs (see the module docstring)."""

    store: StateStore
    owner: str
    key: str
    """What a stop names: the conversation's id (``/chat``) or the response's."""
    turn: str
    """This turn's own id (a ``/chat`` turn's ``turn_…``; a response's is its id)."""
    journal: Journal | None
    recorded: bool
    """Its run is in the store (``/chat``, a background response): watched for a cancel request, moved at its end."""
    status: Callable[[Stop], Awaitable[RunStatus]]
    """How it ended, once its journal is closed (a stored response's record is settled here too)."""
    ended: Callable[[RunStatus], Awaitable[None]] | None = None
    """What follows its end (a background response's webhook)."""
    stop: Stop = field(default_factory=Stop)

    def stoppable(self, events: AsyncIterator[T], ending: Callable[[], list[T]]) -> AsyncIterator[T]:
        """``events`` until a client stops the turn; then ``ending()`` (its API's terminal events)."""
        return stoppable(events, self.stop, ending)

    def run(
        self, items: AsyncIterator[T], finish: Callable[[list[T]], Awaitable[None]] | None = None
    ) -> AsyncIterator[T]:
        """``items`` produced to the end by a task of their own (``finish`` stores the turn before the stream ends),
        the turn stoppable by its key meanwhile, and ended afterwards however it ends."""
        watch = watcher(self.store, self.owner, self.key, self.turn, begin=False) if self.recorded else None
        tracked = Tracked((self.owner, self.key), self.stop, watch=watch, end=self._end)
        return run_to_the_end(items, finish, tracked)

    async def _end(self, stop: Stop) -> None:
        if self.journal is not None:
            await self.journal.close()
        status = await self.status(stop)
        if self.recorded:
            await end_run(self.store, self.owner, self.key, self.turn, status)
        if self.ended is not None:
            await self.ended(status)


def chat_turn(store: StateStore, owner: str, conversation_id: str) -> RunningTurn:
    """A new ``/chat`` turn in a stored conversation: its run (``run_<conversation id>``, naming the turn) and its
    journal (``run_<turn id>``) are written beside the turn, with its first events, never before its first token; it
    ends ``cancelled`` when a client stopped it, else ``completed``."""
    turn = new_id("turn")
    runs = store.runs

    async def begin(first: dict[str, object]) -> None:  # the journal, then the run that names it
        await runs.open_journal(owner, turn, call_deadline())
        await runs.begin(owner, conversation_id, turn, "in_progress", call_deadline())

    log = chat_turn_log(runs, owner, turn)
    journal = Journal(log.append, turn, deadline=call_deadline, begin=begin, terminal=CHAT_TERMINAL)

    async def status(stop: Stop) -> RunStatus:
        return "cancelled" if stop.is_set else "completed"

    return RunningTurn(store, owner, conversation_id, turn, journal, recorded=True, status=status)


def response_turn(
    store: StateStore,
    owner: str,
    response_id: str,
    *,
    background: bool,
    inputs: Callable[[], list[Item]],
    deadline: Callable[[], Deadline],
    settings: Settings,
) -> RunningTurn:
    """A stored, streamed response's turn, journaled to the response's own events. Its record is made with its first
    events (``in_progress``, with ``inputs()``), except a background one's: made when it was queued, with
    ``response.queued`` as event 0, so its worker's events are numbered from 1. At its end the record takes the
    status its terminal event says (``settle_record``); a background one alone has a run (watched for a cancel,
    moved at its end) and a webhook."""

    async def begin(first: dict[str, object]) -> None:  # the record, in_progress, before the first events
        response = first.get("response")
        if isinstance(response, dict):
            await store.responses.create(owner, json_object(response), inputs(), deadline())

    log = response_log(store, owner, response_id)
    journal = Journal(log.append, response_id, deadline=deadline, begin=None if background else begin)
    if background:
        journal.offset = 1

    async def status(stop: Stop) -> RunStatus:
        return await settle_record(store, owner, response_id, journal, deadline)

    async def ended(status: RunStatus) -> None:
        if await _deleted(store, owner, response_id, deadline()):  # deletion wins: nothing to announce
            logger.info(f"response {response_id} was deleted while its turn ran: no webhook")
            return
        await notify(settings, response_id, status)

    return RunningTurn(
        store,
        owner,
        response_id,
        response_id,
        journal,
        recorded=background,
        status=status,
        ended=ended if background else None,
    )


async def _deleted(store: StateStore, owner: str, response_id: str, deadline: Deadline) -> bool:
    """Whether the response is gone (deleted while its turn ran); False when the store cannot tell (the webhook is
    then sent: a receiver told of a response it cannot fetch is better than one never told of an ending)."""
    try:
        return await store.responses.get(owner, response_id, deadline) is None
    except StoreUnavailable:
        return False


async def settle_record(
    store: StateStore, owner: str, response_id: str, journal: Journal, deadline: Callable[[], Deadline]
) -> RunStatus:
    """The record's final status: what the terminal event says; a failed or cancelled turn (which the door does not
    store) has its record take that response; no terminal event at all is a failure."""
    terminal = journal.terminal
    response = terminal.get("response") if terminal is not None else None
    status = response.get("status") if isinstance(response, dict) else None
    final: RunStatus = "failed"
    if status == "completed" or status == "incomplete" or status == "cancelled":
        final = status
    if terminal is None or terminal.get("type") == "response.failed":
        try:
            stored = await store.responses.get(owner, response_id, deadline())
            if stored is not None:
                body = {**stored.body, **(response if isinstance(response, dict) else {}), "status": final}
                await store.responses.update(owner, response_id, json_object(body), [], deadline())
        except StoreUnavailable as error:
            logger.warning(f"response {response_id}: its end ({final}) was not stored: {error}")
    return final


async def ask_to_stop(store: StateStore, owner: str, key: str, deadline: Deadline) -> Run | None:
    """Ask the turn running under ``key`` on whichever copy runs it to stop: a cancel request on its run (read by
    its watcher within ``running.CANCEL_POLL_SECONDS``); the run as it stands afterwards (None: no run)."""
    return await store.runs.cancel(owner, key, deadline)


async def cancel_queued(store: StateStore, owner: str, key: str, deadline: Deadline) -> bool:
    """End a run no worker has claimed yet, ``queued -> cancelled``, once: False when a worker claimed it first (it
    stops through its watcher), or it ended."""
    return await store.runs.move(owner, key, key, {"queued"}, "cancelled", deadline) is not None


__all__ = ["RunningTurn", "Stop", "ask_to_stop", "cancel_queued", "chat_turn", "response_turn", "stop_here"]
