"""A ChatModel on an official OpenAI-compatible SDK (``groq`` or ``openai``): the shared adapter.

Nothing hidden: the SDK's retries are off (``max_retries=0``), each call's time limit comes from the turn's
deadline, and every failure is raised as a typed ``ModelError``. The SDK is imported when the first model of
that provider is called, not at import time (cold start). The SDK's own ``*_API_KEY`` / ``*_BASE_URL``
variables work, so a chain can point at any OpenAI-compatible server.

Each client is built around ``providers.warmup``'s HTTP client (the shared TLS context; primed, keyless, in a
SnapStart snapshot), which tells ``when_in_flight`` callbacks when a call's request is on the wire.

Usage::

    model = GroqModel(catalog.get("groq:llama-3.3-70b-versatile"), catalog.provider("groq"), api_key="gsk_...")
    async for item in model.stream(ModelRequest(messages=[...], deadline=Deadline.after(20))): ...
    drop_clients()                 # before a snapshot: no client that may hold a key or a connection
"""

from __future__ import annotations

import asyncio
import importlib
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable
from types import ModuleType
from typing import Any, Protocol

from chatloop.config import from_environment
from chatloop.deadline import until
from chatloop.providers.base import ModelRequest, ModelResponse, StreamItem, TextDelta, Usage
from chatloop.providers.catalog import ModelInfo, ProviderInfo
from chatloop.providers.failures import DeadlineExceeded, ModelError, Transient, classify
from chatloop.providers.stream import ToolCallAccumulator, field_of
from chatloop.providers.warmup import http_client
from chatloop.textsafe import text_safe

# One client per event loop (an httpx pool belongs to its loop), then per SDK, key and base URL. Keyed by the loop
# object, not its id(): a later loop can reuse a dead loop's id and would get a client bound to that dead loop.
_CLIENTS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str | None, str | None], _AsyncClient]
] = weakref.WeakKeyDictionary()


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
        time_left = request.deadline.remaining()
        if time_left <= 0:
            raise DeadlineExceeded("no time left for a model call", model=self.name)
        reading = _Reading()
        started = False
        # A model that accepts the request and then says nothing must not eat the whole request: past this,
        # the silence is a transient failure and the chain tries the next model. The last one is waited for.
        first = (
            request.deadline if request.last_resort else request.deadline.earliest(self.first_chunk_timeout)
        )
        try:
            try:
                create = self._client().chat.completions.create(
                    **_untransformed(self.params(request)),
                    timeout=time_left,
                    extra_headers=request.headers or None,
                )
                stream = await asyncio.wait_for(create, timeout=first.remaining())
            except sdk.APIError as exc:
                raise self._error(sdk, exc, streamed=False) from exc
            started = True
            async for chunk in until(request.deadline, stream, first=first):
                for delta in reading.take(chunk):
                    yield delta
        except TimeoutError:
            if not request.deadline.expired() and first.expired() and not reading.content:
                raise Transient(
                    f"{self.name} sent nothing within {self.first_chunk_timeout:g} s", model=self.name
                ) from None
            raise DeadlineExceeded(
                f"{self.name} did not answer within {time_left:.1f} s", model=self.name
            ) from None
        except ModelError:
            raise
        except Exception as exc:
            if not started:
                raise  # not a provider failure: a bug must not look like a fallback reason
            raise self._error(sdk, exc, streamed=bool(reading.content)) from exc
        if reading.finish_reason is None and not reading.content and not reading.calls.calls():
            raise Transient(f"{self.name}: the stream ended without a message", model=self.name)
        yield reading.response(self.name)

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


def drop_clients() -> None:
    """Forget every SDK client (and its connection pool, with whatever connections and key it holds): the next
    call builds its client anew. The primed keyless HTTP clients and the TLS context (``providers.warmup``) stay."""
    _CLIENTS.clear()


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


class _Reading:
    """What one streamed completion said so far: its text, tool-call deltas, finish reason, usage and id."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls = ToolCallAccumulator()
        self.finish_reason: Any = None
        self.usage: Usage | None = None
        self.response_id: Any = None

    def take(self, chunk: object) -> list[TextDelta]:
        """Add one chunk; its text, made text-safe, as the deltas to show."""
        shown: list[TextDelta] = []
        self.usage = _usage(chunk) or self.usage
        self.response_id = self.response_id or field_of(chunk, "id")
        for choice in field_of(chunk, "choices") or []:
            delta = field_of(choice, "delta")
            text = field_of(delta, "content")
            if text:
                text = text_safe(text)
                self.content.append(text)
                shown.append(TextDelta(text))
            self.calls.add(field_of(delta, "tool_calls"))
            self.finish_reason = field_of(choice, "finish_reason") or self.finish_reason
        return shown

    def response(self, model: str) -> ModelResponse:
        return ModelResponse(
            model=model,
            content="".join(self.content),
            tool_calls=self.calls.calls(),
            finish_reason=self.finish_reason,
            usage=self.usage,
            response_id=self.response_id if isinstance(self.response_id, str) else None,
        )
