"""``FallbackChain``: a ChatModel made of ChatModels, tried in order.

Per failure class: rate limited -> next model now, this one cools down until its reset (a short wait is
slept out only when no other model is left and it fits the deadline); too large / context too long -> next
model, preferring a larger context window; model gone -> next model, disabled for the container's life;
tool-use failed -> recover the call from ``failed_generation`` or retry once with a corrective note, then
next; auth -> skip every model of that provider; transient -> next. A bad request is not retried elsewhere.
Every switch is a ``ModelFallback`` item (the engine turns it into an event, a log line and a metric).

``stream`` holds the ordering and the fallback; what it asks along the way has its own place: fitting the conversation
to the models' windows is ``window.fit`` (a pure decision, also the HTTP pre-check's through ``can_hold``), what a
failure teaches about a model is ``health.ChainHealth``, and the tool-call recovery is ``recovery``.

Health (cooldowns, disabled models) lives as long as the container; stickiness lives for one turn:
``chain.for_turn()`` returns a chain that keeps using the model that last worked.

Usage::

    chain = FallbackChain([groq_model, openai_model])
    turn_model = chain.for_turn(start_at="openai:gpt-4.1-mini")
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, replace

from chatloop.jsontypes import JSONObject
from chatloop.providers.base import (
    ChatModel,
    ContextFit,
    ModelFallback,
    ModelRequest,
    ModelResponse,
    StreamItem,
    TextDelta,
)
from chatloop.providers.catalog import Catalog, ModelInfo
from chatloop.providers.failures import (
    AllModelsFailed,
    AuthFailed,
    BadRequest,
    ContextTooLong,
    ModelError,
    ToolUseFailed,
)
from chatloop.providers.health import ChainHealth, provider_of
from chatloop.providers.images import Images, carried_images
from chatloop.providers.recovery import may_retry, recovered_calls, with_corrective_note
from chatloop.providers.window import Window, fit, fitted

__all__ = ["ChainHealth", "FallbackChain"]


@dataclass
class _Attempt:
    """How one model's try went: filled in by the helper that streams it (an async generator returns nothing)."""

    error: ModelError | None = None
    """The failure another model may fix; None when the model answered."""
    streamed: bool = False
    """Whether its last call streamed text (void, when it then failed)."""


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
        self._images = Images()
        """The images the current request carries (set by ``stream``): a model that cannot see them is passed over."""

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

    # --- the ChatModel: ordering and fallback ------------------------------------------------------
    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """The first usable model's answer, in chain order (the turn's sticky model first); each failure another
        model may fix is a ``ModelFallback`` to the next; when none is left, a short cooldown may be slept out once,
        else ``AllModelsFailed``."""
        request, fit_item, self._needs = self._fit(request)
        yield fit_item
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
            attempt = _Attempt()
            last = self._next_usable(order[i:], request, min_context) is None
            async for item in self._try(model, replace(request, last_resort=last), attempt):
                yield item
            if attempt.error is None:
                self._sticky = model
                return
            error = attempt.error
            failures.append(error)
            min_context = self._learn(model, error, min_context)
            if isinstance(error, ContextTooLong):
                order = order[:i] + self._largest_first(order[i:])
            next_model = self._next_usable(order[i:], request, min_context)
            yield ModelFallback(
                model.name,
                next_model.name if next_model else None,
                error.kind,
                retry_after=error.retry_after,
                discard_partial=attempt.streamed,
                message=error.message,
            )
        # Nothing left. A short rate-limit wait that fits the deadline is worth sleeping out once; the model is then
        # tried as every other is (a tool call recovered, a guessed format refused, its usage learned).
        waited = await self._wait_for_cooldown(request, min_context)
        if waited is not None:
            attempt = _Attempt()
            async for item in self._try(waited, replace(request, last_resort=True), attempt):
                yield item
            if attempt.error is None:
                self._sticky = waited
                return
            self._learn(waited, attempt.error, min_context)
            failures.append(attempt.error)
        raise self._all_failed(failures, skipped)

    def _all_failed(self, failures: list[ModelError], skipped: list[str]) -> AllModelsFailed:
        """The turn's last error: every call that failed and every model passed over, and when every model is
        cooling down after a rate limit, how long until the first may be called (the client's retry-after)."""
        detail = "; ".join([f"{e.model}: {_said(e)}" for e in failures] + skipped) or "no model configured"
        return AllModelsFailed(
            f"every model in the chain failed ({detail})",
            failures,
            self.health.rate_limited_for(self.entries()),
        )

    # --- one model's try ----------------------------------------------------------------------
    async def _try(
        self, model: ChatModel, request: ModelRequest, attempt: _Attempt
    ) -> AsyncIterator[StreamItem]:
        """``model``'s answer to ``request``, streamed. A tool call it failed to format is recovered from the
        failure's text, or asked for once more with a corrective note (a ``ModelFallback`` to itself says so). A
        failure another model may fix is left in ``attempt.error``; any other is raised."""
        sent, retried = request, False
        while True:
            attempt.streamed = False
            try:
                async for item in model.stream(sent):
                    if isinstance(item, TextDelta):
                        attempt.streamed = True
                    elif isinstance(item, ModelResponse) and item.usage is not None:
                        self.health.estimator.observe(model.name, sent, item.usage.prompt_tokens)
                    yield item
                return
            except ToolUseFailed as exc:
                response = recovered_calls(exc, request, model.name)
                if response is not None:
                    yield response
                    return
                if not retried and may_retry(request):
                    retried, sent = True, with_corrective_note(request, exc)
                    yield ModelFallback(
                        model.name,
                        model.name,
                        exc.kind,
                        discard_partial=attempt.streamed,
                        message="retrying once with a corrective note",
                    )
                    continue
                attempt.error = exc
            except ModelError as exc:
                if not exc.fallback and not self._guessed(model, request, exc):
                    raise
                attempt.error = exc
            return

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

    # --- the context window ------------------------------------------------------------------
    def _fit(self, request: ModelRequest) -> tuple[ModelRequest, ContextFit, dict[str, int]]:
        """``request`` fitted to the windows of the models that may take it (``window.fit``), the ``ContextFit``
        to report, and what it needs of each model's window (the conversation is read once for all)."""
        self._needs = {}
        self._images = carried_images(request.messages)
        candidates = [m for m in self._order() if not self._unusable(m, request, 0)] or self._order()
        needs = self.health.estimator.needs(request, self.entries())
        fitting = fit([self._window(m.name, needs[m.name]) for m in candidates], request.allow_trimming)
        return fitted(request, fitting, self.health.estimator, needs)

    def can_hold(self, messages: list[JSONObject], max_tokens: int | None) -> tuple[bool, int]:
        """Whether any model of the chain could hold ``messages`` (whatever else the turn adds), and the largest
        known window: a model whose window is unknown could."""
        entries = self.entries()
        if (
            entries and self.catalog.get(entries[0]).context_window is None
        ):  # the first model is tried whatever it needs
            return True, 0
        needs = self.health.estimator.needs_of(messages, None, max_tokens, entries)
        fitting = fit([self._window(name, needs[name]) for name in entries], allow_trimming=False)
        passed = [w.size or 0 for w in fitting.windows[: len(fitting.skipped)]]
        return fitting.holds, fitting.window if fitting.window is not None else max(passed, default=0)

    def _window(self, name: str, need: int) -> Window:
        return Window(name, self.catalog.get(name).context_window, need)

    def _largest_first(self, models: list[ChatModel]) -> list[ChatModel]:
        """Larger known windows first; unknown ones after them, still tried."""
        return sorted(models, key=lambda m: -(self.catalog.get(m.name).context_window or 0))

    # --- choosing -----------------------------------------------------------------------------
    def _order(self) -> list[ChatModel]:
        if self._sticky is not None and self._sticky in self.models:
            return [self._sticky, *[m for m in self.models if m is not self._sticky]]
        return list(self.models)

    def _unusable(self, model: ChatModel, request: ModelRequest, min_context: int) -> str | None:
        if model.name in self.health.disabled:
            return f"disabled ({self.health.disabled[model.name]})"
        if provider_of(model.name) in self._failed_providers:
            return "provider authentication failed"
        wait = self.health.cooling(model.name)
        if wait > 0:
            return f"cooling down for {wait:.1f} s"
        info = self.catalog.get(model.name)
        if request.tools and not info.tools:
            return "no tool support"
        refused = _refusal(info, request.response_format, request.params) or blind(info, self._images)
        if refused:
            return refused
        if min_context and info.context_window is not None and info.context_window <= min_context:
            return "context window too small"
        need = self._needs.get(model.name)
        if need is not None and info.context_window is not None and need > info.context_window:
            return f"context window too small ({need} estimated tokens > {info.context_window})"
        return None

    def supports(
        self,
        *,
        response_format: JSONObject | None = None,
        params: Iterable[str] = (),
        images: Images | None = None,
    ) -> tuple[list[str], list[str]]:
        """Which of the chain's models a request asking for ``response_format`` and ``params`` goes to, and which it
        passes over, each in the chain's order: a model whose catalog entry lists what is asked is sent it, one whose
        entry does not say is tried too (a provider's refusal passes the turn on), one whose entry says no is passed
        over (the rule ``stream`` skips models by). With ``images``, a model that cannot see them (its entry says no
        vision, or it needs the bytes of an image sent by URL) is passed over too.

        Usage::

            able, passed_over = chain.supports(params=["seed"])       # (["openai:gpt-4.1-mini"], ["groq:llama"])
        """
        asked = list(params)
        able: list[str] = []
        passed_over: list[str] = []
        for model in self.models:
            info = self.catalog.get(model.name)
            refused = _refusal(info, response_format, asked) or (blind(info, images) if images else None)
            (passed_over if refused else able).append(model.name)
        return able, passed_over

    def _guessed(self, model: ChatModel, request: ModelRequest, error: ModelError) -> bool:
        """A request refused by a model that was sent something its catalog entry does not vouch for (a format or a
        parameter it says nothing about, or images when it does not say it sees): the refusal is that model's skip reason, and the chain goes on."""
        if not isinstance(error, BadRequest):
            return False
        info = self.catalog.get(model.name)
        return (
            info.honours(request.response_format) is None
            or any(info.takes(p) is None for p in request.params)
            or (self._images.count > 0 and info.vision is None)
        )

    def _next_usable(
        self, rest: list[ChatModel], request: ModelRequest, min_context: int
    ) -> ChatModel | None:
        return next((m for m in rest if not self._unusable(m, request, min_context)), None)

    def _learn(self, model: ChatModel, error: ModelError, min_context: int) -> int:
        """Update health after ``error``; returns the context size later candidates must exceed."""
        self.health.learn(error, model.name, self.entries())
        if isinstance(
            error, AuthFailed
        ):  # skip the provider for the rest of the turn, not only for its cooldown
            self._failed_providers.add(provider_of(model.name))
        elif isinstance(error, ContextTooLong):
            return max(min_context, self.catalog.get(model.name).context_window or 0)
        return min_context


def _refusal(info: ModelInfo, response_format: JSONObject | None, params: Iterable[str]) -> str | None:
    """Why a model's catalog entry refuses ``response_format`` or one of ``params`` (None: it lists them, or does
    not say: unknown capabilities are tried, not assumed absent)."""
    if info.honours(response_format) is False:
        return f"no {(response_format or {}).get('type')} support"
    refused = [p for p in params if info.takes(p) is False]
    if refused:
        return f"does not take {', '.join(refused)}"
    return None


def blind(info: ModelInfo, images: Images) -> str | None:
    """Why a model cannot be sent a conversation's ``images`` (None: it can, or its entry does not say: tried)."""
    if not images.count:
        return None
    if info.vision is False:
        return "no vision support"
    if images.by_url and not info.image_urls:
        return "cannot read an image by URL (its API takes the bytes; the server does not fetch)"
    return None


def _said(error: ModelError) -> str:
    """A failure as the turn's error names it: its kind, and what happened (``transient: local:qwen sent nothing
    within 10 s``), so a 503 says why."""
    what = error.message.removeprefix(f"{error.model}: ") if error.message else ""
    return f"{error.kind}: {what[:160]}" if what else error.kind
