"""A stored turn's run, from the API's side: recorded when it starts (off the turn's path: the first token never
waits for it), watched for a cancel request while it runs, and moved to its final status when it ends.

Usage (``api.chat.threads``, ``api.openai.responses.journaled``, ``api.openai.responses.background``)::

    tracked = Tracked((owner, "conv_1"), Stop(), watch=watcher(store, owner, "conv_1", turn, begin=True),
                      end=ender(store, owner, "conv_1", turn, status_of_the_end))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from chatloop.api.runs.running import CANCEL_POLL_SECONDS, Stop
from chatloop.deadline import Deadline
from chatloop.observability import logger
from chatloop.store.model import StoreUnavailable
from chatloop.store.protocol import StateStore
from chatloop.store.runs import ACTIVE, RunStatus

STORE_CALL_SECONDS = 5.0
"""The longest one of these store calls may take (they run beside the turn, not inside its deadline)."""


def call_deadline() -> Deadline:
    return Deadline.after(STORE_CALL_SECONDS)


def watcher(
    store: StateStore, owner: str, key: str, turn: str, *, begin: bool
) -> Callable[[Stop], Coroutine[Any, Any, None]]:
    """Reads the run every ``CANCEL_POLL_SECONDS`` and stops the turn when a client asked (``begin``: records the
    run first, ``in_progress``)."""

    async def watch(stop: Stop) -> None:
        runs = store.runs
        if begin:
            try:
                await runs.begin(owner, key, turn, "in_progress", call_deadline())
            except StoreUnavailable as error:
                logger.warning(
                    f"run {key}: not recorded, a stop from another copy will not reach it: {error}"
                )
                return
        while not stop.is_set:
            await asyncio.sleep(CANCEL_POLL_SECONDS)
            try:
                run = await runs.get(owner, key, call_deadline())
            except StoreUnavailable:
                continue  # read again next time
            if run is not None and run.turn == turn and run.cancel:
                logger.info(f"run {key}: a client asked to stop it (from another copy)")
                stop()
                return

    return watch


async def end_run(store: StateStore, owner: str, key: str, turn: str, status: RunStatus) -> None:
    """Move the run to its final ``status`` (if it is still this turn's and active)."""
    try:
        await store.runs.move(owner, key, turn, ACTIVE, status, call_deadline())
    except StoreUnavailable as error:
        logger.warning(f"run {key}: its end ({status}) was not recorded: {error}")
