"""Reading the environment for ``chatloop.config``: a variable by name, a setting's variable name and its raw text
parsed to the setting's type.

Only ``chatloop.config`` and this helper of it read ``os.environ``; everything else asks ``config``.

Usage::

    from chatloop.config import env_name, from_environment
    env_name("max_iterations")              # 'MAX_ITERATIONS'
    from_environment("GROQ_BASE_URL")       # None when unset or empty
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping


class ConfigError(ValueError):
    """An environment variable holds a value the handler cannot use."""


_ENV_NAMES = {
    "version": "APP_VERSION",
    "tool_caps": "TOOL_BUDGETS",  # renamed fields keep the variables operators set
    "mcp_tool_limit": "MCP_TOOL_BUDGET",
    "function_memory_mb": "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "lambda_function_name": "AWS_LAMBDA_FUNCTION_NAME",
    "lambda_function_version": "AWS_LAMBDA_FUNCTION_VERSION",
    "lwa_pass_through_path": "AWS_LWA_PASS_THROUGH_PATH",
    "snapstart_before_checkpoint_path": "AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH",
    "snapstart_after_restore_path": "AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH",
}


def from_environment(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the environment variable ``name``, None when it is unset or empty: for what is read by name
    after start-up (see the module docstring), never for a setting (those are ``Settings`` fields)."""
    env = os.environ if environ is None else environ
    return env.get(name) or None


def aws_region(environ: Mapping[str, str] | None = None) -> str | None:
    """The AWS region the function runs in (``AWS_REGION``, as Lambda sets it, else ``AWS_DEFAULT_REGION``): where
    Bedrock is called, read without importing the Bedrock member (a chain may name none)."""
    return from_environment("AWS_REGION", environ) or from_environment("AWS_DEFAULT_REGION", environ)


def env_name(field_name: str) -> str:
    """The environment variable a setting is read from: ``max_iterations`` -> ``MAX_ITERATIONS``."""
    return _ENV_NAMES.get(field_name, field_name.upper())


def default_store_path(environ: Mapping[str, str] | None = None) -> str:
    """``chatloop/conversations.sqlite3`` under ``$XDG_DATA_HOME`` (or ``~/.local/share``) when that can be written,
    else under the temp directory (Lambda's home is read-only; ``/tmp`` is the function's own)."""
    import tempfile
    from pathlib import Path

    env = os.environ if environ is None else environ
    home = env.get("HOME", "")
    data = env.get("XDG_DATA_HOME") or (str(Path(home) / ".local" / "share") if home else "")
    if data:
        folder = Path(data) / "chatloop"
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            if os.access(folder, os.W_OK):
                return str(folder / "conversations.sqlite3")
        except OSError:
            pass
    return str(Path(tempfile.gettempdir()) / "chatloop" / "conversations.sqlite3")


def parse_value(name: str, raw: str, kind: type) -> object:
    """``raw`` as a value of ``kind`` (bool, int, float, a JSON object, else the text), or a ``ConfigError`` naming
    ``name``.

    >>> parse_value("JS_PRESPAWN", "off", bool)
    False
    """
    try:
        if kind is bool:
            if raw.lower() in {"1", "true", "yes", "on"}:
                return True
            if raw.lower() in {"0", "false", "no", "off"}:
                return False
            raise ValueError(raw)
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
        if kind is dict:
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError(raw)
            return value
        return raw
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a valid {kind.__name__}") from exc
