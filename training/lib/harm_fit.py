"""Fitting the harm model (one calibrated head per fine category over one union of
vectorisers) and its operating point: per head, thresholds within FP_BUDGETS on each benign
validation set.
"""

from __future__ import annotations

import time
import warnings
from collections import namedtuple
from collections.abc import Sequence

import numpy as np

from deltaguard.classifiers.harm import FINE
from training.corpus.harm import HarmRow, benign_set
from training.lib.lexical_fit import FitSettings, expand, log, source_weights

SETTINGS = FitSettings(word_features=40000, char_features=80000, c=4.0)
CHAR_NGRAMS = (3, 4)  # not (3, 5): the gate lane's cost is mostly char n-grams; the serving path needs min 3
OTHER_HARM_WEIGHT = 0.25  # a harmful row of another category, as a negative of this head

# Validation flag-rate budgets of the union (toxicity) per benign set: half the targets on
# held-out data (eval/harm_eval.py: 2% of benign answers, refusals included; 1% of chat;
# chat less, as test chat flagged twice its validation rate), since the greedy rule
# spends each budget in full on validation.
FP_BUDGETS = {"answer": 0.01, "refusal": 0.01, "chat": 0.0025, "prompt": 0.01, "document": 0.02, "code": 0.01}
LOOKAHEAD = 8  # benign rows one threshold step may let through (thresholds_for)
_View = namedtuple("_View", "text label source")


def _head_views(rows: Sequence[HarmRow], head: str) -> tuple[list[_View], np.ndarray]:
    views = [_View(r.text, "harmful" if head in r.categories else "benign", r.source) for r in rows]
    weights = np.array([r.weight * (OTHER_HARM_WEIGHT if r.harmful and head not in r.categories else 1.0)
                        for r in rows])  # fmt: skip
    return views, weights


def fit(train: Sequence[HarmRow], validation: Sequence[HarmRow], settings: FitSettings = SETTINGS):
    """(union, {head: calibrated model}) for every head of FINE."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.frozen import FrozenEstimator
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import FeatureUnion

    from training.lib.lexical_export import CHAR_VECTORIZER, WORD_VECTORIZER

    t0 = time.time()
    # Every view of a row trains with the row's label (expand: an encoded harmful row
    # trains on its decoded view only).
    tr_texts, tr_owner = expand(
        [_View(r.text, "harmful" if r.harmful else "benign", r.source) for r in train]
    )
    va_texts, va_owner = expand(
        [_View(r.text, "harmful" if r.harmful else "benign", r.source) for r in validation]
    )
    word = dict(WORD_VECTORIZER, max_features=settings.word_features)
    char = dict(CHAR_VECTORIZER, max_features=settings.char_features, ngram_range=CHAR_NGRAMS)
    union = FeatureUnion([("word", TfidfVectorizer(**word)), ("char", TfidfVectorizer(**char))], n_jobs=1)
    x_tr = union.fit_transform(tr_texts).tocsr()
    x_va = union.transform(va_texts).tocsr()
    log(
        f"harm: vectorised {len(tr_texts)} train / {len(va_texts)} validation views ({time.time() - t0:.0f}s)"
    )
    models = {}
    for head in FINE:
        views_tr, w_row_tr = _head_views(train, head)
        views_va, w_row_va = _head_views(validation, head)
        y_tr = np.array([views_tr[o].label == "harmful" for o in tr_owner], dtype=int)
        y_va = np.array([views_va[o].label == "harmful" for o in va_owner], dtype=int)
        w_tr = source_weights(views_tr, tr_owner, y_tr) * w_row_tr[tr_owner]
        w_va = source_weights(views_va, va_owner, y_va) * w_row_va[va_owner]
        lr = LogisticRegression(C=settings.c, max_iter=settings.max_iter, tol=1e-6)
        lr.fit(x_tr, y_tr, sample_weight=w_tr)
        cal = CalibratedClassifierCV(FrozenEstimator(lr), method="sigmoid")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Since FrozenEstimator", category=UserWarning)
            cal.fit(x_va, y_va, sample_weight=w_va)
        models[head] = cal
        log(f"harm: {head}: {int(y_tr.sum())} positive / {len(y_tr)} train views")
    return union, models


def thresholds_for(
    scores: np.ndarray,
    rows: Sequence[HarmRow],
    budgets=FP_BUDGETS,
    conversations: Sequence[tuple[np.ndarray, float]] = (),
) -> dict[str, float]:
    """Per-head thresholds that flag the most validation harm within the benign budgets.

    Greedy, from every threshold just above its head's highest benign score: each step
    lowers one head's threshold past its next benign scores (up to LOOKAHEAD of them),
    the move that recovers the most harmful rows (toxicity: any head over its
    threshold) per benign row it lets through, as long as every benign set stays within
    its budget. `scores`: rows x FINE raw probabilities of the validation rows.
    `conversations`: benign conversation sets, each (conversations x FINE: the highest
    score of any of a conversation's messages, budget): a set stays within its budget of
    conversations with any head over its threshold."""
    benign = np.array([not r.harmful for r in rows])
    harmful = ~benign
    sets = [(np.array([benign_set(r) == name for r in rows]), budget) for name, budget in budgets.items()]
    sets = [(mask, budget) for mask, budget in sets if mask.any()]
    benign_scores = np.concatenate([scores[benign], *(c for c, _ in conversations)])
    ladders = [
        np.concatenate([np.sort(np.unique(benign_scores[:, h]))[::-1], [0.0]]) for h in range(len(FINE))
    ]
    at = [0] * len(FINE)  # head h's threshold: just above ladders[h][at[h]]

    def flagged(levels: list[int]) -> np.ndarray:
        cut = np.array([ladders[h][k] + 1e-12 for h, k in enumerate(levels)])
        return (scores >= cut).any(axis=1)

    def feasible(f: np.ndarray, levels: list[int]) -> bool:
        cut = np.array([ladders[h][k] + 1e-12 for h, k in enumerate(levels)])
        return all(f[mask].mean() <= budget for mask, budget in sets) and all(
            (c >= cut).any(axis=1).mean() <= budget for c, budget in conversations
        )

    caught = int(flagged(at)[harmful].sum())
    while True:
        best = None
        for h in range(len(FINE)):
            for step in range(1, LOOKAHEAD + 1):
                if at[h] + step >= len(ladders[h]) - 1:
                    break
                levels = at.copy()
                levels[h] += step
                f = flagged(levels)
                if not feasible(f, levels):
                    break
                gain = (int(f[harmful].sum()) - caught) / step
                if gain > 0 and (best is None or gain > best[0]):
                    best = (gain, levels, int(f[harmful].sum()))
        if best is None:
            break
        _, at, caught = best
    return {FINE[h]: float(min(ladders[h][k] + 1e-12, 0.999999)) for h, k in enumerate(at)}
