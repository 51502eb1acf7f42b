"""Operating points from a per-conversation budget.

A session reads dozens of items, and a flag on any one of them is a false alarm for the
whole conversation; so the rule that binds on real traffic is per conversation and per
agent kind, not per message. Given each benign conversation's highest score (over the
items a classifier judges), `per_kind_floor` is the lowest threshold at which no agent
kind has more than `budget` of its conversations flagged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def per_kind_floor(kinds: Sequence[str], maxima: np.ndarray, budget: float) -> float:
    """The lowest threshold (flagged at >= it) keeping every kind within `budget`: a kind
    of n conversations may lose floor(budget * n) of them. 0.0 when nothing binds."""
    maxima = np.asarray(maxima, dtype=float)
    t = 0.0
    for kind in sorted(set(kinds)):
        q = np.sort(maxima[[i for i, k in enumerate(kinds) if k == kind]])[::-1]
        allowed = int(budget * len(q))
        if allowed < len(q) and q[allowed] > 0.0:
            t = max(t, float(np.nextafter(q[allowed], np.inf)))
    return t


def flagged_share(kinds: Sequence[str], flagged: np.ndarray) -> dict[str, float]:
    """The share of each kind's conversations flagged."""
    flagged = np.asarray(flagged, dtype=bool)
    return {
        kind: round(float(flagged[[i for i, k in enumerate(kinds) if k == kind]].mean()), 4)
        for kind in sorted(set(kinds))
    }


def f1_at(y: np.ndarray, pred: np.ndarray) -> float:
    """F1 of the boolean predictions `pred` against labels `y` (1 positive); 0.0 without a
    true positive. The max-F1 threshold rules of the lexical recipes share it: they differ
    in candidates and tie-break (their released thresholds depend on both)."""
    tp = int(np.sum(pred & (y == 1)))
    fp = int(np.sum(pred & (y == 0)))
    fn = int(np.sum(~pred & (y == 1)))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0
