"""What a fallback chain has learned about its models: cooldowns, disabled models, the token calibration.

It lives as long as the container (every turn's chain shares it), so a model that was rate limited in one request is
not called again in the next before its reset. Per failure class: rate limited -> cooling down until the reset it
asked for; transient -> a short cooldown; auth -> every model of that provider cools down for a minute; model gone
-> disabled for the container's life.

Usage::

    health = ChainHealth()
    health.learn(RateLimited("slow down", retry_after=3.0), "groq:llama-3.3-70b-versatile", chain_entries)
    health.cooling("groq:llama-3.3-70b-versatile")        # ~3.0
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from chatloop.providers.failures import AuthFailed, ModelError, ModelGone, RateLimited, Transient
from chatloop.providers.tokens import TokenEstimator

DEFAULT_RATE_LIMIT_COOLDOWN = 20.0
"""Cooldown after a 429 that says nothing about when to come back."""
TRANSIENT_COOLDOWN = 5.0
AUTH_COOLDOWN = 60.0


def provider_of(name: str) -> str:
    """``"groq:llama-3.3-70b-versatile"`` -> ``"groq"``."""
    return name.partition(":")[0]


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

    def learn(self, error: ModelError, name: str, entries: Iterable[str]) -> None:
        """Update what is known of ``name`` (one of the chain's ``entries``) after it failed with ``error``."""
        if isinstance(error, RateLimited):
            wait = error.retry_after if error.retry_after is not None else DEFAULT_RATE_LIMIT_COOLDOWN
            self.cool(name, wait, rate_limit=True)
        elif isinstance(error, ModelGone):
            self.disabled[name] = error.message[:200]
        elif isinstance(error, AuthFailed):
            # A bad key stays bad until it is replaced: every model of the provider, for a minute.
            for other in entries:
                if provider_of(other) == provider_of(name):
                    self.cool(other, AUTH_COOLDOWN)
        elif isinstance(error, Transient):
            self.cool(name, TRANSIENT_COOLDOWN)

    def rate_limited_for(self, entries: Iterable[str]) -> float | None:
        """Seconds until the first of ``entries`` may be called again, when every one is cooling down after a rate
        limit (the client should come back then); None when any failed for another reason."""
        names = list(entries)
        waits = [self.cooling(n) for n in names]
        rate_limited = all(n in self.rate_limited for n in names)
        return min(waits) if rate_limited and all(w > 0 for w in waits) else None
