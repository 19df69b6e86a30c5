"""The Responses API's ``input_image`` parts checked at the door (``input[0].content[1]``; ``items[...]`` when a
conversation is given items): the rules of ``api.turns.images``, on input items. Apart from it so that the pipeline,
which every door imports, does not import the item vocabulary (and the MCP package under it) at start.

Usage::

    params = response_images(current_items(body), ImageLimits.of(settings))     # ["input[0].content[1]"]
"""

from __future__ import annotations

from collections.abc import Sequence

from chatloop.api.items.inputs import InputImage, InputItem, InputMessage
from chatloop.api.turns.images import ImageLimits, check_image, counted, refused


def response_images(items: Sequence[InputItem], limits: ImageLimits, base: str = "input") -> list[str]:
    """The params of the ``input_image`` parts of Responses input items (``input[i].content[n]``), each checked."""
    found: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, InputMessage) or isinstance(item.content, str):
            continue
        for n, part in enumerate(item.content):
            if not isinstance(part, InputImage):
                continue
            where = f"{base}[{i}].content[{n}]"
            if item.role != "user":
                raise refused(where, "an image is taken in a user message only")
            if part.file_id is not None:
                raise refused(
                    where, "file_id is not supported (this server has no Files API): send image_url"
                )
            check_image(part.image_url, part.detail, limits, where)
            found.append(where)
    return counted(found, limits)
