"""``Claims``: one-time uses (an answered approval, say), recorded so that a second use is told apart, across
processes: the backend's create is conditional, so of two claims at once one wins.

Usage::

    claims = Claims(Core(SQLiteBackend(path), ttl_seconds=3600))
    await claims.claim("alice", "apr_1", deadline)          # True: the first use
    await claims.claim("alice", "apr_1", deadline)          # False ever after (until the store's TTL)
    await claims.release("alice", "apr_1", deadline)        # its turn was refused: the next claim is the first again
"""

from __future__ import annotations

from chatloop.deadline import Deadline
from chatloop.store.core import Core, owner_key
from chatloop.store.model import StoreUnavailable


class Claims:
    """The ``ClaimRecords`` of the store (``store.protocol``): every method scoped to ``owner``."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def claim(self, owner: str, claim_id: str, deadline: Deadline) -> bool:
        """Record the one use of ``claim_id``: True the first time, False ever after (until the store's TTL)."""
        core = self.core
        record = core.new_record("claim", {})
        try:
            await core.call(deadline, core.backend.create, owner_key(owner), claim_id, record, {})
        except StoreUnavailable:
            if await core.read(owner, claim_id, "claim", deadline) is not None:
                return False  # it exists: this is a second use
            raise
        return True

    async def release(self, owner: str, claim_id: str, deadline: Deadline) -> None:
        """Give back a use ``claim`` recorded for something that then did not happen (its turn refused before
        anything ran): the next ``claim`` of ``claim_id`` is the first again."""
        core = self.core
        if await core.read(owner, claim_id, "claim", deadline) is not None:
            await core.call(deadline, core.backend.delete, owner_key(owner), claim_id, core.now())
