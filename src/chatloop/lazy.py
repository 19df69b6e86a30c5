"""What ``import app`` leaves to first use, in one place: the app's lazy routes and the modules imported inside a
function rather than at the top of a module, each with why (cold start: the first request of a kind pays for it,
or the SnapStart snapshot does, never every cold start).

The app builds its lazy routes from ``ROUTES`` (``api.app.lazy``); SnapStart imports ``ROUTES`` into the snapshot
(``snapstart.before_snapshot``); tests/test_imports.py checks that every function-local import of the package's
own modules is of a module listed here, that each listed one is imported that way somewhere, and that none of them
is reached by ``import app``.

Usage::

    from chatloop import lazy
    "chatloop.api.openai.responses.endpoint" in lazy.ROUTES      # True
"""

from __future__ import annotations

ROUTES = (
    "chatloop.api.openai.responses.endpoint",
    "chatloop.api.openai.responses.compact",
    "chatloop.api.openai.responses.stored",
    "chatloop.api.openai.responses.background",
    "chatloop.api.chat.threads",
    "chatloop.api.openai.conversations.endpoints",
    "chatloop.api.turns.budgets",
    "chatloop.api.websocket.route",
)
"""The endpoints not every request needs, imported on their route's first request: the Responses API, the stored
state, the Conversations API, /v1/usage and WebSocket mode (~10 ms of ``import app``, pydantic schemas mostly)."""

FIRST_USE = {
    "chatloop.store": "the conversation store and the budget ledger: opened by the first request that needs them",
    "chatloop.store.idempotency": "the idempotency records, only when IDEMPOTENCY_TABLE_NAME is set",
    "chatloop.store.dynamodb": "the store's DynamoDB backend (boto3), only when CONVERSATION_TABLE_NAME is set",
    "chatloop.store.sqlite": "the store's SQLite backend, only when no table is configured",
    "chatloop.providers.image_fetch": "fetching images by URL for Bedrock (netpolicy, a pinned httpx2 client): only "
    "with IMAGE_FETCH",
    "chatloop.providers.budgeted": "per-caller budgets (the store's ledger): only when a BUDGET_* limit is set",
    "chatloop.store.budget_dynamodb": "the budget ledger in DynamoDB, only when a BUDGET_* limit and a table are set",
    "chatloop.store.budget_sqlite": "the budget ledger in SQLite, only when a BUDGET_* limit is set and no table",
    "chatloop.providers.bedrock": "the Bedrock member (the Converse mapping, botocore): with the first chain that "
    "names a bedrock: model",
    "chatloop.tools.mcp": "MCP servers' tools: with the first turn that uses an MCP server",
    "chatloop.tools.mcp.client": "the mcp SDK (~100 ms): with the first MCP server listed, or into a snapshot",
    "chatloop.api.turns.approvals": "tool approvals (sealed ids, the store's one-use claims): only with a tool that "
    "waits for a person (APPROVAL_REQUIRED_TOOLS), or a refused turn that answered one",
    "chatloop.api.http.traced": "a turn's tracing (the tracing package): with the first turn",
    "chatloop.tracing.turn": "the OpenTelemetry SDK: with the first traced turn (an exporter configured)",
    "chatloop.tracing.scope": "a dataclass (~0.7 ms to define): with the first traced turn",
    "chatloop.tracing.sigv4": "botocore's SigV4 signer: only for an X-Ray OTLP endpoint",
    "chatloop.api.websocket.lambda_transport": "WebSocket mode on Lambda (the session, the management API's "
    "client): only with an API Gateway WebSocket event",
}
"""Modules imported inside a function, by module: why they are not imported at the top."""
