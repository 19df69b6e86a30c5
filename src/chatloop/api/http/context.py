"""``RequestContext``: what every part of one request shares, worked out once (the deadline, the request id, the
Web Adapter's invocation, the caller, the time left).

Idempotency, the endpoints, the stored state and the renderers all ask the same context, so the time left is
computed in one place and the adapter's headers are parsed once per request.

Usage::

    ctx = RequestContext.of(request)        # the same object for the whole request
    ctx.deadline.remaining()                # the turn's one deadline (model calls, tool runs, store calls)
    ctx.request_id, ctx.caller              # "5bba95d5-…", "apikey:k1x2" | None
    ctx.remaining_ms()                      # how long the invocation has left (idempotency records)

    request = job_request(app, TurnJob(owner, "resp_…", deadline, body))   # a background worker's turn
    ctx.job                                 # the job it runs (None: a client's request)
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from starlette.requests import HTTPConnection, Request

from chatloop.api.http import adapter
from chatloop.api.http.caller import caller_of
from chatloop.deadline import Deadline
from chatloop.observability import logger

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.jsontypes import JSONObject

SCOPE_KEY = "chatloop.context"
"""The one key this app keeps in a request's ASGI scope: its ``RequestContext`` (middleware reads it there)."""
RESPONSE_ID_PREFIX = "resp_"


def response_id(request_id: str) -> str:
    """The id of the response a request's turn makes (the Responses API's): ``resp_`` and the request id, built here
    only (a background job's request id is its response id's tail: ``TurnJob.request_id``)."""
    return RESPONSE_ID_PREFIX + request_id


@runtime_checkable
class AdmittedTurn(Protocol):
    """A turn admitted by its caller's budget (``budgets.TurnBudget``): its ``x-ratelimit-*`` headers, and what
    gives its budget back."""

    headers: dict[str, str]

    async def finish(self) -> None: ...

    async def give_back_unused(self) -> None:
        """What its first call's reservation left unused, given back now (its slot stays held)."""
        ...


@dataclass(frozen=True)
class TurnJob:
    """A turn run apart from the request that asked for it (a background response's worker): whose it is, the
    response it makes, how long it may take, and the request body it runs (opened from the store)."""

    owner: str
    response_id: str
    deadline: Deadline
    body: JSONObject

    @property
    def request_id(self) -> str:
        """The request id the turn runs under: its response's (``response_id`` inverted)."""
        return self.response_id.removeprefix(RESPONSE_ID_PREFIX)


class RequestContext:
    """One request's shared facts. Built by ``RequestContext.of`` on first use and kept in the ASGI scope."""

    def __init__(self, request: HTTPConnection) -> None:
        self.request = request
        self.runtime: Runtime = request.app.state.runtime
        self.started = time.monotonic()
        """When the request's clock started (``make run``: the time left is REQUEST_TIMEOUT_SECONDS from here)."""
        self.invocation = adapter.invocation_of(request)
        """The Web Adapter's invocation (stream mode, only when the adapter sent it), else None."""
        self.job: TurnJob | None = None
        """The background job this context runs (``job_request``), else None: a client's request."""
        self.turn_budget: AdmittedTurn | None = None
        """The turn's budget once admitted (``budgets.admit``): its headers go on the response
        (``RateLimitHeaders``) and it is given back as the turn ends."""
        self.turn_started = False
        """Set when the turn's events start: their end gives the budget back (``ratelimit_headers.given_back``)."""
        self.stop_reason: str | None = None
        """How the request's turn ended, for the idempotency wrapper (a failed stream is not recorded)."""

    @classmethod
    def of(cls, request: HTTPConnection) -> RequestContext:
        """The request's context, made (and its log lines correlated: ``correlate_logs``) on first use."""
        context = request.scope.get(SCOPE_KEY)
        if not isinstance(context, RequestContext):
            context = request.scope[SCOPE_KEY] = cls(request)
            context.correlate_logs()
        return context

    def correlate_logs(self) -> None:
        """Behind the Web Adapter, the invocation's request id becomes the log correlation id of every line from
        here on: nothing else sets it there (no ``inject_lambda_context``; the adapter sends one invocation at a
        time). Under Mangum the handler's ``inject_lambda_context`` has set it already; ``make run`` has none."""
        if self.invocation is not None and not self._lambda_request_id():
            logger.set_correlation_id(self.request_id)

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def lambda_remaining_ms(self) -> float | None:
        """Lambda's own clock, buffered mode (Mangum's ``aws.context``); None elsewhere."""
        context = self.request.scope.get("aws.context")
        if context is not None and hasattr(context, "get_remaining_time_in_millis"):
            return float(context.get_remaining_time_in_millis())
        return None

    @property
    def in_lambda(self) -> bool:
        """Served by Lambda: behind Mangum (an ``aws.context``) or behind the Web Adapter."""
        return "aws.context" in self.request.scope or self.invocation is not None

    def remaining_ms(self) -> int:
        """How long this invocation has left: Lambda's clock, the adapter's deadline, or (``make run``) the request
        timeout less what has passed since the request started."""
        lambda_ms = self.lambda_remaining_ms
        if lambda_ms is not None:
            return int(lambda_ms)
        if self.invocation is not None:
            return max(0, int(self.invocation.seconds_left() * 1000))
        elapsed = time.monotonic() - self.started
        return max(0, int((self.settings.request_timeout_seconds - elapsed) * 1000))

    @cached_property
    def deadline(self) -> Deadline:
        """One deadline per request: the smaller of the Lambda's remaining time (less a margin) and the request timeout
        (counted from the request's start, the clock ``remaining_ms`` reads too)."""
        if self.job is not None:  # the worker's own deadline, for the background turn's whole time
            return self.job.deadline
        elapsed = time.monotonic() - self.started
        return Deadline.after(self._seconds_left(self.settings.request_timeout_seconds - elapsed))

    def store_deadline(self) -> Deadline:
        """The deadline of a store call the request makes before or instead of a turn (reading a conversation's
        history, the Conversations API): the request's, and at most CONVERSATION_STORE_TIMEOUT_SECONDS."""
        return self.deadline.earliest(self.settings.conversation_store_timeout_seconds)

    def write_deadline(self) -> Deadline:
        """The deadline of a store write after the turn (keeping the response, appending the turn to its
        conversation): what the invocation has left now, less the margin, and at most
        CONVERSATION_STORE_TIMEOUT_SECONDS. Not the turn's deadline: a turn that used all of it (it ran to its
        deadline) still has its answer kept; the request timeout bounds the turn, counted afresh here."""
        seconds = self._seconds_left(self.settings.request_timeout_seconds)
        return Deadline.after(seconds).earliest(self.settings.conversation_store_timeout_seconds)

    def _seconds_left(self, timeout: float) -> float:
        """``timeout``, or less when Lambda's clock (buffered mode) or the adapter's (stream mode) says less is left,
        the safety margin kept back."""
        margin = self.settings.lambda_safety_margin_seconds
        lambda_ms = self.lambda_remaining_ms
        if lambda_ms is not None:
            return min(timeout, lambda_ms / 1000 - margin)
        if self.invocation is not None:  # stream mode, behind the Web Adapter
            return min(timeout, self.invocation.seconds_left() - margin)
        return timeout

    @cached_property
    def request_id(self) -> str:
        """API Gateway's request id, Lambda's, the adapter's, or a new one (``make run``); a job's: its response's."""
        if self.job is not None:
            return self.job.request_id
        rid = self._lambda_request_id()
        if not rid and self.invocation is not None:
            rid = self.invocation.request_id
        return str(rid or uuid.uuid4())

    def _lambda_request_id(self) -> str | None:
        """The request id of the Lambda event Mangum adapted (API Gateway's, else Lambda's), buffered mode."""
        event = self.request.scope.get("aws.event") or {}
        context = self.request.scope.get("aws.context")
        rid = (event.get("requestContext") or {}).get("requestId") or getattr(context, "aws_request_id", None)
        return str(rid) if rid else None

    @cached_property
    def gateway(self) -> dict[str, object]:
        """API Gateway's request context (``adapter.gateway_context``), read once per request."""
        return adapter.gateway_context(self.request)

    @cached_property
    def caller(self) -> str | None:
        """Who is asking (``caller_of``): the identity every per-caller scope uses; None when there is none. A job's:
        the caller that queued it."""
        if self.job is not None:
            return self.job.owner
        return caller_of(self.request)


def job_request(app: Starlette, job: TurnJob) -> Request:
    """The request a background job's turn runs as: an empty ``POST /v1/responses`` on ``app`` (no headers, no body:
    what the parts that read a request's scope see), whose context (``RequestContext.of``) carries ``job``: its
    caller, response and deadline. The job's body is run as it is (``pipeline.run_door``'s ``body``)."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/responses",
        "raw_path": b"/v1/responses",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": None,
        "server": None,
        "app": app,
    }
    request = Request(scope)
    context = scope[SCOPE_KEY] = RequestContext(request)
    context.job = job
    return request
