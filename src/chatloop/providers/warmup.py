"""What a provider SDK's first call needs, made ready before it is needed: in a SnapStart snapshot (``prime``) or,
on a plain cold start, while the first call waits on the network (``when_in_flight``).

The first call of a process pays for what later calls reuse; each piece is made once:

- one TLS context (CA certificates only) shared by every client of every SDK: ~20 ms of CPU to parse certifi's
  bundle, none with the layer's hashed CA directory (``scripts/package.py``), which loads the CA a handshake needs;
- per SDK, its chat resource modules, a keyless HTTP client (the key is added by the SDK client built around it on
  first use, after a restore: never in a snapshot) and the streamed chunk's pydantic schema (built on the first chunk
  otherwise, after the model answered: on the turn's path). On a cold start it is built on a thread while the first
  call waits; should the answer begin first, its chunks wait for that thread rather than build the schema again;
- ``when_in_flight`` callbacks: work the turn needs later (the sandbox's spare Deno process) started once a model
  call's request is on the wire (httpcore's ``trace`` request extension), so it takes CPU the turn is not using.

Usage::

    prime("groq")                  # before a snapshot: all of the above but a key or a connection
    when_in_flight(sandbox.warm)   # run once, when the next model call's request has been written
    client = http_client("groq")   # what providers.sdk builds each SDK client around
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import ssl
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chatloop.config import from_environment

_TLS: ssl.SSLContext | None = None
"""The TLS context every client shares (``tls_context``)."""
_HTTP: dict[str, Any] = {}
"""Per SDK, a primed keyless ``httpx.AsyncClient`` that has never connected: the next client built takes it."""
_PRIMED: set[str] = set()
"""The SDKs whose modules and chunk schema are ready (``prime``)."""
_IN_FLIGHT: list[Callable[[], None]] = []
"""Run once each, when the next model call is waiting for its answer (``when_in_flight``)."""
_PRIMING: dict[str, threading.Thread] = {}
"""Per SDK, the thread building what its first call needs (``_prime_in_background``), until it is done."""
PRIME_WAIT_SECONDS = 2.0
PRIMERS: dict[str, Callable[[], None]] = {}
"""``prime_modules`` for an SDK that is not OpenAI-shaped, by module (``botocore``: registered by ``providers.bedrock``,
which has no HTTP client of ours to prime)."""
REGISTERED_BY = {"botocore": "chatloop.providers.bedrock"}
"""The module that registers an SDK's ``PRIMERS`` entry when imported: imported by ``prime`` if nothing has yet (a
chain names the SDK's member only when it is built; a snapshot may prime before that)."""
"""The longest the first answer's chunks wait for that thread (it takes ~15 ms of CPU: ~50 ms at 512 MB)."""
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
        if event.endswith(
            ".send_request_body.complete"
        ):  # http11. / http2.: the whole request is on the wire
            _call_in_flight(sdk_module)
        elif event.endswith(".receive_response_headers.complete"):  # the answer starts: its chunks come next
            await _primed(sdk_module)

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
    if sdk_module in REGISTERED_BY:
        importlib.import_module(
            REGISTERED_BY[sdk_module]
        )  # registers the SDK's priming (once: a module is cached)
    if sdk_module in PRIMERS:
        if claimed:
            PRIMERS[sdk_module]()
        return
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
    if sdk_module in REGISTERED_BY:
        importlib.import_module(REGISTERED_BY[sdk_module])
    if sdk_module in PRIMERS:
        PRIMERS[sdk_module]()
        return
    sdk = importlib.import_module(sdk_module)
    importlib.import_module(f"{sdk_module}.resources.chat.completions")
    import platform

    platform.platform()  # cached per process, as is what ``distro`` reads (the SDKs' own dependency)
    with contextlib.suppress(ImportError):
        import distro

        distro.id()
    sdk.types.chat.ChatCompletionChunk.construct(**SAMPLE_CHUNK)
    tls_context()


def when_in_flight(callback: Callable[[], None]) -> None:
    """Run ``callback`` (once, on the event loop: it must not block) when the next model call is waiting for its
    answer."""
    with _LOCK:
        _IN_FLIGHT.append(callback)


def call_in_flight(sdk_module: str) -> None:
    """``_call_in_flight`` for a provider whose calls run on a thread (``providers.bedrock``): it schedules this on the
    loop (``loop.call_soon_threadsafe``) as its request goes out."""
    _call_in_flight(sdk_module)


def _call_in_flight(sdk_module: str) -> None:
    """A call's request is written: start what was waiting for that (on the loop's next turn, once the call awaits
    its answer), and build the chunk schema off the turn's path if no snapshot primed it."""
    with _LOCK:
        callbacks = _IN_FLIGHT[:]
        _IN_FLIGHT.clear()
    loop = asyncio.get_running_loop()
    # The first turn's imports are done: the collector's usual thresholds again (chatloop.coldstart: imported by the
    # entry point, never here, as importing it sets things up for a cold start).
    coldstart = sys.modules.get("chatloop.coldstart")
    if coldstart is not None:
        loop.call_soon(coldstart.settled)
    for callback in callbacks:
        loop.call_soon(callback)
    if sdk_module not in _PRIMED:  # now, not on the loop's next turn: the answer may be read before that
        _prime_in_background(sdk_module)


def _prime_in_background(sdk_module: str) -> None:
    """``prime_modules`` in a thread, while the call waits: its pure-Python work yields the interpreter to the event
    loop every few milliseconds, so the answer is read when it comes. Once per SDK and process."""
    with _LOCK:
        if sdk_module in _PRIMED:
            return
        _PRIMED.add(sdk_module)
    thread = threading.Thread(target=_prime_quietly, args=(sdk_module,), name="sdk-prime", daemon=True)
    with _LOCK:
        _PRIMING[sdk_module] = thread
    thread.start()


async def _primed(sdk_module: str) -> None:
    """The model's answer has begun: should the chunk schema still be building on the priming thread (a model that
    answers before it is done: a fast one, a small CPU share), wait for it (at most ``PRIME_WAIT_SECONDS``) rather
    than have the SDK build the same schema a second time, on the turn's path, on the first chunk."""
    with _LOCK:
        thread = _PRIMING.get(sdk_module)
    if thread is None:
        return
    loop = asyncio.get_running_loop()
    until = loop.time() + PRIME_WAIT_SECONDS
    while thread.is_alive() and loop.time() < until:
        await asyncio.sleep(0.005)  # the loop stays free for other requests
    with _LOCK:
        if not thread.is_alive():
            _PRIMING.pop(sdk_module, None)


def _prime_quietly(sdk_module: str) -> None:
    # An optimisation only: should it fail, the SDK builds the same lazily, on the first chunk.
    with contextlib.suppress(Exception):
        prime_modules(sdk_module)
