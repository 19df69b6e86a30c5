"""The HTTP surface: a Starlette app, one sub-package per layer, each serving the next (tests/test_imports.py holds
the order and checks it):

- ``http``: what every request may need (the ``RequestContext`` built once per request, errors, wire bytes, body
  limits, the caller, the Web Adapter's headers, health), with ``runtime`` (what the container keeps: settings,
  chain, tools, stores) beside it;
- ``idempotency``: the ``Idempotency-Key`` route wrapper (its records are ``store/idempotency.py``'s);
- ``turns``: a turn served through a renderer, the checks and request schemas the turn endpoints share, budgets;
- ``runs``: turns that outlive their request (journaled, followed, stopped from any copy; background responses);
- the wire APIs: ``chat`` (/chat and its stored threads) and ``openai`` (chat completions, models, ``responses/``,
  ``conversations/``);
- ``page`` (/) and ``app``: the route table; the endpoints not every request needs are imported on their first
  request (``chatloop.lazy.ROUTES``) or into a SnapStart snapshot.

Usage::

    app = create_app(Settings.from_env())
"""

from chatloop.api.app import create_app

__all__ = ["create_app"]
