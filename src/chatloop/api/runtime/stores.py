"""``Stores``: what the container keeps beyond a request: the state store (every aggregate: conversations,
responses, runs, claims; DynamoDB or the SQLite file, opened on first use: no I/O until a request needs it) and, when IDEMPOTENCY_TABLE_NAME is set, the idempotency
records. The budget ledger is the budgets' own (``Runtime.budgets``).

Usage::

    stores = Stores(Settings.from_env())
    store = stores.state()                         # store.conversations, .responses, .runs, .claims
    stores.idempotency                                     # None: IDEMPOTENCY_TABLE_NAME is not set
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from chatloop.config import Settings

if TYPE_CHECKING:
    from chatloop.store.idempotency import IdempotencyRecords
    from chatloop.store.protocol import StateStore


class Stores:
    """The stores of the container (``settings`` may be swapped by the runtime that holds it)."""

    def __init__(self, settings: Settings, state: StateStore | None = None):
        self.settings = settings
        self._state = state
        self._lock = threading.Lock()
        self.idempotency: IdempotencyRecords | None = None
        if settings.idempotency_table_name:
            from chatloop.store.idempotency import IdempotencyRecords

            self.idempotency = IdempotencyRecords(
                settings.idempotency_table_name, settings.idempotency_expiry_seconds
            )

    def state(self) -> StateStore:
        """The state store, opened on first use."""
        with self._lock:
            if self._state is None:
                from chatloop.store import open_store

                self._state = open_store(self.settings)
            return self._state
