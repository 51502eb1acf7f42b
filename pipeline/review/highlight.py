"""Which items of a recording raised its flags, for the review page to highlight.

Verdicts are conversation-level and recorded per turn, so the recording says *when* a
category was flagged (`labels.flag_turns`), not *which item* carried it. The page finds
the item by rescoring the transcript with the scorer it was given and reading each
item's own evidence (`Fold.item_scores`) in the flagging turn: the items of that turn
at or above the category's recorded threshold, else the strongest one. A redacted secret
or PII value cannot be found again, so items carrying `[REDACTED:<kind>]` of that
category, up to the flagging turn, are highlighted too. With no evidence at all (e.g.
a multi-turn jailbreak whose pieces are each below the threshold) the flagging turn's
input items are highlighted as a whole.
"""

from __future__ import annotations

import re
from typing import Any

from deltaguard.recording import RecordedTranscript
from deltaguard.recording.labels import flag_turns
from deltaguard.state.policy import Policy
from deltaguard.state.scoring import Scorer

_MASK = re.compile(r"\[REDACTED:([a-z0-9_]+)\]")


def _masked_categories(raw: Any, redactions: dict[str, Any]) -> set[str]:
    """Categories of the `[REDACTED:<kind>]` masks in an item (older recordings, with no
    `kind_categories`, count a mask for every category redaction touched)."""
    by_kind = redactions.get("kind_categories") or {}
    fallback = set(redactions.get("categories") or ())
    found: set[str] = set()
    stack = [raw]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            for kind in _MASK.findall(value):
                found |= {by_kind[kind]} if kind in by_kind else fallback
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


def highlights(rec: RecordedTranscript, scorer: Scorer | None) -> list[list[dict[str, Any]]]:
    """Per turn, per item (input items then output items): `{"categories": [...], "scores":
    {category: the item's own score}}`; `categories` are the flags this item raised."""
    conv = rec.conversation()
    rows: list[list[dict[str, Any]]] = [
        [{"categories": [], "scores": {}} for _ in (*turn.input, *turn.output)] for turn in conv.turns
    ]
    if scorer is not None:
        snapshot = scorer.empty()
        for t, turn in enumerate(conv.turns):
            fold = scorer.fold(snapshot, turn.input)
            scores = list(fold.item_scores)
            snapshot = fold.after
            if turn.output:
                out = scorer.fold(snapshot, turn.output)
                scores += out.item_scores
                snapshot = out.after
            for row, item_scores in zip(rows[t], scores, strict=True):
                row["scores"] = {c: round(v, 4) for c, v in item_scores.items() if v > 0.0}
    policy = Policy.model_validate(rec.policy) if rec.policy else Policy()
    for category, at in flag_turns(rec).items():
        if at >= len(rows):
            continue
        marked = False
        for t in range(at + 1):
            items = [*conv.turns[t].input, *conv.turns[t].output]
            for row, item in zip(rows[t], items, strict=True):
                if category in _masked_categories(item.raw, rec.redactions):
                    row["categories"].append(category)
                    marked = True
        turn_rows = rows[at]
        evidence = [(row["scores"].get(category, 0.0), n) for n, row in enumerate(turn_rows)]
        strong = [n for score, n in evidence if score >= policy.threshold(category)]
        if not strong and not marked:
            best = max(evidence, default=(0.0, -1))
            strong = [best[1]] if best[0] > 0.0 else list(range(len(conv.turns[at].input)))
        for n in strong:
            if category not in turn_rows[n]["categories"]:
                turn_rows[n]["categories"].append(category)
    return rows
