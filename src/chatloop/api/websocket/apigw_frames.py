"""Server events fitted to API Gateway's WebSocket limits, and several text deltas made one: pure functions of
events to the messages ``PostToConnection`` sends.

- **Coalescing.** Consecutive ``response.output_text.delta`` events of the same output item and content part are
  one delta (their texts joined, the last one's ``sequence_number``) while the joined event stays within one
  32 KB frame: fewer, larger deltas, as the protocol allows. Nothing is reordered or dropped: any other event, or
  a delta of another part, ends the run.
- **Splitting.** A delta larger than a frame is sent as several deltas of the same part, each within a frame.
- **Trimming.** Any other event larger than a message (128 KB; API Gateway closes the socket with 1009 on more) is
  sent with its longest texts shortened until it fits, and ``"chatloop_trimmed": true`` on the event: the client
  had the text through the deltas already, and a stored response (``store: true``) keeps it whole
  (``GET /v1/responses/{id}``). The trim is logged where it happens.

Usage::

    messages = fitted(coalesced([delta1, delta2, done]))      # -> list of encoded messages, each <= 128 KB
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from chatloop.jsontypes import JSONObject, JSONValue

FRAME_BYTES = 32 * 1024
MESSAGE_BYTES = 128 * 1024
DELTA = "response.output_text.delta"
TRIMMED_FLAG = "chatloop_trimmed"
TRIM_MARK = "…"


def encoded(event: JSONObject) -> bytes:
    """One event as the message that carries it (compact JSON, UTF-8)."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def coalesced(events: Iterable[JSONObject], limit: int = FRAME_BYTES) -> list[JSONObject]:
    """``events`` with each run of consecutive deltas of one content part joined, up to ``limit`` bytes each."""
    out: list[JSONObject] = []
    for event in events:
        last = out[-1] if out else None
        if last is not None and _same_part(last, event):
            joined = {**last, "delta": f"{last['delta']}{event['delta']}"}
            if "sequence_number" in event:
                joined["sequence_number"] = event["sequence_number"]
            if isinstance(last.get("logprobs"), list) and isinstance(event.get("logprobs"), list):
                joined["logprobs"] = [*_list(last.get("logprobs")), *_list(event.get("logprobs"))]
            if len(encoded(joined)) <= limit:
                out[-1] = joined
                continue
        out.append(event)
    return out


def fitted(events: Iterable[JSONObject]) -> list[tuple[JSONObject, bytes]]:
    """Each event with the message that carries it: a delta over a frame split into several, any other event over a
    message trimmed (see the module docstring)."""
    out: list[tuple[JSONObject, bytes]] = []
    for event in events:
        data = encoded(event)
        if event.get("type") == DELTA and isinstance(event.get("delta"), str) and len(data) > FRAME_BYTES:
            out.extend((part, encoded(part)) for part in split_delta(event))
        elif len(data) > MESSAGE_BYTES:
            small = trimmed(event)
            out.append((small, encoded(small)))
        else:
            out.append((event, data))
    return out


def split_delta(event: JSONObject, limit: int = FRAME_BYTES) -> list[JSONObject]:
    """A delta event as several of the same part whose texts join to its own, each encoded within ``limit``."""
    room = limit - len(encoded({**event, "delta": ""}))
    parts: list[JSONObject] = []
    chunk: list[str] = []
    size = 0
    for char in str(event["delta"]):
        cost = _cost(char)
        if chunk and size + cost > room:
            parts.append({**event, "delta": "".join(chunk)})
            chunk, size = [], 0
        chunk.append(char)
        size += cost
    parts.append({**event, "delta": "".join(chunk)})
    return parts


def trimmed(event: JSONObject, limit: int = MESSAGE_BYTES) -> JSONObject:
    """``event`` with its longest texts cut (each ending in ``…``) until it is encoded within ``limit``, and
    ``chatloop_trimmed: true``."""
    current: JSONObject = {**event, TRIMMED_FLAG: True}
    while True:
        over = len(encoded(current)) - limit
        if over <= 0:
            return current
        longest = max(_texts(current), key=len, default="")
        if len(longest) <= len(TRIM_MARK):
            raise ValueError("an event too large to send has no text left to trim")
        keep = max(0, len(longest) - max(over, len(longest) // 2) - len(TRIM_MARK))
        cut = _cut(current, longest, longest[:keep] + TRIM_MARK)
        if not isinstance(cut, dict):
            raise TypeError("an event is an object")
        current = cut


def _same_part(last: JSONObject, event: JSONObject) -> bool:
    keys = ("item_id", "output_index", "content_index")
    return (
        last.get("type") == DELTA
        and event.get("type") == DELTA
        and isinstance(last.get("delta"), str)
        and isinstance(event.get("delta"), str)
        and all(last.get(k) == event.get(k) for k in keys)
        and set(last) == set(event)
    )


def _list(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def _cost(char: str) -> int:
    """The bytes ``char`` takes inside an encoded JSON string."""
    if " " <= char <= "~" and char not in '"\\':
        return 1
    return len(json.dumps(char, ensure_ascii=False)[1:-1].encode("utf-8", "surrogatepass"))


def _texts(value: JSONValue) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def _cut(value: JSONValue, old: str, new: str) -> JSONValue:
    """``value`` with the first string equal to ``old`` replaced by ``new`` (values only, never keys)."""
    done = False

    def walk(node: JSONValue) -> JSONValue:
        nonlocal done
        if done:
            return node
        if isinstance(node, str) and node == old:
            done = True
            return new
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(value)
