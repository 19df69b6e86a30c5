"""A ChatModel on an official OpenAI-compatible SDK (``groq`` or ``openai``): the shared adapter.

Nothing hidden: the SDK's retries are off (``max_retries=0``), each call's time limit comes from the turn's
deadline, and every failure is raised as a typed ``ModelError``. The SDK is imported when the first model of
that provider is called, not at import time (cold start). The SDK's own ``*_API_KEY`` / ``*_BASE_URL``
variables work, so a chain can point at any OpenAI-compatible server.

The first call of a process pays for what later calls reuse; each piece is made once and is ready before it is
needed (``prime``, in a SnapStart snapshot; while the first call is in flight, on a plain cold start):

- one TLS context (CA certificates only, ~30 ms of CPU to load) shared by every client of every SDK;
- per SDK, its chat resource modules, a keyless HTTP client (the key is added by the SDK client built around it
  on first use, after a restore: never in a snapshot) and the streamed chunk's pydantic schema (built on the first
  chunk otherwise, after the model answered: on the turn's path);
- ``when_in_flight`` callbacks: work the turn needs later (the sandbox's spare Deno process) started once a model
  call is waiting on the network, so it takes CPU the turn is not using.

Usage::

    model = GroqModel(catalog.get("groq:llama-3.3-70b-versatile"), catalog.provider("groq"), api_key="gsk_...")
    async for item in model.stream(ModelRequest(messages=[...], deadline=Deadline.after(20))): ...
    prime("groq")                  # before a snapshot: everything above but a key or a connection
    drop_clients()                 # ... and no client that may have held either
    when_in_flight(sandbox.warm)   # run once, when the next model call is waiting for its answer
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import ssl
import threading
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from chatloop.config import from_environment
from chatloop.deadline import until
from chatloop.providers.base import ModelRequest, ModelResponse, StreamItem, TextDelta, Usage
from chatloop.providers.catalog import ModelInfo, ProviderInfo
from chatloop.providers.errors import DeadlineExceeded, ModelError, Transient, classify
from chatloop.providers.stream import ToolCallAccumulator, field_of
from chatloop.textsafe import text_safe

# One client per event loop (an httpx pool belongs to its loop), then per SDK, key and base URL. Keyed by the loop
# object, not its id(): a later loop can reuse a dead loop's id and would get a client bound to that dead loop.
_CLIENTS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str | None, str | None], _AsyncClient]
] = weakref.WeakKeyDictionary()
_TLS: ssl.SSLContext | None = None
"""The TLS context every client shares (``tls_context``)."""
_HTTP: dict[str, Any] = {}
"""Per SDK, a primed keyless ``httpx.AsyncClient`` that has never connected: the next client built takes it."""
_PRIMED: set[str] = set()
"""The SDKs whose modules and chunk schema are ready (``prime``)."""
_IN_FLIGHT: list[Callable[[], None]] = []
"""Run once each, when the next model call is waiting for its answer (``when_in_flight``)."""
_LOCK = threading.Lock()
CA_DIR = "chatloop-ca"
"""Beside certifi in the layer: its CAs as an OpenSSL hashed directory (``scripts/package.py``'s ``CA_DIR``)."""
SAMPLE_CHUNK: dict[str, object] = {
    "id": "chatcmpl-prime",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": "prime",
    "choices": [
        {
            "index": 0,
            "delta": {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            },
            "finish_reason": None,
            "logprobs": None,
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    "x_groq": {"id": "req_prime", "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
}
"""A streamed chunk with every part a turn reads (text, a tool call, usage, Groq's ``x_groq``): constructing it
builds the pydantic schemas the SDK builds lazily on the first real chunk."""


class _Completions(Protocol):
    def create(self, **params: object) -> Awaitable[AsyncIterable[object]]: ...


class _Chat(Protocol):
    @property
    def completions(self) -> _Completions: ...


class _AsyncClient(Protocol):
    """What this adapter uses of ``groq.AsyncGroq`` / ``openai.AsyncOpenAI`` (imported lazily, so not named here):
    a streamed ``chat.completions.create``, whose chunks are read with ``field_of``."""

    @property
    def chat(self) -> _Chat: ...


class SDKChatModel:
    sdk_module = ""
    """The SDK's import name."""
    client_class = ""
    """Its async client class."""

    def __init__(
        self,
        info: ModelInfo,
        provider: ProviderInfo,
        api_key: str | None = None,
        base_url: str | None = None,
        first_chunk_timeout: float = 10.0,
    ):
        self.info = info
        self.provider = provider
        self.name = info.name
        self.first_chunk_timeout = first_chunk_timeout
        self._api_key = api_key
        self._base_url = base_url or (
            from_environment(provider.base_url_env) if provider.base_url_env else None
        )

    # --- the client --------------------------------------------------------------------------
    def _sdk(self) -> ModuleType:
        return importlib.import_module(self.sdk_module)

    def _client(self) -> _AsyncClient:
        clients = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
        key = (self.sdk_module, self._api_key, self._base_url)
        client = clients.get(key)
        if client is None:
            sdk = self._sdk()
            kwargs: dict[str, object] = {
                "api_key": self._api_key or "missing",
                "max_retries": 0,
                "http_client": http_client(self.sdk_module),
            }
            if self._base_url:
                kwargs["base_url"] = self._base_url
            client = clients[key] = getattr(sdk, self.client_class)(**kwargs)
        return client

    # --- a call ------------------------------------------------------------------------------
    def params(self, request: ModelRequest) -> dict[str, object]:
        """The create() parameters: only what was asked for, less what this model rejects."""
        messages = request.messages
        if not self.provider.tool_message_name:
            messages = [
                {k: v for k, v in m.items() if k != "name"} if m["role"] == "tool" else m for m in messages
            ]
        params: dict[str, object] = {"model": self.info.model_id, "messages": messages, "stream": True}
        if self.provider.stream_usage:
            params["stream_options"] = {"include_usage": True}
        if request.tools:
            params["tools"] = request.tools
            if request.tool_choice is not None:
                params["tool_choice"] = request.tool_choice
            if request.parallel_tool_calls is not None and self.info.parallel_tool_calls:
                params["parallel_tool_calls"] = request.parallel_tool_calls
        for name in ("temperature", "top_p"):
            value = getattr(request, name)
            if value is not None and name not in self.info.drop_params:
                params[name] = value
        if request.max_tokens is not None:
            params[self.info.max_tokens_param] = request.max_tokens
        if request.response_format is not None:
            params["response_format"] = request.response_format
        # The chain passed over models whose catalog entry refuses one of these.
        params.update({k: v for k, v in request.params.items() if k not in self.info.drop_params})
        return params

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        sdk = self._sdk()
        budget = request.deadline.remaining()
        if budget <= 0:
            raise DeadlineExceeded("no time left for a model call", model=self.name)
        content: list[str] = []
        calls = ToolCallAccumulator()
        finish_reason = None
        usage: Usage | None = None
        started = False
        # A model that accepts the request and then says nothing must not eat the whole request: past this,
        # the silence is a transient failure and the chain tries the next model.
        first = request.deadline.earliest(self.first_chunk_timeout)
        try:
            try:
                create = self._client().chat.completions.create(
                    **_untransformed(self.params(request)), timeout=budget
                )
                stream = await asyncio.wait_for(create, timeout=first.remaining())
            except sdk.APIError as exc:
                raise self._error(sdk, exc, streamed=False) from exc
            started = True
            async for chunk in until(request.deadline, stream, first=first):
                usage = _usage(chunk) or usage
                for choice in field_of(chunk, "choices") or []:
                    delta = field_of(choice, "delta")
                    text = field_of(delta, "content")
                    if text:
                        text = text_safe(text)
                        content.append(text)
                        yield TextDelta(text)
                    calls.add(field_of(delta, "tool_calls"))
                    finish_reason = field_of(choice, "finish_reason") or finish_reason
        except TimeoutError:
            if not request.deadline.expired() and first.expired() and not content:
                raise Transient(
                    f"{self.name} sent nothing within {self.first_chunk_timeout:g} s", model=self.name
                ) from None
            raise DeadlineExceeded(
                f"{self.name} did not answer within {budget:.1f} s", model=self.name
            ) from None
        except ModelError:
            raise
        except Exception as exc:
            if not started:
                raise  # not a provider failure: a bug must not look like a fallback reason
            raise self._error(sdk, exc, streamed=bool(content)) from exc
        if finish_reason is None and not content and not calls.calls():
            raise Transient(f"{self.name}: the stream ended without a message", model=self.name)
        yield ModelResponse(
            model=self.name,
            content="".join(content),
            tool_calls=calls.calls(),
            finish_reason=finish_reason,
            usage=usage,
        )

    def _error(self, sdk: ModuleType, exc: Exception, streamed: bool) -> ModelError:
        if isinstance(exc, sdk.APIStatusError):
            headers = dict(exc.response.headers) if getattr(exc, "response", None) is not None else {}
            return classify(exc.status_code, exc.body, headers, model=self.name)
        if isinstance(exc, sdk.APITimeoutError):
            return Transient(f"{self.name}: request timed out", model=self.name)
        if isinstance(exc, sdk.APIConnectionError):
            return Transient(f"{self.name}: connection error", model=self.name)
        if isinstance(exc, sdk.APIError):  # an error event inside the stream
            return classify(None, getattr(exc, "body", None) or {"message": str(exc)}, {}, model=self.name)
        where = "mid-stream" if streamed else "before any output"
        return Transient(f"{self.name}: the stream was cut {where} ({type(exc).__name__})", model=self.name)


def tls_context() -> ssl.SSLContext:
    """The one TLS context of this process, trusting what httpx trusts by default (certifi's CA bundle, or
    ``SSL_CERT_FILE``/``SSL_CERT_DIR``): CA certificates only, no client key, no session until a connection. In the
    Lambda layer, certifi's CAs also come as a hashed directory (``scripts/package.py``): loaded one by one as a
    handshake needs them, not all ~120 parsed as the context is made (~20 ms of CPU on the first call)."""
    global _TLS
    with _LOCK:
        if _TLS is None:
            hashed = _hashed_ca_dir()
            if hashed is not None:
                _TLS = ssl.create_default_context(capath=str(hashed))
            else:
                import httpx

                _TLS = httpx.create_ssl_context()
        return _TLS


def _hashed_ca_dir() -> Path | None:
    """The layer's hashed copy of certifi's CAs, unless the environment names other CAs (as httpx honours)."""
    if from_environment("SSL_CERT_FILE") or from_environment("SSL_CERT_DIR"):
        return None
    spec = importlib.util.find_spec("certifi")
    if spec is None or spec.origin is None:
        return None
    hashed = Path(spec.origin).parent.parent / CA_DIR
    return hashed if hashed.is_dir() else None


def http_client(sdk_module: str) -> Any:
    """An ``httpx.AsyncClient`` with the SDK's defaults and the shared TLS context: the primed one (never
    connected) the first time, then a new one for each client (a client's pool belongs to its event loop)."""
    with _LOCK:
        primed = _HTTP.pop(sdk_module, None)
    return primed if primed is not None else _new_http_client(sdk_module)


def _new_http_client(sdk_module: str) -> Any:
    """The SDK's default HTTP client on the shared TLS context, telling ``when_in_flight`` when a call's request has
    been written (httpcore's ``trace`` request extension, set by a request hook): from then on the call only waits."""

    async def sent(event: str, info: dict[str, object]) -> None:
        if event.endswith(".send_request_body.complete"):  # http11. / http2.: the whole request is on the wire
            _call_in_flight(sdk_module)

    async def trace_sends(request: Any) -> None:
        request.extensions.setdefault("trace", sent)

    sdk = importlib.import_module(sdk_module)
    return sdk.DefaultAsyncHttpxClient(verify=tls_context(), event_hooks={"request": [trace_sends]})


def prime(sdk_module: str) -> None:
    """Make ready, before any call, what the first call of ``sdk_module`` would otherwise make on its path: the SDK
    and its chat resource modules, the TLS context, the streamed chunk's schema, the platform facts the SDK sends
    as headers (``uname -p`` is a subprocess), and a keyless HTTP client. Nothing here holds a key or a
    connection, so it may go into a SnapStart snapshot."""
    with _LOCK:
        claimed = sdk_module not in _PRIMED
        _PRIMED.add(sdk_module)
    if claimed:
        prime_modules(sdk_module)
    import anyio
    import anyio.streams.memory
    import anyio.streams.stapled

    # The asyncio backend and the socket streams the HTTP transport (httpcore) uses, imported on its first
    # connection otherwise: a loop run and closed here (no thread, nothing left; under a running loop, as the Web
    # Adapter's hook route runs, Starlette has imported the backend already), and anyio's lazy attribute.
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        anyio.run(anyio.sleep, 0)
    _ = anyio.connect_tcp
    client = _new_http_client(sdk_module)
    with _LOCK:
        _HTTP.setdefault(sdk_module, client)


def prime_modules(sdk_module: str) -> None:
    """``prime`` without the HTTP client: the modules, the chunk schema, the platform facts, the TLS context."""
    sdk = importlib.import_module(sdk_module)
    importlib.import_module(f"{sdk_module}.resources.chat.completions")
    import platform

    platform.platform()  # cached per process, as is what ``distro`` reads (the SDKs' own dependency)
    with contextlib.suppress(ImportError):
        import distro

        distro.id()
    sdk.types.chat.ChatCompletionChunk.construct(**SAMPLE_CHUNK)
    tls_context()


def drop_clients() -> None:
    """Forget every SDK client (and its connection pool, with whatever connections and key it holds): the next
    call builds its client anew. The primed keyless HTTP clients and the TLS context stay."""
    _CLIENTS.clear()


def when_in_flight(callback: Callable[[], None]) -> None:
    """Run ``callback`` (once, on the event loop: it must not block) when the next model call is waiting for its
    answer."""
    with _LOCK:
        _IN_FLIGHT.append(callback)


def _call_in_flight(sdk_module: str) -> None:
    """A call's request is written: start what was waiting for that (on the loop's next turn, once the call awaits
    its answer), and build the chunk schema off the turn's path if no snapshot primed it."""
    with _LOCK:
        callbacks = _IN_FLIGHT[:]
        _IN_FLIGHT.clear()
    loop = asyncio.get_running_loop()
    for callback in callbacks:
        loop.call_soon(callback)
    if sdk_module not in _PRIMED:
        loop.call_soon(_prime_in_background, sdk_module)


def _prime_in_background(sdk_module: str) -> None:
    """``prime_modules`` in a thread, while the call waits: its pure-Python work yields the interpreter to the event
    loop every few milliseconds, so the answer is read when it comes. Once per SDK and process."""
    with _LOCK:
        if sdk_module in _PRIMED:
            return
        _PRIMED.add(sdk_module)
    threading.Thread(target=_prime_quietly, args=(sdk_module,), name="sdk-prime", daemon=True).start()


def _prime_quietly(sdk_module: str) -> None:
    with contextlib.suppress(
        Exception
    ):  # an optimisation only: the SDK builds the same lazily if this failed
        prime_modules(sdk_module)


def _untransformed(params: dict[str, object]) -> dict[str, object]:
    """``params`` with the conversation and tool schemas sent as ``extra_body``, which the SDK merges into the JSON
    body as they are. Passed normally, the SDK walks them with its type-driven transform on the event loop: 11.3 s
    for a 29,000-message history here, during which nothing else (not even /health) is served. They are plain
    JSON already (normalised messages, checked schemas), which is all the transform would produce."""
    bulky = {k: params.pop(k) for k in ("messages", "tools", "response_format") if k in params}
    return {**params, "messages": [], "extra_body": bulky}


def _usage(chunk: object) -> Usage | None:
    raw = field_of(chunk, "usage") or field_of(field_of(chunk, "x_groq"), "usage")
    if raw is None:
        return None
    prompt = int(field_of(raw, "prompt_tokens") or 0)
    completion = int(field_of(raw, "completion_tokens") or 0)
    return Usage(prompt, completion, int(field_of(raw, "total_tokens") or prompt + completion))
