"""``RequestContext``: what every part of one turn's request shares, worked out once (the deadline, the request id,
the Web Adapter's invocation, the caller, the time left), from explicit inputs: built from an HTTP request, or
without any connection for a background job (``for_job``) or a WebSocket message.

Idempotency, the endpoints, the stored state and the renderers all ask the same context, so the time left is
computed in one place and the adapter's headers are parsed once per request.

Usage::

    ctx = RequestContext.of(request)        # the same object for the whole request
    ctx.deadline.remaining()                # the turn's one deadline (model calls, tool runs, store calls)
    ctx.request_id, ctx.caller              # "5bba95d5-…", "apikey:k1x2" | None
    ctx.remaining_ms()                      # how long the invocation has left (idempotency records)

    ctx = RequestContext.for_job(runtime, TurnJob(owner, "resp_…", deadline, body))   # a background job's
    ctx.prior.counted                       # what its queueing did already (``QUEUED``; a request's: nothing)
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from starlette.requests import HTTPConnection, Request

from chatloop.api.http import adapter
from chatloop.api.http.caller import caller_of
from chatloop.api.http.request_limits import read_within, within
from chatloop.deadline import Deadline
from chatloop.observability import logger

if TYPE_CHECKING:
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


class Prior(NamedTuple):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    """What was done for a turn before it runs here, told rather than guessed: a background job's was counted,
    its approval answers claimed and its run recorded when it was queued (``QUEUED``); a client's request or a
    WebSocket message has nothing done yet (``NOTHING_YET``)."""

    counted: bool = False
    """The request counted, its concurrent-turn slot taken (``budgets.admit_queued``): not counted again."""
    claimed: bool = False
    """Its approval answers checked and claimed (``approvals.answers_of``): each is this turn's."""
    recorded: bool = False
    """Its run in the store (a background response's): watched for a cancel, moved at its end."""


NOTHING_YET = Prior()
"""A client's request's, a WebSocket message's: nothing done before the turn."""
QUEUED = Prior(counted=True, claimed=True, recorded=True)
"""A background job's: its queueing counted it, claimed its answers and recorded its run."""


class TurnJob(NamedTuple):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    """A turn run apart from the request that asked for it (a background response's worker): whose it is, the
    response it makes, how long it may take, the request body it runs (opened from the store), and what its
    queueing did already."""

    owner: str
    response_id: str
    deadline: Deadline
    body: JSONObject
    prior: Prior = QUEUED

    @property
    def request_id(self) -> str:
        """The request id the turn runs under: its response's (``response_id`` inverted)."""
        return self.response_id.removeprefix(RESPONSE_ID_PREFIX)


class _Given(enum.Enum):
    FROM_CONNECTION = "from the connection"


FROM_CONNECTION = _Given.FROM_CONNECTION
"""A context input read from its connection (an HTTP request's headers and scope), not given."""


class RequestContext:
    """One turn's (or request's) shared facts, from explicit inputs: the runtime, the caller, the request id, the
    deadline, the raw body, what was done before (``prior``), and the ``HTTPConnection`` when there is one (an HTTP
    request, a Starlette WebSocket) for whatever is not given. ``RequestContext.of`` builds an HTTP request's (kept
    in its ASGI scope); ``for_job`` a background job's, with no connection at all; a WebSocket message's is built
    the same way, with its own inputs."""

    def __init__(
        self,
        runtime: Runtime,
        connection: HTTPConnection | None = None,
        *,
        caller: str | _Given | None = FROM_CONNECTION,
        request_id: str | None = None,
        deadline: Deadline | None = None,
        body: bytes | None = None,
        prior: Prior = NOTHING_YET,
    ) -> None:
        self.runtime = runtime
        self.connection = connection
        """The HTTP request or WebSocket this context serves, if any (None: a job, an API Gateway WebSocket event)."""
        self._scope: Mapping[str, Any] = connection.scope if connection is not None else {}
        self._caller, self._request_id, self._deadline, self._body = caller, request_id, deadline, body
        self.prior = prior
        self.started = time.monotonic()
        """When the request's clock started (``make run``: the time left is REQUEST_TIMEOUT_SECONDS from here)."""
        self.invocation = adapter.invocation_of(connection) if connection is not None else None
        """The Web Adapter's invocation (stream mode, only when the adapter sent it), else None."""
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
            context = request.scope[SCOPE_KEY] = cls(request.app.state.runtime, request)
            context.correlate_logs()
        return context

    @classmethod
    def for_job(cls, runtime: Runtime, job: TurnJob) -> RequestContext:
        """A background job's context, no connection: its caller the job's owner, its request id its response's
        tail, its deadline the job's, and what its queueing did (``job.prior``)."""
        return cls(
            runtime, caller=job.owner, request_id=job.request_id, deadline=job.deadline, prior=job.prior
        )

    def correlate_logs(self) -> None:
        """Behind the Web Adapter, the invocation's request id becomes the log correlation id of every line from
        here on: nothing else sets it there (no ``inject_lambda_context``; the adapter sends one invocation at a
        time). Under Mangum the handler's ``inject_lambda_context`` has set it already; ``make run`` has none."""
        if self.invocation is not None and not self._lambda_request_id():
            logger.set_correlation_id(self.request_id)

    async def raw_body(self, limit: int) -> bytes:
        """The request's body, read no further than ``limit`` bytes (a 413 past it): the one the context was given
        (a WebSocket message's), else the HTTP request's (read once: ``read_within``)."""
        if self._body is not None:
            return within(self._body, limit)
        if not isinstance(self.connection, Request):
            raise TypeError("this context has no body to read (a job's is given to run_door)")
        return await read_within(self.connection, limit)

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def lambda_remaining_ms(self) -> float | None:
        """Lambda's own clock, buffered mode (Mangum's ``aws.context``); None elsewhere."""
        context = self._scope.get("aws.context")
        if context is not None and hasattr(context, "get_remaining_time_in_millis"):
            return float(context.get_remaining_time_in_millis())
        return None

    @property
    def in_lambda(self) -> bool:
        """Served by Lambda: behind Mangum (an ``aws.context``) or behind the Web Adapter."""
        return "aws.context" in self._scope or self.invocation is not None

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
        if self._deadline is not None:  # given: a job's own, for the background turn's whole time
            return self._deadline
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
        if self._request_id is not None:
            return self._request_id
        rid = self._lambda_request_id()
        if not rid and self.invocation is not None:
            rid = self.invocation.request_id
        return str(rid or uuid.uuid4())

    def _lambda_request_id(self) -> str | None:
        """The request id of the Lambda event Mangum adapted (API Gateway's, else Lambda's), buffered mode."""
        event = self._scope.get("aws.event") or {}
        context = self._scope.get("aws.context")
        rid = (event.get("requestContext") or {}).get("requestId") or getattr(context, "aws_request_id", None)
        return str(rid) if rid else None

    @cached_property
    def gateway(self) -> dict[str, object]:
        """API Gateway's request context (``adapter.gateway_context``), read once per request ({}: no connection)."""
        return adapter.gateway_context(self.connection) if self.connection is not None else {}

    @cached_property
    def caller(self) -> str | None:
        """Who is asking (``caller_of``): the identity every per-caller scope uses; None when there is none. A job's:
        the caller that queued it."""
        if not isinstance(self._caller, _Given):
            return self._caller
        return caller_of(self.connection) if self.connection is not None else None
