"""The iteration engine: ``run_turn`` drives one user turn and yields typed events; it knows nothing of HTTP."""

from chatloop.engine.events import Event, EventType
from chatloop.engine.limits import EngineLimits
from chatloop.engine.loop import run_turn
from chatloop.engine.request import TurnRequest
from chatloop.engine.summary import DecisionReason, StopReason, TurnSummary

__all__ = [
    "DecisionReason",
    "EngineLimits",
    "Event",
    "EventType",
    "StopReason",
    "TurnRequest",
    "TurnSummary",
    "run_turn",
]
