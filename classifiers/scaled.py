"""Threshold-scaled scores: each model's validated threshold becomes 0.5.

Two models that cover one category (the lexical model and the encoder both score
`prompt_injection`) are calibrated on different data and get different thresholds on
validation. The conversation's category score is the max over classifiers, which only
means something if their scales agree; so each model-backed classifier is wrapped to map
its threshold t to 0.5, piecewise linearly (monotonic: ROC curves are unchanged):

    s < t:  0.5 * s / t            s >= t:  0.5 + 0.5 * (s - t) / (1 - t)

A category is then flagged when any of its classifiers is over its own threshold, and
the policy's default threshold is 0.5 for every category.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from deltaguard.classifiers.base import Classifier, Finding, Scores, State, Update, Wrapper
from deltaguard.items import Item


def scale(score: float, threshold: float) -> float:
    if score < threshold:
        return 0.5 * score / threshold if threshold > 0 else 0.5
    return 0.5 + 0.5 * (score - threshold) / (1.0 - threshold) if threshold < 1 else 1.0


def rescale_one(score: float, source: float, target: float) -> float:
    """A score judged at threshold `source` expressed on a scale whose threshold is `target`
    (monotonic; `source` maps to `target`, 0 to 0 and 1 to 1): how a model with a threshold
    per channel reports one category score. `scale` to 0.5, then back out of it at
    `target`. Plain floats: the gate lane rescales a few scores per item."""
    half = scale(score, source)
    return 2.0 * half * target if half < 0.5 else target + 2.0 * (half - 0.5) * (1.0 - target)


def rescale(score: np.ndarray | float, source: float, target: float) -> np.ndarray:
    """`rescale_one` elementwise (the training recipes' score arrays)."""
    return np.vectorize(rescale_one, otypes=[np.float64])(score, source, target)


class ThresholdScaled(Wrapper):
    """Wraps a classifier; everything but its scores passes through unchanged."""

    def __init__(self, inner: Classifier, thresholds: Mapping[str, float]) -> None:
        super().__init__(inner)
        self.thresholds = dict(thresholds)

    def _scaled(self, scores: Mapping[str, float]) -> Scores:
        return {
            cat: scale(v, self.thresholds[cat]) if cat in self.thresholds else v for cat, v in scores.items()
        }

    def update(self, state: State, items: Sequence[Item]) -> Update:
        upd = self.inner.update(state, items)
        return Update(
            state=upd.state,
            item_scores=[self._scaled(row) for row in upd.item_scores],
            scores=self._scaled(upd.scores),
            tokens=upd.tokens,
            findings=[self._scaled_finding(f) for f in upd.findings],
        )

    def _scaled_finding(self, finding: Finding) -> Finding:
        """A located finding's score on the same scale as the category scores."""
        if finding.score is None or finding.category not in self.thresholds:
            return finding
        return replace(finding, score=scale(finding.score, self.thresholds[finding.category]))
