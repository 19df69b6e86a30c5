"""AWS calls inside a time budget: botocore settings whose worst case, retries included, is a given number of
seconds (botocore's defaults are 60 s to connect, 60 s per read and up to 10 attempts: minutes against an endpoint
that accepts connections and never answers).

Usage::

    client = session.client("dynamodb", config=bounded_config(2.0))   # every call ends within ~2 s
"""

from __future__ import annotations

from typing import Any

RETRY_BACKOFF_SECONDS = 1.0
"""botocore's standard retry mode sleeps up to 1 s before its first retry (random x 2^0)."""


def bounded_config(budget: float) -> Any:
    """botocore ``Config`` whose worst case (every attempt connecting, then reading, to its timeout, plus the
    backoff before a retry) is ``budget`` seconds: two attempts from 2 s up, else one.

    >>> c = bounded_config(4.0); (c.retries["max_attempts"], c.connect_timeout, c.read_timeout)
    (2, 0.6, 0.9)
    """
    from botocore.config import Config

    attempts = 2 if budget >= 2 else 1
    per_attempt = (budget - (attempts - 1) * RETRY_BACKOFF_SECONDS) / attempts
    return Config(  # connecting includes the TLS handshake, slow on a cold, small function's CPU
        connect_timeout=round(per_attempt * 0.4, 3),
        read_timeout=round(per_attempt * 0.6, 3),
        retries={"mode": "standard", "max_attempts": attempts},
    )
