"""The recipes' threshold rules: every operating point a recipe or evaluation picks within
flag-rate budgets on benign sets comes from here.

`choose_threshold` is the rule over candidate scores: among the candidates at which every
benign set stays within its budget, the one of highest F1 (given labels), ties to the
higher or the lower end. The lexical recipes (max F1), tool_definitions (the lowest within
budget) and the evaluations that re-fit their operating points all call it; their released
thresholds depend on which candidates and which tie-break they use, so both are arguments.

`most_sensitive_threshold` is the detector's rule over benign rows weighted by group.

A session reads dozens of items, and a flag on any one of them is a false alarm for the
whole conversation; so the rule that binds on real traffic is per conversation and per
agent kind, not per message. Given each benign conversation's highest score (over the
items a classifier judges), `per_kind_floor` is the lowest threshold at which no agent
kind has more than `budget` of its conversations flagged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np


def choose_threshold(
    candidates: np.ndarray,
    benign: Mapping[str, np.ndarray],
    budgets: Mapping[str, float],
    *,
    ties: Literal["higher", "lower"],
    otherwise: float,
    y: np.ndarray | None = None,
    p: np.ndarray | None = None,
) -> float:
    """The candidate (flagged at >= it) of highest F1 of `p` against `y` among those at which
    no non-empty benign set flags more than its budget (`budgets[name]`); without `y`, all
    such candidates are alike and `ties` alone decides. `otherwise` when none is within."""
    if (y is None) != (p is None):
        raise ValueError("choose_threshold takes labels `y` and scores `p` together, or neither")
    within = []
    for t in np.unique(candidates)[::-1]:  # high to low: once a budget breaks, lower ones break it too
        if any(np.mean(q >= t) > budgets[name] for name, q in benign.items() if q.size):
            break
        within.append(float(t))
    if not within:
        return otherwise
    if ties == "lower":
        within.reverse()
    elif ties != "higher":
        raise ValueError(f"ties must be 'higher' or 'lower', not {ties!r}")
    if y is None:
        return within[0]
    best_t, best_f1 = within[0], -1.0
    for t in within:
        f1 = f1_at(y, p >= t)
        if f1 > best_f1:  # strictly better: ties stay with the first, at the preferred end
            best_t, best_f1 = t, f1
    return best_t


def most_sensitive_threshold(
    benign: Mapping[str, tuple[np.ndarray, Sequence[str]]], budgets: Mapping[str, float]
) -> float:
    """The lowest threshold (flagged at >= it) at which no benign set's flag rate exceeds
    its budget.

    Each set is (scores, groups), and every group weighs the same: one templated article
    in thirty variants is one document, not thirty, and would otherwise set the threshold
    alone. A set of fewer than 1/budget rows cannot measure its budget and sets nothing
    (a fold that holds out most of the set's sources). Attacks play no part: validation
    attacks come from the training sources and score higher than attacks from elsewhere,
    so a threshold fitted to them (max F1) sits too high for traffic the model never saw."""
    t = 0.0
    for name, (q, groups) in benign.items():
        size = Counter(groups)
        if budgets[name] * len(q) < 1:  # too few rows to measure the budget: a fold's remnant
            continue
        order = np.argsort(-q, kind="stable")
        weight = np.array([1.0 / size[groups[i]] for i in order])
        # the rows that may be flagged: the top ones, while their weight stays in budget
        allowed = int(np.searchsorted(np.cumsum(weight), budgets[name] * len(size) + 1e-9, side="right"))
        if allowed < len(q):  # the highest score that must stay unflagged, and just above it
            t = max(t, float(np.nextafter(q[order[allowed]], np.inf)))
    return t


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
    true positive."""
    tp = int(np.sum(pred & (y == 1)))
    fp = int(np.sum(pred & (y == 0)))
    fn = int(np.sum(~pred & (y == 1)))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0
