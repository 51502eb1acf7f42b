"""The threshold rules of training/lib/thresholds.py."""

import numpy as np
import pytest

from training.lib.thresholds import choose_threshold, f1_at, most_sensitive_threshold, per_kind_floor


def test_f1_counts_true_and_false_positives_and_misses():
    y = np.array([1, 1, 1, 0, 0])
    assert f1_at(y, np.array([True, True, False, True, False])) == 2 * 2 / (2 * 2 + 1 + 1)
    assert f1_at(y, np.zeros(5, dtype=bool)) == 0.0
    assert f1_at(y, y == 1) == 1.0


def test_per_kind_floor_lets_each_kind_lose_its_budget():
    kinds = ["a"] * 10 + ["b"] * 10
    maxima = np.r_[np.linspace(0.0, 0.9, 10), np.full(10, 0.2)]
    # 10% of 10 conversations: kind a may lose its top one (0.9), not 0.8
    assert per_kind_floor(kinds, maxima, 0.1) == float(np.nextafter(0.8, np.inf))


# y and p worked by hand: F1 at each candidate is 0.9: 2/4, 0.8: 4/5, 0.7: 4/6, 0.6: 6/7, 0.2: 6/8
Y = np.array([1, 1, 0, 1, 0])
P = np.array([0.9, 0.8, 0.7, 0.6, 0.2])


def test_choose_threshold_takes_the_max_f1_within_the_budgets():
    chat = np.array([0.65, 0.1, 0.1, 0.1])  # flag rate 0.25 from 0.65 down, 1.0 from 0.1 down
    free = choose_threshold(P, {"chat": chat}, {"chat": 0.25}, ties="higher", otherwise=1.0, y=Y, p=P)
    assert free == 0.6  # 6/7: the budget allows one chat message of four
    tight = choose_threshold(P, {"chat": chat}, {"chat": 0.2}, ties="higher", otherwise=1.0, y=Y, p=P)
    assert tight == 0.8  # 0.6 flags the 0.65 message (1 of 4 > 0.2); 0.8's 4/5 beats 0.9 and 0.7
    # no labelled candidate within budget: the stated fallback
    assert (
        choose_threshold(P, {"chat": np.array([1.0])}, {"chat": 0.0}, ties="higher", otherwise=0.5, y=Y, p=P)
        == 0.5
    )


def test_choose_threshold_breaks_f1_ties_to_the_end_asked_for():
    y, p, benign = np.array([1, 0]), np.array([0.9, 0.1]), {"chat": np.array([0.5])}
    candidates = np.concatenate([p, benign["chat"]])  # F1 is 1.0 at both 0.9 and 0.5

    def pick(ties):
        return choose_threshold(candidates, benign, {"chat": 1.0}, ties=ties, otherwise=1.0, y=y, p=p)

    assert (pick("higher"), pick("lower")) == (0.9, 0.5)


def test_choose_threshold_without_labels_is_the_lowest_or_highest_within_budget():
    candidates = np.array([0.1, 0.5, 0.9])
    benign = {"a": np.array([0.1, 0.5]), "empty": np.zeros(0)}  # an empty set bounds nothing
    budgets = {"a": 0.5, "empty": 0.0}
    assert choose_threshold(candidates, benign, budgets, ties="lower", otherwise=1.0) == 0.5
    assert choose_threshold(candidates, benign, budgets, ties="higher", otherwise=1.0) == 0.9
    with pytest.raises(ValueError, match="together"):
        choose_threshold(candidates, benign, budgets, ties="lower", otherwise=1.0, y=np.array([1, 0, 1]))
    with pytest.raises(ValueError, match="ties"):
        choose_threshold(candidates, benign, budgets, ties="lowest", otherwise=1.0)  # type: ignore[arg-type]


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
