"""One deadline per request, passed down to every model call and tool run.

Usage::

    deadline = Deadline.after(28.0)
    deadline.remaining()          # seconds left, never negative
    deadline.cap(5.0)             # min(5.0, remaining): a timeout that never outlives the request
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Deadline:
    at: float
    """A ``time.monotonic()`` instant."""

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + max(0.0, seconds))

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def cap(self, seconds: float) -> float:
        return max(0.0, min(seconds, self.remaining()))

    def minus(self, seconds: float) -> Deadline:
        """An earlier deadline: used to keep a reserve for the final answer."""
        return Deadline(self.at - seconds)
