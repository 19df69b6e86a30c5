"""Lambda SnapStart: what goes into the snapshot, and what every restore redoes.

Lambda snapshots the initialised function once per published version and restores copies of it on cold starts.
What a snapshot holds is shared by every copy, so before it is taken nothing may be alive that cannot be restored or
must not be shared: no child process (the sandbox's spare Deno), no open connection, no provider key (the keys are
fetched from the secret after restore, on the first request, never during init); and after each restore whatever
must be unique per copy is renewed: ``random`` is re-seeded from the OS, and the sandbox's spare is started once the
first model call is in flight (not at once: the first turn needs the CPU until its call waits on the network).

What a first turn needs that can be frozen is built into the snapshot instead ("priming", ``Runtime.prime``): the
provider SDKs of the configured chain with their chat modules, one TLS context, a keyless HTTP client each and the
streamed chunk's schema (``providers.warmup.prime``); the Responses and Conversations modules; Powertools' Parameters
(boto3) and Idempotency when configured; the ``mcp`` SDK when MCP servers are; the tool registry (the sandbox
without a process). Then ``Runtime.forget_credentials`` drops any key and SDK client a request before the snapshot
may have left, and ``gc.freeze`` keeps the init's objects out of every later collection (and their pages unwritten
by the collector in each restored copy).

Both response modes reach the same two functions:

- buffered (``app.handler``): the runtime's ``snapshot_restore_py`` hooks, registered by ``import app``
  (``register_runtime_hooks``); where that module is absent (not on Lambda), nothing is registered;
- stream (the Lambda Web Adapter): the adapter POSTs, empty, to ``AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH`` and
  ``AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH``; ``hook_routes`` serves them. The adapter refuses outside requests to
  those paths with a 403; these routes refuse them too (a 403, the hook not run): anything that carries the
  adapter's ``x-amzn-request-context`` or ``x-amzn-lambda-context`` header (an invocation, not the adapter's own
  call) and any API Gateway event Mangum adapted.

Usage::

    runtime = app.state.runtime            # anything ``Snapshotted``: the API's Runtime
    register_runtime_hooks(runtime)        # buffered: at import of the Lambda entry point
    hook_routes(settings, taken)           # stream: the adapter's hook routes, apart from the app's ``taken`` paths
    before_snapshot(runtime)               # what the runtime / the adapter calls before the snapshot
    after_restore(runtime)                 # ... and after each restore
"""

from __future__ import annotations

import gc
import random
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from chatloop import lazy
from chatloop.config import DEFAULT_MODEL_CHAIN, ConfigError, Settings
from chatloop.observability import logger
from chatloop.providers.warmup import when_in_flight
from chatloop.tools.javascript import sandbox

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

SDK_MODULES = {"groq": "groq", "openai": "openai", "local": "openai", "bedrock": "botocore"}
"""The SDK a chain entry's provider is called through (``chatloop.providers.factory``)."""


class Snapshotted(Protocol):
    """What the hooks ask of the container's runtime (``api.runtime.Runtime``): its settings, to build what a first
    turn needs, and to forget every credential."""

    settings: Settings

    def prime(self, sdk_modules: Sequence[str], modules: Sequence[str] = ()) -> None: ...
    def forget_credentials(self) -> None: ...


INVOCATION_HEADERS = ("x-amzn-request-context", "x-amzn-lambda-context")
"""Headers the adapter adds to every invocation it forwards, and never to its own hook calls."""


def before_snapshot(runtime: Snapshotted) -> None:
    """Prime what a first turn needs, then leave nothing the snapshot must not hold: no Deno process (spare
    killed, none started until after a restore), no connection, no provider key, no idle thread."""
    sandbox.suspend_all()  # first: the tool built below starts suspended, without a process
    runtime.prime(sdk_modules(runtime.settings), [*configured_modules(runtime.settings), *lazy.ROUTES])
    runtime.forget_credentials()  # nothing read a key during init; should a request have run, it is dropped
    parameters = sys.modules.get("aws_lambda_powertools.utilities.parameters")
    if parameters is not None:
        parameters.clear_caches()  # Powertools' cached secret
    gc.collect()
    gc.freeze()
    # The snapshot keeps the collector's usual thresholds (chatloop.coldstart's schedule, when the entry point has it)
    coldstart = sys.modules.get("chatloop.coldstart")
    if coldstart is not None:
        coldstart.settled()


def after_restore(runtime: Snapshotted) -> None:
    """Make this copy of the snapshot its own: ``random`` re-seeded from the OS (ids from ``secrets``/``uuid4`` use
    the OS already), the sandbox's spare started once the first model call is in flight. The keys are read on the
    first request."""
    random.seed()
    when_in_flight(sandbox.resume_all)


def sdk_modules(settings: Settings) -> list[str]:
    """The SDK modules the configured chain calls, in chain order (no key needed to know them)."""
    spec = settings.model_chain or DEFAULT_MODEL_CHAIN
    providers = [entry.strip().partition(":")[0] for entry in spec.split(",") if entry.strip()]
    return list(dict.fromkeys(SDK_MODULES[p] for p in providers if p in SDK_MODULES))


def configured_modules(settings: Settings) -> list[str]:
    """What configuration adds to a first request's imports, imported into the snapshot and never called before it:
    Powertools' Parameters (boto3, for the keys secret) and Idempotency (~0.45 s at 512 MB), and the OpenTelemetry
    SDK and exporter when traces are exported (its providers start after restore)."""
    modules = []
    if settings.provider_keys_secret_arn:
        modules.append("aws_lambda_powertools.utilities.parameters")
    if settings.idempotency_table_name:
        modules.append("aws_lambda_powertools.utilities.idempotency")
    if settings.otel_traces_endpoint():
        modules.append("chatloop.tracing.turn")
    return modules


def primed_modules(settings: Settings) -> list[str]:
    """What the first request after a restore would import, imported into the snapshot instead: the chain's SDKs
    (primed further by ``providers.warmup.prime``) and ``configured_modules``."""
    return [*sdk_modules(settings), *configured_modules(settings)]


def register_runtime_hooks(runtime: Snapshotted) -> bool:
    """Register ``before_snapshot`` / ``after_restore`` with the Lambda runtime's ``snapshot_restore_py`` (present
    in the managed Python runtimes). False where it is absent: nothing to register with."""
    try:
        from snapshot_restore_py import (  # type: ignore[import-untyped]  # no type hints; in the runtime only
            register_after_restore,
            register_before_snapshot,
        )
    except ImportError:
        return False
    register_before_snapshot(before_snapshot, runtime)
    register_after_restore(after_restore, runtime)
    return True


def reserved_paths(taken: Iterable[str]) -> list[str]:
    """The paths a hook may not take, from the app's route paths: each one's first segment (``/v1/models`` ->
    ``/v1``), the whole of ``/v1/...`` being the API's."""
    return sorted({"/" + path.strip("/").split("/")[0] for path in taken})


def check_hook_paths(settings: Settings, taken: Iterable[str]) -> list[tuple[str, str]]:
    """``[(path, "before"|"after")]`` for the configured adapter hook paths, checked: each a dedicated absolute path
    (no ``%``, not the root, apart from the app's routes ``taken``: the app's route paths and the adapter's
    pass-through path), the two distinct."""
    reserved = reserved_paths(taken)
    configured = [
        (settings.snapstart_before_checkpoint_path, "before"),
        (settings.snapstart_after_restore_path, "after"),
    ]
    hooks = [(path.strip(), which) for path, which in configured if path.strip()]
    for path, _ in hooks:
        segments = [s for s in path.split("/") if s not in ("", ".")]
        if not path.startswith("/") or "%" in path or ".." in segments or not segments:
            raise ConfigError(f"SnapStart hook path {path!r} must be a dedicated absolute path without '%'")
        if any(path == r or path.startswith(r.rstrip("/") + "/") for r in reserved if r != "/"):
            raise ConfigError(f"SnapStart hook path {path!r} overlaps one of the app's routes")
    if len(hooks) == 2 and hooks[0][0].rstrip("/").lower() == hooks[1][0].rstrip("/").lower():
        raise ConfigError("the two SnapStart hook paths must differ")
    return hooks


def hook_routes(settings: Settings, taken: Iterable[str]) -> list[BaseRoute]:
    """The adapter's hook routes (``POST``), only those configured, apart from the app's routes ``taken``."""
    from starlette.routing import Route

    def endpoint(which: str) -> Callable[[Request], Awaitable[Response]]:
        async def hook(request: Request) -> Response:
            return run_hook(request, which)

        return hook

    return [
        Route(path, endpoint(which), methods=["POST"], name=f"snapstart-{which}")
        for path, which in check_hook_paths(settings, taken)
    ]


def run_hook(request: Request, which: str) -> Response:
    """Run a hook for the adapter's own empty POST; refuse (403, not run) anything that came as an invocation."""
    from starlette.responses import JSONResponse, Response

    if "aws.event" in request.scope or any(h in request.headers for h in INVOCATION_HEADERS):
        logger.warning(f"SnapStart {which} hook refused: the request came through an invocation")
        return JSONResponse({"error": {"message": "not found", "type": "forbidden"}}, status_code=403)
    runtime: Snapshotted = request.app.state.runtime
    (before_snapshot if which == "before" else after_restore)(runtime)
    return Response(status_code=204)
