"""Model capabilities as data (``models.json``): context window, tool support, parallel tool calls,
decommissioned flag and per-model parameter rules.

Usage::

    catalog = Catalog.load()
    info = catalog.get("groq:llama-3.3-70b-versatile")
    info.context_window, info.tools, info.decommissioned
    catalog.get("groq:some-new-model")        # unknown: conservative defaults, known=False
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from chatloop.jsontypes import JSONObject, JSONValue

CATALOG_FILE = Path(__file__).with_name("models.json")


@dataclass(frozen=True)
class ModelInfo:
    name: str
    """``provider:model``."""
    provider: str
    model_id: str
    context_window: int | None
    """Tokens; None when the catalog does not know the model (it is tried, never assumed too small)."""
    tools: bool
    parallel_tool_calls: bool
    decommissioned: bool
    drop_params: tuple[str, ...] = ()
    max_tokens_param: str = "max_tokens"
    known: bool = True
    response_formats: tuple[str, ...] | None = None
    """Structured-output types the model honours (``json_object``, ``json_schema``); None when the catalog does not
    say (the model is tried: a provider that rejects the format makes the chain go on)."""
    params: tuple[str, ...] | None = None
    """Further request parameters the model takes (``stop``, ``seed``, ``reasoning_effort`` ...); None when the catalog
    does not say (tried, like an unknown format)."""
    tool_choices: tuple[str, ...] | None = None
    """The forms of Converse's ``toolChoice`` a Bedrock model takes (``auto``, ``any``, ``tool``); None: not said."""
    vision: bool | None = None
    """Whether the model reads images; None when the catalog does not say (a turn with images tries it: a provider
    that refuses them makes the chain go on)."""
    image_urls: bool = True
    """Whether its provider's API takes an image by URL (False: only the bytes, as Bedrock's Converse)."""

    def honours(self, response_format: JSONObject | None) -> bool | None:
        """Whether this model can be sent ``response_format`` (no format, or ``text``, is always fine); None: unknown."""
        kind = (response_format or {}).get("type", "text")
        if kind == "text":
            return True
        return None if self.response_formats is None else kind in self.response_formats

    def takes(self, param: str) -> bool | None:
        """Whether this model takes the request parameter ``param``; None: the catalog does not say."""
        return None if self.params is None else param in self.params


@dataclass(frozen=True)
class ProviderInfo:
    name: str
    key_env: str | None
    base_url_env: str | None
    stream_usage: bool
    tool_message_name: bool
    key_required: bool = True
    """False for self-hosted OpenAI-compatible servers (llama-server, Ollama, vLLM) that take any key or none."""
    image_urls: bool = True
    """False for an API that takes images as bytes only (Bedrock's Converse fetches no URL)."""


@dataclass
class Catalog:
    models: dict[str, JSONObject]
    """Entries as ``models.json`` (and the overlay) hold them, checked by ``validate_catalog``."""
    providers: dict[str, ProviderInfo]
    defaults: JSONObject = field(default_factory=dict)
    _infos: dict[str, ModelInfo] = field(default_factory=dict, init=False, repr=False, compare=False)
    """``get``'s answers: an entry is read once (the chain asks for each of its models several times a request)."""

    @classmethod
    def load(cls, path: Path = CATALOG_FILE, overlay: str | None = None) -> Catalog:
        """The packaged catalog, with ``overlay`` (MODEL_CATALOG_FILE: a JSON file of the same format) merged over
        it entry by entry: an operator adds a model, or changes one field of a packaged one, without a code change."""
        return _load(str(path), overlay or None)

    def get(self, name: str) -> ModelInfo:
        info = self._infos.get(name)
        if info is None:
            info = self._infos[name] = self._read(name)
        return info

    def _read(self, name: str) -> ModelInfo:
        provider, model_id = split_entry(name)
        provider_info = self.providers.get(provider)
        raw = {**self.defaults, **self.models.get(f"{provider}:{model_id}", {})}
        window = raw.get("context_window")
        max_tokens_param = raw.get("max_tokens_param", "max_tokens")
        return ModelInfo(
            name=f"{provider}:{model_id}",
            provider=provider,
            model_id=model_id,
            context_window=int(window) if window and isinstance(window, int | float) else None,
            tools=bool(raw.get("tools", True)),
            parallel_tool_calls=bool(raw.get("parallel_tool_calls", False)),
            decommissioned=bool(raw.get("decommissioned", False)),
            drop_params=_strings(raw.get("drop_params")),
            max_tokens_param=max_tokens_param if isinstance(max_tokens_param, str) else "max_tokens",
            known=f"{provider}:{model_id}" in self.models,
            response_formats=_strings(raw["response_format"]) if "response_format" in raw else None,
            params=_strings(raw["params"]) if "params" in raw else None,
            tool_choices=_strings(raw["tool_choice"]) if "tool_choice" in raw else None,
            vision=bool(raw["vision"]) if "vision" in raw else None,
            image_urls=provider_info.image_urls if provider_info else True,
        )

    def provider(self, name: str) -> ProviderInfo | None:
        return self.providers.get(name)


def _strings(value: JSONValue) -> tuple[str, ...]:
    """The strings of a catalog list (``drop_params``, ``params``, ``response_format``)."""
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def split_entry(entry: str) -> tuple[str, str]:
    """``"groq:openai/gpt-oss-120b"`` -> ``("groq", "openai/gpt-oss-120b")``: split at the first colon only."""
    provider, sep, model_id = entry.strip().partition(":")
    if not sep or not provider or not model_id:
        raise ValueError(f"model entry {entry!r} is not of the form provider:model")
    return provider.lower(), model_id


class CatalogError(ValueError):
    """MODEL_CATALOG_FILE cannot be read as a catalog."""


MAX_CONTEXT_WINDOW = 100_000_000
"""Tokens: a window beyond this is a typo (the largest models hold a few million)."""
_FLAGS = ("tools", "parallel_tool_calls", "decommissioned", "vision")
_STRING_LISTS = ("drop_params",)
_PROVIDER_FLAGS = ("stream_usage", "tool_message_name", "key_required", "image_urls")


def validate_catalog(data: object, source: str) -> None:
    """Raise ``CatalogError`` naming ``source``, the entry and the field when ``data`` is not a usable catalog: an
    entry that is not an object, a window that is not a positive whole number (a string, NaN, an infinity), a flag
    that is not a boolean. Run once at start-up, so no request ever meets a bad entry. Fields it does not know are
    left alone (the catalog grows)."""

    def fail(where: str, problem: str) -> CatalogError:
        return CatalogError(f"{source}: {where}: {problem}")

    if not isinstance(data, dict):
        raise fail("the file", "must be a JSON object with 'models' and/or 'providers'")
    for section in ("models", "providers", "defaults"):
        if not isinstance(data.get(section, {}), dict):
            raise fail(section, "must be an object")
    entries = [(f"models[{name!r}]", entry) for name, entry in data.get("models", {}).items()]
    for where, entry in [("defaults", data.get("defaults", {})), *entries]:
        if not isinstance(entry, dict):
            raise fail(where, f"must be an object, got {type(entry).__name__}")
        window = entry.get("context_window")
        if window is not None and not (
            isinstance(window, int | float)
            and not isinstance(window, bool)
            and math.isfinite(window)
            and window == int(window)
            and 0 < window <= MAX_CONTEXT_WINDOW
        ):
            raise fail(
                f"{where}.context_window",
                f"must be a whole number of tokens from 1 to {MAX_CONTEXT_WINDOW:,}, got {window!r}",
            )
        for flag in _FLAGS:
            if flag in entry and not isinstance(entry[flag], bool):
                raise fail(f"{where}.{flag}", f"must be true or false, got {entry[flag]!r}")
        for key in _STRING_LISTS:
            value = entry.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail(f"{where}.{key}", f"must be a list of strings, got {value!r}")
        if not isinstance(entry.get("max_tokens_param", ""), str):
            raise fail(f"{where}.max_tokens_param", f"must be a string, got {entry['max_tokens_param']!r}")
    for name, provider in data.get("providers", {}).items():
        where = f"providers[{name!r}]"
        if not isinstance(provider, dict):
            raise fail(where, f"must be an object, got {type(provider).__name__}")
        for key in ("key_env", "base_url_env"):
            if not isinstance(provider.get(key), str | None):
                raise fail(f"{where}.{key}", f"must be a string or null, got {provider[key]!r}")
        for flag in _PROVIDER_FLAGS:
            if flag in provider and not isinstance(provider[flag], bool):
                raise fail(f"{where}.{flag}", f"must be true or false, got {provider[flag]!r}")


def _overlaid(data: JSONObject, overlay: str) -> JSONObject:
    try:
        extra = json.loads(Path(overlay).read_text())
    except (OSError, ValueError) as exc:
        raise CatalogError(f"MODEL_CATALOG_FILE {overlay}: {exc}") from None
    validate_catalog(extra, f"MODEL_CATALOG_FILE {overlay}")
    merged = dict(data)
    for section in ("models", "providers", "defaults"):
        if section == "defaults":
            merged[section] = {**_object(data.get(section)), **extra.get(section, {})}
            continue
        combined = _object(data.get(section))
        for name, entry in extra.get(section, {}).items():
            combined[name] = {**_object(combined.get(name)), **entry}
        merged[section] = combined
    return merged


def _object(value: JSONValue) -> JSONObject:
    """A copy of ``value``, a JSON object by ``validate_catalog``'s check (a missing section: an empty one)."""
    return dict(value) if isinstance(value, dict) else {}


@lru_cache(maxsize=4)
def _load(path: str, overlay: str | None = None) -> Catalog:
    data = json.loads(Path(path).read_text())
    validate_catalog(data, path)
    if overlay:
        data = _overlaid(data, overlay)
    providers = {
        name: ProviderInfo(
            name,
            p.get("key_env"),
            p.get("base_url_env"),
            bool(p.get("stream_usage")),
            bool(p.get("tool_message_name", True)),
            bool(p.get("key_required", True)),
            bool(p.get("image_urls", True)),
        )
        for name, p in data["providers"].items()
    }
    return Catalog(models=data["models"], providers=providers, defaults=data.get("defaults", {}))
