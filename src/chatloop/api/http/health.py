"""``GET /health``: the version, the model chain and the tools this copy serves (no model call).

Usage::

    curl -s localhost:8000/health         # {"status": "ok", "version": ..., "model_chain": [...], ...}
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.wire import JSONBody


async def health(request: Request) -> Response:
    runtime = RequestContext.of(request).runtime
    return JSONBody(
        {
            "status": "ok",
            "version": runtime.settings.version,
            "model_chain": runtime.describe_chain(),
            "tools": runtime.tool_names(),
            "max_iterations": runtime.settings.max_iterations,
        }
    )
