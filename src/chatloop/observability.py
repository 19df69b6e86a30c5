"""Powertools Logger and Metrics for the whole package: every log line redacted (``chatloop.redaction``), the keys
in the environment registered for redaction at import, and the names a metric may carry.

Defaults keep a missing ``POWERTOOLS_*`` variable from ever breaking a request. The engine's decision lines are
``engine/loglines.py``; the metrics of a turn ``api/turns/metrics.py``.

Usage::

    from chatloop.observability import logger, metrics
    logger.info("model fallback: ...", extra={"fallback": {...}})
"""

from __future__ import annotations

import logging
import re

from aws_lambda_powertools import Logger, Metrics

from chatloop.config import KEY_VARIABLES, from_environment
from chatloop.redaction import redact, redact_value, register_secret

SERVICE = from_environment("POWERTOOLS_SERVICE_NAME") or "chatloop"
NAMESPACE = from_environment("POWERTOOLS_METRICS_NAMESPACE") or "ChatLoop"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)


class _RedactingFilter(logging.Filter):
    _STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        for key, value in list(vars(record).items()):
            if key not in self._STANDARD and isinstance(value, str | dict | list):
                setattr(record, key, redact_value(value))
        return True


logger.addFilter(_RedactingFilter())
AWS_SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
"""The Lambda runtime's credentials, in the environment of every function."""
for _secret_var in (*KEY_VARIABLES.values(), *AWS_SECRET_VARIABLES):
    register_secret(from_environment(_secret_var))


def metric_safe(name: str) -> str:
    """A model or reason as a metric name's suffix: ``groq:openai/gpt-oss-120b`` -> ``groq_openai_gpt-oss-120b``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:200]


MCP_METRIC_SERVERS: set[str] = set()
"""Operator-configured MCP server labels, each its own ``server`` dimension; a client-supplied server counts as
``client`` (a request must not be able to create metrics)."""
