"""The detector screen's floor rule (training/detector_screen.py)."""

import numpy as np

from training.lib.screen_floor import FoldEvidence, benign_cleared, choose_floor, losses, nested


def fold(name: str, caught_lexical: list[float], benign_lexical: list[float]) -> FoldEvidence:
    """A fold whose detector catches rows scored `caught_lexical` by lexical-v3, beside
    benign tool outputs scored `benign_lexical`."""
    lexical = np.array(caught_lexical + benign_lexical)
    caught = np.array([True] * len(caught_lexical) + [False] * len(benign_lexical))
    return FoldEvidence(
        name=name, lexical=lexical, caught=caught, benign=~caught, indirect=np.ones_like(caught)
    )


def test_largest_floor_that_clears_no_more_than_the_budget():
    # 2,000 catches, two of them low (0.004, 0.006): a 0.05% budget lets one be cleared.
    folds = [fold("a", [0.004] + [0.9] * 999, [0.0001] * 50), fold("b", [0.006] + [0.8] * 999, [0.002] * 50)]
    floor = choose_floor(folds, grid=(0.001, 0.005, 0.01), budget=0.0005)
    assert floor == 0.005
    assert losses(folds, floor) == (1, 2000)
    assert benign_cleared(folds, floor, indirect=True) == 1.0


def test_no_screen_when_even_the_smallest_floor_clears_too_much():
    folds = [fold("a", [0.0001] * 10 + [0.9] * 90, [0.0001])]
    assert choose_floor(folds, grid=(0.001, 0.01), budget=0.001) == 0.0


def test_nested_check_chooses_each_fold_floor_on_the_others():
    # Fold c's catches sit low: chosen on a and b alone, the floor is high enough to clear
    # some of them, which is what the nested check is there to show.
    folds = [
        fold("a", [0.5] * 100, [0.001] * 10),
        fold("b", [0.6] * 100, [0.001] * 10),
        fold("c", [0.004] * 5 + [0.7] * 95, [0.001] * 10),
    ]
    by = {n["fold"]: n for n in nested(folds)}
    assert by["c"]["floor"] == 0.05 and by["c"]["lost"] == 5 and by["c"]["caught"] == 100
    assert by["a"]["floor"] == 0.003 and by["a"]["lost"] == 0
