"""Transcript conversations as the turn events a gateway would publish.

Turn t of a conversation continues response t-1 and carries every item added to the
history since that response's snapshot: the model output of turn t-1, then the input
of turn t. Folding those gives the same verdicts as the embedded delta mode gives each
turn's input, which scores the output after the turn's decision (the fold is
associative), so the distributed monitor lane can be checked against the embedded one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from deltaguard.events import TurnEvent
from deltaguard.transcripts import Conversation


def response_id(conv: Conversation, turn: int) -> str:
    return f"{conv.id}#{turn}"


def conversation_turn_events(conv: Conversation) -> list[TurnEvent]:
    events = []
    previous: str | None = None
    carried: list[dict] = []
    for t, turn in enumerate(conv.turns):
        rid = response_id(conv, t)
        events.append(
            TurnEvent.build(
                conversation_id=conv.id,
                response_id=rid,
                previous_response_id=previous,
                items=carried + [item.to_wire() for item in turn.input],
            )
        )
        carried = [item.to_wire() for item in turn.output]
        previous = rid
    return events


def interleaved_turn_events(conversations: Iterable[Conversation]) -> Iterator[TurnEvent]:
    """Every conversation's turns, round-robin across conversations (as live traffic is)."""
    queues = [conversation_turn_events(c) for c in conversations]
    t = 0
    while any(t < len(q) for q in queues):
        for q in queues:
            if t < len(q):
                yield q[t]
        t += 1
