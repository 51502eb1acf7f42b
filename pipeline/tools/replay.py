"""Replaying transcripts turn by turn, in delta or full mode (docs/contract.md sections 2, 3).

- delta: one `ConversationTracker` for the whole file; each turn continues the previous
  response and scores only its new input items; the model output of a turn is scored
  after its decision (post-inference), as the gateway does, so it is never scored twice.
- full: at every turn, the whole history is rescored from the empty state, by
  classifiers that remember no item results (`Scorer.without_memo`): the baseline does
  all the work a guardrail without state does.

A turn's `decision` is taken on its input (what a gateway enforces before the model
answers); its `category_scores` and `flagged_categories` describe the conversation at the
end of the turn, its output included. Both modes give the same verdicts (delta
equivalence); their cost is what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from deltaguard.classifiers.base import count_tokens
from deltaguard.errors import TranscriptError
from deltaguard.items import Item
from deltaguard.state.scoring import Fold, Scorer, turn_json
from deltaguard.state.tracker import ConversationTracker
from deltaguard.transcripts import Conversation

Mode = Literal["delta", "full"]


def replay_delta(conv: Conversation, tracker: ConversationTracker) -> list[dict[str, Any]]:
    turns = []
    previous: str | None = None
    for t, turn in enumerate(conv.turns):
        response_id = f"{conv.line}:{conv.id}#{t}"
        tracked = tracker.score_turn(response_id, turn.input, previous)
        out = tracker.score_output(response_id, turn.output).fold if turn.output else None
        row = turn_json(t, tracker.scorer.verdict(tracked.fold, prior=tracked.rebuild, output=out))
        if out is not None:
            row["output"] = output_json(out)
        turns.append(row)
        previous = response_id
    return turns


def replay_full(conv: Conversation, scorer: Scorer) -> list[dict[str, Any]]:
    """Every turn rescored from the empty state; `scorer` should remember no item results
    (`replay` passes `scorer.without_memo()`), or later turns reuse earlier turns' work."""
    turns = []
    history: list[Item] = []
    for t, turn in enumerate(conv.turns):
        history.extend(turn.input)
        gate = scorer.fold(scorer.empty(), history)
        out = scorer.fold(gate.after, turn.output) if turn.output else None
        row = turn_json(t, scorer.verdict(gate, output=out))
        if out is not None:
            row["output"] = output_json(out)
        turns.append(row)
        history.extend(turn.output)
    return turns


def output_json(fold: Fold) -> dict[str, Any]:
    """The cost of scoring a turn's output, beside the turn's own."""
    return {
        "tokens_scored": max(fold.tokens.values(), default=0),
        "latency_ms": round(sum(fold.latency_ms.values()), 4),
    }


@dataclass
class ReplayResult:
    mode: Mode
    conversations: list[dict[str, Any]] = field(default_factory=list)
    errors: list[TranscriptError] = field(default_factory=list)
    unscored_items: int = 0
    history_tokens: int = 0  # what full rescoring processes, summed over turns

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "conversations": self.conversations}
        if self.errors:
            out["errors"] = [
                {"path": e.path, "line": e.line, "field": e.field, "message": e.reason} for e in self.errors
            ]
        return out


def history_token_cost(conv: Conversation) -> int:
    """Tokens a full-rescoring guardrail processes over the conversation."""
    total = 0
    history = 0
    for turn in conv.turns:
        history += sum(count_tokens(i.text) for i in turn.input)
        total += history
        history += sum(count_tokens(i.text) for i in turn.output)
    return total


def replay(
    source: Iterable[Conversation | TranscriptError],
    scorer: Scorer,
    mode: Mode = "delta",
    tracker: ConversationTracker | None = None,
    on_line: Callable[[], None] | None = None,
) -> ReplayResult:
    """Replay every conversation of `source`; bad lines are collected, not fatal."""
    result = ReplayResult(mode)
    tracker = tracker or ConversationTracker(scorer)
    baseline = scorer.without_memo() if mode == "full" else scorer
    for entry in source:
        if isinstance(entry, TranscriptError):
            result.errors.append(entry)
        else:
            turns = replay_delta(entry, tracker) if mode == "delta" else replay_full(entry, baseline)
            result.conversations.append({"id": entry.id, "turns": turns})
            result.unscored_items += entry.unscored_items
            result.history_tokens += history_token_cost(entry)
        if on_line is not None:
            on_line()
    return result
