"""``create_app()``: the ASGI application, the same under uvicorn (``make run``) and behind Mangum on Lambda.

A Starlette app rather than FastAPI: FastAPI's import alone takes ~270 ms on the target machine, more than the
whole cold-start budget; Starlette is the ASGI core FastAPI is built on, and pydantic still validates bodies.

Usage::

    app = create_app(Settings.from_env())                      # production
    app = create_app(settings, chain=FallbackChain([...]))     # tests: inject models and tools
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from chatloop import snapstart
from chatloop.api.chat import endpoint as chat
from chatloop.api.http.errors import RequestError, on_http_error, on_request_error, on_unexpected
from chatloop.api.http.health import health
from chatloop.api.http.nosniff import NoSniff
from chatloop.api.http.ratelimit_headers import RateLimitHeaders
from chatloop.api.idempotency.idempotent import idempotent
from chatloop.api.openai import chat_completions as openai_chat
from chatloop.api.openai import models
from chatloop.api.page import endpoints as page
from chatloop.api.runtime import Runtime
from chatloop.config import KEY_VARIABLES, Settings, from_environment
from chatloop.lazy import ROUTES as LAZY_ROUTES
from chatloop.observability import logger
from chatloop.providers.chain import FallbackChain
from chatloop.tools.base import ToolRegistry


def lazy(module: str, name: str) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint ``chatloop.api.<module>.<name>``, imported when its route is first called: the endpoints not
    every request needs, listed in ``chatloop.lazy.ROUTES`` (SnapStart imports them into the snapshot)."""
    path = f"chatloop.api.{module}"
    if path not in LAZY_ROUTES:
        raise ValueError(f"{path} is not in chatloop.lazy.ROUTES")
    endpoint: Callable[[Request], Awaitable[Response]] | None = None

    async def call(request: Request) -> Response:
        nonlocal endpoint
        if endpoint is None:
            endpoint = getattr(importlib.import_module(path), name)
        return await endpoint(request)

    call.__name__ = call.__qualname__ = name
    return call


def lazy_socket(module: str, name: str) -> Callable[[WebSocket], Awaitable[None]]:
    """The WebSocket endpoint ``chatloop.api.<module>.<name>``, imported on its first connection (as ``lazy``)."""
    path = f"chatloop.api.{module}"
    if path not in LAZY_ROUTES:
        raise ValueError(f"{path} is not in chatloop.lazy.ROUTES")

    async def call(websocket: WebSocket) -> None:
        await getattr(importlib.import_module(path), name)(websocket)

    call.__name__ = call.__qualname__ = name
    return call


def routes(settings: Settings) -> list[BaseRoute]:
    """Every route of the app: the turn endpoints, the stored state, models and health, the page, and (stream mode
    under SnapStart) the Web Adapter's hook routes, apart from the others (in this order: Starlette takes the first
    route that matches)."""
    table = [*_turn_routes(), *_conversation_routes(), *_other_routes(settings)]
    # stream mode under SnapStart: the Web Adapter's two hook routes, when configured (H1, #27)
    return [*table, *snapstart.hook_routes(settings, taken=route_paths(table))]


def _turn_routes() -> list[BaseRoute]:
    """The three wire APIs' turns, and what acts on a turn or stored response once it started."""
    return [
        Route("/chat", idempotent(chat.chat), methods=["POST"]),
        Route("/chat/stop", lazy("chat.threads", "stop_chat"), methods=["POST"]),
        Route("/chat/follow", lazy("chat.threads", "follow_chat"), methods=["GET"]),
        Route("/v1/chat/completions", idempotent(openai_chat.chat_completions), methods=["POST"]),
        Route("/v1/responses", idempotent(lazy("openai.responses.endpoint", "responses")), methods=["POST"]),
        # WebSocket mode, on the same path (Starlette routes websocket scopes apart from http ones)
        WebSocketRoute("/v1/responses", lazy_socket("websocket.route", "responses_socket")),
        Route("/v1/responses/compact", lazy("openai.responses.compact", "compact"), methods=["POST"]),
        Route(
            "/v1/responses/{response_id}",
            lazy("openai.responses.stored", "retrieve_response"),
            methods=["GET"],
        ),
        Route(
            "/v1/responses/{response_id}",
            lazy("openai.responses.stored", "delete_response"),
            methods=["DELETE"],
        ),
        Route(
            "/v1/responses/{response_id}/cancel",
            lazy("openai.responses.background", "cancel_response"),
            methods=["POST"],
        ),
        Route(
            "/v1/responses/{response_id}/input_items",
            lazy("openai.responses.stored", "list_input_items"),
            methods=["GET"],
        ),
    ]


def _conversation_routes() -> list[BaseRoute]:
    """OpenAI's Conversations API: the conversations and their items."""
    return [
        Route(
            "/v1/conversations",
            lazy("openai.conversations.endpoints", "create_conversation"),
            methods=["POST"],
        ),
        Route(
            "/v1/conversations", lazy("openai.conversations.endpoints", "list_conversations"), methods=["GET"]
        ),
        Route(
            "/v1/conversations/{conversation_id}",
            lazy("openai.conversations.endpoints", "retrieve_conversation"),
            methods=["GET"],
        ),
        Route(
            "/v1/conversations/{conversation_id}",
            lazy("openai.conversations.endpoints", "update_conversation"),
            methods=["POST"],
        ),
        Route(
            "/v1/conversations/{conversation_id}",
            lazy("openai.conversations.endpoints", "delete_conversation"),
            methods=["DELETE"],
        ),
        Route(
            "/v1/conversations/{conversation_id}/items",
            lazy("openai.conversations.endpoints", "list_items"),
            methods=["GET"],
        ),
        Route(
            "/v1/conversations/{conversation_id}/items",
            lazy("openai.conversations.endpoints", "create_items"),
            methods=["POST"],
        ),
        Route(
            "/v1/conversations/{conversation_id}/items/{item_id}",
            lazy("openai.conversations.endpoints", "retrieve_item"),
            methods=["GET"],
        ),
        Route(
            "/v1/conversations/{conversation_id}/items/{item_id}",
            lazy("openai.conversations.endpoints", "delete_item"),
            methods=["DELETE"],
        ),
    ]


def _other_routes(settings: Settings) -> list[BaseRoute]:
    """Usage, models, health, the page, and the Web Adapter's pass-through path (stream mode)."""
    return [
        Route("/v1/usage", lazy("turns.budgets", "usage"), methods=["GET"]),
        Route("/v1/models", models.list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", models.retrieve_model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/", page.page, methods=["GET"]),
        Route("/static/{path:path}", page.asset, methods=["GET"]),
        # stream mode: the asynchronous invocation that runs a background response, as the Web Adapter passes it
        Route(
            settings.lwa_pass_through_path, lazy("openai.responses.background", "events"), methods=["POST"]
        ),
    ]


def route_paths(table: list[BaseRoute]) -> list[str]:
    """The paths of ``table``'s routes (what a SnapStart hook path may not overlap)."""
    return [route.path for route in table if isinstance(route, Route)]


def create_app(
    settings: Settings | None = None,
    *,
    chain: FallbackChain | None = None,
    registry: ToolRegistry | None = None,
    runtime: Runtime | None = None,
) -> Starlette:
    settings = settings or Settings.from_env()
    app = Starlette(
        routes=routes(settings),
        exception_handlers={
            RequestError: on_request_error,
            HTTPException: on_http_error,
            Exception: on_unexpected,
        },
        # X-Content-Type-Options on every response; a metered turn's x-ratelimit-* headers (api/turns/budgets.py)
        middleware=[Middleware(NoSniff), Middleware(RateLimitHeaders)],
    )
    app.state.runtime = runtime or Runtime(settings, chain=chain, registry=registry)
    if chain is None and runtime is None:
        _say_which_models(settings)
    return app


def _say_which_models(settings: Settings) -> None:
    has_key = any(from_environment(v) for v in KEY_VARIABLES.values()) or settings.provider_keys_secret_arn
    if not has_key and not settings.model_chain:
        logger.warning(
            "no API key configured (GROQ_API_KEY, OPENAI_API_KEY or PROVIDER_KEYS_SECRET_ARN): "
            "answering with the offline demo model (demo:offline)"
        )
