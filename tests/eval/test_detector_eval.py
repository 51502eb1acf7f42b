"""eval/detector_eval.py's summary on a synthetic fold: held-out figures and benign rates."""

from __future__ import annotations

import numpy as np

from eval import detector_eval


def row(source: str, label: str, group: str, fp_set: str | None = None) -> dict:
    return {"source": source, "label": label, "group": group, "channel": "document", "family": "f",
            "fp_set": fp_set}  # fmt: skip


def test_benign_sets_are_rated_by_row_and_with_each_group_weighing_one():
    rows = [row("raginject", "injection", f"r:{i}") for i in range(4)]
    # one templated article in three rows, all flagged; three other documents, none
    rows += [row("hard-negatives", "benign", "article:9", "lookalike")] * 3
    rows += [row("hard-negatives", "benign", f"article:{i}", "lookalike") for i in range(3)]
    scores = np.array([0.9, 0.8, 0.7, 0.2, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1])
    fold = {"rows": rows, "held_out": ["raginject"], "attack": dict.fromkeys(detector_eval.SCORERS, scores)}
    summary = detector_eval.summarise([fold])
    held = summary["sources"]["raginject (indirect)"]
    assert held["attacks"] == 4 and held["detector"]["recall"][0] == 0.75
    lookalike = summary["benign_sets"]["pipeline"]["lookalike"]
    assert lookalike["n"] == 6 and lookalike["flag_rate"][0] == 0.5
    assert lookalike["groups"] == 4 and lookalike["by_group"][0] == 0.25
