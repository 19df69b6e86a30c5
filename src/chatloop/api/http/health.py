"""``GET /health``: the version, the model chain and the tools this copy serves (no model call); a 503
``unhealthy`` naming the setting and what to fix when the chain cannot be built as written (every turn is refused
then: a load balancer or a deployment's check must not see a healthy copy).

Usage::

    curl -s localhost:8000/health         # {"status": "ok", "version": ..., "model_chain": [...], ...}
    # MODEL_CHAIN=grok:llama-3.3-70b-versatile: 503
    # {"status": "unhealthy", "error": {"setting": "MODEL_CHAIN", "code": "model_chain_misconfigured", "message": ...}}
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.wire import JSONBody


async def health(request: Request) -> Response:
    runtime = RequestContext.of(request).runtime
    problem = runtime.models.chain_error()
    if problem is not None:
        return JSONBody(
            {
                "status": "unhealthy",
                "version": runtime.settings.version,
                "error": {"setting": problem.setting, "code": problem.code, "message": str(problem)},
            },
            status_code=503,
        )
    return JSONBody(
        {
            "status": "ok",
            "version": runtime.settings.version,
            "model_chain": runtime.models.describe_chain(),
            "tools": runtime.tools.names(),
            "max_iterations": runtime.settings.max_iterations,
        }
    )
