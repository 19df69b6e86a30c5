"""Build the container's FallbackChain from ``MODEL_CHAIN`` and the provider keys.

Decommissioned entries are skipped with a warning at start; entries whose provider has no key are skipped
too; models missing from the catalog are allowed with conservative defaults. With nothing usable left (no key
configured at all), the chain is the offline demo model, and the log says so.

Usage::

    chain = build_chain(settings, keys={"groq": "gsk_...", "openai": None})
    chain.entries()     # ['groq:openai/gpt-oss-120b', 'groq:llama-3.3-70b-versatile', ...]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from chatloop.config import DEFAULT_MODEL_CHAIN, ConfigError, Settings, from_environment
from chatloop.observability import logger
from chatloop.providers import bedrock
from chatloop.providers.base import ChatModel
from chatloop.providers.catalog import Catalog, ProviderInfo, split_entry
from chatloop.providers.chain import FallbackChain
from chatloop.providers.demo import DemoModel
from chatloop.providers.groq import GroqModel
from chatloop.providers.openai import OpenAIModel

# ``local:`` is any OpenAI-compatible server at LOCAL_BASE_URL (llama-server --jinja, Ollama, vLLM), through the openai
# SDK, beside OpenAI's own API in the same chain.
ADAPTERS: dict[str, Callable[..., ChatModel]] = {
    "groq": GroqModel,
    "openai": OpenAIModel,
    "local": OpenAIModel,
    "bedrock": bedrock.BedrockModel,
}


def provider_usable(provider: ProviderInfo, keys: Mapping[str, str | None]) -> bool:
    """A hosted provider needs its key; a self-hosted one (``key_required: false``) needs its base URL; Bedrock
    needs a region (its credentials are the role's, found when it is called)."""
    if provider.name == "bedrock":
        return bedrock.region() is not None
    if provider.key_required:
        return bool(keys.get(provider.name))
    return bool(provider.base_url_env and from_environment(provider.base_url_env))


def names_bedrock(settings: Settings) -> bool:
    """Whether the operator chose Bedrock (a ``bedrock:`` entry in MODEL_CHAIN): only then are the catalog's other
    Bedrock models offered to clients. A region is always set on Lambda; the role's access to a model is not."""
    return any(e.strip().lower().startswith("bedrock:") for e in (settings.model_chain or "").split(","))


def build_model(
    entry: str, keys: Mapping[str, str | None], catalog: Catalog, settings: Settings | None = None
) -> ChatModel | None:
    """The ChatModel for one ``provider:model`` entry, or None (with a warning) when it cannot be used."""
    try:
        provider, _ = split_entry(entry)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    info = catalog.get(entry)
    if info.decommissioned:
        logger.warning(f"model chain: skipping {info.name}: decommissioned")
        return None
    if provider == "demo":
        return DemoModel()
    adapter = ADAPTERS.get(provider)
    provider_info = catalog.provider(provider)
    if adapter is None or provider_info is None:
        logger.warning(f"model chain: skipping {info.name}: unknown provider {provider!r}")
        return None
    if provider == "bedrock" and settings is not None and not names_bedrock(settings):
        logger.warning(f"model chain: skipping {info.name}: MODEL_CHAIN names no bedrock: model")
        return None
    if not provider_usable(provider_info, keys):
        missing = provider_info.key_env if provider_info.key_required else provider_info.base_url_env
        missing = "AWS_REGION" if provider == "bedrock" else missing
        logger.warning(f"model chain: skipping {info.name}: no {missing} configured")
        return None
    if not info.known:
        logger.info(f"model chain: {info.name} is not in the catalog; using conservative defaults")
    first_chunk = (settings or Settings()).model_first_chunk_timeout_seconds
    return adapter(info, provider_info, api_key=keys.get(provider), first_chunk_timeout=first_chunk)


def build_chain(
    settings: Settings, keys: Mapping[str, str | None], catalog: Catalog | None = None
) -> FallbackChain:
    catalog = catalog or Catalog.load()
    spec = settings.model_chain or (DEFAULT_MODEL_CHAIN if any(keys.values()) else DemoModel.name)
    models = [
        m
        for entry in spec.split(",")
        if entry.strip()
        if (m := build_model(entry.strip(), keys, catalog, settings))
    ]
    if not models:
        logger.warning("no usable model configured: answering with the offline demo model (demo:offline)")
        models = [DemoModel()]
    elif all(isinstance(m, DemoModel) for m in models):
        logger.warning(
            "MODEL_CHAIN is the offline demo model (demo:offline): answers are not from a language model"
        )
    logger.info(f"model chain: {','.join(m.name for m in models)}")
    return FallbackChain(models, catalog=catalog, max_wait=settings.rate_limit_max_wait_seconds)
