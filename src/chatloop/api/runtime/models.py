"""``Models``: the container's models: the provider keys (read on first use, from the environment or Secrets
Manager), the catalog, the fallback chain built from ``MODEL_CHAIN`` (checked at start without a key, built on
first use), and which chain a turn gets for the ``model`` it asked for.

Usage::

    models = Models(Settings.from_env())
    chain = models.for_turn("groq:llama-3.3-70b-versatile", strict=True)   # a FallbackChain for one turn
    models.available()                                                      # what GET /v1/models lists
    models.forget_credentials()                                             # keys and chain read again on next use
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from chatloop.config import DEFAULT_MODEL_CHAIN, Settings
from chatloop.observability import logger
from chatloop.providers.catalog import Catalog, split_entry
from chatloop.providers.chain import FallbackChain
from chatloop.providers.factory import (
    ChainMisconfigured,
    build_chain,
    build_model,
    chain_problem,
    names_bedrock,
    provider_usable,
)
from chatloop.providers.sdk import drop_clients
from chatloop.secrets import load_provider_keys

DEMO_PROVIDER = "demo"
CHAIN_ALIAS = "chatloop"
"""The model id that means "the configured chain, from its first entry" (what a client gets with no ``model``)."""

KeysLoader = Callable[[Settings], dict[str, str | None]]


class UnknownModel(ValueError):
    pass


class Models:
    """The keys, the catalog and the chain, for the life of the container (``settings`` may be swapped by the
    runtime that holds it: what is built stays built, as before the swap)."""

    def __init__(
        self,
        settings: Settings,
        *,
        chain: FallbackChain | None = None,
        keys_loader: KeysLoader = load_provider_keys,
    ):
        self.settings = settings
        self.catalog = Catalog.load(overlay=settings.model_catalog_file or None)
        self._chain = chain
        self._chain_error: ChainMisconfigured | None = None
        """Why the chain cannot be built with the keys read (cached, like the chain, until they are read again)."""
        self._config_error = None if chain else self._check_chain()
        self._keys: dict[str, str | None] | None = None
        self._keys_loader = keys_loader
        self._lock = threading.Lock()

    def keys(self) -> dict[str, str | None]:
        if self._keys is None:
            self._keys = self._keys_loader(self.settings)
        return self._keys

    def _check_chain(self) -> ChainMisconfigured | None:
        """MODEL_CHAIN checked at start, without a key: an entry that can never be built is logged now, once, with
        what to fix, and refuses every turn (``chain`` raises it)."""
        problem = chain_problem(self.settings.model_chain, self.catalog)
        if problem is None:
            return None
        logger.error(problem)
        return ChainMisconfigured(problem)

    def chain(self) -> FallbackChain:
        """The container's chain, built on first use. Raises ``ChainMisconfigured`` when MODEL_CHAIN cannot be built
        as written (checked at start, or once the keys are read: then once, not on every request)."""
        with self._lock:
            if self._config_error is not None:
                raise self._config_error
            if self._chain_error is not None:
                raise self._chain_error
            if self._chain is None:
                try:
                    self._chain = build_chain(self.settings, self.keys(), self.catalog)
                except ChainMisconfigured as exc:
                    self._chain_error = exc
                    raise
            return self._chain

    def chain_error(self) -> ChainMisconfigured | None:
        """Why the chain cannot be built, for /health, reading no secret: known at start, or once the keys are read
        (from the environment here and now; from PROVIDER_KEYS_SECRET_ARN's secret by the first turn), else None."""
        if self._config_error is not None or self._chain is not None:
            return self._config_error
        if self.settings.provider_keys_secret_arn and self._keys is None:
            return self._chain_error
        try:
            self.chain()
        except ChainMisconfigured as exc:
            return exc
        return None

    def forget_credentials(self) -> None:
        """Drop the provider keys and the chain built with them (and its SDK clients, with their connection
        pools): the next request reads the keys again (after a SnapStart restore: this copy's, never the
        snapshot's)."""
        with self._lock:
            self._keys = None
            self._chain = None
            self._chain_error = None
        drop_clients()
        bedrock = sys.modules.get("chatloop.providers.bedrock")  # imported only by a chain that names Bedrock
        if bedrock is not None:
            bedrock.drop_clients()

    def for_turn(self, requested: str | None, strict: bool) -> FallbackChain:
        """The chain for one turn, started at ``requested`` when it names a chain entry or an available catalog
        model. A model this server cannot serve is an ``UnknownModel`` when ``strict``, else the default chain."""
        chain = self.chain()
        if requested == CHAIN_ALIAS:
            requested = None
        if not requested or requested in chain.entries():
            return chain.for_turn(start_at=requested)
        try:
            provider, _ = split_entry(requested)
            # The offline demo answers only where it is the configured chain (no key): beside real models it is
            # not a model this server serves, and its work must not be a client's to start.
            known = self.catalog.get(requested).known and provider != DEMO_PROVIDER
        except ValueError:
            known = False
        if known:
            model = build_model(requested, self.keys(), self.catalog, self.settings)
            if model is not None:
                return chain.for_turn(extra=model)
            if strict:
                raise UnknownModel(
                    f"model {requested!r} is not available (decommissioned, or no key for its provider)"
                )
        if strict:
            raise UnknownModel(f"unknown model {requested!r}; available: {self.available()}")
        return chain.for_turn()

    def available(self) -> list[str]:
        """Every id a client may pass as ``model``: the chain's alias, the chain's entries, then the catalog's other
        models whose provider has a key here (tool-capable and not decommissioned)."""
        entries = self.chain().entries()
        keys = self.keys()
        others = []
        for name in self.catalog.models:
            info = self.catalog.get(name)
            provider = self.catalog.provider(info.provider)
            usable = provider is not None and provider_usable(provider, keys)
            usable = usable and (info.provider != "bedrock" or names_bedrock(self.settings))
            if name not in entries and usable and info.tools and not info.decommissioned:
                others.append(name)
        return [CHAIN_ALIAS, *entries, *sorted(others)]

    def describe_chain(self) -> list[str]:
        """The chain for /health, without reading any secret: resolved when the keys are in the environment (or
        there are none: the demo model), else as configured (the secret's keys decide at the first request)."""
        if self._chain is not None or not self.settings.provider_keys_secret_arn:
            return self.chain().entries()
        spec = self.settings.model_chain or DEFAULT_MODEL_CHAIN
        return [e.strip() for e in spec.split(",") if e.strip()]
