"""Events of the model chain's failures and switches: ``FallbackMade`` (a chain switched models) and ``TurnError``
(a model, the whole chain or the turn failed), re-exported by ``chatloop.engine.events``.

Usage::

    from chatloop.engine.events import FallbackMade, TurnError
    TurnError("timeout", "the model sent nothing").data     # {'code': 'timeout', 'message': ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from chatloop.engine.event_base import EventType, Payload
from chatloop.jsontypes import JSONObject
from chatloop.providers.base import ModelFallback
from chatloop.providers.failures import AllModelsFailed, ModelError


@dataclass(frozen=True, eq=False)
class FallbackMade(Payload):
    """A chain switched models. ``partial_kept``: ``from_model`` had already shown text, and it stays part of the
    answer (the next model's text continues it). Also sent as ``discard_partial``, its deprecated name (it never
    meant the text was discarded), for one release."""

    type: ClassVar[EventType] = EventType.MODEL_FALLBACK
    from_model: str
    to_model: str | None
    reason: str
    retry_after: float | None = None
    partial_kept: bool = False
    message: str = ""

    @classmethod
    def of(cls, item: ModelFallback) -> FallbackMade:
        return cls(
            item.from_model, item.to_model, item.reason, item.retry_after, item.discard_partial, item.message
        )

    @cached_property
    def data(self) -> JSONObject:
        return {
            "from": self.from_model,
            "to": self.to_model,
            "reason": self.reason,
            "retry_after": self.retry_after,
            "partial_kept": self.partial_kept,
            "discard_partial": self.partial_kept,  # deprecated: the same flag under its old, misleading name
            "message": self.message,
        }


@dataclass(frozen=True, eq=False)
class FailedAttempt:
    model: str
    kind: str
    message: str


@dataclass(frozen=True, eq=False)
class TurnError(Payload):
    """Something failed: a model (``model``), the whole chain (``attempts``), or the turn itself (neither)."""

    type: ClassVar[EventType] = EventType.ERROR
    code: str
    message: str
    model: str | None = None
    attempts: tuple[FailedAttempt, ...] | None = None
    partial_kept: bool | None = None
    """Set when a model call ran out of time: whether it had shown text (which stays part of the answer). Also sent
    as ``discard_partial``, its deprecated name, for one release."""
    retry_after: float | None = None

    @classmethod
    def of(cls, exc: ModelError, partial_kept: bool | None = None) -> TurnError:
        """The error event of a model failure (every attempt, when the whole chain failed)."""
        if isinstance(exc, AllModelsFailed):
            attempts = tuple(FailedAttempt(a.model, a.kind, a.message) for a in exc.attempts)
            retry_after = None if exc.retry_after is None else round(exc.retry_after, 1)
            return cls(
                exc.kind,
                exc.message,
                attempts=attempts,
                partial_kept=partial_kept,
                retry_after=retry_after,
            )
        return cls(exc.kind, exc.message, model=exc.model, partial_kept=partial_kept)

    @cached_property
    def data(self) -> JSONObject:
        data: JSONObject = {"code": self.code, "message": self.message}
        if self.attempts is not None:
            data["attempts"] = [
                {"model": a.model, "kind": a.kind, "message": a.message} for a in self.attempts
            ]
        elif self.model is not None:
            data["model"] = self.model
        if self.partial_kept is not None:
            data["partial_kept"] = self.partial_kept
            data["discard_partial"] = self.partial_kept  # deprecated name, kept for one release
        if self.retry_after is not None:
            data["retry_after"] = self.retry_after
        return data
