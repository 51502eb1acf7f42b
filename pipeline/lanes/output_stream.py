"""Scoring model output while it streams, without ever rescanning what came before.

Text deltas are gathered into chunks of about `chunk_chars` and each chunk is folded,
as the next assistant item, through the rule classifiers: their per-channel window
carries the end of the previous chunk, so a secret split across two deltas is found
once, and each character is scanned at most once plus the bounded window.

This is early warning (a flag while the answer is still streaming); the conversation's
history state is still the fold of the completed output item, so verdicts do not depend
on how the stream was chunked.

A turn's scorer (`Turn.watch`, `Turn.stream`) also knows what the gate flagged already,
where a newly raised flag goes, and what meters the streamed text for billing; `watched`
runs it over a stream of events, in the stream.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from typing import Any

from deltaguard.classifiers.base import Classifier, Finding, State
from deltaguard.items import Item, count_tokens
from deltaguard.state.policy import ordered_categories
from deltaguard.streams import close_source


def new_categories(found: Sequence[Finding], flagged: Collection[str]) -> list[str]:
    """The categories of `found` not in `flagged`, in taxonomy order: the order the
    post-inference lane names them in, so that its flag and the streamed one share an
    event id when they name the same categories."""
    return ordered_categories({f.category: 1.0 for f in found if f.category not in flagged})


def _chunk_item(text: str) -> Item:
    return Item(
        kind="message",
        role="assistant",
        text=text,
        digest=hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest(),
        raw={"type": "message", "role": "assistant", "content": text},
        tokens=count_tokens(text),
    )


class OutputStreamScorer:
    """Feed it text deltas; it returns findings as soon as a chunk completes one."""

    def __init__(
        self,
        classifiers: Sequence[Classifier],
        chunk_chars: int = 256,
        *,
        flagged: Collection[str] = (),
        flag: Callable[[list[str], dict[str, float]], Awaitable[Any]] | None = None,
        meter: Callable[[str], None] | None = None,
    ) -> None:
        """`flagged`: categories already flagged (the gate's), never raised again; `flag`:
        what a newly raised category goes to, with the scores so far; `meter`: what each
        piece of text is counted by (a billing journal's output meter)."""
        self.classifiers = list(classifiers)
        self.chunk_chars = chunk_chars
        self.flagged = flagged
        self.flag = flag
        self.meter = meter
        self._states: dict[str, State] = {c.name: c.initial_state() for c in self.classifiers}
        self._pending: list[str] = []
        self._pending_chars = 0
        self.findings: list[Finding] = []
        self.scores: dict[str, float] = {}

    def feed(self, delta: str) -> list[Finding]:
        self._pending.append(delta)
        self._pending_chars += len(delta)
        if self._pending_chars < self.chunk_chars:
            return []
        return self._score()

    def raised(self, delta: str, flagged: Collection[str]) -> list[str]:
        """`feed` a delta; the categories its findings raise beyond `flagged`."""
        found = self.feed(delta)
        return new_categories(found, flagged) if found else []

    async def watch(self, delta: str) -> list[str]:
        """Meter and score a piece of the streamed text; flags (and returns) the categories
        it raises beyond `flagged`."""
        if self.meter is not None:
            self.meter(delta)
        raised = self.raised(delta, self.flagged)
        if raised and self.flag is not None:
            await self.flag(raised, dict(self.scores))
        return raised

    async def watched(
        self, events: AsyncIterator[dict[str, Any]], text: Callable[[dict[str, Any]], str | None]
    ) -> AsyncIterator[dict[str, Any]]:
        """`events`, each piece of text in them (`text(event)`; None: none) watched before
        the event is passed on; closing it closes `events`."""
        try:
            async for event in events:
                piece = text(event)
                if piece is not None:
                    await self.watch(piece)
                yield event
        finally:
            await close_source(events)

    def flush(self) -> list[Finding]:
        return self._score() if self._pending else []

    def _score(self) -> list[Finding]:
        item = _chunk_item("".join(self._pending))
        self._pending.clear()
        self._pending_chars = 0
        found: list[Finding] = []
        for clf in self.classifiers:
            upd = clf.update(self._states[clf.name], [item])
            self._states[clf.name] = upd.state
            found.extend(upd.findings)
            for cat, value in upd.scores.items():
                self.scores[cat] = max(self.scores.get(cat, 0.0), value)
        self.findings.extend(found)
        return found
