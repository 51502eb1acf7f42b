"""The threshold helpers of training/lib/thresholds.py."""

import numpy as np

from training.lib.thresholds import f1_at, per_kind_floor


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
