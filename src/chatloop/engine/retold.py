"""A retried call continues the reply; it does not say it again.

Within a turn the engine asks the model again for a reply it already began: a reminder after an unreadable call, a
nudge after an empty reply, the forced last call for a client tool, the next model after a cut. What was shown
stays shown, and models asked again start their reply again from the top. ``Retold`` sits after the text-call
filter of such a call: it holds the new text while it repeats what the reply already said (compared with runs of
whitespace as one space), then

- drops the repeat and lets the rest through *without* a seam, when the new text said all of it and goes on (a
  continuation: "Let me compute that." then "Let me compute that. The balance is ...");
- drops the whole sentences it repeated and lets the rest through *after* a seam, when it parts from what was said
  (a cut answer restarted in other words: two different things a model said);
- drops it all when the new text only repeats (the forced call ignored: the same answer twice).

Whatever follows (a continuation, or new text after a seam) goes out a sentence at a time, and a sentence the reply
already said is not shown again wherever it comes ("Sorry about that. The weather in Oslo is sunny."). The reply's
text is compared from each of its calls' starts, so a retry that repeats only the last call's words is caught too.
Only a call made again for the same reply is filtered; a reply's first call streams as it comes.

Usage::

    retold = Retold(["Let me compute that."])
    retold.feed("Let me compute") + retold.feed(" that. It is 42.") + retold.finish()   # " It is 42."
    retold.continues                                                                     # True: no seam
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_SENTENCE_ENDS = frozenset(".!?:;")
_SENTENCE_END = re.compile(r"(?:[.!?](?=\s)|\n)\s*(?=\S)")
"""Where a sentence (or a line) ends and the next one starts: only once something follows the whitespace, so the
pieces a text arrives in do not change where it is cut."""
_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


def _norm(text: str) -> str:
    return " ".join(text.split())


class _Match:
    """How far new text repeats one earlier text (whitespace runs compared as one space)."""

    def __init__(self, said: str) -> None:
        self.said = _norm(said)
        self.at = 0
        """Characters of ``said`` matched so far."""
        self.space = False
        """Whitespace was read since the last matched character."""
        self.boundary = 0
        """Where in the new text the last whole sentence that matched ends."""
        self.failed = False
        self.last = ""
        self.done: int | None = None
        """Where in the new text all of ``said`` had been matched, once it has."""

    @property
    def whole(self) -> bool:
        return self.at >= len(self.said) > 0

    def read(self, text: str, offset: int) -> int | None:
        """Advance over ``text`` (starting at ``offset`` in the new text); the offset where all of ``said`` was
        matched, or None."""
        for i, char in enumerate(text):
            if self.failed or self.whole:
                break
            if char.isspace():
                # A sentence both texts end here: the new text may be cut after it.
                if self.at and not self.space and self.last in _SENTENCE_ENDS and self.said[self.at] == " ":
                    self.boundary = offset + i
                self.space = self.space or self.at > 0
                continue
            if self.space:
                if self.said[self.at] != " ":
                    self.failed = True
                    break
                self.at += 1
                self.space = False
            if self.at < len(self.said) and self.said[self.at] == char:
                self.at += 1
                self.last = char
            else:
                self.failed = True
                break
            if self.whole:
                if char in _SENTENCE_ENDS:
                    self.boundary = offset + i + 1
                return offset + i + 1
        return None


class Retold:
    """Filters one retried call's visible text against what the reply already said (``said``: each earlier call's
    text of this reply, oldest first). See the module docstring."""

    def __init__(self, said: Sequence[str]) -> None:
        texts = ["\n\n".join(said[i:]) for i in range(len(said))]  # as a seam joins them
        self.matches = [_Match(t) for t in texts if t.strip()]
        self.said_ends_in_space = bool(said) and said[-1][-1:].isspace()
        """A continuation then starts without the whitespace that was already shown."""
        self.spaced = False
        """Whitespace at the start of what comes next is not shown (until something else is)."""
        self.held = ""
        self.decided = not self.matches
        self.continues = False
        """The new text carries on from what was said: it follows without a seam."""
        self.dropped = 0
        """Characters of the new text not shown again."""
        self.sentences = {_norm(t) for t in _SPLIT.split("\n".join(said))} - {""}
        """The sentences the reply said: after a seam, none is shown again."""
        self.by_sentence = False
        self.pending = ""
        """Text after a seam, held until its sentence ends."""

    def feed(self, text: str) -> str:
        """What of ``text`` (and of what was held) may be shown now."""
        if self.by_sentence:
            return self._sentences(text, final=False)
        if self.decided:
            return self._after_space(text)
        offset = len(self.held)
        self.held += text
        for match in self.matches:
            if not match.failed and match.done is None:
                match.done = match.read(text, offset)
        # Longest first: while a longer text said before may still be repeated whole, the last call's text alone
        # is not the end of the repeat (else how the text was cut into pieces would decide what is shown).
        for match in self.matches:
            if match.done is not None:
                return self._decide(cut=match.done, continues=True)
            if not match.failed:
                return ""
        return self._decide(cut=max(m.boundary for m in self.matches), continues=False)

    def finish(self) -> str:
        """The call ended: what was held only repeated what was said (a prefix of it, or all of it)."""
        if self.by_sentence:
            return self._sentences("", final=True)
        if self.decided:
            return ""
        if any(not m.failed for m in self.matches):
            self.dropped += len(self.held)
            self.held, self.decided, self.continues = "", True, True
            return ""
        shown = self._decide(cut=max(m.boundary for m in self.matches), continues=False)
        return shown + self._sentences("", final=True)

    def _decide(self, cut: int, continues: bool) -> str:
        self.decided, self.continues = True, continues
        self.spaced = not continues or self.said_ends_in_space
        self.dropped += cut
        rest, self.held = self.held[cut:], ""
        self.by_sentence = True  # what follows, a continuation or not, goes out without what was said
        return self._sentences(rest, final=False)

    def _sentences(self, text: str, final: bool) -> str:
        """Whole sentences of the text after a seam, less those the reply already said; at the end, the rest."""
        self.pending += text
        out, start = [], 0
        for end in [m.end() for m in _SENTENCE_END.finditer(self.pending)] + (
            [len(self.pending)] if final else []
        ):
            out.append(self._unless_said(self.pending[start:end]))
            start = end
        self.pending = self.pending[start:]
        return "".join(out)

    def _unless_said(self, sentence: str) -> str:
        if _norm(sentence) in self.sentences:
            self.dropped += len(sentence)
            return ""
        return self._after_space(sentence)

    def _after_space(self, text: str) -> str:
        """``text``, less the whitespace that would follow what was shown twice (or open a new text after a seam)."""
        if not self.spaced:
            return text
        rest = text.lstrip()
        self.dropped += len(text) - len(rest)
        self.spaced = not rest
        return rest
