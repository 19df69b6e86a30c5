"""The HTTP surface: a Starlette app, one module per wire API over one request context.

- ``context.RequestContext``: built once per request (deadline, request id, the adapter's invocation, the caller);
- ``serve.serve_turn``: a turn served through a renderer, streamed or not (one guarded stream, one redaction point);
- ``chat`` (/chat), ``openai_chat`` (/v1/chat/completions), ``responses`` (/v1/responses), each a renderer and its
  endpoint; ``models`` (/v1/models, /health), ``page`` (/); ``checks`` holds the checks the turn endpoints share,
  ``schemas`` and ``response_schemas`` their request bodies;
- the stored state: ``conversations`` (/v1/conversations, and a conversation read as a turn's history), ``stored``
  (stored responses), ``chat_threads`` (/chat in a conversation, /chat/stop, /chat/follow), ``running`` (turns that
  outlive their client), ``journal``/``follow``/``journaled``/``runs`` (running turns kept in the store, followed and
  stopped from any copy), ``background`` (background responses, /events) and ``webhooks``; these and ``responses``
  are imported on their first request (``app.lazy``) or into a SnapStart snapshot;
- ``wire``: JSON and SSE bytes, heartbeats; ``idempotency``, ``limits``, ``adapter``, ``caller``, ``errors``: what
  every request may need.

Usage::

    app = create_app(Settings.from_env())
"""

from chatloop.api.app import create_app

__all__ = ["create_app"]
