"""A tiny classifier for store and lane tests: it remembers how many items it folded."""

from __future__ import annotations

from deltaguard.classifiers.base import Update, count_tokens, running_max


class ItemCounter:
    """Flags `secrets` once it has seen an item containing the word 'BOOM'."""

    name = "counter"
    version = "test"
    categories = ("secrets",)
    lane = "gate"
    max_state_bytes = 200

    def __init__(self, name: str = "counter", lane: str = "gate") -> None:
        self.name = name
        self.lane = lane
        self.calls = 0
        self.items_seen = 0

    def initial_state(self):
        return {"n": 0, "max": {}}

    def update(self, state, items):
        self.calls += 1
        self.items_seen += len(items)
        rows = [{"secrets": 1.0 if "BOOM" in i.text else 0.0} for i in items]
        scores = running_max(state["max"], rows)
        return Update(
            state={"n": state["n"] + len(items), "max": scores},
            item_scores=rows,
            scores=scores,
            tokens=sum(count_tokens(i.text) for i in items),
        )
