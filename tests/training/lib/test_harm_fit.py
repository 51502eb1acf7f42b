"""The harm recipe's operating point (training/lib/harm_fit.py thresholds_for)."""

import numpy as np

from deltaguard.classifiers.harm import FINE
from training.corpus.harm import HarmRow
from training.lib.harm_fit import thresholds_for


def rows_and_scores():
    """200 benign chat rows low on every head, 50 hateful requests high on `hate`."""
    rng = np.random.default_rng(1)
    rows = [HarmRow(f"chat {i}", frozenset(), "chitchat", "chat", f"c{i}") for i in range(200)]
    rows += [HarmRow(f"hate {i}", frozenset({"hate"}), "src", "request", f"h{i}") for i in range(50)]
    scores = np.vstack([rng.uniform(0.0, 0.3, (200, len(FINE))), rng.uniform(0.6, 1.0, (50, len(FINE)))])
    return rows, scores


def test_rows_alone_let_the_thresholds_fall_to_the_benign_rows():
    rows, scores = rows_and_scores()
    t = thresholds_for(scores, rows, {"chat": 0.01})
    assert t["hate"] <= 0.6  # every hateful row is caught, no benign row costs it


def test_benign_conversations_hold_the_union_to_their_budget():
    rows, scores = rows_and_scores()
    # 100 conversations: each one's highest message scores 0.5-0.95 on some head, so a
    # per-message threshold of 0.6 would flag most of them; 1% may be flagged
    conv = np.random.default_rng(2).uniform(0.0, 0.4, (100, len(FINE)))
    conv[np.arange(100), np.arange(100) % len(FINE)] = np.linspace(0.5, 0.95, 100)
    t = thresholds_for(scores, rows, {"chat": 0.01}, conversations=[(conv, 0.01)])
    cut = np.array([t[c] for c in FINE])
    assert (conv >= cut).any(axis=1).mean() <= 0.01
    assert (scores[200:] >= cut).any(axis=1).mean() > 0.5  # harm is still caught
