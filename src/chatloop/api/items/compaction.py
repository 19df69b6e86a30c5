"""A ``compaction`` item as input: the earlier conversation, summarized and sealed by this server
(``api.turns.compaction`` seals and opens it; here is only its shape, and the message it stands for once opened).

Usage::

    item = CompactionInput.model_validate({"type": "compaction", "encrypted_content": "…"})
    item.open("the user is Ada; she asked for 5!")     # what open_items does once the content is unsealed
    item.message()                                      # {"role": "system", "content": SUMMARY_HEADER + …}
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictStr

from chatloop.engine.messages import Message

SUMMARY_HEADER = "Summary of the conversation so far (its earlier turns were compacted):\n"


class CompactionInput(BaseModel):
    """A ``compaction`` item sent back (or read from the store): opened by ``open_items`` before it is read."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["compaction"]
    encrypted_content: Annotated[StrictStr, Field(min_length=1, max_length=200_000)]
    id: StrictStr | None = None
    _summary: str | None = PrivateAttr(default=None)

    def message(self) -> Message:
        """The system message the model gets in place of everything before the item."""
        if self._summary is None:
            raise RuntimeError("a compaction item was read before it was opened (open_items)")
        return {"role": "system", "content": SUMMARY_HEADER + self._summary}

    def open(self, summary: str) -> None:
        """Give the item the summary its sealed content holds (``api.turns.compaction.open_items`` unseals it)."""
        self._summary = summary
