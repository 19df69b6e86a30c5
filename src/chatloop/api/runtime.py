"""What the app keeps for the life of the container: settings, the model chain and the tools.

Built lazily on the first request that needs them (keys may come from Secrets Manager; the sandbox
starts its spare process once the turn's first model call is in flight; MCP servers list their tools when a turn
first needs them), and injectable for tests. Under SnapStart, ``prime`` builds what can be frozen before the
snapshot and ``forget_credentials`` drops what must not be.

Usage::

    runtime = Runtime(Settings.from_env())
    model = runtime.model_for("groq:llama-3.3-70b-versatile")      # a FallbackChain for one turn
    registry = await runtime.tools_for_turn(deadline)              # the built-in tool and the MCP servers' tools
    runtime.prime(["groq"], ["chatloop.api.openai.responses.endpoint"])            # before a snapshot: no key, process or connection
    runtime.forget_credentials()                                   # keys and the chain are read again on next use
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from chatloop.config import DEFAULT_MODEL_CHAIN, MCPServerConfig, Settings
from chatloop.deadline import Deadline
from chatloop.engine.limits import EngineLimits
from chatloop.observability import logger
from chatloop.providers import bedrock
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
from chatloop.providers.warmup import prime as prime_sdk
from chatloop.providers.warmup import when_in_flight
from chatloop.secrets import load_provider_keys
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool, JavaScriptSandbox
from chatloop.tools.javascript.tool import TOOL_NAME as JAVASCRIPT_TOOL

if TYPE_CHECKING:
    from chatloop.providers.budgeted import Book
    from chatloop.store.idempotency import IdempotencyRecords
    from chatloop.store.service import ConversationStore
    from chatloop.tools.mcp import MCPServers, TurnTools

BUILTIN_TOOLS = (JAVASCRIPT_TOOL,)
DEMO_PROVIDER = "demo"
CHAIN_ALIAS = "chatloop"
"""The model id that means "the configured chain, from its first entry" (what a client gets with no ``model``)."""


class UnknownModel(ValueError):
    pass


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
    def __init__(
        self,
        settings: Settings,
        *,
        chain: FallbackChain | None = None,
        registry: ToolRegistry | None = None,
        keys_loader: Callable[[Settings], dict[str, str | None]] = load_provider_keys,
        conversations: ConversationStore | None = None,
    ):
        self.settings = settings
        self.catalog = Catalog.load(overlay=settings.model_catalog_file or None)
        self._chain = chain
        self._chain_error: ChainMisconfigured | None = None
        """Why the chain cannot be built with the keys read (cached, like the chain, until they are read again)."""
        self._config_error = None if chain else self._check_chain()
        self._registry = registry
        self._keys: dict[str, str | None] | None = None
        self._keys_loader = keys_loader
        self._lock = threading.Lock()
        self._conversations = conversations
        self._limits = (settings, engine_limits(settings))
        self._mcp: MCPServers | None = None
        self._budgets: Book | None = None
        self.idempotency: IdempotencyRecords | None = None
        if settings.idempotency_table_name:
            from chatloop.store.idempotency import IdempotencyRecords

            self.idempotency = IdempotencyRecords(
                settings.idempotency_table_name, settings.idempotency_expiry_seconds
            )

    @property
    def limits(self) -> EngineLimits:
        """The engine's limits, built once per ``settings`` (tests may swap the settings of a running app)."""
        if self._limits[0] is not self.settings:
            self._limits = (self.settings, engine_limits(self.settings))
        return self._limits[1]

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

    def registry(self) -> ToolRegistry:
        with self._lock:
            if self._registry is None:
                sandbox = JavaScriptSandbox(
                    memory_mb=self.settings.js_memory_mb,
                    max_concurrency=self.settings.sandbox_concurrency(),
                    prespawn=self.settings.js_prespawn,
                )
                # Its spare Deno process (~40 ms of CPU to start) starts once the first model call waits on the
                # network, rather than competing with the turn for the CPU before it (a third of a core at 512 MB).
                when_in_flight(sandbox.warm)
                self._registry = ToolRegistry([ExecuteJavaScriptTool(sandbox)])
            return self._registry

    def prime(self, sdk_modules: Sequence[str], modules: Sequence[str] = ()) -> None:
        """Build now what the first turn would build, where none of it holds a key, a connection or a process (a
        SnapStart snapshot): ``modules`` imported, each of ``sdk_modules`` primed (``providers.warmup.prime``: its
        modules, the TLS context, a keyless HTTP client, the chunk schema), the request bodies' validators
        (``build_schemas``), the tool registry (the sandbox without its process) and, when MCP servers are
        configured, the ``mcp`` SDK (the servers are listed on first use)."""
        for module in modules:
            importlib.import_module(module)
        for sdk_module in sdk_modules:
            prime_sdk(sdk_module)
        build_schemas()
        self.registry()
        if self.settings.mcp_servers:
            from chatloop.tools.mcp.client import load_sdk

            load_sdk()
            self.mcp_servers()

    def forget_credentials(self) -> None:
        """Drop the provider keys and the chain built with them (and its SDK clients, with their connection
        pools): the next request reads the keys again (after a SnapStart restore: this copy's, never the
        snapshot's)."""
        with self._lock:
            self._keys = None
            self._chain = None
            self._chain_error = None
        drop_clients()
        bedrock.drop_clients()

    def conversations(self) -> ConversationStore:
        """The conversation store (DynamoDB or the SQLite file), opened on first use: no I/O until it is needed."""
        with self._lock:
            if self._conversations is None:
                from chatloop.store import open_store

                self._conversations = open_store(self.settings)
            return self._conversations

    def budgets(self) -> Book | None:
        """The per-caller budgets (``api/turns/budgets.py``), built on first use; None when no BUDGET_* limit is set (no
        budget is kept, no store call made)."""
        if not self.settings.budgets_on():
            return None
        book = self._budgets
        if book is None or book.settings is not self.settings:
            from chatloop.providers.budgeted import Book

            self._budgets = book = Book(self.settings, self.catalog)
        return book

    def mcp_servers(self) -> MCPServers:
        """The operator's MCP servers (MCP_SERVERS), their tool lists cached for the container's life."""
        if self._mcp is None:
            from chatloop.tools.mcp import MCPServers

            self._mcp = MCPServers(self.settings)
        return self._mcp

    async def mcp_for_turn(
        self, deadline: Deadline, client_servers: Sequence[MCPServerConfig] = ()
    ) -> TurnTools:
        """The MCP tools one turn may use (MCP_SERVERS' and a request's own ``client_servers``), listed when a turn
        first needs them; a server that is down or slow is skipped for the turn, with its reason logged."""
        from chatloop.tools.mcp import TurnTools

        if not self.settings.mcp_servers and not client_servers:
            return TurnTools()
        return await self.mcp_servers().tools_for_turn(deadline, client_servers, taken=self.tool_names())

    async def tools_for_turn(
        self, deadline: Deadline, client_servers: Sequence[MCPServerConfig] = ()
    ) -> ToolRegistry:
        """The registry of one turn: the built-in tool, then every MCP tool reachable for it."""
        registry = self.registry()
        if not self.settings.mcp_servers and not client_servers:
            return registry
        turn = await self.mcp_for_turn(deadline, client_servers)
        return registry.with_tools(turn.tools, turn.skipped)

    def mcp_servers_labels(self) -> list[str]:
        """The labels of the operator's MCP servers: a request's own server may not take one."""
        return [c.label for c in self.settings.mcp_servers]

    def mcp_name(self, name: str) -> bool:
        """Whether ``name`` has the shape of a configured MCP server's tool (``<label>__<tool>``): a request may
        name one before the server's tools are listed."""
        label, sep, tool = name.partition("__")
        return bool(sep and tool) and label in {c.label for c in self.settings.mcp_servers}

    def tool_names(self) -> list[str]:
        """The built-in tools, without starting the sandbox."""
        return self._registry.names() if self._registry is not None else list(BUILTIN_TOOLS)

    def model_for(self, requested: str | None, strict: bool) -> FallbackChain:
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
            raise UnknownModel(f"unknown model {requested!r}; available: {self.available_models()}")
        return chain.for_turn()

    def available_models(self) -> list[str]:
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
