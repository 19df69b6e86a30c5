"""Checks of ``chatloop.config``'s settings that take more than a comparison: WEBHOOK_URL's address, MCP_ALLOWED_URLS'
prefixes, the OpenTelemetry exporter and its timeouts, the image limits.

Usage::

    from chatloop.config_checks import check_webhook
    check_webhook("https://hooks.example/in", "whsec_...", allow_private=False)   # raises ConfigError if unusable
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from chatloop import netpolicy
from chatloop.config_env import ConfigError


def check_webhook(url: str, secret: str, allow_private: bool) -> None:
    """WEBHOOK_URL: http(s), with its secret, and an address webhooks may be sent to (``netpolicy``: never
    link-local or metadata, private or loopback only with WEBHOOK_ALLOW_PRIVATE), a name judged by what it
    resolves to now (one lookup, 1 s at most; a name that does not resolve yet is checked at every send)."""
    if not (re.match(r"^https?://[^/?#]", url) and secret):
        raise ConfigError("WEBHOOK_URL must be an http(s) URL, and WEBHOOK_SECRET set with it")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        host = ""
    if not host:
        raise ConfigError("WEBHOOK_URL must name a host (and a port that is a number, if any)")
    reason = netpolicy.first_refusal(host, netpolicy.resolved_now(host), allow_private)
    if reason == netpolicy.PRIVATE:
        raise ConfigError(
            f"WEBHOOK_URL's host {host!r} is {reason}: set WEBHOOK_ALLOW_PRIVATE=true to send webhooks there"
        )
    if reason:
        raise ConfigError(f"WEBHOOK_URL's host {host!r} is {reason}, where webhooks are never sent")


def check_mcp_prefixes(prefixes: list[str]) -> None:
    """MCP_ALLOWED_URLS: each entry an http(s) URL prefix with a host (and no user part)."""
    for prefix in prefixes:
        if not re.match(r"^https?://[^/?#@]+", prefix):
            raise ConfigError(f"MCP_ALLOWED_URLS entry {prefix!r} is not an http(s) URL prefix")


def check_otel(traces_exporter: str, timeouts: tuple[int, ...]) -> None:
    """OTEL_TRACES_EXPORTER (otlp or none) and the OTEL_EXPORTER_OTLP_*TIMEOUT milliseconds (none negative)."""
    if min(timeouts) < 0:
        raise ConfigError("OTEL_EXPORTER_OTLP_*TIMEOUT must not be negative (milliseconds)")
    if traces_exporter.lower() not in {"", "otlp", "none"}:
        raise ConfigError("OTEL_TRACES_EXPORTER must be otlp or none (OTLP/HTTP is the exporter supported)")


IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types IMAGE_MEDIA_TYPES may name: what every provider here reads (``providers.images.MEDIA_TYPES``)."""


def image_types(text: str) -> tuple[str, ...]:
    """IMAGE_MEDIA_TYPES as media types.

    >>> image_types("png, JPEG")
    ('image/png', 'image/jpeg')
    """
    return tuple(f"image/{t.strip().lower()}" for t in text.split(",") if t.strip())


def check_images(max_count: int, max_bytes: int, url_max_chars: int, media_types: str) -> None:
    """The image limits: positive, and IMAGE_MEDIA_TYPES some of png, jpeg, gif, webp."""
    if min(max_count, max_bytes, url_max_chars) < 1:
        raise ConfigError("IMAGE_MAX_COUNT, IMAGE_MAX_BYTES and IMAGE_URL_MAX_CHARS must be positive")
    types = image_types(media_types)
    if not types or set(types) - IMAGE_TYPES:
        raise ConfigError("IMAGE_MEDIA_TYPES must name some of png, jpeg, gif, webp")
