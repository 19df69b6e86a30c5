"""``bedrock:`` models through Amazon Bedrock Runtime's ConverseStream API, with botocore (imported on first use).

Signed with SigV4 from the standard credential chain (the function's role deployed; ``AWS_*`` variables or a profile
locally), or a Bedrock API key (``AWS_BEARER_TOKEN_BEDROCK``, which botocore reads). The region is ``AWS_REGION``
and the endpoint botocore's own (``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` for a VPC endpoint or a test server): no
setting of ours. Nothing hidden: botocore's retries are off (one attempt per chain step), and each failure is a
typed ``ModelError`` the chain acts on as on Groq's and OpenAI's.

botocore is synchronous: each call runs on its own thread, which hands the stream's events to the event loop as they
come; a turn cancelled or out of time closes the stream and leaves the thread to end.

Usage::

    model = BedrockModel(catalog.get("bedrock:amazon.nova-lite-v1:0"), catalog.provider("bedrock"))
    async for item in model.stream(ModelRequest(messages=[...], deadline=Deadline.after(20))): ...
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from chatloop.config import aws_region, from_environment
from chatloop.deadline import until
from chatloop.observability import logger
from chatloop.providers import warmup
from chatloop.providers.base import ModelRequest, ModelResponse, StreamItem, TextDelta
from chatloop.providers.catalog import ModelInfo, ProviderInfo
from chatloop.providers.converse import ConverseFolder, converse_params
from chatloop.providers.failures import (
    AuthFailed,
    BadRequest,
    ContextTooLong,
    DeadlineExceeded,
    ModelError,
    ModelGone,
    RateLimited,
    Transient,
)
from chatloop.redaction import register_secret

if TYPE_CHECKING:
    from chatloop.providers.image_fetch import ImageFetch

SERVICE = "bedrock-runtime"
SDK_MODULE = "botocore"
"""botocore's own session makes the client: boto3 on top of it (its resources, s3transfer and multiprocessing) is
~18 ms of CPU a cold start, ~60 ms at 512 MB, for nothing a Bedrock client uses."""
READ_TIMEOUT_SECONDS = 60.0
"""botocore's wait for the next bytes: a backstop only, for a thread whose turn has gone (the turn itself stops at
its deadline, closing the stream)."""

_CLIENTS: dict[tuple[str, str | None], Any] = {}
_PRIMED_SESSION: list[Any] = []
"""A botocore session with the service model loaded and no credentials resolved (``prime_modules``), for the first
client."""
_LOCK = threading.Lock()
_END = object()
_CALL = threading.local()
"""The headers of the call a pump thread is making (``ModelRequest.headers``: the trace context)."""

RATE_LIMITED = {"ThrottlingException", "ModelNotReadyException", "ServiceQuotaExceededException"}
TRANSIENT = {
    "ServiceUnavailableException",
    "ModelTimeoutException",
    "InternalServerException",
    "ModelErrorException",
    "ModelStreamErrorException",
    "RequestTimeout",
    "RequestTimeoutException",
}
GONE = {
    "AccessDeniedException": "grant this model's access in the Bedrock console (Model access) and allow "
    "bedrock:InvokeModelWithResponseStream on it (and its inference profile) in the function's role",
    "ResourceNotFoundException": "check the model id (or use an inference profile id such as us.<model> "
    "where the model is offered on demand only through one) and that it is offered in this region",
}
AUTH = {
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "ExpiredToken",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
}
_TOO_LONG = (
    "too long",
    "too many tokens",
    "context window",
    "context length",
    "maximum context",
    "exceeds the",
)


def client(region_name: str) -> Any:
    """The process's ``bedrock-runtime`` client for ``region_name`` (botocore's clients are thread-safe), built on
    first use: botocore's client is imported then, not by ``import app``."""
    endpoint = from_environment("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")  # part of the key only: botocore reads it
    key = (region_name, endpoint)
    with _LOCK:
        built = _CLIENTS.get(key)
        if built is None:
            from botocore.config import Config

            config = Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                read_timeout=READ_TIMEOUT_SECONDS,
                connect_timeout=5,
                tcp_keepalive=True,
            )
            quiet_botocore()
            register_secret(
                from_environment("AWS_BEARER_TOKEN_BEDROCK")
            )  # botocore reads it; we never echo it
            session = _PRIMED_SESSION.pop() if _PRIMED_SESSION else _session()
            built = _CLIENTS[key] = session.create_client(SERVICE, region_name=region_name, config=config)
            built.meta.events.register(f"before-sign.{SERVICE}", _add_call_headers)
        return built


def _add_call_headers(request: Any, **_: Any) -> None:
    """Before signing (so they are signed too): the current call's own headers."""
    for name, value in getattr(_CALL, "headers", {}).items():
        request.headers[name] = value


def quiet_botocore() -> None:
    """botocore's debug lines dump each request's headers (a Bedrock API key as ``Authorization: Bearer ...``, the
    session token) and its signing steps: however the function's log level is set, they stay unwritten."""
    logging.getLogger("botocore").setLevel(max(logging.INFO, logging.getLogger("botocore").level))


def _session() -> Any:
    import botocore.session

    session = botocore.session.Session()
    session._internal_components.lazy_register_component(
        "endpoint_resolver", lambda: _endpoint_resolver(session)
    )
    return session


def _endpoint_resolver(session: Any) -> Any:
    """botocore's endpoint resolver, from the endpoints.json botocore would read, parsed into plain dicts (ordered
    as the loader's OrderedDicts, which cost twice the CPU: ~9 of ~17 ms for its 1.2 MB, ~30 ms at 512 MB on a cold
    start). Where the file it would read is not a plain ``.json``, botocore's own loader reads it."""
    from botocore.regions import EndpointResolver

    loader = session.get_component("data_loader")
    for folder in loader.search_paths:
        path = os.path.join(folder, "endpoints.json")
        if os.path.isfile(path):
            with open(path, "rb") as file:
                data = json.loads(file.read())
            return EndpointResolver(data, uses_builtin_data=loader.is_builtin_path(path))
        if os.path.exists(path + ".gz"):
            break
    data, path = loader.load_data_with_path("endpoints")
    return EndpointResolver(data, uses_builtin_data=loader.is_builtin_path(path))


def prime_modules() -> None:
    """What the first call would import and load, made now (a SnapStart snapshot, or a thread while that call waits):
    botocore's client, signer and event-stream modules, and a session with every data file a client reads
    parsed (the service model, its endpoint rules, botocore's endpoints and partitions, the SDK's defaults). No
    client, no credentials (a session resolves them only when a client is made)."""
    with _LOCK:
        if _CLIENTS:  # a call made its client already (this is then the in-flight priming, too late to help)
            return
    import botocore.auth
    import botocore.eventstream
    import botocore.parsers  # noqa: F401  (imported for their import's sake)

    session = _session()
    loader = session.get_component("data_loader")
    # Asked for as the client asks (the loader caches per call form): its service model and endpoint rules.
    for kind in ("service-2", "endpoint-rule-set-1"):
        loader.load_service_model(SERVICE, kind, api_version=None)
    # What building any client parses: the partitions, the SDK's defaults, and the endpoint resolver's 1.2 MB
    # endpoints.json (~30 ms of CPU at 512 MB, after each restore when it was not in the snapshot).
    for name in ("partitions", "sdk-default-configuration"):
        loader.load_data(name)
    session._get_internal_component("endpoint_resolver")
    with _LOCK:
        if not _PRIMED_SESSION and not _CLIENTS:
            _PRIMED_SESSION.append(session)


warmup.PRIMERS[SDK_MODULE] = prime_modules


def drop_clients() -> None:
    """Forget the clients (and their connections and credentials): before a SnapStart snapshot."""
    with _LOCK:
        _CLIENTS.clear()


class BedrockModel:
    def __init__(
        self,
        info: ModelInfo,
        provider: ProviderInfo,
        api_key: str | None = None,
        base_url: str | None = None,
        first_chunk_timeout: float = 10.0,
        image_fetch: ImageFetch | None = None,
    ):
        self.info = info
        self.provider = provider
        self.name = info.name
        self.first_chunk_timeout = first_chunk_timeout
        self.image_fetch = (
            image_fetch  # IMAGE_FETCH; None: a turn with an image by URL passes it over (chain.blind)
        )
        self.fetches_images = image_fetch is not None

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        time_left = request.deadline.remaining()
        if time_left <= 0:
            raise DeadlineExceeded("no time left for a model call", model=self.name)
        if self.image_fetch is not None:  # images by URL sent as bytes: Converse takes no URL
            request = await self.image_fetch.for_request(request, self.name)
        params = converse_params(self.info, request)
        where = aws_region()
        if where is None:
            raise AuthFailed(f"{self.name}: no AWS_REGION configured", model=self.name)
        # The last model of a chain is waited for until the deadline (issue #41): there is no next one to skip to.
        first = (
            request.deadline if request.last_resort else request.deadline.earliest(self.first_chunk_timeout)
        )
        folder = ConverseFolder()
        pump = _Pump(lambda: client(where), params, asyncio.get_running_loop(), request.headers)
        started = False
        try:
            async for event in until(request.deadline, pump, first=first):
                started = True
                for text in folder.add(event):
                    yield TextDelta(text)
        except TimeoutError:
            if not request.deadline.expired() and first.expired() and not folder.text:
                raise Transient(
                    f"{self.name} sent nothing within {self.first_chunk_timeout:g} s", model=self.name
                ) from None
            raise DeadlineExceeded(
                f"{self.name} did not answer within {time_left:.1f} s", model=self.name
            ) from None
        except ModelError:
            raise
        except Exception as exc:
            if not started and not _from_botocore(exc):
                raise  # not a provider failure: a bug must not look like a fallback reason
            raise self._error(exc, streamed=bool(folder.text)) from exc
        finally:
            pump.close()
        calls = folder.tool_calls()
        if folder.stop_reason is None and not folder.text and not calls:
            raise Transient(f"{self.name}: the stream ended without a message", model=self.name)
        yield ModelResponse(
            model=self.name,
            content="".join(folder.text),
            tool_calls=calls,
            finish_reason=folder.finish_reason() or ("tool_calls" if calls else "stop"),
            usage=folder.usage(),
        )

    def _error(self, exc: Exception, streamed: bool) -> ModelError:
        """A botocore failure as the chain's taxonomy (see module docstring of ``providers.failures``)."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            EventStreamError,
            NoCredentialsError,
            ParamValidationError,
        )

        # The request broke Converse's shape (botocore checked it before sending): another model's would too.
        if isinstance(exc, ParamValidationError):
            return BadRequest(f"{self.name}: {exc}", model=self.name, status=400)
        if isinstance(exc, NoCredentialsError):
            return AuthFailed(f"{self.name}: no AWS credentials found", model=self.name)
        if isinstance(exc, EventStreamError):  # an exception event inside the stream: a cut stream
            code, message, status = _details(exc)
            if code.lower() == "validationexception":
                return self._client_error(code[0].upper() + code[1:], message, status)
            where = "mid-stream" if streamed else "before any output"
            return Transient(f"{self.name}: the stream was cut {where} ({code}: {message})", model=self.name)
        if isinstance(exc, ClientError):
            return self._client_error(*_details(exc))
        if isinstance(exc, BotoCoreError):  # connection refused or reset, a read timeout
            return Transient(f"{self.name}: {type(exc).__name__}", model=self.name)
        where = "mid-stream" if streamed else "before any output"
        return Transient(f"{self.name}: the stream was cut {where} ({type(exc).__name__})", model=self.name)

    def _client_error(self, code: str, message: str, status: int | None) -> ModelError:
        text = f"{code}: {message}"
        if code in RATE_LIMITED:
            return RateLimited(text, model=self.name, status=status)
        if code in TRANSIENT or (status is not None and status >= 500):
            return Transient(text, model=self.name, status=status)
        if code == "ValidationException" and any(m in message.lower() for m in _TOO_LONG):
            return ContextTooLong(text, model=self.name, status=status)
        if code in GONE:
            # The chain disables the model for the container's life: this is said once, with what to fix.
            logger.warning(f"{self.name} is unusable ({text}): {GONE[code]}")
            return ModelGone(text, model=self.name, status=status)
        if code in AUTH:
            return AuthFailed(text, model=self.name, status=status)
        return BadRequest(text, model=self.name, status=status)


def _from_botocore(exc: Exception) -> bool:
    """Whether ``exc`` is botocore's (a service error, a connection or parameter failure), not a bug of ours."""
    from botocore.exceptions import BotoCoreError, ClientError

    return isinstance(exc, BotoCoreError | ClientError)


def _details(exc: Any) -> tuple[str, str, int | None]:
    error = exc.response.get("Error") or {}
    status = (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return str(error.get("Code") or "Unknown"), str(error.get("Message") or ""), status


class _Pump:
    """ConverseStream on a thread of its own, its events handed to the loop as they come (an async iterator).
    ``close()`` (the turn ended, failed or ran out of time) closes the stream; the thread then ends by itself."""

    def __init__(
        self,
        make_client: Any,
        params: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
        headers: dict[str, str] | None = None,
    ):
        self._headers = dict(headers or {})
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._loop = loop
        self._closed = False
        self._stream: Any = None
        self._make_client = make_client
        self._params = params
        threading.Thread(target=self._run, name="bedrock-stream", daemon=True).start()

    def _run(self) -> None:
        try:
            bedrock = self._make_client()
            _CALL.headers = self._headers
            # The request goes out now: what waited for a call in flight (the sandbox's spare) starts while it waits.
            self._loop.call_soon_threadsafe(warmup.call_in_flight, SDK_MODULE)
            response = bedrock.converse_stream(**self._params)
            self._stream = response["stream"]
            for event in self._stream:
                if self._closed:
                    break
                self._post(event)
            self._post(_END)
        except BaseException as exc:  # handed to the turn: a failure is the chain's to classify
            self._post(exc)
        finally:
            if self._stream is not None:
                with contextlib.suppress(Exception):
                    self._stream.close()

    def _post(self, item: object) -> None:
        if self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits for this
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def __aiter__(self) -> _Pump:
        return self

    async def __anext__(self) -> dict[str, Any]:
        item = await self._queue.get()
        if item is _END:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        event: dict[str, Any] = item
        return event

    def close(self) -> None:
        self._closed = True
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()
