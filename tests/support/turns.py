"""A turn driven through the engine's ``run_turn`` with a scripted model and a registry, its events collected, as
the engine's tests read them (tests/engine/test_seed_scenarios.py, tests/engine/test_turn_contract.py, tests/api/turns/test_said_once.py,
tests/engine/test_small_model_answers.py).

Usage::

    turn = await drive(ScriptedModel(script), ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "6*7?")
    assert turn.answer == "42" and turn.of(EventType.TOOL_CALL_RESULT)
"""

from __future__ import annotations

from dataclasses import dataclass

from chatloop.api.runtime import engine_limits
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.engine import EventType, TurnRequest, run_turn
from chatloop.engine.messages import normalize_conversation
from tests.support.models import ScriptedModel

COMPOUND = "calculate compound interest: $10,000 at 5% annually for 15 years"
COMPOUND_CODE = "const p = 10000, r = 0.05, n = 15; (p * Math.pow(1 + r, n)).toFixed(2)"


@dataclass
class Turn:
    """A driven turn: its events and the model that answered; ``of(kind)`` is the data of the events of a kind."""

    events: list
    model: ScriptedModel

    def of(self, kind):
        return [e.data for e in self.events if e.type is kind]

    @property
    def done(self):
        return self.of(EventType.DONE)[0]

    @property
    def answer(self):
        return self.done["message"]["content"]

    @property
    def streamed(self):
        return "".join(d["content"] for d in self.of(EventType.DELTA))


async def drive(model, registry, user=COMPOUND, settings=None, deadline=30.0, messages=None, **request):
    """Runs one turn of ``user`` (or ``messages``) to its end with engine limits from ``settings``; the turn must end
    with exactly one DONE event, its last."""
    msgs = normalize_conversation(messages or [{"role": "user", "content": user}])
    events = [
        e
        async for e in run_turn(
            TurnRequest(messages=msgs, **request),
            model,
            registry,
            Deadline.after(deadline),
            engine_limits(settings or Settings()),
        )
    ]
    assert [e.type for e in events].count(EventType.DONE) == 1 and events[-1].type is EventType.DONE
    return Turn(events, model)
