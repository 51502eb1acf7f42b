"""One suite, every classifier: deltaguard.classifiers.checks over the default set."""

from __future__ import annotations

import pytest

from deltaguard.classifiers import checks
from deltaguard.classifiers.base import Update
from deltaguard.classifiers.registry import DEFAULT_NAMES, load_classifiers
from deltaguard.classifiers.secrets import SecretsClassifier

CLASSIFIERS = {c.name: c for c in load_classifiers()}
ITEMS = checks.sample_items()


@pytest.mark.parametrize("rule", list(checks.CHECKS))
@pytest.mark.parametrize("name", list(DEFAULT_NAMES))
def test_every_classifier_keeps_every_rule(name, rule):
    checks.CHECKS[rule](CLASSIFIERS[name], ITEMS)


class _Forgetful(SecretsClassifier):
    """Breaks associativity: its state remembers how the items were cut into updates."""

    def update(self, state, items):
        upd = super().update(state, items)
        batch = {**upd.state, "batch": len(items)}
        return Update(state=batch, item_scores=upd.item_scores, scores=upd.scores, tokens=upd.tokens)


class _Mutating(SecretsClassifier):
    """Breaks purity: it writes into the state it is given."""

    def update(self, state, items):
        state["seen"] = state.get("seen", 0) + len(items)
        return super().update(state, items)


@pytest.mark.parametrize(
    ("clf", "rule", "says"),
    [
        (_Forgetful(), "delta_equals_full", "differs when cut"),
        (_Mutating(), "pure", "mutated its input state"),
    ],
)
def test_a_classifier_that_breaks_a_rule_is_named(clf, rule, says):
    with pytest.raises(checks.ConformanceError, match=says):
        checks.CHECKS[rule](clf, ITEMS)
    with pytest.raises(checks.ConformanceError):
        checks.check_classifier(clf, ITEMS)
