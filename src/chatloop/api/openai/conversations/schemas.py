"""The Conversations API's request bodies (OpenAI's ``ConversationCreateParams``, ``ConversationUpdateParams``,
``ItemCreateParams``). Imported on the first conversations request, not at start (cold start); the items they hold
are stored by ``api.items.stored.stored_items``.

Usage::

    body = ConversationCreate.model_validate({"items": [{"role": "user", "content": "hi"}]})
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from chatloop.api.items.inputs import InputItem

MAX_ITEMS_AT_ONCE = 20
"""OpenAI: "You may add up to 20 items at a time"."""

Metadata = Annotated[
    dict[Annotated[StrictStr, Field(max_length=64)], Annotated[StrictStr, Field(max_length=512)]],
    Field(max_length=16),
]
"""OpenAI's metadata: at most 16 pairs, keys of at most 64 characters, values of at most 512."""


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    items: Annotated[list[InputItem], Field(max_length=MAX_ITEMS_AT_ONCE)] | None = None
    metadata: Metadata | None = None


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    metadata: Metadata | None


class ItemsCreate(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    items: Annotated[list[InputItem], Field(min_length=1, max_length=MAX_ITEMS_AT_ONCE)]
