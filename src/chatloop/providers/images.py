"""Images in a conversation: reading a ``data:`` URL, an image's size from its first bytes, and the tokens an image
costs a model, as the providers document it. Pure functions (no Pillow: a few bytes of each format's header).

Engine messages carry images as chat completions' parts, in a user message's content list::

    {"type": "image_url", "image_url": {"url": "data:image/png;base64,..." or "https://...", "detail": "auto"}}

Usage::

    image = read_data_url("data:image/png;base64,iVBORw0KGgo...")   # DataImage("image/png", b"\\x89PNG...")
    image_size(image.data)                                           # (640, 480), None when the header says nothing
    image_tokens("data:image/png;base64,...", "high")                # what the context estimate counts
    carried_images(messages)                                         # Images(count=1, by_url=0)
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from chatloop.jsontypes import JSONObject

MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image types every provider here reads (OpenAI, Groq, Bedrock's Converse): IMAGE_MEDIA_TYPES picks among them."""
DETAILS = ("auto", "low", "high")

LOW_DETAIL_TOKENS = 85
"""OpenAI: an image at ``detail: low`` costs 85 tokens whatever its size."""
TILE_TOKENS = 170
"""OpenAI: at ``high`` (and ``auto``), 85 plus 170 per 512-px tile after scaling to fit 2048 px, shortest side 768."""
PIXELS_PER_TOKEN = 750
"""Anthropic (Claude on Bedrock): tokens = width x height / 750, after scaling the long edge to at most 1568 px."""
UNKNOWN_SIZE_TOKENS = 1600
"""An image whose size is not known here (a URL the server never fetches, or a header that says nothing): the
largest either rule counts (OpenAI's most is 85 + 8 x 170 = 1445 for a 768 x 2048 image, Claude's ~1600 at its
1.15-megapixel cap), so no model's window is over-filled by an image."""


class ImageError(ValueError):
    """A ``data:`` URL that is not an image this server takes; the message says what is wrong."""


class DataImage(NamedTuple):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    media_type: str
    """``image/png``, as the URL declared it and the bytes confirmed."""
    data: bytes


def read_data_url(
    url: str, max_bytes: int | None = None, media_types: Iterable[str] = MEDIA_TYPES
) -> DataImage:
    """The image a ``data:image/...;base64,`` URL holds, checked: a declared type among ``media_types``, valid base64,
    at most ``max_bytes`` decoded, and bytes whose header is that type (a GIF sent as ``image/png`` is refused, not
    sent to a provider that would refuse it mid-turn). Raises ``ImageError`` saying why.

    >>> read_data_url("data:image/gif;base64,R0lGODlhAQABAAAAACw=").media_type
    'image/gif'
    """
    header, sep, payload = url.partition(",")
    if not header.startswith("data:") or not sep or not header.endswith(";base64"):
        raise ImageError("a data: URL must be data:image/<type>;base64,<data>")
    media_type = header.removeprefix("data:").removesuffix(";base64").lower()
    allowed = tuple(media_types)
    if media_type not in allowed:
        raise ImageError(f"type {media_type[:40] or '(none)'!r} is not taken (one of {', '.join(allowed)})")
    if max_bytes is not None and len(payload) > (max_bytes + 2) // 3 * 4 + 4:  # refused before it is decoded
        raise ImageError(f"the image is larger than {max_bytes} bytes")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the data is not valid base64") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise ImageError(f"the image is larger than {max_bytes} bytes ({len(data)})")
    sniffed = media_type_of(data)
    if sniffed != media_type:
        raise ImageError(f"the data is not a {media_type} image" + (f" (it is {sniffed})" if sniffed else ""))
    return DataImage(media_type, data)


def media_type_of(data: bytes) -> str | None:
    """The image type the first bytes say (None: none of ``MEDIA_TYPES``)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from a PNG, JPEG, GIF or WebP header; None when the bytes do not say.

    >>> image_size(bytes.fromhex("89504e470d0a1a0a0000000d49484452") + (640).to_bytes(4, "big") + (480).to_bytes(4, "big"))
    (640, 480)
    """
    try:
        kind = media_type_of(data)
        if kind == "image/png" and data[12:16] == b"IHDR":
            width, height = struct.unpack(">II", data[16:24])
        elif kind == "image/gif":
            width, height = struct.unpack("<HH", data[6:10])
        elif kind == "image/webp":
            return _webp_size(data)
        elif kind == "image/jpeg":
            return _jpeg_size(data)
        else:
            return None
    except struct.error:
        return None
    return (width, height) if width > 0 and height > 0 else None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":  # extended: 24-bit width-1, height-1
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
    elif chunk == b"VP8L" and data[20:21] == b"\x2f":  # lossless: 14-bit fields after the signature byte
        bits = int.from_bytes(data[21:25], "little")
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":  # lossy: the key frame's 14-bit fields
        width, height = (value & 0x3FFF for value in struct.unpack("<HH", data[26:30]))
    else:
        return None
    return (width, height) if width > 0 and height > 0 else None


_JPEG_FRAMES = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
"""Start-of-frame markers (baseline, progressive, lossless...): the frame header holds the height and width."""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Walk the JPEG's segments to its start-of-frame (EXIF and other segments come first)."""
    at = 2
    while at + 9 < len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            at += 2
            continue
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return (width, height) if width > 0 and height > 0 else None
        if length < 2:
            return None
        at += 2 + length
    return None


def openai_image_tokens(width: int, height: int, detail: str) -> int:
    """OpenAI's documented cost of an image (GPT-4o / 4.1 family): 85 at ``low``; else scaled to fit 2048 x 2048,
    then its shortest side to 768, and 85 + 170 per 512-px tile.

    >>> openai_image_tokens(1024, 1024, "high"), openai_image_tokens(2048, 4096, "high"), openai_image_tokens(4096, 8192, "low")
    (765, 1105, 85)
    """
    if detail == "low":
        return LOW_DETAIL_TOKENS
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    return LOW_DETAIL_TOKENS + TILE_TOKENS * math.ceil(w / 512) * math.ceil(h / 512)


def anthropic_image_tokens(width: int, height: int) -> int:
    """Anthropic's documented cost of an image (Claude, here on Bedrock): width x height / 750, after scaling the long
    edge to 1568 px.

    >>> anthropic_image_tokens(200, 200), anthropic_image_tokens(1092, 1092)
    (54, 1590)
    """
    w, h = float(width), float(height)
    if max(w, h) > 1568:
        w, h = w * 1568 / max(w, h), h * 1568 / max(w, h)
    return math.ceil(w * h / PIXELS_PER_TOKEN)


_SIZES: dict[tuple[int, int], tuple[int, int] | None] = {}
"""The sizes of data: URLs already read, by the URL's hash and length (not the URL: a cache of 4 MB strings would keep
them alive in the container). The chain estimates the same conversation several times a turn."""
_SIZES_KEPT = 256


def image_tokens(url: str, detail: str = "auto") -> int:
    """The tokens an image part is counted as in the context estimate: the larger of OpenAI's and Anthropic's rule
    for its size, read from a ``data:`` URL's header; ``UNKNOWN_SIZE_TOKENS`` when the size is not known (a URL is
    never fetched)."""
    if detail == "low":
        return LOW_DETAIL_TOKENS
    size = None
    if url.startswith("data:"):
        key = (hash(url), len(url))  # a str caches its hash: the same part costs nothing the second time
        if key not in _SIZES:
            if len(_SIZES) >= _SIZES_KEPT:
                _SIZES.clear()
            _SIZES[key] = _data_url_size(url)
        size = _SIZES[key]
    if size is None:
        return UNKNOWN_SIZE_TOKENS
    return max(openai_image_tokens(*size, detail), anthropic_image_tokens(*size))


def _data_url_size(url: str) -> tuple[int, int] | None:
    """The size a data: URL's image header says: its first 4 KB decoded, or the whole when a JPEG's frame header
    comes later (after EXIF)."""
    _, _, payload = url.partition(",")
    try:
        head = base64.b64decode(payload[:4096], validate=False)
        size = image_size(head)
        if size is None and media_type_of(head) == "image/jpeg":
            size = image_size(base64.b64decode(payload, validate=False))
    except (binascii.Error, ValueError):
        return None
    return size


# --- images in messages ------------------------------------------------------------------------------
def image_parts(message: JSONObject) -> Iterator[JSONObject]:
    """The ``image_url`` parts of a message's content list."""
    content = message.get("content")
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                yield part


def part_url(part: JSONObject) -> str:
    """An ``image_url`` part's URL (empty when it has none)."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    return url if isinstance(url, str) else ""


def part_detail(part: JSONObject) -> str:
    image = part.get("image_url")
    detail = image.get("detail") if isinstance(image, dict) else None
    return detail if isinstance(detail, str) else "auto"


@dataclass(frozen=True)
class Images:
    """What images a conversation carries: the chain's reason to pass over a member that cannot see them."""

    count: int = 0
    by_url: int = 0
    """Of them, images by URL (not ``data:``): a member that needs the bytes (Bedrock) cannot be sent them."""


def carried_images(messages: Iterable[JSONObject]) -> Images:
    count = by_url = 0
    for message in messages:
        if not isinstance(message.get("content"), list):  # most messages are text
            continue
        for part in image_parts(message):
            count += 1
            by_url += not part_url(part).startswith("data:")
    return Images(count, by_url)
