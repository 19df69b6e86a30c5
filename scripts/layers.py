"""The layers of the package, lowest first: the one table of which module may import which. tests/test_imports.py
checks the whole import graph against it, tests/api/test_layers.py api/'s part, and docs/architecture.md shows it,
written by ``make layout`` (tests/docs/test_layout_tree.py fails when the page no longer matches).

A module may import its own layer and those below, never one above; its layer is that of the longest prefix listed
(``chatloop.tracing.turn`` is above ``chatloop.tracing``).

Usage::

    from scripts.layers import LAYERS, API_LAYERS, markdown
    [layer.name for layer in LAYERS]        # ['foundation', 'store', ..., 'entry']
    API_LAYERS                              # ('http', 'idempotency', ..., 'app'): api/'s part, by short name
    print(markdown())                       # the table as docs/architecture.md holds it
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]
    """Dotted prefixes: a module is in the layer whose longest prefix it starts with."""
    why: str
    """What the layer is and what it serves (one line of the docs' table)."""


LAYERS: tuple[Layer, ...] = (
    Layer(
        "foundation",
        (
            "chatloop",
            "chatloop.jsontypes",
            "chatloop.textsafe",
            "chatloop.deadline",
            "chatloop.config",
            "chatloop.config_env",
            "chatloop.config_mcp",
            "chatloop.config_checks",
            "chatloop.aws",
            "chatloop.redaction",
            "chatloop.observability",
            "chatloop.secrets",
            "chatloop.coldstart",
            "chatloop.lazy",
            "chatloop.netpolicy",
            "chatloop.pinning",
        ),
        "typed values, settings, the deadline, AWS clients' bounds, keys, redaction, logging: every layer uses them "
        "and they use nothing of the rest",
    ),
    Layer(
        "store",
        ("chatloop.store",),
        "state that outlives a request (conversations, runs, budgets, idempotency records)",
    ),
    Layer(
        "providers",
        ("chatloop.providers",),
        "models and the fallback chain; a budgeted model charges the store's budget ledger",
    ),
    Layer(
        "tracing",
        ("chatloop.tracing",),
        "OpenTelemetry spans of model calls (it wraps providers' models) and the trace context of tool runs",
    ),
    Layer(
        "tools",
        ("chatloop.tools",),
        "the sandbox and MCP servers; an MCP call carries the tool run's trace context",
    ),
    Layer("engine", ("chatloop.engine",), "the turn loop over providers and tools; it knows nothing of HTTP"),
    Layer(
        "turn tracing",
        ("chatloop.tracing.turn",),
        "the engine's events become spans: it reads the engine, the engine never it",
    ),
    Layer(
        "container",
        ("chatloop.snapstart",),
        "what the container does around requests (SnapStart's snapshot and restore), through public functions of "
        "the layers below and a protocol the API's runtime meets; it knows no route",
    ),
    Layer(
        "api.http",
        ("chatloop.api.http", "chatloop.api.runtime"),
        "one request's plumbing: the request context, errors, wire bytes; the container-lifetime runtime beside it, "
        "as every request's context holds it",
    ),
    Layer("api.idempotency", ("chatloop.api.idempotency",), "a request answered once (the route wrapper)"),
    Layer(
        "api.items",
        ("chatloop.api.items",),
        "the item vocabulary /chat threads, stored responses and conversations share, owned by none of them",
    ),
    Layer("api.turns", ("chatloop.api.turns",), "serving one turn: the machinery every endpoint shares"),
    Layer(
        "api.runs", ("chatloop.api.runs",), "turns that outlive their request (journal, record, follow, stop)"
    ),
    Layer(
        "api.wire",
        ("chatloop.api.chat", "chatloop.api.openai"),
        "the wire APIs (/chat, OpenAI's): none borrows from another",
    ),
    Layer(
        "api.websocket",
        ("chatloop.api.websocket",),
        "WebSocket mode: the Responses API's door over a socket, whichever transport carries it",
    ),
    Layer("api.page", ("chatloop.api.page",), "the chat page (GET /, /static/...)"),
    Layer("api.app", ("chatloop.api", "chatloop.api.app"), "the app: the route table over everything above"),
    Layer("entry", ("app",), "the Lambda handler (src/app.py)"),
)

API_LAYERS: tuple[str, ...] = tuple(
    layer.name.removeprefix("api.") for layer in LAYERS if layer.name.startswith("api.")
)
"""api/'s layers by short name, lowest first (``http`` ... ``app``), as tests/api/test_layers.py ranks them."""


def api_layer_of(module: str) -> str | None:
    """The short name of the api/ layer ``module`` is in; None outside api/.

    >>> api_layer_of("chatloop.api.openai.responses.render")
    'wire'
    """
    best, found = -1, None
    for layer in LAYERS:
        for prefix in layer.modules:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), layer.name
    return found.removeprefix("api.") if found and found.startswith("api.") else None


def markdown() -> str:
    """The table as docs/architecture.md shows it: lowest layer first, its modules and what it is."""
    rows = ["| Layer | Modules | What it is |", "| --- | --- | --- |"]
    for layer in LAYERS:
        modules = ", ".join(f"`{m}`" for m in layer.modules)
        rows.append(f"| {layer.name} | {modules} | {layer.why} |")
    return "\n".join(rows) + "\n"
