"""Every setting of the handler, read once from the environment, and the one door to the environment: longer than
400 lines because every setting lives here, each with its documentation (one typed home, as the docs' table is one).

Each field of ``Settings`` documents its environment variable; docs/configuration.md's table lists the same
names. Nothing else in the package reads ``os.environ`` (but this module's helpers, ``config_env`` reading and
parsing the environment, ``config_mcp`` MCP_SERVERS' entries and ``config_checks`` the checks that take more than a
comparison, all re-exported here): what is read later than start-up, by name, goes through ``from_environment`` — the provider keys (which may also come from a secret, and are registered for redaction
when read), the providers' base URLs, ``DENO_BIN``, the values of MCP header placeholders, and the Powertools
service and namespace names (Powertools itself reads its ``POWERTOOLS_*`` variables too, and the OpenTelemetry SDK,
once tracing is configured here, its own limits and resource variables such as ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``).

Usage::

    from chatloop.config import Settings, from_environment
    settings = Settings.from_env()          # or Settings(max_iterations=4) in tests
    settings.max_iterations                 # 10 unless MAX_ITERATIONS says otherwise
    from_environment("GROQ_BASE_URL")       # None when unset or empty
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from chatloop.config_checks import check_images, check_mcp_prefixes, check_otel, check_webhook, image_types
from chatloop.config_env import ConfigError as ConfigError
from chatloop.config_env import aws_region as aws_region
from chatloop.config_env import default_store_path as default_store_path
from chatloop.config_env import env_name as env_name
from chatloop.config_env import from_environment as from_environment
from chatloop.config_env import parse_value
from chatloop.config_mcp import MCP_LABEL as MCP_LABEL
from chatloop.config_mcp import MCP_PLACEHOLDER as MCP_PLACEHOLDER
from chatloop.config_mcp import MCPServerConfig as MCPServerConfig
from chatloop.config_mcp import parse_mcp_servers as parse_mcp_servers
from chatloop.config_mcp import under_prefix as under_prefix

DEFAULT_MODEL_CHAIN = (
    "groq:openai/gpt-oss-120b,groq:llama-3.3-70b-versatile,groq:llama-3.1-8b-instant,openai:gpt-4.1-mini"
)
KEY_VARIABLES = {"groq": "GROQ_API_KEY", "openai": "OPENAI_API_KEY", "local": "LOCAL_API_KEY"}
"""Each provider's key variable (in the environment or PROVIDER_KEYS_SECRET_ARN's secret), read and redacted by name."""


@dataclass(frozen=True)
class Settings:
    # --- the loop -------------------------------------------------------------------------
    max_iterations: int = 10
    """MAX_ITERATIONS: model calls per user turn, the final answer included. Requests may ask for fewer."""
    tool_caps: Mapping[str, int] = field(default_factory=lambda: {"execute_javascript": 3})
    """TOOL_BUDGETS: executions per tool per turn (its cap), as JSON (``{"execute_javascript": 3}``)."""
    substantive_answer_chars: int = 200
    """SUBSTANTIVE_ANSWER_CHARS: content longer than this, sent with tool calls, ends the turn."""
    system_prompt_guidance: bool = True
    """SYSTEM_PROMPT_GUIDANCE: add the 'answer right after execute_javascript' instruction."""
    legacy_syntax_reminders: int = 2
    """LEGACY_SYNTAX_REMINDERS: reminders sent when a model writes ``<function=...>`` text."""
    deadline_reserve_seconds: float = 4.0
    """DEADLINE_RESERVE_SECONDS: time kept back from tool work so the model can still answer."""
    # --- requests -------------------------------------------------------------------------
    request_timeout_seconds: float = 28.0
    """REQUEST_TIMEOUT_SECONDS: a request's whole budget (API Gateway's integration timeout is 29 s)."""
    lambda_safety_margin_seconds: float = 1.0
    """LAMBDA_SAFETY_MARGIN_SECONDS: kept back from the Lambda's remaining time."""
    max_body_bytes: int = 6_000_000
    """MAX_BODY_BYTES: larger request bodies get a 413. The default is what Lambda accepts (a 6 MB synchronous
    request payload, the event's envelope included), so context fitting, not this limit, decides how much of a
    long conversation is sent."""
    sse_heartbeat_seconds: float = 10.0
    """SSE_HEARTBEAT_SECONDS: a streamed response sends a ``: ping`` comment after this long without bytes."""
    websocket_max_message_bytes: int = 128 * 1024
    """WEBSOCKET_MAX_MESSAGE_BYTES: a larger WebSocket message closes it (1009; API Gateway's 128 KB limit)."""
    websocket_max_connection_seconds: int = 7200
    """WEBSOCKET_MAX_CONNECTION_SECONDS: a WebSocket connection's longest life (1001; API Gateway's 2 hours)."""
    websocket_idle_seconds: float = 600.0
    """WEBSOCKET_IDLE_SECONDS: an idle WebSocket connection is closed (1001; API Gateway's 10 minutes)."""
    max_json_depth: int = 64
    """MAX_JSON_DEPTH: a body nested deeper (lists and objects) gets a 400."""
    max_messages: int = 2000
    """MAX_MESSAGES: a conversation with more messages gets a 413."""
    # --- images (docs/api.md#images): checked at the door, never fetched unless IMAGE_FETCH -------
    image_max_count: int = 5
    """IMAGE_MAX_COUNT: image parts a request's own input may carry (Groq takes at most 5 a request)."""
    image_max_bytes: int = 3_000_000
    """IMAGE_MAX_BYTES: the largest image a ``data:`` URL (or IMAGE_FETCH) may hold, decoded."""
    image_media_types: str = "png,jpeg,gif,webp"
    """IMAGE_MEDIA_TYPES: comma-separated image types taken, among png, jpeg, gif and webp."""
    image_url_max_chars: int = 2048
    """IMAGE_URL_MAX_CHARS: the longest image URL (https) taken."""
    image_fetch: bool = False
    """IMAGE_FETCH: fetch an image sent by URL for a model that takes only bytes (Bedrock), by ``netpolicy``."""
    image_fetch_allow_private: bool = False
    """IMAGE_FETCH_ALLOW_PRIVATE: let IMAGE_FETCH reach a loopback or private address (never a link-local one)."""
    api_base_path: str = "/"
    """API_BASE_PATH: path prefix stripped by Mangum (a custom domain's base path or a named HTTP API stage)."""
    # --- hardening, round 3 (api): dependencies inside the deadline, adapter trust ----------
    idempotency_timeout_seconds: float = 2.0
    """IDEMPOTENCY_TIMEOUT_SECONDS: the longest one idempotency store call may take, its retries included (never
    more than a fifth of the request's remaining time before the turn, half after it); a store slower than that is a store failure."""
    trust_adapter_headers: bool = False
    """TRUST_ADAPTER_HEADERS: read the Lambda Web Adapter's ``x-amzn-lambda-context`` / ``x-amzn-request-context``
    headers (deadline, request id, identity) on loopback requests. ``src/run.sh`` sets it when Lambda starts it
    under the adapter; anywhere else a client could write those headers."""
    lambda_function_name: str = ""
    """AWS_LAMBDA_FUNCTION_NAME: set by Lambda in every execution environment. There a header alone never names a
    caller (``api/http/caller.py``); unset, as in ``make run``, the ``x-api-key`` header does, hashed. Set, a background
    response's turn is handed to an asynchronous invocation of this function (``api/openai/responses/background.py``)."""
    lambda_function_version: str = ""
    """AWS_LAMBDA_FUNCTION_VERSION: set by Lambda (``$LATEST`` or the published version the alias points at): the
    qualifier of the asynchronous invocation that runs a background response, so it runs the same code."""
    lwa_pass_through_path: str = "/events"  # noqa: S105 - a path, not a password
    """AWS_LWA_PASS_THROUGH_PATH: stream mode: where the Lambda Web Adapter POSTs a non-HTTP event (the asynchronous
    invocation that runs a background response); the adapter's default is ``/events``."""
    websocket_management_endpoint: str = ""
    """WEBSOCKET_MANAGEMENT_ENDPOINT: the API Gateway Management API endpoint WebSocket mode posts a connection's
    events to (``https://{api}.execute-api.{region}.amazonaws.com/{stage}``; the template sets it). Empty: the
    endpoint of the event's own ``domainName`` and ``stage``."""
    # --- models ---------------------------------------------------------------------------
    model_chain: str = ""
    """MODEL_CHAIN: comma-separated ``provider:model`` entries tried in order. Empty: the default chain
    when a provider key is configured, else the offline demo model. A chain that cannot be built as written (a
    malformed entry, an unknown provider, no usable member) makes every turn a 503 naming it (docs/models.md)."""
    model_first_chunk_timeout_seconds: float = 10.0
    """MODEL_FIRST_CHUNK_TIMEOUT_SECONDS: a model that sends nothing for this long is skipped for the next one."""
    rate_limit_max_wait_seconds: float = 2.0
    """RATE_LIMIT_MAX_WAIT_SECONDS: the longest rate-limit wait the chain sleeps out (when no other model is left)."""
    model_catalog_file: str = ""
    """MODEL_CATALOG_FILE: a JSON file in models.json's format merged over the packaged catalog (add a model, or
    change a packaged model's context window, without a code change)."""
    unknown_model_fallback: bool = False
    """UNKNOWN_MODEL_FALLBACK: answer a /v1 request that names a model this server cannot serve with the default
    chain (the response's ``model`` says which answered) instead of a 404 ``model_not_found``."""
    provider_keys_secret_arn: str = ""
    """PROVIDER_KEYS_SECRET_ARN: Secrets Manager secret (JSON with GROQ_API_KEY / OPENAI_API_KEY) read when the
    keys are not in the environment."""
    idempotency_table_name: str = ""
    """IDEMPOTENCY_TABLE_NAME: the DynamoDB table of Idempotency-Key records (the template creates it). Empty: the
    header is ignored and every request runs."""
    idempotency_expiry_seconds: int = 3600
    """IDEMPOTENCY_EXPIRY_SECONDS: how long a stored answer is replayed for its key."""
    # --- conversation store ---------------------------------------------------------------
    conversation_table_name: str = ""
    """CONVERSATION_TABLE_NAME: the DynamoDB table of conversations and stored responses (the template creates it).
    Empty: the SQLite file at CONVERSATION_STORE_PATH."""
    conversation_store_path: str = ""
    """CONVERSATION_STORE_PATH: the SQLite file used when no table is named. Empty: ``chatloop/conversations.sqlite3``
    under the user's data directory (``$XDG_DATA_HOME`` or ``~/.local/share``), or the temp directory when that is
    not writable (as on Lambda)."""
    conversation_ttl_seconds: int = 30 * 24 * 3600
    """CONVERSATION_TTL_SECONDS: how long a conversation or stored response is kept after it was created (its items
    with it); any positive value."""
    conversation_store_timeout_seconds: float = 5.0
    """CONVERSATION_STORE_TIMEOUT_SECONDS: the longest a request waits for the store (within its own deadline)
    before it answers 503."""
    # --- budgets (chatloop/api/turns/budgets.py): per-caller spend limits, kept in the conversation store ---
    budget_tokens_per_day: int = 0
    """BUDGET_TOKENS_PER_DAY: model tokens (prompt + completion) a caller may use per UTC day. 0: no limit. With
    every BUDGET_* limit 0 (the default), no budget is kept and no store call is made."""
    budget_tokens_per_month: int = 0
    """BUDGET_TOKENS_PER_MONTH: model tokens a caller may use per UTC calendar month. 0: no limit."""
    budget_cost_per_day_usd: float = 0.0
    """BUDGET_COST_PER_DAY_USD: dollars a caller may spend per UTC day, at the catalog's per-model prices
    (``price_per_million_tokens`` in models.json; a model without one is charged the highest price known). 0: no
    limit."""
    budget_requests_per_minute: int = 0
    """BUDGET_REQUESTS_PER_MINUTE: turns a caller may start per minute. 0: no limit."""
    budget_tokens_per_minute: int = 0
    """BUDGET_TOKENS_PER_MINUTE: model tokens a caller may use per minute. 0: no limit."""
    budget_concurrent_turns: int = 0
    """BUDGET_CONCURRENT_TURNS: turns of one caller running at once, across every container. 0: no limit."""
    budget_store_failure: str = ""
    """BUDGET_STORE_FAILURE: what a turn does when the budget store fails: ``closed`` (a 503, no model call) or
    ``open`` (answered unmetered, with a warning and the BudgetStoreFailures metric). Empty: ``closed`` on Lambda,
    ``open`` elsewhere (``make run``)."""
    budget_anonymous_caller: str = "anonymous"
    """BUDGET_ANONYMOUS_CALLER: the budget that requests with no caller identity on Lambda share (the name it is
    kept under); ``none``: such requests are not metered."""
    webhook_url: str = ""
    """WEBHOOK_URL: where a background response's end is POSTed (``response.completed`` / ``failed`` / ``cancelled``
    / ``incomplete``, signed with WEBHOOK_SECRET as OpenAI signs its webhooks). Empty: no webhooks."""
    webhook_secret: str = ""
    """WEBHOOK_SECRET: the signing secret of those webhooks (``whsec_`` + base64, as OpenAI's)."""
    webhook_allow_private: bool = False
    """WEBHOOK_ALLOW_PRIVATE: let WEBHOOK_URL be a loopback or private address (local development, tests). A
    link-local or cloud-metadata address is refused whatever it says (``chatloop.netpolicy``)."""
    background_timeout_seconds: float = 900.0
    """BACKGROUND_TIMEOUT_SECONDS: the longest a background response's turn runs (set it to the function's Timeout;
    on Lambda the invocation's own time left bounds it too). A stored turn still running this long after its last
    write is dead, and is ended ``failed`` when it is read."""
    # --- sandbox --------------------------------------------------------------------------
    js_memory_mb: int = 256
    """JS_MEMORY_MB: RLIMIT_DATA of each Deno process."""
    js_max_concurrency: int = 0
    """JS_MAX_CONCURRENCY: sandbox processes running at once (parallel tool calls). 0: as many as the memory
    budget allows (see ``sandbox_concurrency``); a larger value is lowered to that."""
    sandbox_memory_share: float = 0.5
    """SANDBOX_MEMORY_SHARE: the share of the function's memory that running sandboxes may use at their limits."""
    function_memory_mb: int = 1024
    """AWS_LAMBDA_FUNCTION_MEMORY_SIZE: the function's memory, set by Lambda from the template's MemorySize
    (1024 when unset, as in ``make run``)."""
    js_prespawn: bool = True
    """JS_PRESPAWN: keep one Deno process started and waiting for code."""
    # --- SnapStart (chatloop/snapstart.py) ------------------------------------------------
    snapstart_before_checkpoint_path: str = ""
    """AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH: stream mode under SnapStart: the route the Lambda Web Adapter POSTs
    to before the snapshot (the template sets it when EnableSnapStart is true). Empty: no such route."""
    snapstart_after_restore_path: str = ""
    """AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH: the route the adapter POSTs to after a restore. Empty: no such route."""
    # --- MCP servers ----------------------------------------------------------------------
    mcp_servers: tuple[MCPServerConfig, ...] = ()
    """MCP_SERVERS: MCP servers whose tools are offered beside the built-in tool, as a JSON list of
    ``{"label", "url", "headers"?, "allowed_tools"?, "timeout_seconds"?}`` (see ``parse_mcp_servers``)."""
    mcp_tool_limit: int = 3
    """MCP_TOOL_BUDGET: executions per MCP tool per turn, unless TOOL_BUDGETS names the tool."""
    mcp_tools_ttl_seconds: float = 300.0
    """MCP_TOOLS_TTL_SECONDS: how long a server's tool list is reused before it is listed again."""
    mcp_list_timeout_seconds: float = 3.0
    """MCP_LIST_TIMEOUT_SECONDS: a server that has not listed its tools by then is skipped for the turn."""
    mcp_allowed_urls: str = ""
    """MCP_ALLOWED_URLS: comma-separated URL prefixes a /v1/responses request's own ``mcp`` tools may point at.
    Empty: no client-supplied MCP servers."""
    approval_required_tools: str = ""
    """APPROVAL_REQUIRED_TOOLS: comma-separated tool names (as offered: ``execute_javascript``,
    ``docs__create_page``; ``docs__*`` for every tool of a server) whose calls wait for a person's approval."""
    compaction_threshold_tokens: int = 0
    """COMPACTION_THRESHOLD_TOKENS: a stored conversation or response chain estimated past this many tokens is
    compacted (its earlier turns summarized) before the turn, instead of trimmed; 0: off."""
    compaction_model: str = ""
    """COMPACTION_MODEL: the chain entry (or catalog model) that writes compaction summaries; empty: the turn's."""
    # --- observability --------------------------------------------------------------------
    log_content: bool = False
    """LOG_CONTENT: include message text and tool arguments in log lines."""
    version: str = "0.1.0"
    """APP_VERSION: reported by /health."""
    # --- OpenTelemetry (chatloop/tracing): the standard OTEL_* variables; off unless an exporter is configured ----
    otel_sdk_disabled: bool = False
    """OTEL_SDK_DISABLED: true turns tracing off whatever else is set."""
    otel_traces_exporter: str = ""
    """OTEL_TRACES_EXPORTER: ``otlp`` (the only one supported; the default once an endpoint is set) or ``none``."""
    otel_metrics_exporter: str = ""
    """OTEL_METRICS_EXPORTER: ``otlp`` (the default once an endpoint is set) or ``none`` (spans only)."""
    otel_exporter_otlp_endpoint: str = ""
    """OTEL_EXPORTER_OTLP_ENDPOINT: OTLP/HTTP base URL (``/v1/traces`` and ``/v1/metrics`` are appended), e.g. the
    ADOT collector layer's ``http://localhost:4318``. Empty (and no per-signal endpoint): no tracing, and the
    OpenTelemetry packages are never imported."""
    otel_exporter_otlp_traces_endpoint: str = ""
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: the full traces URL, used as is (X-Ray's
    ``https://xray.<region>.amazonaws.com/v1/traces`` is signed with SigV4)."""
    otel_exporter_otlp_metrics_endpoint: str = ""
    """OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: the full metrics URL, used as is."""
    otel_exporter_otlp_headers: str = ""
    """OTEL_EXPORTER_OTLP_HEADERS: ``key=value`` pairs, comma-separated, sent with every export (a backend's key;
    redacted like the provider keys)."""
    otel_exporter_otlp_traces_headers: str = ""
    """OTEL_EXPORTER_OTLP_TRACES_HEADERS: the span exports' own headers, in place of OTEL_EXPORTER_OTLP_HEADERS."""
    otel_exporter_otlp_metrics_headers: str = ""
    """OTEL_EXPORTER_OTLP_METRICS_HEADERS: the metrics exports' own headers, in place of OTEL_EXPORTER_OTLP_HEADERS."""
    otel_exporter_otlp_timeout: int = 3000
    """OTEL_EXPORTER_OTLP_TIMEOUT: milliseconds one export may take (each flush at the end of an invocation too)."""
    otel_exporter_otlp_traces_timeout: int = 0
    """OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: milliseconds one span export may take. 0: OTEL_EXPORTER_OTLP_TIMEOUT. (Read
    here, in milliseconds as the spec has it: the exporter would read the variables as seconds.)"""
    otel_exporter_otlp_metrics_timeout: int = 0
    """OTEL_EXPORTER_OTLP_METRICS_TIMEOUT: milliseconds one metrics export may take. 0: OTEL_EXPORTER_OTLP_TIMEOUT."""
    otel_service_name: str = ""
    """OTEL_SERVICE_NAME: the traces' ``service.name``. Empty: POWERTOOLS_SERVICE_NAME, else ``chatloop``."""
    otel_instrumentation_genai_capture_message_content: str = ""
    """OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: ``true`` / ``SPAN_ONLY`` / ``SPAN_AND_EVENT`` put prompts,
    answers, tool arguments and results on the spans, redacted as the logs are. Empty / ``false`` / ``NO_CONTENT``:
    none (the default)."""

    def otel_traces_endpoint(self) -> str:
        """Where spans go (empty: nowhere)."""
        if self.otel_sdk_disabled or self.otel_traces_exporter.lower() == "none":
            return ""
        return self._otlp_url(self.otel_exporter_otlp_traces_endpoint, "traces")

    def otel_metrics_endpoint(self) -> str:
        """Where the GenAI metrics go (empty: nowhere; never without traces)."""
        if not self.otel_traces_endpoint() or self.otel_metrics_exporter.lower() == "none":
            return ""
        return self._otlp_url(self.otel_exporter_otlp_metrics_endpoint, "metrics")

    def _otlp_url(self, signal_url: str, signal: str) -> str:
        """A signal's own URL as it is, else the base endpoint with ``/v1/<signal>`` (the OTLP exporter spec)."""
        base = self.otel_exporter_otlp_endpoint.rstrip("/")
        return signal_url or (f"{base}/v1/{signal}" if base else "")

    def otel_export_timeouts(self) -> tuple[float, float]:
        """Seconds one span export and one metrics export may take (a signal's own timeout, else the general one)."""
        general = self.otel_exporter_otlp_timeout
        return (self.otel_exporter_otlp_traces_timeout or general) / 1000, (
            self.otel_exporter_otlp_metrics_timeout or general
        ) / 1000

    def otel_capture_content(self) -> bool:
        """Whether message content goes on spans (opted in, by the conventions' Python utilities' values)."""
        value = self.otel_instrumentation_genai_capture_message_content.strip().lower()
        return value in {"true", "1", "span_only", "span_and_event"}

    def sandbox_concurrency(self) -> int:
        """Sandbox runs at once: concurrency x JS_MEMORY_MB stays within SANDBOX_MEMORY_SHARE of the function's
        memory (4 parallel runs at their limit once took ~1 GB of a 1024 MB function).

        >>> Settings(function_memory_mb=1024).sandbox_concurrency()     # 512 MB budget / 256 MB a run
        2
        """
        fits = max(1, int(self.function_memory_mb * self.sandbox_memory_share) // self.js_memory_mb)
        return min(self.js_max_concurrency, fits) if self.js_max_concurrency > 0 else fits

    def store_path(self) -> str:
        """The SQLite file of the embedded store: CONVERSATION_STORE_PATH, else under the user's data directory when
        it is writable, else under the temp directory."""
        return self.conversation_store_path or default_store_path()

    def budgets_on(self) -> bool:
        """Whether any BUDGET_* limit is set: only then is a caller's budget kept (and the store called for it)."""
        return any(value > 0 for value in self._budget_limits())

    def _budget_limits(self) -> tuple[float, ...]:
        return (
            self.budget_tokens_per_day,
            self.budget_tokens_per_month,
            self.budget_cost_per_day_usd,
            self.budget_requests_per_minute,
            self.budget_tokens_per_minute,
            self.budget_concurrent_turns,
        )

    def approval_required(self, name: str) -> bool:
        """Whether APPROVAL_REQUIRED_TOOLS names tool ``name`` (by its offered name, or its server's ``label__*``).

        >>> Settings(approval_required_tools="docs__*, execute_javascript").approval_required("docs__create")
        True
        """
        for pattern in (p.strip() for p in self.approval_required_tools.split(",")):
            if pattern and (name == pattern or (pattern.endswith("__*") and name.startswith(pattern[:-1]))):
                return True
        return False

    def image_types(self) -> tuple[str, ...]:
        """IMAGE_MEDIA_TYPES as media types (``image/png``, ...)."""
        return image_types(self.image_media_types)

    def mcp_url_prefixes(self) -> list[str]:
        """MCP_ALLOWED_URLS as a list (empty: no client-supplied MCP server is accepted)."""
        return [p.strip() for p in self.mcp_allowed_urls.split(",") if p.strip()]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every setting from ``environ`` (default ``os.environ``); unset ones keep their default."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}  # each value parsed to its field's type by _parse
        for f in fields(cls):
            name = env_name(f.name)
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                continue
            parser = _PARSERS.get(name)
            values[f.name] = (
                parser(raw.strip())
                if parser
                else parse_value(name, raw.strip(), type(getattr(_DEFAULTS, f.name)))
            )
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        if not 1 <= self.max_iterations <= 100:
            raise ConfigError("MAX_ITERATIONS must be between 1 and 100")
        if any(not isinstance(v, int) or v < 1 for v in self.tool_caps.values()):
            raise ConfigError("TOOL_BUDGETS values must be positive integers")
        # MODEL_CHAIN is checked where the chain is built (providers.factory): a chain that cannot be built is a 503
        # naming it on every turn and an unhealthy /health, not a failed init (retried, costly, and silent)
        if not 0 < self.sandbox_memory_share <= 1:
            raise ConfigError("SANDBOX_MEMORY_SHARE must be above 0 and at most 1")
        if self.js_memory_mb > self.function_memory_mb * self.sandbox_memory_share:
            raise ConfigError(
                f"JS_MEMORY_MB={self.js_memory_mb} does not fit SANDBOX_MEMORY_SHARE={self.sandbox_memory_share:g} "
                f"of the function's {self.function_memory_mb} MB"
            )
        if self.conversation_ttl_seconds <= 0 or self.conversation_store_timeout_seconds <= 0:
            raise ConfigError(
                "CONVERSATION_TTL_SECONDS and CONVERSATION_STORE_TIMEOUT_SECONDS must be positive"
            )
        if self.idempotency_timeout_seconds <= 0:
            raise ConfigError("IDEMPOTENCY_TIMEOUT_SECONDS must be positive")
        if self.mcp_tool_limit < 1 or self.mcp_tools_ttl_seconds < 0 or self.mcp_list_timeout_seconds <= 0:
            raise ConfigError(
                "MCP_TOOL_BUDGET and MCP_LIST_TIMEOUT_SECONDS must be positive, MCP_TOOLS_TTL_SECONDS not negative"
            )
        if self.compaction_threshold_tokens < 0:
            raise ConfigError("COMPACTION_THRESHOLD_TOKENS must not be negative (0: off)")
        check_mcp_prefixes(self.mcp_url_prefixes())
        if self.budget_store_failure not in {"", "closed", "open"}:
            raise ConfigError("BUDGET_STORE_FAILURE must be closed or open")
        if min(self._budget_limits()) < 0:
            raise ConfigError("BUDGET_* limits must not be negative (0: no limit)")
        check_images(
            self.image_max_count, self.image_max_bytes, self.image_url_max_chars, self.image_media_types
        )
        if self.background_timeout_seconds <= 0:
            raise ConfigError("BACKGROUND_TIMEOUT_SECONDS must be positive")
        if self.webhook_url:
            check_webhook(self.webhook_url, self.webhook_secret, self.webhook_allow_private)
        check_otel(
            self.otel_traces_exporter,
            (
                self.otel_exporter_otlp_timeout,
                self.otel_exporter_otlp_traces_timeout,
                self.otel_exporter_otlp_metrics_timeout,
            ),
        )
        if self.request_timeout_seconds <= 0 or self.deadline_reserve_seconds < 0:
            raise ConfigError(
                "REQUEST_TIMEOUT_SECONDS must be positive and DEADLINE_RESERVE_SECONDS not negative"
            )


_PARSERS = {"MCP_SERVERS": parse_mcp_servers}
"""Settings whose value is more than a scalar or a JSON object: parsed by their own function."""

_DEFAULTS = Settings()
