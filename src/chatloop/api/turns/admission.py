"""A turn's admission as one transaction: the stages that take something before the turn runs (the approval answers
it claims, the compaction's summary call, the caller's budget reservation or a background turn's slot) run inside
one ``async with``, and whatever was taken is given back together when the block ends in a failure, a refusal or a
cancel. Before, each stage released the answers on its own error path (four of them): the copies drifted.

Usage (``api.turns.pipeline``, the one caller)::

    async with Admission(ctx) as admission:
        answers = await admission.claim(items, len(history))   # claimed: given back if anything below fails
        metered = await admission.budget(turn, model, registry)   # a 429 here gives the answers back
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from chatloop.api.turns.serve import admitted_to_queue, budgeted
from chatloop.observability import logger

if TYPE_CHECKING:
    from chatloop.api.http.context import RequestContext
    from chatloop.api.http.ratelimit_headers import AdmittedTurn
    from chatloop.api.items.inputs import InputItem
    from chatloop.api.turns.approvals import Answers
    from chatloop.config import MCPServerConfig
    from chatloop.engine import TurnRequest
    from chatloop.engine.approvals import ApprovalAnswer
    from chatloop.providers.base import ChatModel
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.base import ToolRegistry


class Admission:
    """What one turn's admission has taken so far, given back on the block's failure (nothing once it succeeded:
    the turn then owns it, and its events give the budget back as they end)."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self._answers: list[ApprovalAnswer] = []
        self._queued: AdmittedTurn | None = None

    async def __aenter__(self) -> Admission:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if error is None:
            return
        if self._queued is not None:  # not queued after all, or its worker not started: its slot given back
            await self._queued.finish()
        if self._answers:  # refused, failed or cancelled before anything ran: the answers may be sent again
            from chatloop.api.turns.approvals import give_back  # only a turn that claimed answers has them

            try:
                await give_back(self.ctx, self._answers)
            except Exception:  # the refusal the client gets is the first error, not the give-back's
                logger.exception("approval answers could not be given back after a refused turn")

    async def claim(
        self, items: Sequence[InputItem], start: int, servers: Sequence[MCPServerConfig] = ()
    ) -> Answers:
        """The approval stage: the new answers among ``items[start:]`` read and claimed (``approvals.answers_of``,
        a 400 or 401 now), each one used once, by this turn, and given back if the admission fails."""
        from chatloop.api.turns.approvals import answers_of  # every turn reads its answers; few have any

        answers = await answers_of(self.ctx, items, start, servers)
        self._answers.extend(answers.answers)
        return answers

    async def budget(self, turn: TurnRequest, model: FallbackChain, registry: ToolRegistry) -> ChatModel:
        """The budget stage: the turn's model metered by the caller's budget (a 429 or 503 now)."""
        return await budgeted(self.ctx, turn, model, registry)

    async def queue_slot(self, turn: TurnRequest, model: FallbackChain, registry: ToolRegistry) -> None:
        """The budget stage of a background turn, before anything is queued: its slot taken (a 429 or 503 now),
        given back if the queueing then fails."""
        self._queued = await admitted_to_queue(self.ctx, turn, model, registry)
