"""What a turn is given (``TurnSetup``, fixed) and what it has done so far (``TurnState``, changing).

The loop reads and changes the state; ``execute`` adds its tool messages to it. Tool use ends once, for one reason
(``ended_by``); the turn's stop reason is decided by one rule (``stop_reason``).

Usage::

    setup = TurnSetup.of(request, model, registry, Deadline.after(28), EngineLimits())
    state = TurnState(messages, ToolLedger())
    state.end_tool_use(DecisionReason.DEADLINE)
    state.stop_reason(withheld_by=None, otherwise=StopReason.STOP)    # StopReason.DEADLINE
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chatloop.deadline import Deadline
from chatloop.engine import prompts
from chatloop.engine.events import Delta
from chatloop.engine.guards import ToolLedger
from chatloop.engine.limits import EngineLimits
from chatloop.engine.messages import Message, tool_call_ids
from chatloop.engine.record import TurnRecord
from chatloop.engine.request import TurnRequest
from chatloop.engine.retold import Retold
from chatloop.engine.summary import DecisionReason, StopReason
from chatloop.providers.base import ChatModel
from chatloop.tools.base import ToolRegistry


@dataclass(frozen=True)
class TurnSetup:
    """What one turn is given, and what follows from it alone."""

    request: TurnRequest
    model: ChatModel
    tools: ToolRegistry
    deadline: Deadline
    limits: EngineLimits
    max_iterations: int
    """The request's, when lower than the limit."""
    builtin: list[str]
    """The server's own tools enabled for the turn (registered ones only)."""
    client_names: frozenset[str]
    """The client's own tools (/v1): a call to one ends the turn."""
    client_required: bool
    """The client's ``tool_choice`` requires the turn to end with a call to one of its tools."""

    @classmethod
    def of(
        cls,
        request: TurnRequest,
        model: ChatModel,
        tools: ToolRegistry,
        deadline: Deadline,
        limits: EngineLimits,
    ) -> TurnSetup:
        enabled = tools.names() if request.tool_names is None else request.tool_names
        return cls(
            request,
            model,
            tools,
            deadline,
            limits,
            max_iterations=min(request.max_iterations or limits.max_iterations, limits.max_iterations),
            builtin=[n for n in enabled if tools.get(n) is not None],
            client_names=frozenset(request.client_tool_names()),
            client_required=request.requires_client_tool(),
        )

    def first_state(self) -> TurnState:
        """The state a turn starts in: the client's conversation, with the tools' guidance when they give some."""
        messages = list(self.request.messages)
        guidance = self.tools.guidance(self.builtin) if self.limits.system_prompt_guidance else []
        if guidance:
            messages = prompts.with_guidance(messages, "\n\n".join(guidance))
        ledger = ToolLedger(
            caps=self.tools.caps(self.limits.tool_caps),
            max_runs=self.request.max_tool_calls,
            answered_once=self.tools.answered_once(self.builtin),
        )
        return TurnState(
            messages,
            ledger,
            required_client_tools=sorted(self.client_names) if self.client_required else None,
            call_ids=tool_call_ids(messages),
        )


@dataclass
class TurnState:
    messages: list[Message]
    """The conversation as the next model call gets it (the client's, then what the turn added)."""
    ledger: ToolLedger
    """Tool runs, results and budgets: what the guards decide from."""
    required_client_tools: list[str] | None = None
    """The client tools the turn must end with a call to (``tool_choice`` requires one), or None."""
    record: TurnRecord = field(default_factory=TurnRecord)
    iteration: int = 0
    """Model calls made so far."""
    reminders: int = 0
    nudges: int = 0
    ended_by: DecisionReason | None = None
    """Why tool use ended for the turn (the next calls are made without the server's tools); None while it goes on."""
    tripped: StopReason | None = None
    """The first guard that tripped. Not always the end of tool use: a budget used up withdraws one tool, and the
    others stay offered; it is still why the turn stops when the answer comes."""
    call_ids: set[str] = field(default_factory=set)
    """Every tool call id in the conversation (a reused one is renamed)."""
    shown: ShownText = field(default_factory=lambda: ShownText())

    @property
    def tools_ended(self) -> bool:
        return self.ended_by is not None

    def trip(self, guard: StopReason | None) -> None:
        """A guard tripped: the first one is the turn's stop reason."""
        self.tripped = self.tripped or guard

    def end_tool_use(self, reason: DecisionReason) -> None:
        """No more tools this turn: the next call is made without them, after a note saying why. Tool use ends once:
        when it has already ended, the first reason and its note stand (two notes would tell the model twice)."""
        if self.ended_by is not None:
            return
        self.ended_by = reason
        self.trip(reason.stop_reason)
        answered = sorted(self.ledger.answered_once & self.ledger.succeeded)
        note = prompts.final_answer_note(reason, self.required_client_tools, answered)
        self.messages.append({"role": "system", "content": note})

    def stop_reason(self, withheld_by: StopReason | None, otherwise: StopReason) -> StopReason:
        """Why the turn stops when it answers now: the first guard that tripped, else the guard that withheld the
        tools from the call that answered (the iteration cap, the deadline), else ``otherwise``."""
        return self.tripped or withheld_by or otherwise


@dataclass
class ShownText:
    """Every piece of text sent as a ``delta``: the answer's content is their concatenation, whatever happened in
    between; a model call's text is set off from the text before it by a seam (a blank line)."""

    pieces: list[str] = field(default_factory=list)
    new_segment: bool = True
    """The next text shown starts a new model call's text (a seam goes before it)."""
    call_shown: bool = False
    """Whether the current model call has shown any text."""
    reply: list[str] = field(default_factory=list)
    """Each model call's text (seams aside) since the reply began: since the turn started or tools last ran. A call
    made again for the same reply (a reminder, a nudge, the forced last call, the next model after a cut) is
    compared with it, so what was said is not said again (``engine.retold``)."""

    def start_call(self) -> None:
        self.new_segment, self.call_shown = True, False
        self.reply.append("")

    def new_reply(self) -> None:
        """Tools ran: the next call answers from their results, a new reply."""
        self.reply = []

    def said(self) -> list[str]:
        """The reply's text so far, one entry per model call that showed some."""
        return [text for text in self.reply if text]

    def unsaid(self, retold: Retold, text: str | None) -> str:
        """What of a call's visible ``text`` is not a repeat of what its reply already said (None: the call ended).
        A continuation follows what was said without a seam; text the call did not show again counts as shown."""
        out = retold.feed(text) if text is not None else retold.finish()
        if retold.dropped:
            self.call_shown = True
            if retold.continues:
                self.new_segment = False
        return out

    def show(self, text: str, iteration: int) -> list[Delta]:
        """``text`` as ``delta`` events, after a seam when it starts a new model call's text."""
        events = []
        if self.new_segment:
            self.new_segment = False
            seam = _seam("".join(self.pieces[-2:]))
            if seam:
                self.pieces.append(seam)
                events.append(Delta(seam, iteration, seam=True))
        self.pieces.append(text)
        self.call_shown = True
        if self.reply:
            self.reply[-1] += text
        else:
            self.reply.append(text)
        events.append(Delta(text, iteration))
        return events

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _seam(before: str) -> str:
    """What separates two model calls' texts: a blank line, less the line breaks ``before`` already ends with."""
    if not before or before.endswith("\n\n"):
        return ""
    return "\n" if before.endswith("\n") else "\n\n"
