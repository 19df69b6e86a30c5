"""``GET /v1/models``, ``GET /v1/models/{id}``: the ids a client may pass as ``model``, in OpenAI's model list shape.

Usage::

    curl -s localhost:8000/v1/models      # {"object": "list", "data": [{"id": "chatloop", ...}, ...]}
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.http.wire import JSONBody
from chatloop.api.runtime import CHAIN_ALIAS, Runtime
from chatloop.providers.factory import ChainMisconfigured
from chatloop.secrets import KeysUnavailable


def model_object(model_id: str) -> dict[str, str | int]:
    owner = "chatloop" if model_id == CHAIN_ALIAS else model_id.partition(":")[0]
    return {"id": model_id, "object": "model", "created": 0, "owned_by": owner}


def available_models(runtime: Runtime) -> list[str]:
    try:
        return runtime.models.available()
    except KeysUnavailable as exc:
        raise RequestError(503, "keys_unavailable", str(exc)) from None
    except ChainMisconfigured as exc:
        raise RequestError(503, exc.code, str(exc)) from None


async def list_models(request: Request) -> Response:
    """The ids a client may pass as ``model``, in OpenAI's list shape (the chain's alias and entries first)."""
    ids = available_models(RequestContext.of(request).runtime)
    return JSONBody({"object": "list", "data": [model_object(i) for i in ids]})


async def retrieve_model(request: Request) -> Response:
    model_id = request.path_params["model_id"]
    ids = available_models(RequestContext.of(request).runtime)
    if model_id not in ids:
        raise RequestError(
            404, "model_not_found", f"unknown model {model_id!r}; available: {ids}", param="model"
        )
    return JSONBody(model_object(model_id))
