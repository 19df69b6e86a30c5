"""Build the container's FallbackChain from ``MODEL_CHAIN`` and the provider keys.

A chain that cannot be built as written is refused whole (``ChainMisconfigured``, naming MODEL_CHAIN and what to
fix), never replaced by the offline demo model: an entry not of the form ``provider:model`` or naming a provider this
version does not know (a typo refused, not half a chain run), or nothing usable left once decommissioned and keyless
entries are skipped. Those two skips are warnings while another member remains; models missing from the catalog are
allowed with conservative defaults. The demo model answers only when neither MODEL_CHAIN nor any key is configured
(or MODEL_CHAIN names it), and the log says so.

Usage::

    chain = build_chain(settings, keys={"groq": "gsk_...", "openai": None})
    chain.entries()     # ['groq:openai/gpt-oss-120b', 'groq:llama-3.3-70b-versatile', ...]
    chain_problem("grok:llama-3.3-70b-versatile", Catalog.load())   # "MODEL_CHAIN entry ...: unknown provider 'grok' ..."
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chatloop.config import DEFAULT_MODEL_CHAIN, ConfigError, Settings, aws_region, from_environment
from chatloop.observability import logger
from chatloop.providers.base import ChatModel
from chatloop.providers.catalog import Catalog, ProviderInfo, split_entry
from chatloop.providers.chain import FallbackChain
from chatloop.providers.demo import DemoModel
from chatloop.providers.groq import GroqModel
from chatloop.providers.openai import OpenAIModel


def _bedrock_model(*args: Any, **kwargs: Any) -> ChatModel:
    """A ``bedrock:`` member: its module (the Converse mapping, botocore's client) is imported with the first chain
    that names one, not by ``import app`` (most chains name none; ~4 ms of every cold start otherwise)."""
    from chatloop.providers.bedrock import BedrockModel

    return BedrockModel(*args, **kwargs)


# ``local:`` is any OpenAI-compatible server at LOCAL_BASE_URL (llama-server --jinja, Ollama, vLLM), through the openai
# SDK, beside OpenAI's own API in the same chain.
ADAPTERS: dict[str, Callable[..., ChatModel]] = {
    "groq": GroqModel,
    "openai": OpenAIModel,
    "local": OpenAIModel,
    "bedrock": _bedrock_model,
}


def provider_usable(provider: ProviderInfo, keys: Mapping[str, str | None]) -> bool:
    """A hosted provider needs its key; a self-hosted one (``key_required: false``) needs its base URL; Bedrock
    needs a region (its credentials are the role's, found when it is called)."""
    if provider.name == "bedrock":
        return aws_region() is not None
    if provider.key_required:
        return bool(keys.get(provider.name))
    return bool(provider.base_url_env and from_environment(provider.base_url_env))


SETTING = "MODEL_CHAIN"


class ChainMisconfigured(ConfigError):
    """MODEL_CHAIN cannot be built as written: every turn is a 503 naming the setting and /health is unhealthy (the
    function still starts: a failed init is retried, costs more and tells no one why)."""

    setting = SETTING
    code = "model_chain_misconfigured"
    """The error code of the refused turns' 503 and of /health's."""


def entries(spec: str) -> list[str]:
    """The entries of a MODEL_CHAIN value, stripped, empty ones left out."""
    return [e.strip() for e in spec.split(",") if e.strip()]


def known_providers(catalog: Catalog) -> list[str]:
    """The providers a chain entry may name: those with an adapter and a catalog entry, and the demo model's."""
    return sorted({p for p in ADAPTERS if catalog.provider(p)} | {DemoModel.name.partition(":")[0]})


def chain_problem(spec: str, catalog: Catalog) -> str | None:
    """Why MODEL_CHAIN ``spec`` can never be built as written (a malformed entry, an unknown provider), as the line
    an operator reads to fix it; None when every entry could be. Reads no key: a check for the start."""
    known = known_providers(catalog)
    for entry in entries(spec):
        try:
            provider, _ = split_entry(entry)
        except ValueError:
            return f"{SETTING} entry {entry!r} is not of the form provider:model; write it as provider:model"
        if provider not in known:
            return (
                f"{SETTING} entry {entry!r}: unknown provider {provider!r} (known providers: {', '.join(known)}); "
                "correct or remove the entry (the whole chain is refused until then)"
            )
    return None


def names_bedrock(settings: Settings) -> bool:
    """Whether the operator chose Bedrock (a ``bedrock:`` entry in MODEL_CHAIN): only then are the catalog's other
    Bedrock models offered to clients. A region is always set on Lambda; the role's access to a model is not."""
    return any(e.strip().lower().startswith("bedrock:") for e in (settings.model_chain or "").split(","))


def build_model(
    entry: str, keys: Mapping[str, str | None], catalog: Catalog, settings: Settings | None = None
) -> ChatModel | None:
    """The ChatModel for one ``provider:model`` entry, or None (with a warning) when it cannot be used."""
    model, why = _member(entry, keys, catalog, settings)
    if model is None:
        logger.warning(f"model chain: skipping {catalog.get(entry).name}: {why}")
    return model


def _member(
    entry: str, keys: Mapping[str, str | None], catalog: Catalog, settings: Settings | None
) -> tuple[ChatModel | None, str]:
    """The ChatModel for ``entry``, or None and why it cannot be used."""
    try:
        provider, _ = split_entry(entry)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    info = catalog.get(entry)
    if info.decommissioned:
        return None, "decommissioned"
    if provider == "demo":
        return DemoModel(), ""
    adapter = ADAPTERS.get(provider)
    provider_info = catalog.provider(provider)
    if adapter is None or provider_info is None:
        return None, f"unknown provider {provider!r}"
    if provider == "bedrock" and settings is not None and not names_bedrock(settings):
        return None, "MODEL_CHAIN names no bedrock: model"
    if not provider_usable(provider_info, keys):
        missing = provider_info.key_env if provider_info.key_required else provider_info.base_url_env
        missing = "AWS_REGION" if provider == "bedrock" else missing
        return None, f"no {missing} configured"
    if not info.known:
        logger.info(f"model chain: {info.name} is not in the catalog; using conservative defaults")
    first_chunk = (settings or Settings()).model_first_chunk_timeout_seconds
    extra: dict[str, object] = {}
    if provider == "bedrock" and settings is not None and settings.image_fetch:
        from chatloop.providers.image_fetch import ImageFetch  # only with IMAGE_FETCH (cold start)

        fetch = ImageFetch(
            settings.image_max_bytes, settings.image_types(), settings.image_fetch_allow_private
        )
        extra["image_fetch"] = fetch
    return adapter(
        info, provider_info, api_key=keys.get(provider), first_chunk_timeout=first_chunk, **extra
    ), ""


def build_chain(
    settings: Settings, keys: Mapping[str, str | None], catalog: Catalog | None = None
) -> FallbackChain:
    """The chain MODEL_CHAIN names (or the default chain, when a key is configured), its unusable members skipped
    with a warning. Raises ``ChainMisconfigured`` (logged as an error) when it cannot be built as written."""
    catalog = catalog or Catalog.load()
    problem = chain_problem(settings.model_chain, catalog)
    if problem is None and not settings.model_chain and not any(keys.values()):
        logger.warning("no usable model configured: answering with the offline demo model (demo:offline)")
        return FallbackChain([DemoModel()], catalog=catalog, max_wait=settings.rate_limit_max_wait_seconds)
    models: list[ChatModel] = []
    skipped: list[str] = []
    for entry in [] if problem else entries(settings.model_chain or DEFAULT_MODEL_CHAIN):
        model, why = _member(entry, keys, catalog, settings)
        if model is None:
            logger.warning(f"model chain: skipping {catalog.get(entry).name}: {why}")
            skipped.append(f"{entry} ({why})")
        else:
            models.append(model)
    if problem is None and not models:
        problem = _nothing_usable(settings.model_chain, skipped)
    if problem is not None:
        logger.error(problem)
        raise ChainMisconfigured(problem)
    if all(isinstance(m, DemoModel) for m in models):
        logger.warning(
            "MODEL_CHAIN is the offline demo model (demo:offline): answers are not from a language model"
        )
    logger.info(f"model chain: {','.join(m.name for m in models)}")
    return FallbackChain(models, catalog=catalog, max_wait=settings.rate_limit_max_wait_seconds)


def _nothing_usable(configured: str, skipped: list[str]) -> str:
    """The operator's line for a chain every member of which was skipped."""
    if not skipped:
        return f"{SETTING}={configured!r} lists no model; write provider:model entries, comma-separated"
    if configured:
        return (
            f"{SETTING} has no usable model: {'; '.join(skipped)}; configure the missing key or base URL, or list "
            f"a usable model in {SETTING}"
        )
    return (
        f"{SETTING} is not set and the default chain has no usable model ({'; '.join(skipped)}); set {SETTING} to "
        "models of the providers whose keys are configured"
    )
