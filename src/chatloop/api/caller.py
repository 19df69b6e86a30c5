"""Who is asking: the identity API Gateway, the Function URL or an authorizer established, the scope of everything a
caller stores (conversations, stored responses).

- REST API: the API key's id (``requestContext.identity.apiKeyId``), never the key itself.
- Function URL (IAM auth): the IAM caller (``requestContext.authorizer.iam.userArn``).
- An authorizer: its principal (a Lambda authorizer's ``principalId``, a JWT authorizer's ``sub`` claim).
- ``make run`` (no Lambda): the ``x-api-key`` header, hashed; without one, the one local user.
- On Lambda, a header alone never names a caller: no established identity is None.

Usage::

    owner = caller_of(request)          # "apikey:abc123", "iam:arn:aws:iam::…", "local:5e88…", or None
"""

from __future__ import annotations

import hashlib
from typing import Any

from starlette.requests import Request

from chatloop.api.adapter import LAMBDA_CONTEXT_HEADER, gateway_context


def caller_of(request: Request) -> str | None:
    event = request.scope.get("aws.event")
    on_lambda = event is not None or LAMBDA_CONTEXT_HEADER in request.headers
    context = gateway_context(event, request.headers)
    identity: dict[str, Any] = context.get("identity") or {}
    authorizer: dict[str, Any] = context.get("authorizer") or {}
    iam: dict[str, Any] = authorizer.get("iam") or {}
    claims: dict[str, Any] = (authorizer.get("jwt") or {}).get("claims") or {}
    lambda_authorizer: dict[str, Any] = authorizer.get("lambda") or {}
    for kind, who in (
        ("apikey", identity.get("apiKeyId")),
        ("iam", iam.get("userArn") or iam.get("callerId")),
        ("iam", identity.get("userArn")),
        ("principal", authorizer.get("principalId") or lambda_authorizer.get("principalId")),
        ("jwt", claims.get("sub")),
    ):
        if isinstance(who, str) and who:
            return f"{kind}:{who}"
    if on_lambda:
        return None
    key = request.headers.get("x-api-key")
    if key:
        return "local:" + hashlib.sha256(key.encode()).hexdigest()
    return "local"
