"""Who is asking: ``caller_of(request)``, the one identity every per-caller scope uses (idempotency keys, stored
conversations).

The answer is the strongest identity the platform established for this request, never one the client merely
claims:

- **on Lambda** (buffered mode: Mangum's ``aws.event``; stream mode: the Web Adapter's ``x-amzn-request-context``,
  only when the adapter sent it, see ``api/http/adapter.py``), every identity API Gateway or the Function URL put in the
  request context, combined:

  ========================  ===========================================================================
  ``apikey:<id>``           REST API key id (``requestContext.identity.apiKeyId``; never the key itself)
  ``iam:<arn>``             IAM caller: REST ``identity.userArn`` (else ``identity.caller``), HTTP API and
                            Function URL ``authorizer.iam.userArn`` (else ``callerId``)
  ``cognito:<pool> <id>``   a Cognito identity pool's identity behind those IAM credentials (REST
                            ``identity.cognitoIdentityId``, HTTP API ``authorizer.iam.cognitoIdentity``): its
                            users share one role ARN
  ``jwt:<iss> <sub>``       HTTP API JWT authorizer (``authorizer.jwt.claims``) or a REST Cognito authorizer
                            (``authorizer.claims``): the subject with its issuer, so two pools never collide
  ``principal:<id>``        REST Lambda authorizer's ``authorizer.principalId``
  ``lambda:<sha256>``       a Lambda authorizer's context: HTTP API ``authorizer.lambda``, or the REST
                            authorizer's other keys beside ``principalId`` (``integrationLatency`` aside), hashed
                            as canonical JSON (per-request values there only make scopes narrower)
  ========================  ===========================================================================

  joined with ``|`` in that order (each value percent-escaped, so no value can forge a separator). Two requests
  share a scope only if every identity they carry is the same. No identity at all: ``None`` - a header alone never
  names a caller on Lambda (``x-api-key`` is the client's own text; API Gateway's checked key is ``apiKeyId``).
- **locally** (``make run``: no event, no trusted adapter, ``AWS_LAMBDA_FUNCTION_NAME`` unset):
  ``local-key:<sha256>`` of the ``x-api-key`` header (hashed: the raw key is never stored or logged), else
  ``local``: the one person at a ``make run`` server, whose conversations and stored responses persist there.

The string is stable: the same identities give the same string in every container and process, so it can key
stored state (its format is part of that contract: changing it orphans what was stored under the old one). An API
key is one caller however many people use it; give people their own sign-in (JWT, Cognito, an authorizer) to keep
them apart behind a shared key.

``None`` means "nobody we can tell apart": a caller of this function must refuse to guess - never put such a
request in a shared scope. The idempotency layer runs it without deduplication (logged); a conversation store
should refuse to store or read on its behalf.

Usage::

    from chatloop.api.http.caller import caller_of

    who = caller_of(request)          # "apikey:k1x2" | "jwt:https%3A%2F%2Fissuer sub-1" | ... | None
    if who is None: ...               # no identity: no per-caller state
"""

from __future__ import annotations

import hashlib
import json
from urllib.parse import quote

from starlette.requests import HTTPConnection

from chatloop.api.http.adapter import from_adapter, gateway_context

API_KEY_HEADER = "x-api-key"
REST_AUTHORIZER_FIELDS = frozenset({"principalId", "integrationLatency", "claims", "scopes"})
"""Keys of a REST ``requestContext.authorizer`` that are not a Lambda authorizer's own context."""


def caller_of(request: HTTPConnection) -> str | None:
    """The caller's identity as one stable string (see the module docstring), or None when there is none."""
    on_lambda = "aws.event" in request.scope or from_adapter(request) or _in_lambda(request)
    if not on_lambda:
        key = request.headers.get(API_KEY_HEADER)
        return f"local-key:{_digest(key)}" if key else "local"
    parts = identities(gateway_context(request))
    return "|".join(f"{kind}:{value}" for kind, value in parts) or None


def identities(context: dict[str, object]) -> list[tuple[str, str]]:
    """Every identity in an API Gateway / Function URL request context, in a fixed order, values escaped."""
    identity = _object(context.get("identity"))
    authorizer = _object(context.get("authorizer"))
    iam = _object(authorizer.get("iam"))
    jwt_claims = _object(_object(authorizer.get("jwt")).get("claims")) or _object(authorizer.get("claims"))
    found: list[tuple[str, str]] = []
    if key_id := _text(identity.get("apiKeyId")):
        found.append(("apikey", _escape(key_id)))
    if arn := _text(identity.get("userArn")) or _text(identity.get("caller")):
        found.append(("iam", _escape(arn)))
    if arn := _text(iam.get("userArn")) or _text(iam.get("callerId")):
        found.append(("iam", _escape(arn)))
    pool = _object(iam.get("cognitoIdentity"))
    cognito = (_text(identity.get("cognitoIdentityPoolId")), _text(identity.get("cognitoIdentityId")))
    for pool_id, identity_id in (cognito, (_text(pool.get("identityPoolId")), _text(pool.get("identityId")))):
        if identity_id:
            found.append(("cognito", f"{_escape(pool_id)} {_escape(identity_id)}"))
    if subject := _text(jwt_claims.get("sub")):
        found.append(("jwt", f"{_escape(_text(jwt_claims.get('iss')))} {_escape(subject)}"))
    if principal := _text(authorizer.get("principalId")):
        found.append(("principal", _escape(principal)))
    lambda_context = authorizer.get("lambda")
    if principal and not isinstance(
        lambda_context, dict
    ):  # a REST Lambda authorizer's context sits beside it
        lambda_context = {k: v for k, v in authorizer.items() if k not in REST_AUTHORIZER_FIELDS}
    if isinstance(lambda_context, dict) and lambda_context:
        canonical = json.dumps(lambda_context, sort_keys=True, separators=(",", ":"), default=str)
        found.append(("lambda", _digest(canonical)))
    return list(dict.fromkeys(found))  # the same IAM caller named twice is one identity


def _in_lambda(request: HTTPConnection) -> bool:
    # AWS_LAMBDA_FUNCTION_NAME is set by Lambda in every execution environment: there, no header names a caller.
    runtime = getattr(request.app.state, "runtime", None)
    return runtime is None or bool(runtime.settings.lambda_function_name)


def _object(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else str(value) if isinstance(value, int) else ""


def _escape(value: str) -> str:
    return quote(value, safe="")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
