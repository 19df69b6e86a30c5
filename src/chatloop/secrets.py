"""Provider API keys: from the environment when set (local use), else from one Secrets Manager secret.

The secret (``PROVIDER_KEYS_SECRET_ARN``) is a JSON object with ``GROQ_API_KEY`` and/or ``OPENAI_API_KEY``.
It is read with Powertools Parameters (cached) on the first request that needs it, never at import time;
boto3 is imported only then. The read is bounded (``SECRET_READ_SECONDS``, retries included): a Secrets Manager
that hangs is a 503 ``keys_unavailable`` in seconds, not a request held for minutes. Every key is registered for redaction, so it never reaches a log or a response.

The same secret may hold other values an operator refers to by name, such as an MCP server's token
(``"Authorization": "Bearer ${DOCS_TOKEN}"`` in MCP_SERVERS): ``load_named_secrets`` reads them the same way.

Usage::

    keys = load_provider_keys(settings)        # {"groq": "gsk_...", "openai": None}
    load_named_secrets(settings, ["DOCS_TOKEN"])   # {"DOCS_TOKEN": "..."}, each registered for redaction
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from chatloop.aws import bounded_config
from chatloop.config import KEY_VARIABLES, Settings, from_environment
from chatloop.observability import logger
from chatloop.redaction import register_secret

__all__ = ["KEY_VARIABLES", "KeysUnavailable", "load_named_secrets", "load_provider_keys"]
SECRET_CACHE_SECONDS = 300
SECRET_READ_SECONDS = 4.0
"""The longest the secret's read may take, connect and read timeouts and retries included."""
_provider: Any = None


class KeysUnavailable(RuntimeError):
    """The configured secret could not be read: the handler answers 503 rather than run without keys."""


def load_provider_keys(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    keys = {p: from_environment(v, environ) for p, v in KEY_VARIABLES.items()}
    if settings.provider_keys_secret_arn and not all(keys.values()):
        stored = _read_secret(settings.provider_keys_secret_arn)
        for provider, variable in KEY_VARIABLES.items():
            keys[provider] = keys[provider] or (stored.get(variable) or None)
    for value in keys.values():
        register_secret(value)
    return keys


def load_named_secrets(
    settings: Settings, names: Iterable[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The values of ``names``: from the environment when set (local use), else from the provider-keys secret.
    A name found in neither is left out (the caller says which is missing). Every value is registered for
    redaction."""
    wanted = list(dict.fromkeys(names))
    found = {n: value for n in wanted if (value := from_environment(n, environ))}
    missing = [n for n in wanted if n not in found]
    if missing and settings.provider_keys_secret_arn:
        stored = _read_secret(settings.provider_keys_secret_arn)
        found.update({n: stored[n] for n in missing if stored.get(n)})
    for value in found.values():
        register_secret(value)
    return found


def _secrets() -> Any:
    """Powertools' Secrets Manager provider with a bounded client, built on first use (boto3: only then)."""
    global _provider
    if _provider is None:
        from aws_lambda_powertools.utilities.parameters import SecretsProvider

        _provider = SecretsProvider(boto_config=bounded_config(SECRET_READ_SECONDS))
    return _provider


def _read_secret(arn: str) -> dict[str, str]:
    try:
        value = _secrets().get(arn, transform="json", max_age=SECRET_CACHE_SECONDS)
    except Exception as exc:
        logger.error(f"provider keys: could not read the secret ({type(exc).__name__})")
        raise KeysUnavailable("the provider keys secret could not be read") from None
    if not isinstance(value, dict):
        raise KeysUnavailable("the provider keys secret is not a JSON object")
    return {k: v for k, v in value.items() if isinstance(v, str)}
