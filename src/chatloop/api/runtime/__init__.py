"""What the app keeps for the life of the container, as explicit wiring.

``Runtime`` holds the ``settings``, the ``models`` (keys, catalog, chain: ``runtime/models.py``), the ``tools`` (the
sandbox's tool and MCP servers': ``runtime/tools.py``), the ``stores`` (conversations, idempotency:
``runtime/stores.py``), the engine's ``limits`` and the per-caller ``budgets``.

Each part builds what it holds lazily, on the first request that needs it (keys may come from Secrets Manager; the
sandbox starts its spare process once the turn's first model call is in flight; MCP servers list their tools when a
turn first needs them), and is injectable for tests. Under SnapStart, ``prime`` builds what can be frozen before the
snapshot and ``forget_credentials`` drops what must not be.

Usage::

    runtime = Runtime(Settings.from_env())
    model = runtime.models.for_turn("groq:llama-3.3-70b-versatile", strict=True)   # a FallbackChain for one turn
    registry = await runtime.tools.for_turn(deadline)              # the built-in tool and the MCP servers' tools
    store = runtime.stores.state()                         # opened on first use
    runtime.prime(["groq"], ["chatloop.api.openai.responses.endpoint"])   # before a snapshot: no key, process or connection
    runtime.forget_credentials()                                   # keys and the chain are read again on next use
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from chatloop.api.runtime.models import CHAIN_ALIAS, DEMO_PROVIDER, KeysLoader, Models, UnknownModel
from chatloop.api.runtime.stores import Stores
from chatloop.api.runtime.tools import BUILTIN_TOOLS, Tools
from chatloop.config import Settings
from chatloop.engine.limits import EngineLimits
from chatloop.providers.chain import FallbackChain
from chatloop.providers.warmup import prime as prime_sdk
from chatloop.secrets import load_provider_keys
from chatloop.tools.base import ToolRegistry

if TYPE_CHECKING:
    from chatloop.providers.budgeted import Book
    from chatloop.store.protocol import StateStore

__all__ = [
    "BUILTIN_TOOLS",
    "CHAIN_ALIAS",
    "DEMO_PROVIDER",
    "Models",
    "Runtime",
    "Stores",
    "Tools",
    "UnknownModel",
    "build_schemas",
    "engine_limits",
]


def engine_limits(settings: Settings) -> EngineLimits:
    """The engine's limits from the operator's settings (the engine knows no ``Settings``)."""
    return EngineLimits(
        max_iterations=settings.max_iterations,
        deadline_reserve_seconds=settings.deadline_reserve_seconds,
        substantive_answer_chars=settings.substantive_answer_chars,
        legacy_syntax_reminders=settings.legacy_syntax_reminders,
        system_prompt_guidance=settings.system_prompt_guidance,
        tool_caps=dict(settings.tool_caps),
        log_content=settings.log_content,
    )


def build_schemas(prefix: str = "chatloop.") -> list[str]:
    """Build the validators of every pydantic model the loaded ``prefix`` modules define with ``defer_build`` (the
    request bodies: built on a route's first request otherwise, ~10 ms of CPU for /chat's). Returns their names."""
    from pydantic import BaseModel
    from pydantic.errors import PydanticUndefinedAnnotation

    built = []
    for name, module in list(sys.modules.items()):
        if not name.startswith(prefix) or module is None:
            continue
        for value in list(vars(module).values()):
            if not (isinstance(value, type) and issubclass(value, BaseModel)) or value.__module__ != name:
                continue
            if value.__pydantic_complete__:
                continue
            try:
                value.model_rebuild()
            except PydanticUndefinedAnnotation:
                continue  # a forward reference only its first use can resolve: built then, as without this
            built.append(f"{name}.{value.__qualname__}")
    return built


class Runtime:
    """The container's parts. ``chain``, ``registry``, ``keys_loader`` and ``conversations`` replace what the parts
    would build (tests)."""

    def __init__(
        self,
        settings: Settings,
        *,
        chain: FallbackChain | None = None,
        registry: ToolRegistry | None = None,
        keys_loader: KeysLoader = load_provider_keys,
        state: StateStore | None = None,
    ):
        self.models = Models(settings, chain=chain, keys_loader=keys_loader)
        self.tools = Tools(settings, registry)
        self.stores = Stores(settings, state)
        self._settings = settings
        self._limits = (settings, engine_limits(settings))
        self._budgets: Book | None = None

    @property
    def settings(self) -> Settings:
        return self._settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        """Swap the settings of a running app (tests do): every part reads the new ones; what was built stays."""
        self._settings = self.models.settings = self.tools.settings = self.stores.settings = settings

    @property
    def limits(self) -> EngineLimits:
        """The engine's limits, built once per ``settings``."""
        if self._limits[0] is not self.settings:
            self._limits = (self.settings, engine_limits(self.settings))
        return self._limits[1]

    def budgets(self) -> Book | None:
        """The per-caller budgets (``api/turns/budgets.py``), built on first use; None when no BUDGET_* limit is set (no
        budget is kept, no store call made)."""
        if not self.settings.budgets_on():
            return None
        book = self._budgets
        if book is None or book.settings is not self.settings:
            from chatloop.providers.budgeted import Book

            self._budgets = book = Book(self.settings, self.models.catalog)
        return book

    def prime(self, sdk_modules: Sequence[str], modules: Sequence[str] = ()) -> None:
        """Build now what the first turn would build, where none of it holds a key, a connection or a process (a
        SnapStart snapshot): ``modules`` imported, each of ``sdk_modules`` primed (``providers.warmup.prime``: its
        modules, the TLS context, a keyless HTTP client, the chunk schema), the request bodies' validators
        (``build_schemas``) and the tools (``Tools.prime``)."""
        for module in modules:
            importlib.import_module(module)
        for sdk_module in sdk_modules:
            prime_sdk(sdk_module)
        build_schemas()
        self.tools.prime()

    def forget_credentials(self) -> None:
        """Drop the provider keys and the chain built with them (``Models.forget_credentials``)."""
        self.models.forget_credentials()
