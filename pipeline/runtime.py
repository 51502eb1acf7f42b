"""Building a ready-to-use `Scorer`: classifiers loaded once, thresholds from the manifest."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from classifiers.registry import DEFAULT_NAMES, load_classifiers
from models import MODELS_DIR
from pipeline.artifacts import load_manifest
from pipeline.policy import Policy
from pipeline.scoring import Scorer


def manifest_thresholds(models_dir: Path = MODELS_DIR) -> dict[str, float]:
    """Thresholds chosen on validation data, as written in the manifest."""
    out: dict[str, float] = {}
    for entry in load_manifest(models_dir).get("models", {}).values():
        out.update(entry.get("thresholds", {}))
    return out


def build_scorer(
    names: tuple[str, ...] = DEFAULT_NAMES,
    models_dir: Path = MODELS_DIR,
    policy: Policy | None = None,
    thresholds: Mapping[str, float] | None = None,
) -> Scorer:
    """Load the classifiers; the default policy takes the manifest's thresholds."""
    if policy is None:
        policy = Policy().with_thresholds(manifest_thresholds(models_dir))
    if thresholds:
        policy = policy.with_thresholds(thresholds)
    return Scorer(load_classifiers(names, models_dir), policy)
