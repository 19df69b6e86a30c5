"""The iteration engine: ``run_turn`` drives one user turn and yields events; it knows nothing of HTTP."""

from chatloop.engine.events import Event, EventType, StopReason
from chatloop.engine.loop import run_turn
from chatloop.engine.request import TurnRequest

__all__ = ["Event", "EventType", "StopReason", "TurnRequest", "run_turn"]
