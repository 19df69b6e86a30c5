"""Fitting a conversation to the context windows of the models that may take it, before any is called.

``fit`` is the decision, pure like ``policy.decide``: given each model's window and what the conversation needs of it
(``tokens.TokenEstimator``), the first model that holds it, else the largest window to trim it for (or a refusal,
when the client disabled trimming). The fallback chain asks it before each call, and the HTTP pre-check (through
``FallbackChain.can_hold``) before any; ``fitted`` carries the decision out.

When no model of the chain can hold a conversation, ``trim`` makes it fit the largest window: every system message,
the latest user message and the whole current turn stay; old tool results are cut to a head-and-tail excerpt first;
then whole older turns are dropped, oldest first, so no tool exchange is ever left half there.

Usage::

    fitting = fit([Window("groq:llama-3.1-8b-instant", 131072, needs["groq:..."]), ...], request.allow_trimming)
    request, report, needs = fitted(request, fitting, estimator, needs)
    trimmed = trim(messages, fits=lambda m: estimate(m) <= window)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from chatloop.jsontypes import JSONObject
from chatloop.providers.base import ContextFit, ModelRequest
from chatloop.providers.failures import ContextTooLong
from chatloop.providers.tokens import TokenEstimator

__all__ = ["EXCERPT_CHARS", "Fitting", "Trimmed", "Window", "fit", "fitted", "trim"]

EXCERPT_CHARS = 400
"""An old tool result longer than twice this keeps this much of its head and of its tail."""


# --- the decision: which model holds the conversation, or what it is trimmed to ------------------------
@dataclass(frozen=True)
class Window:
    """A model a conversation may be sent to, as fitting sees it."""

    model: str
    size: int | None
    """Its context window in tokens; None when the catalog does not know it (tried, never assumed too small)."""
    need: int
    """What the conversation needs of that window: the prompt as that model counts it, and the answer's reserve."""

    @property
    def holds(self) -> bool:
        return self.size is None or self.need <= self.size


@dataclass(frozen=True)
class Fitting:
    """``fit``'s decision, with every input it used (a logged decision, like ``policy.decide``'s)."""

    action: Literal["fits", "skip", "trim", "refuse"]
    """``fits``: the first model holds the conversation; ``skip``: models before the first that holds it are passed
    over; ``trim``: none holds it, so it is trimmed to fit the largest window; ``refuse``: none holds it and trimming
    is not allowed."""
    model: str
    """The model it is fitted to: the first that holds it, else the one with the largest window."""
    need: int
    window: int | None
    skipped: tuple[str, ...]
    """The models passed over for it, in order."""
    windows: tuple[Window, ...]
    allow_trimming: bool

    @property
    def holds(self) -> bool:
        """Whether some model holds the conversation as it is."""
        return self.action in ("fits", "skip")


def fit(windows: Sequence[Window], allow_trimming: bool = True) -> Fitting:
    """Which of ``windows`` (models in the order they are tried) the conversation is sent to, and whether it must be
    trimmed first. Pure: the chain asks it before each call, the HTTP pre-check before any.

    Usage::

        fit([Window("groq:small", 8192, 9000), Window("openai:large", 128000, 9100)])
        # Fitting(action="skip", model="openai:large", need=9100, window=128000, skipped=("groq:small",), ...)
    """
    if not windows:
        raise ValueError("no model to fit a conversation to")
    kept = tuple(windows)
    first = next((i for i, w in enumerate(kept) if w.holds), None)
    if first is not None:
        chosen, skipped = kept[first], tuple(w.model for w in kept[:first])
        action: Literal["fits", "skip", "trim", "refuse"] = "skip" if skipped else "fits"
    else:
        # Nothing holds it (so every window is known): the largest, the first of equals, gets the trimmed version.
        chosen = max(kept, key=lambda w: w.size or 0)
        skipped = tuple(w.model for w in kept if w.model != chosen.model)
        action = "trim" if allow_trimming else "refuse"
    return Fitting(action, chosen.model, chosen.need, chosen.size, skipped, kept, allow_trimming)


def fitted(
    request: ModelRequest, fitting: Fitting, estimator: TokenEstimator, needs: dict[str, int]
) -> tuple[ModelRequest, ContextFit, dict[str, int]]:
    """``request`` as ``fitting`` decided (trimmed to the chosen window when no model holds it, refused with
    ``ContextTooLong`` when trimming is not allowed), the ``ContextFit`` that reports it, and what the request sent
    needs of each model's window (``needs``: what ``request`` needs of each, as ``fitting`` was decided from). The
    model it was trimmed for is left out of those: it is tried whatever its estimate, and its own error may follow."""
    if fitting.holds:
        fit_item = ContextFit(
            fitting.action, fitting.need, fitting.window, fitting.model, list(fitting.skipped)
        )
        return request, fit_item, needs
    window = fitting.window or 0
    if fitting.action == "refuse":  # the client said no (truncation: disabled): refuse rather than trim
        refusal = ContextTooLong(
            f"the conversation needs about {fitting.need} tokens, more than the largest window in the chain "
            f"({window}); trimming is disabled for this request (truncation: disabled)",
            model=fitting.model,
        )
        refusal.fallback = False
        raise refusal
    trimmed = trim(request.messages, estimator.fits_in(request, fitting.model, window))
    request = replace(request, messages=trimmed.messages)
    needs = estimator.needs(request, list(needs))
    fit_item = ContextFit(
        "trim",
        needs[fitting.model],
        window,
        fitting.model,
        list(fitting.skipped),
        trimmed.dropped,
        trimmed.shortened,
    )
    needs.pop(fitting.model)
    return request, fit_item, needs


@dataclass(frozen=True)
class Trimmed:
    messages: list[JSONObject]
    dropped: int
    """Messages left out (whole older turns)."""
    shortened: int
    """Old tool results cut to an excerpt."""


def trim(messages: list[JSONObject], fits: Callable[[list[JSONObject]], bool]) -> Trimmed:
    """The longest version of ``messages`` that ``fits``, by the policy in the module docstring. When even the
    system messages and the current turn do not fit, that is what is returned: the model's own error follows."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=len(messages))
    older, current = messages[:last_user], messages[last_user:]
    if fits(messages):
        return Trimmed(messages, 0, 0)
    shortened = 0
    excerpted = []
    for message in older:
        content = message.get("content")
        if message["role"] == "tool" and isinstance(content, str) and len(content) > 2 * EXCERPT_CHARS:
            cut = len(content) - 2 * EXCERPT_CHARS
            note = f"\n[... {cut} characters of this old tool result cut to fit the context window ...]\n"
            message = {**message, "content": content[:EXCERPT_CHARS] + note + content[-EXCERPT_CHARS:]}
            shortened += 1
        excerpted.append(message)
    if fits(excerpted + current):
        return Trimmed(excerpted + current, 0, shortened)
    turns = _turns(excerpted)

    def without(count: int) -> list[JSONObject]:
        """The conversation with its ``count`` oldest turns dropped, their system messages kept in order."""
        systems = [m for turn in turns[:count] for m in turn if m["role"] == "system"]
        return systems + [m for turn in turns[count:] for m in turn] + current

    # Fewer turns always fit better: the fewest to drop is found by bisection, not one turn at a time.
    low, high = 1, len(turns)
    while low < high:
        middle = (low + high) // 2
        if fits(without(middle)):
            high = middle
        else:
            low = middle + 1
    kept = without(low)
    dropped = sum(1 for turn in turns[:low] for m in turn if m["role"] != "system")
    return Trimmed(kept, dropped, shortened)


def _turns(messages: list[JSONObject]) -> list[list[JSONObject]]:
    """Older messages as whole turns: each starts at a user message and holds everything up to the next one (the
    assistant's tool calls with every result), so dropping a turn never leaves an orphan."""
    turns: list[list[JSONObject]] = []
    for message in messages:
        if message["role"] == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns
