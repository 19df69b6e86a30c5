"""``FallbackChain``: a ChatModel made of ChatModels, tried in order.

Per failure class: rate limited -> next model now, this one cools down until its reset (a short wait is
slept out only when no other model is left and it fits the deadline); too large / context too long -> next
model, preferring a larger context window; model gone -> next model, disabled for the container's life;
tool-use failed -> recover the call from ``failed_generation`` or retry once with a corrective note, then
next; auth -> skip every model of that provider; transient -> next. A bad request is not retried elsewhere.
Every switch is a ``ModelFallback`` item (the engine turns it into an event, a log line and a metric).

Health (cooldowns, disabled models) lives as long as the container; stickiness lives for one turn:
``chain.for_turn()`` returns a chain that keeps using the model that last worked.

Usage::

    chain = FallbackChain([groq_model, openai_model])
    turn_model = chain.for_turn(start_at="openai:gpt-4.1-mini")
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from chatloop.providers.base import (
    ChatModel,
    ContextFit,
    ModelFallback,
    ModelRequest,
    ModelResponse,
    StreamItem,
    TextDelta,
)
from chatloop.providers.catalog import Catalog
from chatloop.providers.context import ANSWER_RESERVE_TOKENS, TokenEstimator, trim
from chatloop.providers.errors import (
    AllModelsFailed,
    AuthFailed,
    BadRequest,
    ContextTooLong,
    ModelError,
    ModelGone,
    RateLimited,
    RequestTooLarge,
    ToolUseFailed,
    Transient,
)
from chatloop.providers.textcalls import find_text_calls, tool_keys

DEFAULT_RATE_LIMIT_COOLDOWN = 20.0
"""Cooldown after a 429 that says nothing about when to come back."""
TRANSIENT_COOLDOWN = 5.0
AUTH_COOLDOWN = 60.0
TOOL_USE_NOTE = (
    "Your previous tool call could not be parsed ({detail}). Call tools only with the official function-calling "
    "format and valid JSON arguments that match the schema, or answer in plain text."
)


@dataclass
class ChainHealth:
    """What the chain has learned about its models; shared by every turn in the container."""

    cooldown_until: dict[str, float] = field(default_factory=dict)
    disabled: dict[str, str] = field(default_factory=dict)
    rate_limited: set[str] = field(default_factory=set)
    """Models whose current cooldown comes from a rate limit (not a transient or auth failure)."""
    estimator: TokenEstimator = field(default_factory=TokenEstimator)
    """Characters per token as each model has reported it: the context check's calibration."""
    clock: Callable[[], float] = time.monotonic

    def cooling(self, name: str) -> float:
        """Seconds until ``name`` may be called again (0 when it may be called now)."""
        return max(0.0, self.cooldown_until.get(name, 0.0) - self.clock())

    def cool(self, name: str, seconds: float, rate_limit: bool = False) -> None:
        self.cooldown_until[name] = max(self.cooldown_until.get(name, 0.0), self.clock() + seconds)
        if rate_limit:
            self.rate_limited.add(name)
        else:
            self.rate_limited.discard(name)


class FallbackChain:
    def __init__(
        self,
        models: list[ChatModel],
        *,
        catalog: Catalog | None = None,
        health: ChainHealth | None = None,
        max_wait: float = 2.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        if not models:
            raise ValueError("a FallbackChain needs at least one model")
        self.models = models
        self.catalog = catalog or Catalog.load()
        self.health = health or ChainHealth()
        self.max_wait = max_wait
        self._sleep = sleep
        self._sticky: ChatModel | None = None
        self._failed_providers: set[str] = set()
        self._needs: dict[str, int] = {}
        """Per model, the tokens the current request needs of its window (set by ``stream``)."""

    @property
    def name(self) -> str:
        return (self._sticky or self.models[0]).name

    def entries(self) -> list[str]:
        return [m.name for m in self.models]

    def for_turn(self, start_at: str | None = None, extra: ChatModel | None = None) -> FallbackChain:
        """A chain for one turn: same models and health, its own stickiness. ``start_at`` (a chain entry) is
        tried first; ``extra`` (a catalog model outside the chain) is put in front."""
        models = list(self.models)
        if extra is not None:
            models = [extra, *[m for m in models if m.name != extra.name]]
        elif start_at:
            names = [m.name for m in models]
            if start_at in names:
                i = names.index(start_at)
                models = models[i:] + models[:i]
        return FallbackChain(
            models, catalog=self.catalog, health=self.health, max_wait=self.max_wait, sleep=self._sleep
        )

    # --- the ChatModel ------------------------------------------------------------------------
    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        request, fit, self._needs = self._fit(request)
        yield fit
        failures: list[ModelError] = []
        skipped: list[str] = []
        min_context = 0
        order = self._order()
        i = 0
        while i < len(order):
            model = order[i]
            i += 1
            why_not = self._unusable(model, request, min_context)
            if why_not:
                skipped.append(f"{model.name}: {why_not}")
                continue
            attempt, retried = request, False
            error: ModelError
            while True:
                streamed = False
                try:
                    async for item in model.stream(attempt):
                        if isinstance(item, TextDelta):
                            streamed = True
                        elif isinstance(item, ModelResponse) and item.usage is not None:
                            self.health.estimator.observe(model.name, attempt, item.usage.prompt_tokens)
                        yield item
                    self._sticky = model
                    return
                except ToolUseFailed as exc:
                    found = find_text_calls(
                        exc.failed_generation or "", tool_keys(request.tools or []), offered_only=True
                    )
                    if found:
                        self._sticky = model
                        yield ModelResponse(
                            model=model.name, tool_calls=found.calls, finish_reason="tool_calls"
                        )
                        return
                    if not retried and request.deadline.remaining() > 1.0:
                        retried = True
                        note = TOOL_USE_NOTE.format(detail=exc.message[:200])
                        attempt = replace(
                            request, messages=[*request.messages, {"role": "system", "content": note}]
                        )
                        yield ModelFallback(
                            model.name,
                            model.name,
                            exc.kind,
                            discard_partial=streamed,
                            message="retrying once with a corrective note",
                        )
                        continue
                    error = exc
                except ModelError as exc:
                    if not exc.fallback and not self._guessed(model, request, exc):
                        raise
                    error = exc
                break
            failures.append(error)
            min_context = self._learn(model, error, request, min_context)
            if isinstance(error, ContextTooLong):
                # Larger known windows first; unknown ones after them, still tried.
                order = order[:i] + sorted(
                    order[i:], key=lambda m: -(self.catalog.get(m.name).context_window or 0)
                )
            next_model = self._next_usable(order[i:], request, min_context)
            yield ModelFallback(
                model.name,
                next_model.name if next_model else None,
                error.kind,
                retry_after=error.retry_after,
                discard_partial=streamed,
                message=error.message,
            )
        # Nothing left. A short rate-limit wait that fits the deadline is worth sleeping out once.
        waited = await self._wait_for_cooldown(request, min_context)
        if waited is not None:
            try:
                async for item in waited.stream(request):
                    yield item
                self._sticky = waited
                return
            except ModelError as exc:
                if not exc.fallback:
                    raise
                self._learn(waited, exc, request, min_context)
                failures.append(exc)
        detail = "; ".join([f"{e.model}: {e.kind}" for e in failures] + skipped) or "no model configured"
        raise AllModelsFailed(
            f"every model in the chain failed ({detail})", failures, self._rate_limited_for()
        )

    # --- the context window ------------------------------------------------------------------
    def _fit(self, request: ModelRequest) -> tuple[ModelRequest, ContextFit, dict[str, int]]:
        """Pass over models whose window cannot hold ``request``; when none can, trim it to fit the largest. Also
        returns what the request sent needs of each model's window (the conversation is read once for all)."""
        self._needs = {}
        candidates = [m for m in self._order() if not self._unusable(m, request, 0)] or self._order()
        estimator = self.health.estimator
        windows = {m.name: self.catalog.get(m.name).context_window for m in candidates}
        needs = estimator.needs(request, [m.name for m in self.models])
        holding = [
            m for m in candidates if windows[m.name] is None or needs[m.name] <= (windows[m.name] or 0)
        ]
        if holding:
            first = holding[0].name
            skipped = [m.name for m in candidates[: candidates.index(holding[0])]]
            action = "skip" if skipped else "fits"
            return request, ContextFit(action, needs[first], windows[first], first, skipped), needs
        target = max(candidates, key=lambda m: windows[m.name] or 0).name
        window = windows[target] or 0
        if not request.allow_trimming:  # the client said no (truncation: disabled): refuse rather than trim
            refusal = ContextTooLong(
                f"the conversation needs about {needs[target]} tokens, more than the largest window in the chain "
                f"({window}); trimming is disabled for this request (truncation: disabled)",
                model=target,
            )
            refusal.fallback = False
            raise refusal
        trimmed = trim(request.messages, estimator.fits_in(request, target, window))
        fitted = replace(request, messages=trimmed.messages)
        needs = estimator.needs(fitted, [m.name for m in self.models])
        skipped = [m.name for m in candidates if m.name != target]
        fit = ContextFit("trim", needs[target], window, target, skipped, trimmed.dropped, trimmed.shortened)
        # Trimmed as far as the policy goes: the largest window is still tried (its own error may follow).
        needs.pop(target)
        return fitted, fit, needs

    def can_hold(self, messages: list[dict[str, Any]], max_tokens: int | None) -> tuple[bool, int]:
        """Whether any model of the chain could hold ``messages`` (whatever else the turn adds), and the largest
        known window: a model whose window is unknown could."""
        estimator = self.health.estimator
        largest = 0
        for model in self.models:
            window = self.catalog.get(model.name).context_window
            if window is None:
                return True, largest
            need = estimator.prompt_tokens(messages, None, model.name) + (max_tokens or ANSWER_RESERVE_TOKENS)
            if need <= window:
                return True, window
            largest = max(largest, window)
        return False, largest

    def _rate_limited_for(self) -> float | None:
        """Seconds until the first model may be called again, when every model is cooling down after a rate
        limit (the client should come back then); None when any model failed for another reason."""
        waits = [self.health.cooling(m.name) for m in self.models]
        rate_limited = all(m.name in self.health.rate_limited for m in self.models)
        return min(waits) if rate_limited and all(w > 0 for w in waits) else None

    # --- choosing -----------------------------------------------------------------------------
    def _order(self) -> list[ChatModel]:
        if self._sticky is not None and self._sticky in self.models:
            return [self._sticky, *[m for m in self.models if m is not self._sticky]]
        return list(self.models)

    def _unusable(self, model: ChatModel, request: ModelRequest, min_context: int) -> str | None:
        if model.name in self.health.disabled:
            return f"disabled ({self.health.disabled[model.name]})"
        provider = model.name.partition(":")[0]
        if provider in self._failed_providers:
            return "provider authentication failed"
        wait = self.health.cooling(model.name)
        if wait > 0:
            return f"cooling down for {wait:.1f} s"
        info = self.catalog.get(model.name)
        if request.tools and not info.tools:
            return "no tool support"
        if info.honours(request.response_format) is False:
            return f"no {(request.response_format or {}).get('type')} support"
        refused = [p for p in request.params if info.takes(p) is False]
        if refused:
            return f"does not take {', '.join(refused)}"
        if min_context and info.context_window is not None and info.context_window <= min_context:
            return "context window too small"
        need = self._needs.get(model.name)
        if need is not None and info.context_window is not None and need > info.context_window:
            return f"context window too small ({need} estimated tokens > {info.context_window})"
        return None

    def _guessed(self, model: ChatModel, request: ModelRequest, error: ModelError) -> bool:
        """A request refused by a model that was sent something its catalog entry does not vouch for (a format or a
        parameter it says nothing about): the refusal is that model's skip reason, and the chain goes on."""
        if not isinstance(error, BadRequest):
            return False
        info = self.catalog.get(model.name)
        return info.honours(request.response_format) is None or any(
            info.takes(p) is None for p in request.params
        )

    def _next_usable(
        self, rest: list[ChatModel], request: ModelRequest, min_context: int
    ) -> ChatModel | None:
        return next((m for m in rest if not self._unusable(m, request, min_context)), None)

    def _learn(self, model: ChatModel, error: ModelError, request: ModelRequest, min_context: int) -> int:
        """Update health after ``error``; returns the context size later candidates must exceed."""
        if isinstance(error, RateLimited):
            self.health.cool(
                model.name,
                error.retry_after if error.retry_after is not None else DEFAULT_RATE_LIMIT_COOLDOWN,
                rate_limit=True,
            )
        elif isinstance(error, ModelGone):
            self.health.disabled[model.name] = error.message[:200]
        elif isinstance(error, AuthFailed):
            # A bad key stays bad until it is replaced: skip the provider this turn, and for a minute after.
            provider = model.name.partition(":")[0]
            self._failed_providers.add(provider)
            for other in self.models:
                if other.name.partition(":")[0] == provider:
                    self.health.cool(other.name, AUTH_COOLDOWN)
        elif isinstance(error, Transient):
            self.health.cool(model.name, TRANSIENT_COOLDOWN)
        elif isinstance(error, ContextTooLong):
            return max(min_context, self.catalog.get(model.name).context_window or 0)
        elif isinstance(error, RequestTooLarge):
            pass  # the tier's TPM, not the model, is the limit: another model may take it
        return min_context

    async def _wait_for_cooldown(self, request: ModelRequest, min_context: int) -> ChatModel | None:
        """The model whose cooldown ends first, after sleeping it out, when that is short and fits the deadline."""
        candidates = [
            (self.health.cooling(m.name), m)
            for m in self.models
            if (self._unusable(m, request, min_context) or "").startswith("cooling")
        ]
        if not candidates:
            return None
        wait, model = min(candidates, key=lambda c: c[0])
        if wait > self.max_wait or wait + 1.0 > request.deadline.remaining():
            return None
        await self._sleep(wait)
        return model


def estimate_tokens(request: ModelRequest) -> int:
    """A rough count (4 characters a token) of what a request sends: for the bench and context checks."""
    chars = sum(len(json.dumps(m)) for m in request.messages) + len(json.dumps(request.tools or []))
    return chars // 4
