"""Fetching an image by URL for a model whose API takes only the bytes (Bedrock's Converse): off unless the operator
sets IMAGE_FETCH. The server otherwise never downloads an image (a URL goes to the provider as it is).

A fetch goes where webhooks and client MCP servers may go and nowhere else (``chatloop.netpolicy``: never a
link-local or metadata address; a private or loopback one only with IMAGE_FETCH_ALLOW_PRIVATE), over a connection
pinned to the addresses that were checked (``chatloop.pinning``), https only, no redirect followed, no proxy, at most
IMAGE_MAX_BYTES read, within ``FETCH_SECONDS`` and the turn's deadline, and the bytes must be an image of
IMAGE_MEDIA_TYPES (read from the bytes, not the server's ``content-type``). A failure is ``ImageUnreadable``: that
model is passed over (the chain goes on), logged as any fallback.

Usage::

    fetch = ImageFetch(max_bytes=3_000_000, media_types=("image/png",), allow_private=False)
    messages = await fetch.inline(request.messages, deadline)      # URL image parts as data: URLs
    request = await fetch.for_request(request, "bedrock:amazon.nova-pro-v1:0")   # a model's call: the same
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from chatloop import netpolicy
from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.pinning import pinned_transport
from chatloop.providers.base import ModelRequest
from chatloop.providers.failures import ImageUnreadable
from chatloop.providers.images import carried_images, image_parts, media_type_of, part_detail, part_url

if TYPE_CHECKING:
    from chatloop.deadline import Deadline

FETCH_SECONDS = 5.0
"""The longest one image's fetch takes (less when the turn's deadline is nearer)."""
KEPT_IMAGES = 8
KEPT_SECONDS = 60.0
"""A fetched image is reused this long: a tool loop calls the model several times a turn with the same image."""


@dataclass
class ImageFetch:
    max_bytes: int
    media_types: tuple[str, ...]
    allow_private: bool = False
    _kept: dict[str, tuple[float, str]] = field(default_factory=dict, repr=False)
    """URL -> (when, data: URL) of recent fetches, at most ``KEPT_IMAGES`` of them."""

    async def for_request(self, request: ModelRequest, model: str) -> ModelRequest:
        """``request`` with its images by URL inlined (itself when it has none); a failure names ``model``."""
        if not carried_images(request.messages).by_url:
            return request
        try:
            return replace(request, messages=await self.inline(request.messages, request.deadline))
        except ImageUnreadable as exc:
            exc.model = model
            raise

    async def inline(self, messages: list[JSONObject], deadline: Deadline) -> list[JSONObject]:
        """``messages`` with each image by URL replaced by a ``data:`` URL of its bytes (a message without one is
        the same object). Raises ``ImageUnreadable`` naming the URL's host and why."""
        out: list[JSONObject] = []
        for message in messages:
            content = message.get("content")
            if not isinstance(content, list) or all(
                part_url(p).startswith("data:") for p in image_parts(message)
            ):
                out.append(message)
                continue
            parts: list[JSONValue] = []
            for part in content:
                url = part_url(part) if isinstance(part, dict) and part.get("type") == "image_url" else ""
                if isinstance(part, dict) and url and not url.startswith("data:"):
                    image: JSONObject = {
                        "url": await self.data_url(url, deadline),
                        "detail": part_detail(part),
                    }
                    part = {"type": "image_url", "image_url": image}
                parts.append(part)
            out.append({**message, "content": parts})
        return out

    async def data_url(self, url: str, deadline: Deadline) -> str:
        """The image at ``url`` as a ``data:`` URL (see the module's rules)."""
        now = time.monotonic()
        kept = self._kept.get(url)
        if kept is not None and now - kept[0] < KEPT_SECONDS:
            return kept[1]
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.scheme != "https" or not host:
            raise ImageUnreadable(f"the image URL is not https (host {host or '-'})")
        addresses = await netpolicy.resolved(host)
        refused = netpolicy.first_refusal(host, addresses, self.allow_private)
        if refused is not None:
            raise ImageUnreadable(f"the image at {host} is not fetched: {refused}")
        seconds = min(FETCH_SECONDS, deadline.remaining())
        if seconds <= 0:
            raise ImageUnreadable(f"no time left to fetch the image at {host}")
        try:
            data = await asyncio.wait_for(self._get(url, host, addresses), seconds)
        except TimeoutError:
            raise ImageUnreadable(f"the image at {host} did not arrive within {seconds:.1f} s") from None
        kind = media_type_of(data)
        if kind is None or kind not in self.media_types:
            raise ImageUnreadable(f"the file at {host} is not an image of {', '.join(self.media_types)}")
        inline = f"data:{kind};base64,{base64.b64encode(data).decode()}"
        if len(self._kept) >= KEPT_IMAGES:
            self._kept.clear()
        self._kept[url] = (now, inline)
        return inline

    async def _get(self, url: str, host: str, addresses: tuple[str, ...]) -> bytes:
        import httpx2  # the first fetch pays for it, not cold start

        client = httpx2.AsyncClient(transport=pinned_transport(host, addresses), follow_redirects=False)
        try:
            async with client, client.stream("GET", url) as response:
                if response.status_code != 200:
                    raise ImageUnreadable(f"the image at {host} answered {response.status_code}")
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > self.max_bytes:
                        raise ImageUnreadable(f"the image at {host} is larger than {self.max_bytes} bytes")
                return bytes(data)
        except httpx2.HTTPError as exc:
            raise ImageUnreadable(
                f"the image at {host} could not be fetched ({type(exc).__name__})"
            ) from None
