"""Building a ready-to-use `Scorer`: classifiers loaded once, with the policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from deltaguard.classifiers.registry import DEFAULT_NAMES, load_classifiers
from deltaguard.classifiers.vouched import vouched
from deltaguard.models import MODELS_DIR
from deltaguard.state.policy import Policy
from deltaguard.state.scoring import Scorer


def build_scorer(
    names: tuple[str, ...] = DEFAULT_NAMES,
    models_dir: Path = MODELS_DIR,
    policy: Policy | None = None,
    thresholds: Mapping[str, float] | None = None,
    vouch: Sequence[str] = (),
) -> Scorer:
    """Load the classifiers (scores on the 0.5-threshold scale, see classifiers/scaled.py)
    with the default policy, or `policy`; `thresholds` override it per category. `vouch`:
    globs of the paths whose tool outputs the operator vouches for (classifiers/vouched.py)."""
    policy = policy or Policy()
    if thresholds:
        policy = policy.with_thresholds(thresholds)
    return Scorer(vouched(load_classifiers(names, models_dir), vouch), policy)
