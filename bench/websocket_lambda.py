"""WebSocket mode on Lambda (issue 44): what ``PostToConnection`` costs per event, with and without coalescing
deltas while a post is in flight (``api/websocket/apigw_post.py``), against a moto server's Management API on
loopback; and what an idle connection costs: the Lambda invocations of a connection's life, counted through the real
handler (``src/app.py``) with the turn's asynchronous invocation stubbed.

A turn here is the Responses API's event stream for a 300-delta answer (~1,200 characters) produced at 500 deltas
a second (a fast model), plus its eight other events."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench import ROOT
from bench.common import fake_aws_credentials, median, mocked_dynamodb

DELTAS = 300
DELTA_SECONDS = 0.002
REGIONAL_MS = 20.0
"""A post's round trip from a function to API Gateway in its region, assumed (not measured here)."""


def _turn(n: int) -> list[dict[str, Any]]:
    item = {"type": "message", "id": f"msg_{n}", "role": "assistant", "content": []}
    head = [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    events: list[dict[str, Any]] = [
        {"type": t, "sequence_number": i, "item": item} for i, t in enumerate(head)
    ]
    for _ in range(DELTAS):
        events.append(
            {
                "type": "response.output_text.delta",
                "sequence_number": len(events),
                "item_id": f"msg_{n}",
                "output_index": 0,
                "content_index": 0,
                "delta": "word",
                "logprobs": [],
            }
        )
    events += [{"type": t, "sequence_number": len(events) + i} for i, t in enumerate(tail)]
    events.append(
        {"type": "response.completed", "sequence_number": len(events), "response": {"id": f"resp_{n}"}}
    )
    return events


async def _post_turn(client: Any, n: int, coalesce: bool) -> tuple[int, float, float]:
    """One turn posted: (posts, ms from the first event to the last post, ms after the last event was made)."""
    from chatloop.api.websocket.apigw_post import ConnectionPoster
    from chatloop.deadline import Deadline

    poster = ConnectionPoster(client, f"bench-{n}", Deadline.after(120), coalesce=coalesce)
    start = time.perf_counter()
    for event in _turn(n):
        await poster(event)
        if event["type"].endswith(".delta"):
            await asyncio.sleep(DELTA_SECONDS)
    made = time.perf_counter()
    await poster.drain()
    end = time.perf_counter()
    assert poster.stopped is None, poster.stopped
    return poster.posts, (end - start) * 1000, (end - made) * 1000


def _slowed(client: Any, ms: float) -> Any:
    """``client`` with each post ``ms`` slower, as a region's round trip makes it (the post is sent after it)."""

    def wait(**_: Any) -> None:
        time.sleep(ms / 1000)

    client.meta.events.register("before-send.apigatewaymanagementapi.PostToConnection", wait)
    return client


def _posting(reps: int) -> dict[str, Any]:
    from moto.server import ThreadedMotoServer

    from chatloop.api.websocket.apigw_post import management_client

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"  # moto server takes @connections at the root only
        client = management_client(endpoint)
        singles = []
        for n in range(reps * 10):
            start = time.perf_counter()
            client.post_to_connection(ConnectionId=f"single-{n}", Data=b'{"type":"response.created"}')
            singles.append((time.perf_counter() - start) * 1000)
        out: dict[str, Any] = {"post_ms": median(singles), "events": len(_turn(0))}
        slow = _slowed(
            management_client(endpoint + "/"), REGIONAL_MS
        )  # its own client: the hook stays its own
        for key, posting, coalesce in (
            ("coalesced", client, True),
            ("one_by_one", client, False),
            ("regional", slow, True),
        ):
            runs = [asyncio.run(_post_turn(posting, n, coalesce)) for n in range(reps)]
            out[key] = {
                "posts": median([float(r[0]) for r in runs]),
                "turn_ms": median([r[1] for r in runs]),
                "lag_ms": median([r[2] for r in runs]),
            }
        return out
    finally:
        server.stop()


def _idle(idle_seconds: float) -> dict[str, int]:
    """A connection's life through the real handler: invocations per phase (the turn's own invocation stubbed)."""
    import sys

    sys.path.insert(0, str(ROOT / "src"))
    from scripts.invoke_local import LocalContext

    import app as lambda_app
    from chatloop.api.runtime import Runtime
    from chatloop.api.websocket import lambda_transport
    from chatloop.config import Settings

    events = {p.stem: json.loads(p.read_text()) for p in (Path(ROOT) / "events" / "websocket").glob("*.json")}
    counted = {"$connect": 0, "idle": 0, "$default": 0, "worker": 0, "$disconnect": 0}
    handed: list[bytes] = []
    original_invoke, original_runtime = lambda_transport.invoke_self, lambda_app.app.state.runtime

    def kept(settings: Any, payload: bytes, timeout: float) -> int:  # Lambda's 202: queued
        handed.append(payload)
        return 202

    lambda_transport.invoke_self = kept
    with mocked_dynamodb("bench-websocket"):
        settings = Settings(
            conversation_table_name="bench-websocket", lambda_function_name="chatloop-websocket"
        )
        lambda_app.app.state.runtime = Runtime(settings)
        try:
            for phase, name in (("$connect", "connect"), ("idle", None), ("$default", "message")):
                if name is None:
                    before = len(handed)
                    time.sleep(idle_seconds)  # nothing runs: API Gateway alone holds the socket
                    counted["idle"] = len(handed) - before
                    continue
                lambda_app.handler(events[name], LocalContext())
                counted[phase] += 1
            counted["worker"] = len(handed)  # the message's turn, handed to one asynchronous invocation
            lambda_app.handler(events["disconnect"], LocalContext())
            counted["$disconnect"] += 1
        finally:
            lambda_transport.invoke_self = original_invoke
            lambda_app.app.state.runtime = original_runtime
    return counted


def measure(reps: int) -> dict[str, Any]:
    with fake_aws_credentials():
        posting = _posting(reps)
    idle_seconds = 0.5 if reps <= 2 else 3.0
    return {**posting, "idle_seconds": idle_seconds, "invocations": _idle(idle_seconds), "reps": reps}


def section(w: dict[str, Any]) -> list[str]:
    one, joined, regional = w["one_by_one"], w["coalesced"], w["regional"]
    inv = w["invocations"]
    return [
        "## WebSocket mode on Lambda: PostToConnection",
        "",
        f"One turn's {w['events']} events ({DELTAS} text deltas at {1 / DELTA_SECONDS:.0f}/s) posted to a connection "
        f"through the API Gateway Management API (moto server on loopback; a region adds its own round trip per "
        f"post), medians over {w['reps']} turns:",
        "",
        "| posting | posts per turn | first event to last post, ms | after the last event, ms |",
        "|---|---|---|---|",
        f"| one post per event | {one['posts']:.0f} | {one['turn_ms']:.0f} | {one['lag_ms']:.0f} |",
        f"| deltas coalesced while a post is in flight | {joined['posts']:.0f} | {joined['turn_ms']:.0f} | "
        f"{joined['lag_ms']:.0f} |",
        f"| coalesced, each post {REGIONAL_MS:.0f} ms slower (a region's round trip, assumed) | "
        f"{regional['posts']:.0f} | {regional['turn_ms']:.0f} | {regional['lag_ms']:.0f} |",
        "",
        f"One `PostToConnection`: {w['post_ms']:.2f} ms median here. Coalescing: "
        f"{one['posts'] / max(joined['posts'], 1):.1f}× fewer posts on loopback, "
        f"{one['posts'] / max(regional['posts'], 1):.1f}× with a regional round trip (one post per event would "
        f"then take ~{one['posts'] * (w['post_ms'] + REGIONAL_MS) / 1000:.1f} s of posting per turn); nothing "
        "reordered or dropped, each joined delta within one 32 KB frame.",
        "",
        f"Lambda invocations of a connection's life (the real handler): `$connect` {inv['$connect']}, "
        f"idle for {w['idle_seconds']:g} s {inv['idle']}, a `response.create` {inv['$default']} (`$default`) + "
        f"{inv['worker']} (its turn's asynchronous invocation), `$disconnect` {inv['$disconnect']}. An idle "
        "connection runs nothing and costs nothing of the function: API Gateway holds the socket (billed per "
        "connection-minute and per message by API Gateway, not by Lambda).",
        "",
    ]
