"""The detector recipe's operating-point rule (training/train_detector.py)."""

import numpy as np

from training.train_detector import most_sensitive_threshold


def test_lowest_threshold_within_every_budget():
    chat = np.linspace(0.0, 0.99, 100)  # 1% budget: one row may be flagged
    tools = np.array([0.1] * 98 + [0.5, 0.97])  # 1%: the 0.97 row may be flagged, not the 0.5
    t = most_sensitive_threshold(
        {"chat": (chat, [str(i) for i in range(100)]), "tool": (tools, [str(i) for i in range(100)])},
        {"chat": 0.01, "tool": 0.01},
    )
    assert np.mean(chat >= t) <= 0.01 and np.mean(tools >= t) <= 0.01
    assert t == np.nextafter(0.98, np.inf)  # chat's second highest binds; anything lower breaks it


def test_a_templated_group_counts_once():
    # 30 variants of one article at 0.99 and 70 distinct documents below 0.4: by rows the
    # article alone is 30% of the set, by groups it is 1 of 71 (a 2% budget allows it).
    scores = np.array([0.99] * 30 + list(np.linspace(0.0, 0.4, 70)))
    groups = ["article"] * 30 + [f"doc{i}" for i in range(70)]
    t = most_sensitive_threshold({"lookalike": (scores, groups)}, {"lookalike": 0.02})
    assert 0.4 < t <= 0.99


def test_a_set_too_small_for_its_budget_sets_nothing():
    small = np.array([0.95] * 10)  # 10 rows cannot measure a 2% budget
    big = np.linspace(0.0, 0.5, 200)
    t = most_sensitive_threshold(
        {"prompts": (small, list("abcdefghij")), "chat": (big, [str(i) for i in range(200)])},
        {"prompts": 0.02, "chat": 0.005},
    )
    assert t <= 0.5
