"""Lambda entry point: ``handler`` (Lambda) and ``app`` (ASGI, for uvicorn and tests).

``handler`` serves REST API (v1), HTTP API (v2) and Function URL events through Mangum, with Powertools'
correlation id (the API Gateway request id), per-invocation log keys and EMF metrics.

Importing it also registers the SnapStart hooks with the Lambda runtime (``chatloop.snapstart``; stream mode reaches
the same hooks through the Web Adapter's routes), and makes a stop by SIGTERM/SIGINT, or uvicorn's shutdown, close
the JavaScript sandboxes: no Deno process and no work directory outlive the process.
"""

# First, before any other import: it sets what the imports below read as they build (chatloop/coldstart.py).
from chatloop import coldstart

# isort: split
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from mangum import Mangum
from mangum.types import LambdaContext

from chatloop import snapstart
from chatloop.api import create_app, websocket
from chatloop.api.http.query import text_safe_query
from chatloop.api.http.request_limits import fit_lambda_response
from chatloop.config import Settings
from chatloop.observability import logger, metrics
from chatloop.tools.javascript.sandbox import close_all, close_all_on_signals

settings = Settings.from_env()
app = create_app(settings)
_mangum = Mangum(app, lifespan="off", api_gateway_base_path=settings.api_base_path)
snapstart.register_runtime_hooks(app.state.runtime)
close_all_on_signals()  # where nothing else handles them (Lambda's runtime); uvicorn's shutdown is below


_app_lifespan = app.router.lifespan_context


@asynccontextmanager
async def _closing_sandboxes(asgi_app: Any) -> AsyncIterator[Any]:
    """The app's own lifespan, then, at uvicorn's shutdown (SIGTERM/SIGINT), the sandboxes closed: uvicorn re-raises
    the signal afterwards with the default action, which skips ``atexit``."""
    try:
        async with _app_lifespan(asgi_app) as state:
            yield state
    finally:
        close_all()


app.router.lifespan_context = _closing_sandboxes


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    _ensure_event_loop()
    if websocket.handles(
        event
    ):  # WebSocket mode: a WebSocket API's route, or a turn's asynchronous invocation
        from chatloop.api.websocket.lambda_transport import handle_event as answer_websocket

        return answer_websocket(app, event, context.get_remaining_time_in_millis())
    if "chatloop_background" in event and "requestContext" not in event:  # buffered mode: a background turn
        from chatloop.api.openai.responses.background import handle_event

        return handle_event(app, event, context.get_remaining_time_in_millis())
    metrics.add_metric(name="Requests", unit=MetricUnit.Count, value=1)
    # a lone surrogate in a REST event's query would fail Mangum's encoding of it, before the app answers a 400
    response = fit_lambda_response(
        _mangum(text_safe_query(event), context)
    )  # Lambda refuses over 6 MB outright
    status = response.get("statusCode", 500)
    if status >= 400:
        metrics.add_metric(name=f"Status{status // 100}xx", unit=MetricUnit.Count, value=1)
    return response


def _ensure_event_loop() -> None:
    """Mangum runs each invocation on the thread's current event loop; code that ran ``asyncio.run()`` before (or a
    test framework) leaves none set, and Mangum would then fail. Never the case on Lambda, but cheap to guarantee."""
    try:
        asyncio.get_event_loop()
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())


coldstart.imported()  # last: what the imports built is frozen out of the collector's walks
