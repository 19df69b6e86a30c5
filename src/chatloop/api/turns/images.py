"""Images a request sends, checked at the door before any model call, and the chain's answer to whether any of its
models can see them.

Each door names its own parts: ``messages[0].content[1]`` (chat completions, /chat) or ``input[0].content[1]`` (the
Responses API). An image is an https URL (passed to the provider as it is: the server does not fetch it, unless
IMAGE_FETCH lets a model that takes only bytes do so: ``providers.image_fetch``) or a
``data:`` URL (its bytes checked: type, size, base64, and that the bytes are the type they claim), only in a user
message, at most IMAGE_MAX_COUNT a request. Anything else is a 400 naming the part.

Usage::

    limits = ImageLimits.of(settings)
    params = chat_images(body.messages, limits)               # ["messages[0].content[1]"]; a 400 for a bad part
    params = response_images(current_items(body), limits)     # api.turns.input_images: ["input[0].content[1]"]
    see_images(chain, messages, params)                       # a 400 when no model of the chain can see them
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from chatloop.api.http.errors import RequestError
from chatloop.observability import logger
from chatloop.providers.chain import blind
from chatloop.providers.images import DETAILS, ImageError, carried_images, read_data_url

if TYPE_CHECKING:
    from chatloop.config import Settings
    from chatloop.engine.messages import Message
    from chatloop.providers.chain import FallbackChain


class ImageLimits(NamedTuple):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    max_count: int
    max_bytes: int
    media_types: tuple[str, ...]
    url_max_chars: int

    @classmethod
    def of(cls, settings: Settings) -> ImageLimits:
        return cls(
            settings.image_max_count,
            settings.image_max_bytes,
            settings.image_types(),
            settings.image_url_max_chars,
        )


def refused(where: str, problem: str) -> RequestError:
    """The 400 for an image part, logged as a refusal (never the image itself: ``problem`` does not quote it)."""
    logger.info(f"Image refused: {where}: {problem}")
    return RequestError(400, "invalid_image", f"{where}: {problem}", param=where)


def check_image(url: object, detail: object, limits: ImageLimits, where: str) -> None:
    """One image's URL and detail, or a 400 naming ``where``."""
    if detail not in DETAILS:
        raise refused(where, f"detail must be one of {', '.join(DETAILS)}")
    if not isinstance(url, str) or not url:
        raise refused(where, "an image needs an image_url (an https URL or a data: URL)")
    if url.startswith("data:"):
        try:
            read_data_url(url, limits.max_bytes, limits.media_types)
        except ImageError as exc:
            raise refused(where, str(exc)) from None
        return
    if len(url) > limits.url_max_chars:
        raise refused(where, f"an image URL is longer than {limits.url_max_chars} characters")
    scheme, sep, rest = url.partition("://")
    if (
        not sep
        or scheme.lower() != "https"
        or not rest
        or rest.startswith("/")
        or any(c.isspace() for c in url)
    ):
        raise refused(where, "an image URL must be https://... (or a data: URL)")


def counted(found: list[str], limits: ImageLimits) -> list[str]:
    if len(found) > limits.max_count:
        raise refused(found[limits.max_count], f"more than {limits.max_count} images in one request")
    return found


def chat_images(messages: Sequence[object], limits: ImageLimits, base: str = "messages") -> list[str]:
    """The params of the ``image_url`` parts of chat-completions-shaped ``messages`` (``messages[i].content[n]``), each
    checked (a 400 naming the first bad one). Other parts are the engine's to check."""
    found: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            continue
        content: list[object] = message["content"]
        for n, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("image_url", "input_image"):
                continue
            where = f"{base}[{i}].content[{n}]"
            if part["type"] == "input_image":
                raise refused(
                    where, "input_image is the Responses API's part; here send {type: image_url, ...}"
                )
            if message.get("role") != "user":
                raise refused(where, "an image is taken in a user message only")
            image = part.get("image_url")
            if not isinstance(image, dict):
                raise refused(where, "image_url must be an object {url, detail}")
            check_image(image.get("url"), image.get("detail", "auto"), limits, where)
            found.append(where)
    return counted(found, limits)


def see_images(model: FallbackChain, messages: Sequence[Message], params: Sequence[str], door: str) -> None:
    """Whether some model of the chain can see the images the conversation carries (its history's too), logged as a
    decision like structured output's: the models the turn goes to, and those passed over (no vision in their
    catalog entry, or an image by URL for a model whose API takes only bytes). None left: a 400 naming the request's
    first image part (``door``, the input's name, when the images are all in the history)."""
    images = carried_images(messages)
    if not images.count:
        return
    able, skipped = model.supports(images=images)
    subject = f"images={images.count} by_url={images.by_url}"
    logger.info(
        f"Vision decision: {subject} models={','.join(able) or '-'} skipped={','.join(skipped) or '-'} "
        f"reason={'supported' if able else 'unsupported'}",
        extra={
            "model_support": {"decision": "Vision", "subject": subject, "models": able, "skipped": skipped}
        },
    )
    if not able:
        where = params[0] if params else door
        why = [f"{name}: {blind(model.catalog.get(name), images)}" for name in skipped]
        raise RequestError(
            400,
            "unsupported_image",
            f"{where}: no model in the chain can see this turn's images ({'; '.join(why)}); pick a model whose "
            "catalog entry says vision (docs/api.md#images)",
            param=where,
        )
